"""Submissions saved by real editors keep their autograded points and their proofs (issue 39).

Every submission is built here from the real student edition of hw01 (three code
questions, 8 points, and the proof hw01.q4), with the instructor's solutions and a proof
of our own, then saved the way an editor saves it: Colab (nbformat 4.0, Colab's notebook
and cell metadata, no tags and no homework metadata, "Copy of ..." file name), JupyterLab 4
(4.5, cell ids, outputs with images), VS Code (its notebook metadata, outputs), Windows line
endings (CRLF in the file and in every cell), and a proof typed into a new cell after the
student deleted the answer cell.  One grading run through the command line grades them all
beside the clean submission; each must get the clean one's points, question by question,
and its proof in the report, found the way the report says.  The unit tests of
:func:`~stablernn_grader.answers.proof_answer` cover the other layouts without
grading.
"""

from __future__ import annotations

import base64
import copy
import csv
import json
import uuid
from pathlib import Path

import nbformat
import pytest
from stablernn_grader.__main__ import main
from stablernn_grader.answers import (
    FORMER_ANSWER_PLACEHOLDERS,
    NOT_FOUND,
    TAGGED,
    UNDER_HEADING,
    heading_number,
    proof_answer,
    question_statement,
)
from stablernn_tools.student_notebooks import student_notebook

from stablernn_lib.homework import get_homework, get_question
from stablernn_lib.homework.cells import (
    ANSWER_PLACEHOLDER,
    is_answer_cell,
    is_solution_cell,
    question_of,
)

ROOT = Path(__file__).resolve().parents[1]
HOMEWORK = get_homework("hw01")
PROOF_QUESTION = get_question("hw01.q4")
# A 1x1 PNG, as JupyterLab stores a figure in a cell's outputs.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a5b1c4"
        "7f0000000049454e44ae426082"
    )
).decode()


def proof(marker: str) -> str:
    """A Markdown proof with LaTeX, several paragraphs, and a marker naming its editor."""
    return (
        f"**Proof ({marker}).** By induction on the number of steps: $h^k_t$ is obtained "
        "from $h = 0$ by applying $\\phi_w$ to $x_{t-k+1}, \\dots, x_t$ only.\n\n"
        "If $k \\ge t$, both runs start from $h_0 = 0$ on the same inputs, so "
        "$h^k_s = h_s$ for every $s \\le t$. $\\blacksquare$"
    )


def clean_submission(text: str) -> nbformat.NotebookNode:
    """The student edition of hw01, answered: the solutions and ``text`` as the proof."""
    instructor = nbformat.read(ROOT / HOMEWORK.notebook, as_version=4)
    solutions = {question_of(c): c.source for c in instructor.cells if is_solution_cell(c)}
    nb = student_notebook(instructor)
    for cell in nb.cells:
        if is_solution_cell(cell):
            cell.source = solutions[question_of(cell)]
        elif is_answer_cell(cell):
            cell.source = text
    return nb


def lines(text: str, ending: str = "\n") -> list[str]:
    """A cell's source as the list of lines that editors write (each but the last ended)."""
    parts = text.split("\n")
    return [p + ending for p in parts[:-1]] + [parts[-1]]


def executed(nb: nbformat.NotebookNode, outputs) -> None:
    """Give every code cell an execution count and the outputs ``outputs(number)`` makes."""
    number = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            number += 1
            cell.execution_count = number
            cell.outputs = outputs(number)


