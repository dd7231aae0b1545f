"""`python -m mla_jax bench` with the cubin prototype installed first.
Usage: bench_cubin.py LIBRARY [bench arguments]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cubin_ffi

from mla_jax.tools.cli import main

cubin_ffi.install(Path(sys.argv.pop(1)))
sys.exit(main(["bench", *sys.argv[1:]]))
