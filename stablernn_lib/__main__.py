"""Command line: ``python -m stablernn_lib <command> ...``.

Each module in ``COMMAND_MODULES`` defines ``register(subparsers)``, which adds
its subcommand and sets ``func`` to the function that runs it.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "stablernn_lib.homework.cli",
    "stablernn_lib.weights_close",
    "stablernn_lib.train",
    "stablernn_lib.music",
    "stablernn_lib.music_analysis",
    "stablernn_lib.lm_analysis",
    "stablernn_lib.benchmark",
    "stablernn_lib.paper_run",
    "stablernn_lib.tightness",
    "stablernn_lib.book",
)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m stablernn_lib",
        description="Experiments and tools of the course 'Stable Recurrent Models'.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit status."""
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
