"""Command line: ``python -m stablernn_lib <command> ...``.

``COMMANDS``: each subcommand's module (imported when it runs; its ``register(subparsers)``
adds the arguments and sets ``func``) and help.  The grader and the maintainers' tools run
their own tables through :func:`run_command`.
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
        "stablernn_lib.tasks.jsb.measurements",
        "gradient, truncation and Jacobian measurements on the JSB models (Chapter 9)",
    ),
    "lm-analysis": Command(
        "stablernn_lib.tasks.wikitext2.measurements",
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
    """Run the command of ``commands`` that ``argv`` names; its exit status.  A missing extra
    says which to install (2); an error prints its message (1), its traceback with ``--debug``.
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
