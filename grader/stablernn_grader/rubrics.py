"""The rubrics of proof questions, read from the instructor notebooks (grader only).

A rubric is a Markdown cell tagged ``rubric`` with ``{"homework": {"question": ID}}``
metadata in the question's instructor notebook, one criterion a line::

    - [ ] (1 pt) writes h^k_t as k applications of phi_w ...

The student edition drops that cell, and the installed library holds no rubric text:
only the course repository (where the instructor grades) has it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from stablernn_lib.homework.cells import question_of, tags
from stablernn_lib.homework.registry import Question, get_homework

REPOSITORY = Path(__file__).resolve().parents[2]
RUBRIC_TAG = "rubric"
_CRITERION = re.compile(r"^- \[ \] \((?P<points>\d+(?:\.\d+)?) pt\) (?P<text>.+)$")


def rubric_source(question: Question, root: Path = REPOSITORY) -> str | None:
    """The Markdown of the question's rubric cell, or None where no checkout holds it."""
    path = root / get_homework(question.id.split(".")[0]).notebook
    if not path.is_file():
        return None
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if RUBRIC_TAG in tags(cell) and question_of(cell) == question.id:
            return cell.source
    return None


def rubric_items(question: Question, root: Path = REPOSITORY) -> list[tuple[str, float]]:
    """``(criterion, points)`` of every line of the rubric cell."""
    source = rubric_source(question, root) or ""
    matches = (_CRITERION.match(line.strip()) for line in source.split("\n"))
    return [(m["text"], float(m["points"])) for m in matches if m]


def rubric_markdown(question: Question) -> str:
    """The rubric for a report; a pointer to the instructor notebook where it is absent."""
    source = rubric_source(question)
    if source is None:
        return f"_(the rubric of {question.id} is in its instructor notebook)_"
    return source
