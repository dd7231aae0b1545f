"""``python -m mla_jax <command>``: each command lives in its own module.

Commands are imported only when run, so ``demo`` on a CPU never imports torch, and
only ``bench`` and ``model-bench`` need a GPU (each has a ``--dry-run`` without one).

Every error a command reports about its flags or paths, from its parser or after it,
is one line on stderr, ``mla_jax <command>: error: <flag>: got ..., needed ...``,
with exit status 2: ``Parser`` and ``fail`` below are the only places that print one.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

COMMANDS = {
    "demo": ("mla_jax.tools.demo", "a jit-compiled decode loop with the facts about its buffer"),
    "compare": ("mla_jax.tools.compare", "every available path on one random problem, as a table"),
    "bench": ("mla_jax.tools.bench", "the H200 benchmark sweep against vLLM and XLA"),
    "model-bench": (
        "mla_jax.tools.model_bench",
        "a whole DeepSeek model's decode and prefill: floors, time split, transformers",
    ),
}

USAGE_ERROR = 2


def error_line(command: str, message: str) -> str:
    """The one line every usage error of ``command`` (``"demo"``; ``""`` for the
    command-less ``mla_jax``) is printed as."""
    return f"mla_jax{' ' + command if command else ''}: error: {message}"


def fail(command: str, message: str) -> int:
    """Prints ``message`` as ``command``'s one error line; returns the exit status."""
    print(error_line(command, message), file=sys.stderr)
    return USAGE_ERROR


class Parser(argparse.ArgumentParser):
    """Every command's parser: a bad flag is one line (argparse's usage block, a dozen
    lines of every flag, would bury the one that matters) and exit status 2.

    ``-h`` still prints the full usage and help, on stdout.
    """

    def __init__(self, command: str, **kwargs) -> None:
        super().__init__(prog=f"python -m mla_jax {command}", **kwargs)
        self.command = command

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --batch: ..."; the flag alone is the subject here.
        message = re.sub(r"^argument ", "", message)
        message = re.sub(
            r"invalid choice: (.*) \(choose from (.*)\)$", r"got \1, needed one of \2", message
        )
        self.exit(USAGE_ERROR, error_line(self.command, message) + "\n")


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """A ``type``: an int in ``[minimum, maximum]``, else a one-line usage error."""
    needed = f"an int >= {minimum}" if maximum is None else f"an int in [{minimum}, {maximum}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, needed {needed}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"got {value}, needed {needed}")
        return value

    return parse


positive_int = int_at_least(1)


def positive_ints(text: str) -> tuple[int, ...]:
    """A ``type``: comma-separated ints >= 1, at least one."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, needed ints >= 1 separated by commas")
    return values


def positive_float(text: str) -> float:
    """A ``type``: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"got {text!r}, needed a finite number > 0")
    return value


def unwritable_folder(flag: str, folder: Path) -> str | None:
    """Why ``flag``'s ``folder`` cannot be made and written (the nearest part of the
    path that exists is a file, or a folder this user cannot write), or None; nothing
    is created here."""
    folder = folder.resolve()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return f"{flag}: {str(existing)!r} is not a folder (in {str(folder)!r})"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{flag}: {str(existing)!r} is not writable (in {str(folder)!r})"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        lines = [f"  {name:12s} {help_}" for name, (_, help_) in COMMANDS.items()]
        print(
            "usage: python -m mla_jax {" + ",".join(COMMANDS) + "} [options]\n" + "\n".join(lines)
        )
        return 0
    if not argv or argv[0] not in COMMANDS:
        got = repr(argv[0]) if argv else "nothing"
        return fail(
            "", f"command: got {got}, needed one of {', '.join(COMMANDS)} (--help lists them)"
        )
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])
