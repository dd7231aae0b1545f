import sys

from mla_jax.tools.cli import main

sys.exit(main())
