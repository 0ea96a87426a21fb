"""Finding the answer to a proof question in a submitted notebook, with or without metadata.

The student edition puts one Markdown cell under each proof question, tagged ``answer``
with ``{"homework": {"question": ID}}`` metadata and holding a placeholder.  Editors lose
that metadata: Colab keeps no cell tags, and students delete the cell and type their
proof in a new one.  So the answer is found in one of two ways (:class:`Answer` says which):

1. the tagged answer cells of the question, when they hold more than the placeholder;
2. otherwise, every Markdown and raw cell from the question's heading
   (``## Question M: ...``, the cell holding its statement) to the next question's
   heading or the end of the notebook, less the statement and the placeholder.

The statement is read from the question's notebook in the course checkout, when there is
one, so that a proof typed into the statement's own cell is kept; without a checkout the
heading cell counts as statement.  Line endings are normalized (``\\r\\n`` and ``\\r``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import nbformat

from stablernn_lib.homework.cells import (
    ANSWER_PLACEHOLDER,
    is_answer_cell,
    question_of,
)
from stablernn_lib.homework.registry import Question, get_homework

REPOSITORY = Path(__file__).resolve().parents[2]
TAGGED = "tagged answer cell"
UNDER_HEADING = "cells under the question's heading (no tagged answer cell with text)"
NOT_FOUND = "not found"
# Placeholders of earlier student editions: submissions made from them still strip them.
FORMER_ANSWER_PLACEHOLDERS = (
    "**Your answer.** _Replace this text with your proof (Markdown, with LaTeX between "
    "dollar signs)._",
)
_HEADING = re.compile(r"#{1,6}[ \t]*Question[ \t]+(\d+)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Answer:
    """A proof answer: its Markdown text and how it was found (:data:`TAGGED`, ...)."""

    text: str
    found: str


def _normalized(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _without_placeholder(text: str) -> str:
    text = _normalized(text)
    for placeholder in (ANSWER_PLACEHOLDER, *FORMER_ANSWER_PLACEHOLDERS):
        text = text.replace(placeholder, "")
    return text.strip()


def question_number(question: Question) -> int:
    """``M`` of the question ``hwNN.qM``: the number in its heading ``Question M``."""
    return int(question.id.rsplit(".q", 1)[1])


def heading_number(cell: dict[str, Any]) -> int | None:
    """The ``M`` of a Markdown cell whose first non-blank line is ``## Question M...``."""
    if cell.get("cell_type") != "markdown":
        return None
    lines = [line for line in _normalized(cell.get("source", "")).split("\n") if line.strip()]
    match = _HEADING.match(lines[0].strip()) if lines else None
    return int(match.group(1)) if match else None


@cache
def question_statement(question_id: str, root: Path = REPOSITORY) -> str | None:
    """The heading cell of the question in its notebook under ``root``; None without one."""
    homework = get_homework(question_id.split(".", 1)[0])
    path = root / homework.notebook
    if not path.is_file():
        return None
    wanted = int(question_id.rsplit(".q", 1)[1])
    for cell in nbformat.read(path, as_version=4).cells:
        if heading_number(cell) == wanted:
            return _normalized(cell.source).strip()
    return None


def _less_statement(text: str, statement: str | None) -> str:
    """What a heading cell holds beyond the question's statement ('' when unknown)."""
    text = _normalized(text).strip()
    if statement is None or not text.startswith(statement):
        return ""
    return text[len(statement) :]


def proof_answer(cells: list[dict[str, Any]], question: Question) -> Answer:
    """The student's answer to the proof ``question`` among a notebook's ``cells``."""
    tagged = [c for c in cells if is_answer_cell(c) and question_of(c) == question.id]
    text = "\n\n".join(t for c in tagged if (t := _without_placeholder(c["source"])))
    if text:
        return Answer(text, TAGGED)
    number = question_number(question)
    start = next((i for i, c in enumerate(cells) if heading_number(c) == number), None)
    if start is None:
        return Answer("", NOT_FOUND)
    parts = [_less_statement(cells[start]["source"], question_statement(question.id))]
    for cell in cells[start + 1 :]:
        if heading_number(cell) is not None:
            break
        if cell["cell_type"] in ("markdown", "raw"):
            parts.append(cell["source"])
    text = "\n\n".join(t for part in parts if (t := _without_placeholder(part)))
    return Answer(text, UNDER_HEADING if text else NOT_FOUND)