def colab(text: str) -> str:
    """As Colab saves it: nbformat 4.0, no tags nor homework metadata, Colab's own metadata."""
    nb = clean_submission(text)
    cells = []
    for index, cell in enumerate(nb.cells):
        metadata = {"id": f"c{index:03d}xYz{index * 7919 % 1000:03d}"}
        raw = {"cell_type": cell.cell_type, "metadata": metadata, "source": lines(cell.source)}
        if cell.cell_type == "code":
            metadata.update(colab={"base_uri": "https://localhost:8080/"}, outputId=str(index))
            raw["execution_count"] = index
            raw["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["ok\n"]}]
        cells.append(raw)
    document = {
        "nbformat": 4,
        "nbformat_minor": 0,
        "metadata": {
            "colab": {"provenance": [], "toc_visible": True},
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
            "language_info": {"name": "python"},
        },
        "cells": cells,
    }
    return json.dumps(document, indent=2)


def jupyterlab(text: str) -> str:
    """As JupyterLab 4 saves it: nbformat 4.5, cell ids, outputs with an image."""
    nb = clean_submission(text)
    executed(
        nb,
        lambda n: [
            nbformat.v4.new_output("stream", name="stdout", text=f"hw01 check {n}\n"),
            nbformat.v4.new_output(
                "display_data",
                data={"image/png": PNG, "text/plain": "<Figure size 640x480 with 1 Axes>"},
                metadata={"image/png": {"width": 1, "height": 1}},
            ),
        ],
    )
    for cell in nb.cells:
        cell["id"] = uuid.uuid4().hex[:8] + "-" + uuid.uuid4().hex[:4]
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata["language_info"] = {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": "3.11.9",
    }
    return nbformat.writes(nb)


def vscode(text: str) -> str:
    """As VS Code saves it: nbformat 4.2 without ids, its interpreter metadata, one-space indent."""
    nb = clean_submission(text)
    executed(
        nb,
        lambda n: [
            nbformat.v4.new_output("execute_result", {"text/plain": "None"}, execution_count=n)
        ],
    )
    document = json.loads(nbformat.writes(nb))
    document["nbformat_minor"] = 2
    document["metadata"]["vscode"] = {"interpreter": {"hash": "4f" * 32}}
    for cell in document["cells"]:
        cell.pop("id", None)
        cell["source"] = lines("".join(cell["source"]))
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def crlf(text: str) -> str:
    """Windows line endings in the file and in every cell; the proof typed under the placeholder."""
    nb = clean_submission(ANSWER_PLACEHOLDER + "\n\n" + text)
    document = json.loads(nbformat.writes(nb))
    for cell in document["cells"]:
        cell["source"] = lines("".join(cell["source"]), "\r\n")
    return json.dumps(document, indent=1).replace("\n", "\r\n")


def new_cell(text: str) -> str:
    """The tagged answer cell deleted and the proof typed into a new cell (no metadata)."""
    nb = clean_submission(text)
    at = next(i for i, c in enumerate(nb.cells) if is_answer_cell(c))
    nb.cells[at] = nbformat.v4.new_markdown_cell(text)
    return nbformat.writes(nb)


# student -> (file name, how it is saved, how its proof must be found)
EDITORS = {
    "clean": (
        "hw01_recurrent_models.ipynb",
        lambda t: nbformat.writes(clean_submission(t)),
        TAGGED,
    ),
    "colab": ("Copy of hw01_recurrent_models.ipynb", colab, UNDER_HEADING),
    "jupyterlab": ("hw01_recurrent_models.ipynb", jupyterlab, TAGGED),
    "vscode": ("hw01_recurrent_models.ipynb", vscode, TAGGED),
    "windows": ("hw01_recurrent_models (1).ipynb", crlf, TAGGED),
    "new_cell": ("Copy of hw01_recurrent_models.ipynb", new_cell, UNDER_HEADING),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("editors")
    out = tmp_path_factory.mktemp("editor-grades")
    for student, (name, save, _) in EDITORS.items():
        (folder / student).mkdir()
        (folder / student / name).write_bytes(save(proof(student)).encode())
    arguments = ["grade", str(folder), "--out", str(out), "--seed", "5"]
    assert main([*arguments, "--homework", "hw01", "--jobs", "2"]) == 0
    with open(out / "scores.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    reports = {p.name.split("__")[0]: p.read_text() for p in (out / "reports").iterdir()}
    return {"rows": rows, "reports": reports}


def test_the_saved_files_are_what_the_editors_write(tmp_path: Path) -> None:
    """The fixtures have the features that broke the grader: checked, not assumed."""
    saved = {student: save(proof(student)) for student, (_, save, _) in EDITORS.items()}
    as_colab = json.loads(saved["colab"])
    assert (as_colab["nbformat"], as_colab["nbformat_minor"]) == (4, 0)
    assert "colab" in as_colab["metadata"] and "homework" not in as_colab["metadata"]
    assert all(set(c["metadata"]) <= {"id", "colab", "outputId"} for c in as_colab["cells"])
    lab = json.loads(saved["jupyterlab"])
    assert lab["nbformat_minor"] == 5 and all("id" in c for c in lab["cells"])
    assert any("image/png" in o.get("data", {}) for c in lab["cells"] for o in c.get("outputs", []))
    assert "vscode" in json.loads(saved["vscode"])["metadata"]
    assert saved["windows"].count("\r\n") > 100 and "\\r\\n" in saved["windows"]
    typed = json.loads(saved["new_cell"])["cells"]
    assert not any(is_answer_cell(c) for c in typed)
    for text in saved.values():  # every one is still a notebook nbformat reads
        nbformat.reads(text, as_version=4)


def test_every_editor_keeps_the_clean_points_question_by_question(graded) -> None:
    rows = graded["rows"]
    clean = rows["clean"]
    assert float(clean["total"]) == 8.0 and clean["status"] == "graded", clean
    code = [q.id for q in HOMEWORK.questions if q.kind == "code"]
    for student in EDITORS:
        row = rows[student]
        assert row["homework"] == "hw01" and row["status"] == "graded", row
        assert [row[q] for q in code] == [clean[q] for q in code], student
        assert row["total"] == clean["total"], student
        assert row[PROOF_QUESTION.id] == "", student  # graded by hand


@pytest.mark.parametrize("student", sorted(EDITORS))
def test_every_editor_keeps_its_proof_in_the_report(graded, student: str) -> None:
    report = graded["reports"][student]
    section = report.split(f"## {PROOF_QUESTION.id}:", 1)[1]
    assert f"Answer (found in: {EDITORS[student][2]}):" in section
    quoted = [line.rstrip() for line in section.split("\n")]
    for line in proof(student).split("\n"):
        assert f"> {line}".rstrip() in quoted, (student, line)
    for other in EDITORS:
        if other != student:
            assert f"Proof ({other})" not in report
    assert ANSWER_PLACEHOLDER not in report
    assert "Prove that $h^k_t$ depends only on" not in section  # the statement stays out
    assert "\r" not in section


def cells_of(nb: nbformat.NotebookNode) -> list[dict]:
    return [dict(c) for c in nb.cells]


def test_a_tagged_placeholder_falls_back_to_the_cells_under_the_heading() -> None:
    nb = clean_submission(ANSWER_PLACEHOLDER)
    at = next(i for i, c in enumerate(nb.cells) if is_answer_cell(c))
    nb.cells.insert(at + 1, nbformat.v4.new_raw_cell("first part"))
    nb.cells.insert(at + 2, nbformat.v4.new_code_cell("x = 1  # not part of a proof"))
    nb.cells.insert(at + 3, nbformat.v4.new_markdown_cell("second part"))
    found = proof_answer(cells_of(nb), PROOF_QUESTION)
    assert found.found == UNDER_HEADING
    assert found.text == "first part\n\nsecond part"


@pytest.mark.parametrize("placeholder", [ANSWER_PLACEHOLDER, *FORMER_ANSWER_PLACEHOLDERS])
def test_the_placeholder_of_any_edition_is_stripped_from_the_answer(placeholder: str) -> None:
    nb = clean_submission(placeholder + "\n\nMy decision: no verdict.")
    found = proof_answer(cells_of(nb), PROOF_QUESTION)
    assert (found.text, found.found) == ("My decision: no verdict.", TAGGED)


def test_a_proof_typed_into_the_statement_cell_is_kept_without_the_statement() -> None:
    statement = question_statement(PROOF_QUESTION.id)
    assert statement is not None and statement.startswith("## Question 4:")
    nb = clean_submission(ANSWER_PLACEHOLDER)
    nb.cells = [c for c in nb.cells if not is_answer_cell(c)]
    heading = next(c for c in nb.cells if heading_number(c) == 4)
    heading.source = (heading.source + "\n\nMy proof: trivially.").replace("\n", "\r\n")
    found = proof_answer(cells_of(nb), PROOF_QUESTION)
    assert (found.text, found.found) == ("My proof: trivially.", UNDER_HEADING)


def test_the_answer_stops_at_the_next_question_and_may_be_missing() -> None:
    hw04 = nbformat.read(ROOT / get_homework("hw04").notebook, as_version=4)
    nb = student_notebook(hw04)
    untagged = copy.deepcopy(nb)
    for cell in untagged.cells:
        cell.metadata.pop("tags", None)
        cell.metadata.pop("homework", None)
    q4 = get_question("hw04.q4")
    assert proof_answer(cells_of(untagged), q4).found == NOT_FOUND  # only the placeholder
    # a proof written under Question 3 is not an answer to Question 4
    q3 = next(i for i, c in enumerate(untagged.cells) if heading_number(c) == 3)
    untagged.cells.insert(q3 + 1, nbformat.v4.new_markdown_cell("notes on question 3"))
    assert proof_answer(cells_of(untagged), q4).text == ""
    q4_heading = next(i for i, c in enumerate(untagged.cells) if heading_number(c) == 4)
    untagged.cells.insert(q4_heading + 1, nbformat.v4.new_markdown_cell("the proof of q4"))
    assert proof_answer(cells_of(untagged), q4).text == "the proof of q4"
    without_heading = [c for c in cells_of(untagged) if heading_number(c) != 4]
    assert proof_answer(without_heading, q4) == proof_answer([], q4)
    assert proof_answer([], q4).found == NOT_FOUND
