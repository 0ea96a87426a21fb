"""Command line of the maintainers' tools: ``python -m stablernn_tools <command> ...``.

The table below names each command's module and one-line help; a module is imported only
when its command runs (see :mod:`stablernn_lib.__main__`, whose runner this uses: an
error prints its message, ``--debug`` shows the traceback).
"""

from __future__ import annotations

from collections.abc import Sequence

from stablernn_lib.__main__ import Command, run_command

COMMANDS: dict[str, Command] = {
    "book": Command("stablernn_tools.notebook_checks", "strip and check the book's notebooks"),
    "student-edition": Command(
        "stablernn_tools.student_edition", "write the student edition of the book"
    ),
    "sync-colab": Command(
        "stablernn_tools.student_notebooks",
        "copy Chapter 1's Colab setup cell into every homework notebook",
    ),
    "colab": Command(
        "stablernn_tools.colab_conversion", "write the book's notebooks as plain Colab notebooks"
    ),
    "mutation-report": Command(
        "stablernn_tools.mutation_report", "the report of mutmut's runs on the math"
    ),
    "formula-mutants": Command(
        "stablernn_tools.formula_mutants", "run the hand-written formula mutants of every bound"
    ),
    "benchmark": Command(
        "stablernn_tools.benchmark",
        "projection overhead, Figure-2 speed-up, tokens/s (WikiText-2 models)",
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stablernn_tools``: run one command of :data:`COMMANDS`."""
    return run_command(
        argv,
        COMMANDS,
        "python -m stablernn_tools",
        "Book checks and maintenance tools of the course 'Stable Recurrent Models'.",
        "stablernn_tools",
    )


if __name__ == "__main__":
    raise SystemExit(main())
