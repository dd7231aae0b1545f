"""scripts/first_call.py with the cubin prototype installed first.
Usage: first_call_cubin.py LIBRARY [first_call.py's arguments]"""

import sys
import time

START = time.perf_counter()
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[3] / "scripts"))
import cubin_ffi  # noqa: E402
import first_call  # noqa: E402

first_call.START = START
cubin_ffi.install(Path(sys.argv.pop(1)))
first_call.main()
