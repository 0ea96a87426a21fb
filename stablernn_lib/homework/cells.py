"""The cells of a homework notebook: their tags and the question each belongs to.

``solution`` (metadata ``{"homework": {"question": "hw04.q1"}}``): a question's function;
``check``: calls ``check(...)``; ``answer``: a proof's answer (:data:`ANSWER_PLACEHOLDER` in
the student edition); ``rubric``, ``instructor``: the instructor's only.
"""

from __future__ import annotations

from typing import Any

SOLUTION_TAG = "solution"
CHECK_TAG = "check"
COLAB_TAG = "colab-setup"
ANSWER_TAG = "answer"
REMOVED_TAGS = frozenset({"rubric", "instructor"})
ANSWER_PLACEHOLDER = (
    "**Your answer.** _Replace this text with your answer (Markdown, with LaTeX between "
    "dollar signs)._"
)


def tags(cell: dict[str, Any]) -> list[str]:
    """The cell's tags (an empty list when it has none)."""
    return list(cell.get("metadata", {}).get("tags", []))


def question_of(cell: dict[str, Any]) -> str | None:
    """The question id in the cell's ``homework`` metadata, if any."""
    return cell.get("metadata", {}).get("homework", {}).get("question")


def is_solution_cell(cell: dict[str, Any]) -> bool:
    return cell["cell_type"] == "code" and SOLUTION_TAG in tags(cell)


def is_answer_cell(cell: dict[str, Any]) -> bool:
    return cell["cell_type"] == "markdown" and ANSWER_TAG in tags(cell)
