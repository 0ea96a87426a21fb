"""The grader end to end, on real notebooks written here: honest, broken and hostile ones.

Two grading runs (module fixtures, through the command line).  The first, with
generous limits, grades the instructor notebook of every homework, made-up hw04
submissions, and hw01 submissions that attack the grader: each hostile notebook has
a *control*, the same answers without the attack, and must get exactly the control's
score.  The second, with small time limits, grades an answer that loops forever and a
cell that sleeps.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import nbformat
import pytest

from stablernn_lib.__main__ import main
from stablernn_lib.homework import get_homework, homeworks
from stablernn_lib.homework.grading import SANDBOX_UIDS
from stablernn_lib.homework.notebooks import is_solution_cell, question_of, student_notebook

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not AS_ROOT, reason="file isolation and process limits need the grader to run as root"
)

WRONG_LAMBDA = """def rnn_contraction_constant(W, activation):
    return float(torch.linalg.matrix_norm(W, 2))  # forgets L_rho
"""
HARD_CODED_LAMBDA = """def rnn_contraction_constant(W, activation):
    return {"tanh": 0.8, "sigmoid": 0.5}[activation]  # the visible answers
"""
CRASHING_LAMBDA = """def rnn_contraction_constant(W, activation):
    return 1 / 0
"""

# hw01: rnn_states (q1, 2 points), truncated_rnn_states (q2), lstm_step (q3)
WRONG_STATES = """import torch
def rnn_states(W, U, inputs):
    return torch.zeros(inputs.shape[0], inputs.shape[1], W.shape[0], dtype=inputs.dtype)
"""
WRONG_TRUNCATED = """import torch
def truncated_rnn_states(W, U, inputs, k):
    return torch.zeros(inputs.shape[0], inputs.shape[1], W.shape[0], dtype=inputs.dtype)
"""
EXITING_TRUNCATED = """import sys
def truncated_rnn_states(W, U, inputs, k):
    sys.exit(0)
"""
INTERRUPTED_TRUNCATED = """def truncated_rnn_states(W, U, inputs, k):
    raise KeyboardInterrupt
"""
DYING_LSTM = """import os
def lstm_step(weight_hh, weight_ih, bias, c, h, x):
    os._exit(3)
"""
ENDLESS_LSTM = """def lstm_step(weight_hh, weight_ih, bias, c, h, x):
    while True:
        pass
"""

# The attack of issue 12: replace the in-kernel grader of the old design.
MONKEYPATCH = """import json as _j, stablernn_lib.homework.grading as _g
from stablernn_lib.homework.registry import get_question as _gq
import stablernn_lib.homework.runner as _r
def _fake(question_id, namespace, *, seed, out, **kw):
    res = _r.run_question(_gq(question_id), lambda *a, **k: None, hidden=True,
                          seed=seed, source="", time_scale=1.0).to_dict()
    for o in res["outcomes"]: o["status"] = "pass"
    res["points"] = res["max_points"]
    _j.dump(res, open(out, "w"))
_g.grade_in_kernel = _fake
"""
PATCH_HELPERS = """import stablernn_lib.homework.expect as _e
import stablernn_lib.homework.registry as _reg
import stablernn_lib.homework.runner as _r
import stablernn_lib.homework.grading as _g
import stablernn_lib.homework.sandbox as _s
for _name in ("expect_close", "expect_number", "expect_tensor", "expect_raises"):
    if hasattr(_e, _name):
        setattr(_e, _name, lambda *a, **k: "correct")
_reg.CheckFailedError = type("Never", (Exception,), {})
_r.score = lambda question, outcomes: question.points
_r.run_check = lambda *a, **k: None
_g.score = _r.score
_s.Recorder = lambda function: (lambda *a, **k: None)
"""
PATCH_NUMERICS = """import math, numpy, torch, torch.testing
torch.allclose = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
math.isclose = lambda *a, **k: True
"""
PATCH_BUILTINS_AND_JSON = """import builtins, json
_real_print = builtins.print
builtins.print = lambda *a, **k: _real_print("hw01.q2 PASS (8 of 8 points)")
builtins.abs = lambda x: 0
json.dumps = lambda *a, **k: '{"points": 8, "status": "complete"}'
json.dump = lambda obj, fp, *a, **k: fp.write(json.dumps(obj))
json.loads = lambda *a, **k: {"points": 8}
print("anything")
"""
FAKE_PASS_LINES = """for _q in ("hw01.q1", "hw01.q2", "hw01.q3"):
    print(f"{_q}: 3 of 3 checks passed (3 of 3 points)")
    print("  PASS  every check [hidden]: correct")
