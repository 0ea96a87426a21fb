"""The grader on made-up submissions: every outcome it must record, and the right scores.

One grading run (module fixture, through the command line) covers the instructor
notebooks of every homework and six made-up hw04 submissions.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest

from stablernn_lib.__main__ import main
from stablernn_lib.homework import get_homework, homeworks
from stablernn_lib.homework.notebooks import is_solution_cell, question_of, student_notebook

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

WRONG_LAMBDA = """def rnn_contraction_constant(W, activation):
    return float(torch.linalg.matrix_norm(W, 2))  # forgets L_rho
"""
HARD_CODED_LAMBDA = """def rnn_contraction_constant(W, activation):
    return {"tanh": 0.8, "sigmoid": 0.5}[activation]  # the visible answers
"""
CRASHING_LAMBDA = """def rnn_contraction_constant(W, activation):
    return 1 / 0
"""
ENDLESS_ESTIMATE = """def lipschitz_lower_bound(step, states, other_states, inputs):
    while True:
        pass
"""


def hw04() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / get_homework("hw04").notebook, as_version=4)


def with_answers(nb, answers: dict[str, str | None]) -> nbformat.NotebookNode:
    """``nb`` with the solution cell of each question replaced (None: deleted)."""
    cells = []
    for cell in nb.cells:
        if is_solution_cell(cell) and question_of(cell) in answers:
            if answers[question_of(cell)] is None:
                continue
            cell = nbformat.from_dict({**cell, "source": answers[question_of(cell)]})
        cells.append(cell)
    nb = nbformat.from_dict(dict(nb))
    nb.cells = cells
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    folder = tmp_path_factory.mktemp("submissions")
    for homework in homeworks():
        path = ROOT / homework.notebook
        (folder / "instructor").mkdir(exist_ok=True)
        (folder / "instructor" / path.name).write_text(path.read_text())
    stub = student_notebook(hw04())
    stub_q3 = next(c.source for c in stub.cells if question_of(c) == "hw04.q3" and c.source)
    made_up = {
        "partly_wrong": with_answers(hw04(), {"hw04.q2": WRONG_LAMBDA, "hw04.q3": stub_q3}),
        "crashing": with_answers(hw04(), {"hw04.q2": CRASHING_LAMBDA, "hw04.q3": None}),
        "empty": stub,
        "hard_coded": with_answers(stub, {"hw04.q2": HARD_CODED_LAMBDA}),
        "endless": with_answers(stub, {"hw04.q3": ENDLESS_ESTIMATE}),
    }
    made_up["crashing"].cells.insert(2, nbformat.v4.new_code_cell('raise RuntimeError("boom")'))
    made_up["endless"].cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(600)"))
    for student, nb in made_up.items():
        nbformat.write(nb, folder / f"{student}.ipynb")
    (folder / "unreadable.ipynb").write_text("this is not a notebook")
    out = tmp_path_factory.mktemp("grades")
    arguments = ["homework", "grade", str(folder), "--out", str(out), "--seed", "11"]
    assert main([*arguments, "--timeout", "20", "--time-scale", "0.4"]) == 0
    with open(out / "scores.csv") as handle:
        rows = {(r["student"], r["homework"] or "?"): r for r in csv.DictReader(handle)}
    reports = {p.name: p.read_text() for p in (out / "reports").iterdir()}
    return {"rows": rows, "reports": reports, "out": out}


def score(graded, student: str, homework: str = "hw04") -> float:
    return float(graded["rows"][(student, homework)]["total"])


def report(graded, student: str) -> str:
    return next(text for name, text in graded["reports"].items() if name.startswith(student))


def test_instructor_editions_pass_every_check(graded) -> None:
    for homework in homeworks():
        row = graded["rows"][("instructor", homework.id)]
        assert row["status"] == "graded", row
        for question in homework.questions:
            if question.kind == "code":
                assert float(row[question.id]) == question.points, (question.id, row)
            else:
                assert row[question.id] == ""
        text = next(
            t for n, t in graded["reports"].items() if n.startswith(f"instructor__{homework.id}")
        )
        assert "| fail |" not in text and "| timeout |" not in text
        assert "Cells that raised" not in text


def test_partly_wrong(graded) -> None:
    assert score(graded, "partly_wrong") == 3 + 2 * 1 / 4 + 0
    text = report(graded, "partly_wrong")
    assert "expected 0.5, got 2" in text  # the sigmoid case explains the mistake
    assert "still the stub" in text


def test_crashing_and_missing(graded) -> None:
    assert score(graded, "crashing") == 3
    text = report(graded, "crashing")
    assert "RuntimeError: boom" in text
    assert "ZeroDivisionError" in text
    assert "missing: no function lipschitz_lower_bound()" in text


def test_empty_submission_scores_zero(graded) -> None:
    assert score(graded, "empty") == 0
    assert report(graded, "empty").count("Status: not attempted.") == 3


def test_hard_coded_visible_answers_fail_hidden_checks(graded) -> None:
    row = graded["rows"][("hard_coded", "hw04")]
    assert float(row["hw04.q2"]) == 2 * 2 / 4
    text = report(graded, "hard_coded")
    assert "| tanh | visible | pass |" in text and "| sigmoid | visible | pass |" in text
    assert "| every activation, random matrices | hidden | fail |" in text


def test_endless_code_is_stopped_and_recorded(graded) -> None:
    assert score(graded, "endless") == 0
    text = report(graded, "endless")
    assert "| timeout |" in text
    assert "Timeout" in text or "KeyboardInterrupt" in text  # the sleeping cell was cut


def test_unreadable_notebook_is_recorded(graded) -> None:
    row = graded["rows"][("unreadable", "?")]
    assert row["status"].startswith("unreadable notebook")
    assert float(row["total"]) == 0


def test_grading_record(graded) -> None:
    record = json.loads((graded["out"] / "grading.json").read_text())
    assert record["seed"] == 11 and len(record["submissions"]) == len(graded["rows"])
