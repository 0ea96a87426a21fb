"""Command line of the grader: ``python -m stablernn_grader <command> ...``.

The table below names each command's module and one-line help; a module is imported only
when its command runs (see :mod:`stablernn_lib.__main__`, whose runner this uses: an
error prints its message, ``--debug`` shows the traceback).
"""

from __future__ import annotations

from collections.abc import Sequence

from stablernn_lib.__main__ import Command, run_command

COMMANDS: dict[str, Command] = {
    "grade": Command("stablernn_grader.cli", "grade a folder of submitted notebooks"),
    "canvas-csv": Command(
        "stablernn_grader.cli", "the Canvas gradebook CSV of a graded Canvas download"
    ),
    "gradescope": Command(
        "stablernn_grader.cli", "build a Gradescope autograder zip that grades one homework"
    ),
    "questions": Command("stablernn_grader.cli", "print the table of questions (Markdown)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stablernn_grader``: run one command of :data:`COMMANDS`."""
    return run_command(
        argv,
        COMMANDS,
        "python -m stablernn_grader",
        "Grading the homework of the course 'Stable Recurrent Models' (for instructors).",
        "stablernn_grader",
    )


if __name__ == "__main__":
    raise SystemExit(main())