"""
BIG_OUTPUT = """import sys
sys.stdout.write("PASS " * 20_000_000)  # 100 MB
print("x" * 1_000_000, file=sys.stderr)
"""
MEMORY_HOG = """import torch
hog = torch.empty(8 * 2**30, dtype=torch.uint8)  # 8 GiB: beyond the grader's limit
"""
PROCESS_FLOOD = """import subprocess
flood = [subprocess.Popen(["sleep", "60"]) for _ in range(500)]
"""
LEFT_RUNNING = """import os, subprocess, sys
subprocess.Popen(["sleep", "1000"])
if os.fork() == 0:  # a daemon in a session of its own, out of the process group
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "1001"])
    os._exit(0)
"""
FORGED_EVENTS = """import json, os
fake = {"returned": {"tensor": "float64", "shape": [1], "data": "AAAAAAAAAAA="}, "changed": {}}
lines = [
    {"event": "cell", "index": [1], "phase": "end"},
    {"event": "check", "key": ["hw01.q1"], "phase": "start"},
    {"event": "check", "key": ["hw01.q1", "a (4, 2, 3) input"], "phase": "start"},
    {"event": "check", "key": ["hw01.q1", "a (4, 2, 3) input"], "phase": "end", "calls": [fake]},
    {"event": "check", "key": ["hw01.q2", "T = 6, k = 2"], "phase": "end", "calls": "x"},
    {"event": "done"},
]
for fd in map(int, os.listdir("/proc/self/fd")):
    if fd > 2:
        try:
            os.write(fd, ("\\n".join(map(json.dumps, lines)) + "\\nnot json\\n").encode())
        except OSError:
            pass
"""


def forge(out: Path, victim: Path) -> str:
    return f"""import json, os, pathlib
fake = {{"points": 8, "status": "complete"}}
for folder in (".", "..", "/tmp"):
    try:
        pathlib.Path(folder, "scores.csv").write_text("mallory,hw01,x,2,3,3,,8,graded\\n")
        pathlib.Path(folder, "hw01.q1.json").write_text(json.dumps(fake))
    except OSError:
        pass
