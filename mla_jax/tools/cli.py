"""``python -m mla_jax <command>``: each command lives in its own module.

Commands are imported only when run, so ``demo`` on a CPU never imports torch and
``bench`` is the only one that needs a GPU.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "demo": ("mla_jax.tools.demo", "a jit-compiled decode loop with the facts about its buffer"),
    "compare": ("mla_jax.tools.compare", "every available path on one random problem, as a table"),
    "bench": ("mla_jax.tools.bench", "the H200 benchmark sweep against vLLM and XLA"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        lines = [f"  {name:8s} {help_}" for name, (_, help_) in COMMANDS.items()]
        asked = argv[:1] in (["-h"], ["--help"])
        # As argparse does: help asked for goes to stdout, a usage error to stderr.
        print(
            "usage: python -m mla_jax {" + ",".join(COMMANDS) + "} [options]\n" + "\n".join(lines),
            file=sys.stdout if asked else sys.stderr,
        )
        return 0 if asked else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])
