"""scripts/first_call.py through one route.
Usage: first_call_route.py ffi|jaxlib [first_call.py's arguments]"""

import sys
import time

START = time.perf_counter()
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[3] / "scripts"))
import first_call  # noqa: E402
import route  # noqa: E402

first_call.START = START
route.use(sys.argv.pop(1))
first_call.main()