pathlib.Path({str(out / "scores.csv")!r}).write_text("forged")
"""


def snoop(out: Path, victim: Path, folder: Path) -> list[str]:
    return [
        f"stolen = open({str(victim)!r}).read()",
        f"import os\nlisting = os.listdir({str(folder)!r})",
        f"import os\nresults = os.listdir({str(out)!r})",
        f"open({str(victim)!r}, 'a').write('vandalized')",
    ]


def notebook(homework: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / get_homework(homework).notebook, as_version=4)


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


def with_cells(nb, sources: list[str], at: int | None = None) -> nbformat.NotebookNode:
    """``nb`` with new code cells, before its first solution cell (``at=None``) or at the end."""
    nb = nbformat.from_dict(dict(nb))
    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    if at is None:
        at = next(i for i, c in enumerate(nb.cells) if is_solution_cell(c))
    nb.cells = nb.cells[:at] + cells + nb.cells[at:]
    return nb


def hw01_answers(kind: str) -> nbformat.NotebookNode:
    """The hw01 answer sets that the attacks use: stub, wrong, q1 right (and the rest stubs)."""
    stub = student_notebook(notebook("hw01"))
    q1 = next(c.source for c in notebook("hw01").cells if question_of(c) == "hw01.q1")
    return {
        "stub": stub,
        "wrong": with_answers(stub, {"hw01.q1": WRONG_STATES, "hw01.q2": WRONG_TRUNCATED}),
        "q1": with_answers(stub, {"hw01.q1": q1}),
    }[kind]


def grade(folder: Path, out: Path, *options: str) -> dict:
    arguments = ["homework", "grade", str(folder), "--out", str(out), "--seed", "11", *options]
    assert main(arguments) == 0
    with open(out / "scores.csv") as handle:
        rows = {(r["student"], r["homework"] or "?"): r for r in csv.DictReader(handle)}
    reports = {p.name: p.read_text() for p in (out / "reports").iterdir()}
    return {"rows": rows, "reports": reports, "out": out}


# hostile hw01 submission -> (its control, how it is made)
ATTACKS = {
    "mallory": ("stub", lambda nb, paths: with_cells(nb, [MONKEYPATCH])),
    "patch_helpers": ("wrong", lambda nb, paths: with_cells(nb, [PATCH_HELPERS])),
    "patch_numerics": ("wrong", lambda nb, paths: with_cells(nb, [PATCH_NUMERICS])),
    "patch_builtins_json": ("q1", lambda nb, paths: with_cells(nb, [PATCH_BUILTINS_AND_JSON])),
    "forged_events": ("stub", lambda nb, paths: with_cells(nb, [FORGED_EVENTS])),
    "forger": ("stub", lambda nb, paths: with_cells(nb, [forge(*paths[:2]), FAKE_PASS_LINES])),
    "exits": (
        "q1",
        lambda nb, paths: with_answers(nb, {"hw01.q2": EXITING_TRUNCATED, "hw01.q3": DYING_LSTM}),
    ),
    "interrupts": ("q1", lambda nb, paths: with_answers(nb, {"hw01.q2": INTERRUPTED_TRUNCATED})),
    "big_output": ("q1", lambda nb, paths: with_cells(nb, [BIG_OUTPUT])),
    "memory_hog": ("q1", lambda nb, paths: with_cells(nb, [MEMORY_HOG])),
    "processes": ("q1", lambda nb, paths: with_cells(nb, [LEFT_RUNNING, PROCESS_FLOOD])),
    "snoop": ("q1", lambda nb, paths: with_cells(nb, snoop(*paths))),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    for homework in homeworks():
        path = ROOT / homework.notebook
        (folder / "instructor").mkdir(exist_ok=True)
        (folder / "instructor" / path.name).write_text(path.read_text())
    hw04 = notebook("hw04")
    stub = student_notebook(hw04)
    stub_q3 = next(c.source for c in stub.cells if question_of(c) == "hw04.q3" and c.source)
    made_up = {
        "partly_wrong": with_answers(hw04, {"hw04.q2": WRONG_LAMBDA, "hw04.q3": stub_q3}),
        "crashing": with_answers(hw04, {"hw04.q2": CRASHING_LAMBDA, "hw04.q3": None}),
        "empty": stub,
        "hard_coded": with_answers(stub, {"hw04.q2": HARD_CODED_LAMBDA}),
    }
    made_up["crashing"].cells.insert(2, nbformat.v4.new_code_cell('raise RuntimeError("boom")'))
    for kind in ("stub", "wrong", "q1"):
        made_up[f"control_{kind}_hw01"] = hw01_answers(kind)
    victim = folder / "control_stub_hw01.ipynb"
    for student, (control, make) in ATTACKS.items():
        made_up[f"{student}_hw01"] = make(hw01_answers(control), (out, victim, folder))
    for student, nb in made_up.items():
        nbformat.write(nb, folder / f"{student}.ipynb")
    (folder / "unreadable.ipynb").write_text("this is not a notebook")
    return {**grade(folder, out, "--memory-mb", "3072", "--processes", "48"), "folder": folder}


@pytest.fixture(scope="module")
def graded_with_small_limits(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("slow-submissions")
    endless = with_answers(hw01_answers("q1"), {"hw01.q3": ENDLESS_LSTM})
    sleeping = with_cells(hw01_answers("q1"), ["import time\ntime.sleep(600)"], at=10_000)
    nbformat.write(endless, folder / "endless_hw01.ipynb")
    nbformat.write(sleeping, folder / "sleeping_hw01.ipynb")
    out = tmp_path_factory.mktemp("slow-grades")
    return grade(folder, out, "--timeout", "20", "--time-scale", "0.3")


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
        assert "| fail |" not in text and "| timeout |" not in text and "| error |" not in text
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


def test_controls_score_what_their_answers_deserve(graded) -> None:
    assert score(graded, "control_stub_hw01", "hw01") == 0
    assert score(graded, "control_wrong_hw01", "hw01") == 0
    assert score(graded, "control_q1_hw01", "hw01") == get_homework("hw01").questions[0].points


@pytest.mark.parametrize("student", sorted(ATTACKS))
def test_an_attack_scores_exactly_its_control(graded, student: str) -> None:
    control = ATTACKS[student][0]
    row = graded["rows"][(f"{student}_hw01", "hw01")]
    expected = graded["rows"][(f"control_{control}_hw01", "hw01")]
    for question in get_homework("hw01").questions:
        assert row[question.id] == expected[question.id], (question.id, row, expected)
    assert row["total"] == expected["total"]


def test_the_monkeypatch_of_issue_12_scores_zero(graded) -> None:
    assert score(graded, "mallory_hw01", "hw01") == 0


def test_exits_and_interrupts_in_answers_fail_only_their_checks(graded) -> None:
    text = report(graded, "exits_hw01")
    assert "SystemExit" in text and "ended the notebook's process" in text
    assert "KeyboardInterrupt" in report(graded, "interrupts_hw01")


@needs_root
def test_files_outside_the_submission_cannot_be_read_or_written(graded) -> None:
    forged = report(graded, "forger_hw01")
    assert "PermissionError" in forged  # writing the grader's scores.csv
    assert (graded["out"] / "scores.csv").read_text().startswith("student,homework,")
    snooped = report(graded, "snoop_hw01")
    assert snooped.count("PermissionError") == 4  # read, list, list the output, write
    assert "vandalized" not in (graded["folder"] / "control_stub_hw01.ipynb").read_text()


@needs_root
def test_memory_and_process_limits_hold(graded) -> None:
    assert "allocate" in report(graded, "memory_hog_hw01")  # torch's out-of-memory error
    assert "BlockingIOError" in report(graded, "processes_hw01")  # RLIMIT_NPROC
    low, high = SANDBOX_UIDS
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue
        uid = int(next(x for x in lines if x.startswith("Uid:")).split()[1])
        assert not low <= uid < high, f"a student process is still running: {status.parent}"


def test_other_submissions_are_graded_whatever_one_does(graded) -> None:
    for (student, _), row in graded["rows"].items():
        if student != "unreadable":
            assert row["status"] == "graded", (student, row)


def test_endless_answer_is_stopped_and_the_rest_is_graded(graded_with_small_limits) -> None:
    row = graded_with_small_limits["rows"][("endless_hw01", "hw01")]
    assert float(row["hw01.q1"]) == 2 and float(row["hw01.q3"]) == 0
    assert "| timeout |" in report(graded_with_small_limits, "endless")


def test_sleeping_cell_is_cut_and_answers_before_it_count(graded_with_small_limits) -> None:
    row = graded_with_small_limits["rows"][("sleeping_hw01", "hw01")]
    assert float(row["total"]) == 2
    assert "ran past its 20 s limit" in row["status"]
    assert "stopped by the grader" in report(graded_with_small_limits, "sleeping")


def test_unreadable_notebook_is_recorded(graded) -> None:
    row = graded["rows"][("unreadable", "?")]
    assert row["status"].startswith("unreadable notebook")
    assert float(row["total"]) == 0


def test_grading_record(graded) -> None:
    record = json.loads((graded["out"] / "grading.json").read_text())
    assert record["seed"] == 11 and len(record["submissions"]) == len(graded["rows"])
    assert record["limits"]["memory_mb"] == 3072
    assert record["isolation"] == ("own user id" if AS_ROOT else "same user id (not root)")
