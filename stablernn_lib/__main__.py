"""Command line: ``python -m stablernn_lib <command> ...``.

Each module in ``COMMAND_MODULES`` defines ``register(subparsers)``, which adds
its subcommand and sets ``func`` to the function that runs it.

An error of a command prints its message, not a traceback (the messages name the
problem and the fix); ``--debug``, anywhere on the line, shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "stablernn_lib.homework.cli",
    "stablernn_lib.weights_close",
    "stablernn_lib.train",
    "stablernn_lib.music",
    "stablernn_lib.music_analysis",
    "stablernn_lib.lm_analysis",
    "stablernn_lib.benchmark",
    "stablernn_lib.tightness",
    "stablernn_lib.book",
)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m stablernn_lib",
        description="Experiments and tools of the course 'Stable Recurrent Models'.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not only its message"
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit status (1 on an error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    args = build_parser().parse_args([arg for arg in argv if arg != "--debug"])
    try:
        return int(args.func(args) or 0)
    except Exception as error:
        if debug:
            raise
        name = type(error).__name__
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"error ({name}): {message}", file=sys.stderr)
        print("(run again with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
