"""Command line: ``python -m stablernn_lib <command> ...``.

``COMMANDS`` names each subcommand's module and one-line help. A module is imported
only when its subcommand runs, so ``--help``, ``train`` and ``paper-run`` work without
the ``book`` extra; the module's ``register(subparsers)`` adds the subcommand's
arguments and sets ``func`` to the function that runs it.

An error of a command prints its message, not a traceback (the messages name the
problem and the fix); ``--debug``, anywhere on the line, shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple


class Command(NamedTuple):
    module: str
    help: str
    extra: str | None = None  # the pip extra the module needs beyond the plain install


COMMANDS: dict[str, Command] = {
    "homework": Command("stablernn_lib.homework.cli", "student editions and grading", "book"),
    "figure1": Command(
        "stablernn_lib.figures.figure1",
        "weights of recurrent and truncated models under projected GD (Figure 1b)",
    ),
    "train": Command(
        "stablernn_lib.tasks.wikitext2.train", "train a word-level language model on WikiText-2"
    ),
    "train-music": Command(
        "stablernn_lib.tasks.jsb.train", "train an RNN or LSTM on JSB Chorales (Chapter 9)"
    ),
    "jsb-analysis": Command(
        "stablernn_lib.tasks.jsb.analysis",
        "gradient, truncation and Jacobian measurements on the JSB models (Chapter 9)",
    ),
    "lm-analysis": Command(
        "stablernn_lib.tasks.wikitext2.analysis",
        "Figure 2, truncated evaluation, Jacobians, weights close (WikiText-2)",
    ),
    "paper-run": Command(
        "stablernn_lib.tasks.table_runs",
        "train the WikiText-2 table: here within a budget, or through submitit (paper scale)",
        "slurm",  # submitit, for `paper-run submit` only
    ),
    "tightness": Command(
        "stablernn_lib.theory.tightness",
        "adversarial search for the worst ratio measured / bound of each bound",
    ),
    "book": Command("stablernn_lib.book.tools", "strip and check the book's notebooks", "book"),
}


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="python -m stablernn_lib",
        description="Experiments and tools of the course 'Stable Recurrent Models'.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not only its message"
    )
    return parser, parser.add_subparsers(dest="command", required=True)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: with ``command``, that subcommand's full parser (its module imported);
    without, every subcommand listed by name and help only (nothing imported)."""
    parser, subparsers = _top_parser()
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command].module).register(subparsers)
    else:
        for name, entry in COMMANDS.items():
            subparsers.add_parser(name, help=entry.help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit status.

    A command whose extra is not installed says which one to install (status 2); any
    other error prints its message, no traceback (status 1): ``--debug`` shows it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [arg for arg in argv if arg != "--debug"]
    command = argv[0] if argv else None
    extra = COMMANDS[command].extra if command in COMMANDS else None
    try:
        args = build_parser(command).parse_args(argv)
        return int(args.func(args) or 0)
    except ModuleNotFoundError as error:
        if extra is None or debug:
            raise
        print(
            f"`{command}` needs the package {error.name!r}, which is missing: install the "
            f"'{extra}' extra, e.g. pip install \"stablernn_lib[{extra}]\" "
            f'(or pip install -e ".[{extra}]" in a checkout)',
            file=sys.stderr,
        )
        return 2
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
