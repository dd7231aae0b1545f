"""`python -m mla_jax bench` through one route.
Usage: bench_route.py ffi|jaxlib [bench arguments]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import route

from mla_jax.tools.cli import main

route.use(sys.argv.pop(1))
sys.exit(main(["bench", *sys.argv[1:]]))
