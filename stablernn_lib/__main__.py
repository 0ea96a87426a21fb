"""Command line: ``python -m stablernn_lib <command> ...``.

``COMMANDS`` names each subcommand's module and one-line help. A module is imported
only when its subcommand runs; the module's ``register(subparsers)`` adds the
subcommand's arguments and sets ``func`` to the function that runs it. The grader
(``python -m stablernn_grader``) and the maintainers' tools (``python -m stablernn_tools``)
run their own tables through :func:`run_command`.

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
}


PROG = "python -m stablernn_lib"
DESCRIPTION = "Experiments of the course 'Stable Recurrent Models'."


def build_parser(
    command: str | None = None,
    commands: dict[str, Command] = COMMANDS,
    prog: str = PROG,
    description: str = DESCRIPTION,
) -> argparse.ArgumentParser:
    """The parser: with ``command``, that subcommand's full parser (its module imported);
    without, every subcommand listed by name and help only (nothing imported)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not only its message"
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    if command in commands:
        importlib.import_module(commands[command].module).register(subparsers)
    else:
        for name, entry in commands.items():
            subparsers.add_parser(name, help=entry.help)
    return parser


def run_command(
    argv: Sequence[str] | None,
    commands: dict[str, Command] = COMMANDS,
    prog: str = PROG,
    description: str = DESCRIPTION,
    distribution: str = "stablernn_lib",
) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen command of
    ``commands``; returns the exit status.

    A command whose extra is not installed says which one to install (status 2); any
    other error prints its message, no traceback (status 1): ``--debug`` shows it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [arg for arg in argv if arg != "--debug"]
    command = argv[0] if argv else None
    extra = commands[command].extra if command in commands else None
    try:
        args = build_parser(command, commands, prog, description).parse_args(argv)
        return int(args.func(args) or 0)
    except ModuleNotFoundError as error:
        if extra is None or debug:
            raise
        print(
            f"`{command}` needs the package {error.name!r}, which is missing: install the "
            f"'{extra}' extra, e.g. pip install \"{distribution}[{extra}]\" "
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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stablernn_lib``: run one command of :data:`COMMANDS`."""
    return run_command(argv)


if __name__ == "__main__":
    raise SystemExit(main())
