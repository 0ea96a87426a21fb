"""The grader end to end, on real notebooks written here: honest, broken and hostile ones.

Four grading runs (module fixtures, through the command line), each notebook graded
once.  The first, with generous limits, grades the instructor notebook of every
homework, made-up hw04 submissions, and submissions that attack the grader (every
attack class of issues 23 and 37, listed in grader_security.md's threat model): each hostile
notebook has a *control*, the same answers without the attacks, and must get exactly
the control's score; attacks that only add cells share a notebook, and each one's own
cells are checked for the error its defence raises.  The honest submissions must get
the scores the grader of commit 6918f44 gave them
(``tests/data/homework_baseline_scores.json``).  The other three start first and run
beside it in processes of their own, since they mostly wait: one, with small time
limits, grades an answer that loops forever, a cell that sleeps, and an answer that
forges "check start" events to reset its time limit; one grades from a copy of the
repository inside a folder of mode 700; and one, at ``--memory-mb 1024``, grades the
submissions at the caps of issue 37 (record floods, processes that fill their memory,
the largest notebook the reader accepts) and prints the grading process's peak memory.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from hostile_support import REFERENCE_NOT_FOUND, walker_notebook
from stablernn_grader.__main__ import main
from stablernn_grader.isolation import SANDBOX_UIDS, bwrap_binary
from stablernn_tools.student_notebooks import student_notebook

from stablernn_lib.homework import get_homework, homeworks
from stablernn_lib.homework.cells import is_solution_cell, question_of

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
AS_ROOT = os.geteuid() == 0
BASELINE = json.loads((ROOT / "tests" / "data" / "homework_baseline_scores.json").read_text())
SECRET = "TOP-SECRET-7d1c0e"  # in a root-only file a submission links to
PWNED = "stablernn-pwned-4f2a"  # what planted modules would write if they ever ran
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
MONKEYPATCH = """import json as _j, stablernn_grader.grading as _g
from stablernn_lib.homework.registry import get_question as _gq
import stablernn_lib.homework.checks as _r
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
import stablernn_lib.homework.checks as _r
import stablernn_grader.grading as _g
import stablernn_grader.sandbox as _s
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

# issue 23, class 1: modules planted in the working folder and user site, then an exit
PLANTED = f"""import os, pathlib
payload = "import os\\nopen('/tmp/{PWNED}', 'w').write(str(os.getuid()))\\nos._exit(0)\\n"
for name in ("json.py", "sitecustomize.py", "usercustomize.py", "stablernn_lib/__init__.py",
             "stablernn_lib/homework/__init__.py", "IPython/__init__.py", "torch/__init__.py",
             ".local/lib/python3.11/site-packages/evil.pth"):
    path = pathlib.Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(payload if name.endswith(".py") else "import os; os._exit(0)\\n")
os._exit(0)
"""
WHO_AM_I = """import os
raise RuntimeError(f"uid={os.getuid()} home={os.environ.get('HOME')}")
"""
# class 2: answers that zero their inputs in place and return what fits the zeroed inputs
MUTATING_STATES = """import torch
def rnn_states(W, U, inputs):
    W.zero_()
    return torch.stack([torch.tanh(x @ U.T) for x in inputs])
"""
MUTATING_TRUNCATED = """import torch
def truncated_rnn_states(W, U, inputs, k):
    W.zero_()
    return torch.stack([torch.tanh(x @ U.T) for x in inputs])
"""
# their control: the same answers for W = 0, without touching W (right only when T = 1)
IGNORING_STATES = MUTATING_STATES.replace("    W.zero_()\n", "")
IGNORING_TRUNCATED = MUTATING_TRUNCATED.replace("    W.zero_()\n", "")
# class 6: SysV shared memory, /dev/shm, /run/lock and /tmp files left behind
LEFTOVERS = f"""import ctypes, os
libc = ctypes.CDLL(None)
segment = libc.shmget(0, 4096, 0o1666)  # IPC_PRIVATE, IPC_CREAT | 0666
for folder in ("/dev/shm", "/run/lock", "/tmp", "/var/tmp"):
    try:
        open(os.path.join(folder, "{PWNED}"), "w").write("left")
    except OSError:
        pass
"""
# class 6: forged "check start" events, to reset the check's time limit while it runs
FORGED_START = """import json, os, time
def lstm_step(weight_hh, weight_ih, bias, c, h, x):
    for _ in range(120):
        for fd in range(3, 40):
            for name in ("B = 2, D = 3, H = 2", "same as torch.nn.LSTMCell, random sizes"):
                event = {"event": "check", "key": ["hw01.q3", name], "phase": "start"}
                try:
                    os.write(fd, (json.dumps(event) + "\\n").encode())
                except OSError:
                    pass
        time.sleep(0.5)
    raise ValueError("outlived every limit")
"""


# class 6: IPython syntax around a forbidden call (the gate used to fail open)
def magic_bypass(solution: str) -> str:
    unused = "\n\ndef _unused(W, U, inputs, k):\n    return truncated_states(W, U, inputs, k)\n"
    return "%time _ = 1\n" + solution + unused


ALIAS_CELL = "from stablernn_lib.core.truncation import truncated_states as helper"


def aliased(solution: str) -> str:
    return solution + "\n\ndef _unused(W, U, inputs, k):\n    return helper(W, U, inputs, k)\n"


RUBRIC_THIEF = """from stablernn_grader.rubrics import rubric_markdown
from stablernn_lib.homework import get_question
raise RuntimeError("rubric: " + rubric_markdown(get_question("hw01.q4")))
"""
SHOW_RUBRIC = "from stablernn_lib.homework import show_rubric\nshow_rubric('hw01.q4')"
CONSTANT_PROJECTION = """import torch
def spectral_projection(W, radius):
    return torch.zeros_like(W)
"""
NAN_LAMBDA = """def rnn_contraction_constant(W, activation):
    return float("nan")
"""
CONSTANT_ESTIMATE = """def lipschitz_lower_bound(step, h, h2, x):
    return 0.1
"""
ZERO_RECURSION = """import torch
def error_recursion(alpha, beta, c, steps):
    return torch.zeros(steps, dtype=torch.float64)
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
        "ignoring": with_answers(stub, {"hw01.q1": IGNORING_STATES, "hw01.q2": IGNORING_TRUNCATED}),
    }[kind]


def grade(folder: Path, out: Path, *options: str) -> dict:
    arguments = ["grade", str(folder), "--out", str(out), "--seed", "11", *options]
    assert main(arguments) == 0
    return read_grades(out)


def read_grades(out: Path) -> dict:
    """The rows of ``out/scores.csv`` by (student, homework) and every report by file name."""
    with open(out / "scores.csv") as handle:
        rows = {(r["student"], r["homework"] or "?"): r for r in csv.DictReader(handle)}
    reports = {p.name: p.read_text() for p in (out / "reports").iterdir()}
    return {"rows": rows, "reports": reports, "out": out}


# Hostile hw01 submissions, each beside its control (the same answers, no attack).
# Attacks that only add cells share a notebook (one student process, not one each);
# each attack's cells are named (attack_cells) so that its own errors are checked.
def attack_cells(paths: tuple[Path, Path, Path]) -> dict[str, list[str]]:
    """The cells of each attack that adds cells, in the order they run."""
    return {
        "planted": [PLANTED, WHO_AM_I],  # first: its exit restarts the process once, early
        "monkeypatch": [MONKEYPATCH],
        "forged_events": [FORGED_EVENTS],
        "forger": [forge(*paths[:2]), FAKE_PASS_LINES],
        "patch_helpers": [PATCH_HELPERS],
        "patch_numerics": [PATCH_NUMERICS],
        "big_output": [BIG_OUTPUT],
        "memory_hog": [MEMORY_HOG],
        "snoop": snoop(*paths),
        "leftovers": [LEFTOVERS],
        "rubric_thief": [SHOW_RUBRIC, RUBRIC_THIEF],
        "processes": [LEFT_RUNNING, PROCESS_FLOOD],
        "patch_builtins_json": [PATCH_BUILTINS_AND_JSON],  # last: it replaces print and json
    }


# notebook -> (its control, the attacks whose cells it adds)
CELL_ATTACKS = {
    "forgers": ("stub", ("monkeypatch", "forged_events", "forger")),
    # apart: together, every check ends the student process and is started again
    "patch_helpers": ("wrong", ("patch_helpers",)),
    "patch_numerics": ("wrong", ("patch_numerics",)),
    "escapes": (
        "q1",
        (
            "planted",
            "big_output",
            "memory_hog",
            "snoop",
            "leftovers",
            "rubric_thief",
            "processes",
            "patch_builtins_json",
        ),
    ),
}
# notebook -> (its control, the answers it replaces)
ANSWER_ATTACKS = {
    "exits": ("q1", lambda: {"hw01.q2": EXITING_TRUNCATED, "hw01.q3": DYING_LSTM}),
    "interrupts": ("q1", lambda: {"hw01.q2": INTERRUPTED_TRUNCATED}),
    "mutating": ("ignoring", lambda: {"hw01.q1": MUTATING_STATES, "hw01.q2": MUTATING_TRUNCATED}),
    "magic_gate": ("q1", lambda: {"hw01.q2": magic_bypass(solution("hw01.q2"))}),
    "aliased_gate": ("q1", lambda: {"hw01.q2": aliased(solution("hw01.q2"))}),
}
ATTACKS = {name: control for name, (control, _) in {**CELL_ATTACKS, **ANSWER_ATTACKS}.items()}


def write_attacks(folder: Path, paths: tuple[Path, Path, Path]) -> dict[str, list[int]]:
    """Write every hostile notebook; returns the cell numbers (1-based) of each attack."""
    cells = attack_cells(paths)
    numbers: dict[str, list[int]] = {}
    for name, (control, attacks) in CELL_ATTACKS.items():
        nb = hw01_answers(control)
        at = next(i for i, c in enumerate(nb.cells) if is_solution_cell(c))
        sources = []
        for attack in attacks:
            first = at + len(sources) + 1
            numbers[attack] = list(range(first, first + len(cells[attack])))
            sources += cells[attack]
        nbformat.write(with_cells(nb, sources, at), folder / f"{name}_hw01.ipynb")
    for name, (control, answers) in ANSWER_ATTACKS.items():
        nb = with_answers(hw01_answers(control), answers())
        if name == "aliased_gate":
            nb = with_cells(nb, [ALIAS_CELL])
        nbformat.write(nb, folder / f"{name}_hw01.ipynb")
    return numbers


def shared_memory_segments() -> set[tuple[str, str, str]]:
    """``(perms, size, shmid)`` of every SysV shared-memory segment the host can see."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {(f[2], f[3], f[1]) for f in (line.split() for line in lines)}


def solution(question_id: str) -> str:
    homework = question_id.split(".")[0]
    return next(
        c.source
        for c in notebook(homework).cells
        if is_solution_cell(c) and question_of(c) == question_id
    )


def write_malformed(folder: Path) -> list[str]:
    """Notebooks whose metadata or size the grader must refuse, each with its own message."""
    good = nbformat.writes(hw01_answers("q1"))
    variants = {
        "meta_list": lambda nb: nb["metadata"].update(homework=["hw01"]),
        "meta_number": lambda nb: nb["metadata"].update(homework=7),
        "meta_id_list": lambda nb: nb["metadata"].update(homework={"id": ["hw01"]}),
        "tags_number": lambda nb: nb["cells"][3]["metadata"].update(tags=5),
        "cell_meta_list": lambda nb: nb["cells"][3]["metadata"].update(homework=["hw01.q1"]),
        "huge_check": lambda nb: nb["cells"].append(
            {
                "cell_type": "code",
                "metadata": {"tags": ["check"]},
                "outputs": [],
                "execution_count": None,
                "source": "x = 1\n" * 1_000_000,
            }
        ),
    }
    for name, change in variants.items():
        raw = json.loads(good)
        change(raw)
        (folder / f"{name}_hw01.ipynb").write_text(json.dumps(raw))
    return sorted(variants)


def write_links(folder: Path, secret_folder: Path) -> None:
    """Links to another student's notebook, to a root-only file, and a linked folder."""
    secret = secret_folder / "secret.ipynb"
    secret.write_text(SECRET * 50)
    secret.chmod(0o600)
    (folder / "link_victim_hw01.ipynb").symlink_to(
        folder / "instructor" / "hw01_recurrent_models.ipynb"
    )
    (folder / "link_secret_hw01.ipynb").symlink_to(secret)
    (folder / "linked_folder").symlink_to(folder / "instructor", target_is_directory=True)
    os.mkfifo(folder / "fifo_hw01.ipynb")


def grading_command(folder: Path, out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "stablernn_grader", "grade", str(folder)] + [
        "--out",
        str(out),
        "--seed",
        "11",
        *options,
    ]


def start_grading(command: list[str], cwd: Path, pythonpath: Path) -> subprocess.Popen:
    """Start a grading command in a process of its own (output kept for the failure message)."""
    environment = {**os.environ, "PYTHONPATH": str(pythonpath), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        command,
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(background: dict, name: str) -> Path:
    """Wait for the background grading ``name``; its output folder once it succeeded."""
    process = background["processes"][name]
    if name not in background["output"]:
        background["output"][name] = process.communicate(timeout=1800)[0]  # a hung test
    assert process.returncode == 0, background["output"][name][-2000:]
    return background[name]


def write_private_checkout(tmp: Path) -> tuple[Path, Path, Path]:
    """A checkout in a folder of mode 700 (like /root), a submission and an output folder."""
    private = tmp / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    checkout = private / "course"
    shutil.copytree(
        ROOT / "stablernn_lib",
        checkout / "stablernn_lib",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(ROOT / "chapters" / "homework", checkout / "chapters" / "homework")
    folder = tmp / "submissions"
    folder.mkdir(mode=0o700)
    nbformat.write(hw01_answers("q1"), folder / "alice_hw01.ipynb")
    return checkout, folder, tmp / "out"


@pytest.fixture(scope="module")
def background(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The gradings that mostly wait (time limits), started first to run beside the big one.

    "small limits": an answer that loops forever, a cell that sleeps and an answer that
    forges "check start" events, graded with a 20 s notebook limit and check limits
    scaled by 0.3; "private": one notebook graded from a checkout in a mode-700 folder.
    """
    folder = tmp_path_factory.mktemp("slow-submissions")
    endless = with_answers(hw01_answers("q1"), {"hw01.q3": ENDLESS_LSTM})
    sleeping = with_cells(hw01_answers("q1"), ["import time\ntime.sleep(600)"], at=10_000)
    forged = with_answers(hw01_answers("q1"), {"hw01.q3": FORGED_START})
    nbformat.write(forged, folder / "forged_start_hw01.ipynb")
    nbformat.write(endless, folder / "endless_hw01.ipynb")
    nbformat.write(sleeping, folder / "sleeping_hw01.ipynb")
    out = tmp_path_factory.mktemp("slow-grades")
    small = grading_command(folder, out, "--timeout", "20", "--time-scale", "0.3")
    checkout, private_folder, private_out = write_private_checkout(
        tmp_path_factory.mktemp("private-checkout")
    )
    caps_folder = tmp_path_factory.mktemp("caps-submissions")
    write_caps(caps_folder)
    caps_out = tmp_path_factory.mktemp("caps-grades")
    caps = grading_command(caps_folder, caps_out, "--memory-mb", "1024")
    caps[1:3] = ["-c", PEAK]  # the same command, printing the grading process's peak memory
    processes = {
        "small limits": start_grading(small, ROOT, ROOT),
        "private": start_grading(grading_command(private_folder, private_out), checkout, checkout),
        "caps": start_grading(caps, ROOT, ROOT),
    }
    yield {
        "processes": processes,
        "output": {},
        "small limits": out,
        "private": private_out,
        "caps": caps_out,
    }
    for process in processes.values():  # a test that failed early: end what still runs
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, background: dict) -> dict:
    """One grading run of every honest, made-up and hostile notebook (generous limits)."""
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
    for kind in ("stub", "wrong", "q1", "ignoring"):
        made_up[f"control_{kind}_hw01"] = hw01_answers(kind)
    for student, nb in made_up.items():
        nbformat.write(nb, folder / f"{student}.ipynb")
    victim = folder / "control_stub_hw01.ipynb"
    cells = write_attacks(folder, (out, victim, folder))
    (folder / "unreadable.ipynb").write_text("this is not a notebook")
    hw04_stub = student_notebook(notebook("hw04"))
    constant = with_answers(
        hw04_stub,
        {"hw04.q1": CONSTANT_PROJECTION, "hw04.q2": NAN_LAMBDA, "hw04.q3": CONSTANT_ESTIMATE},
    )
    nbformat.write(constant, folder / "constant.ipynb")
    hw07 = with_answers(notebook("hw07"), {"hw07.q2": ZERO_RECURSION})
    nbformat.write(hw07, folder / "zero_recursion_hw07.ipynb")
    mismatch = hw01_answers("q1")
    nbformat.write(mismatch, folder / "mismatch_hw04.ipynb")  # says hw01 inside
    for name in FORMULA_NAMES:  # students (folders) whose names a spreadsheet would run
        (folder / name).mkdir()
        (folder / name / "hw01.ipynb").write_text("not a notebook: no process needed")
    malformed = write_malformed(folder)
    write_round_two(folder)
    nbformat.write(walker_notebook(hw01_answers("stub")), folder / "walker_hw01.ipynb")
    secret_folder = tmp_path_factory.mktemp("secret")
    secret_folder.chmod(0o700)
    write_links(folder, secret_folder)
    shm_before = shared_memory_segments()
    graded = grade(folder, out, "--memory-mb", "3072", "--processes", "48", "--jobs", "2")
    new_segments = shared_memory_segments() - shm_before
    return {**graded, "folder": folder, "malformed": malformed, "shm": new_segments, "cells": cells}


@pytest.fixture(scope="module")
def graded_with_small_limits(background: dict) -> dict:
    return read_grades(finish(background, "small limits"))


@pytest.fixture(scope="module")
def everything_graded(graded: dict, graded_with_small_limits: dict, background: dict) -> dict:
    """``graded``, once no grading runs any more (for checks of what is left on the host):
    every background grading has ended, the one at the caps included."""
    for name in background["processes"]:
        finish(background, name)
    return graded


FORMULA_NAMES = ("=HYPERLINK(1)", "+cmd", "-2+3", "@SUM(A1)")


def cell_errors(graded, student: str, attack: str) -> list[str]:
    """The report's error line of each cell of ``attack`` (in the notebook ``student``)."""
    text = report(graded, student)
    lines = text.split("## Cells that raised an error")[1].split("\n## ")[0].splitlines()
    found = []
    for number in graded["cells"][attack]:
        found += [line for line in lines if line.startswith(f"- cell {number} (")]
    return found


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
    control = ATTACKS[student]
    row = graded["rows"][(f"{student}_hw01", "hw01")]
    expected = graded["rows"][(f"control_{control}_hw01", "hw01")]
    for question in get_homework("hw01").questions:
        assert row[question.id] == expected[question.id], (question.id, row, expected)
    assert row["total"] == expected["total"]


def test_the_monkeypatch_of_issue_12_scores_zero(graded) -> None:
    assert "monkeypatch" in CELL_ATTACKS["forgers"][1]
    assert score(graded, "forgers_hw01", "hw01") == 0


def test_exits_and_interrupts_in_answers_fail_only_their_checks(graded) -> None:
    text = report(graded, "exits_hw01")
    assert "SystemExit" in text and "ended the notebook's process" in text
    assert "KeyboardInterrupt" in report(graded, "interrupts_hw01")


def test_files_outside_the_submission_cannot_be_read_or_written(graded) -> None:
    forged = cell_errors(graded, "forgers_hw01", "forger")
    assert len(forged) == 1 and "Error: [Errno" in forged[0]  # the grader's scores.csv
    assert (graded["out"] / "scores.csv").read_text().startswith("student,homework,")
    snooped = cell_errors(graded, "escapes_hw01", "snoop")
    assert len(snooped) == 4  # read, list, list the output, write
    assert all("Error: [Errno" in line for line in snooped), snooped
    assert "vandalized" not in (graded["folder"] / "control_stub_hw01.ipynb").read_text()


@needs_root
def test_memory_and_process_limits_hold(everything_graded) -> None:
    graded = everything_graded
    (hog,) = cell_errors(graded, "escapes_hw01", "memory_hog")
    assert "allocate" in hog  # torch's out-of-memory error
    assert any(
        "BlockingIOError" in line for line in cell_errors(graded, "escapes_hw01", "processes")
    )
    low, high = SANDBOX_UIDS
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue
        uid = int(next(x for x in lines if x.startswith("Uid:")).split()[1])
        assert not low <= uid < high, f"a student process is still running: {status.parent}"


REFUSED = ("unreadable", "link_", "linked_folder", "fifo_", "mismatch_", "'", "csv_id")


def test_other_submissions_are_graded_whatever_one_does(graded) -> None:
    refused = {f"{name}_hw01" for name in graded["malformed"]}
    for (student, _), row in graded["rows"].items():
        if student not in refused and not student.startswith(REFUSED):
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
    assert record["isolation"] == "bubblewrap" and record["sandboxed"], record["warnings"]
    assert record["jobs"] == 2
    # as an ordinary user, no memory cgroup: the one warning says so (class 5 of issue 37)
    assert all("MEMORY NOT BOUNDED AS A WHOLE" in w for w in record["warnings"]), record
    assert AS_ROOT or record["memory"]["whole_submission"] or record["warnings"]
    # two graded at a time, but every row in the order of the submissions' paths
    notebooks = [s["notebook"] for s in record["submissions"]]
    assert notebooks == sorted(notebooks)


# ------------------------------------------------------------- issue 23: hostile submissions


def all_output(graded) -> str:
    """Everything the grader wrote: scores.csv, grading.json and every report."""
    out = graded["out"]
    return "\n".join(
        [
            (out / "scores.csv").read_text(),
            (out / "grading.json").read_text(),
            *graded["reports"].values(),
        ]
    )


def test_honest_scores_are_those_of_the_previous_grader(graded) -> None:
    """The sandbox changes no honest score: the rows of commit 6918f44's grader, seed 11."""
    assert BASELINE["seed"] == 11
    rows = {f"{r['student']}/{r['notebook']}": r for r in graded["rows"].values()}
    for key, expected in BASELINE["scores"].items():
        got = {q: rows[key][q] for q in expected if q != "total"}
        assert got == {q: v for q, v in expected.items() if q != "total"}, key
        # the total adds the questions a homework gained since (hw08.q4, hw09.q4: 3 and 2)
        questions = [q for q in rows[key] if re.fullmatch(r"hw\d\d\.q\d", q)]
        total = sum(float(rows[key][q]) for q in questions if rows[key][q] not in ("", None))
        assert float(rows[key]["total"]) == pytest.approx(total), key


def test_planted_modules_never_run_and_nothing_runs_as_root(graded) -> None:
    text = " ".join(cell_errors(graded, "escapes_hw01", "planted"))
    uid = int(text.split("uid=")[1].split()[0])
    if AS_ROOT:
        assert SANDBOX_UIDS[0] <= uid < SANDBOX_UIDS[1], uid
    else:
        assert uid == os.getuid()
    assert "home=/nonexistent" in text
    assert not Path("/tmp", PWNED).exists()
    assert PWNED not in all_output(graded)


def test_mutated_inputs_earn_nothing(graded) -> None:
    """Zeroing W in place earns what ignoring W earns (the T = 1 and k = 1 cases), not more."""
    row = graded["rows"][("mutating_hw01", "hw01")]
    assert float(row["hw01.q1"]) < 2 and float(row["hw01.q2"]) < 3
    assert "| a (4, 2, 3) input | visible | fail |" in report(graded, "mutating_hw01")


def test_malformed_metadata_and_huge_cells_are_refused_one_by_one(graded) -> None:
    messages = {
        "meta_list": "metadata.homework must be an object",
        "meta_number": "metadata.homework must be an object",
        "meta_id_list": "metadata.homework.id must be a short string",
        "tags_number": "metadata.tags must be a list of strings",
        "cell_meta_list": "metadata.homework must be an object",
        "huge_check": "larger than 1 MB of source",
    }
    for name in graded["malformed"]:
        row = graded["rows"][(f"{name}_hw01", "hw01")]
        assert messages[name] in row["status"] and float(row["total"]) == 0, row
    assert score(graded, "control_q1_hw01", "hw01") == 2


def test_links_and_special_files_are_refused_and_leak_nothing(graded) -> None:
    for student in ("link_victim_hw01", "link_secret_hw01", "fifo_hw01"):
        row = graded["rows"][(student, "hw01")]
        assert row["status"].startswith("refused") and float(row["total"]) == 0, row
    assert not any(student == "linked_folder" for student, _ in graded["rows"])
    assert SECRET not in all_output(graded)
    assert score(graded, "instructor", "hw01") == 8


def test_the_source_gate_reads_magics_and_follows_aliases(graded) -> None:
    for student in ("magic_gate_hw01", "aliased_gate_hw01"):
        row = graded["rows"][(student, "hw01")]
        assert float(row["hw01.q2"]) == 0, row
        assert "truncated_states" in report(graded, student)


def test_non_finite_and_constant_answers_fail_the_property_checks(graded) -> None:
    row = graded["rows"][("constant", "hw04")]
    assert float(row["hw04.q1"]) == 0 and float(row["hw04.q2"]) == 0
    assert float(row["hw04.q3"]) == 0
    assert float(graded["rows"][("zero_recursion_hw07", "hw07")]["hw07.q2"]) == 0


def test_nothing_is_left_in_shared_memory_or_lock_folders(everything_graded) -> None:
    graded = everything_graded
    assert not {s for s in graded["shm"] if s[1] == "4096" and s[0].endswith("666")}
    for folder in ("/dev/shm", "/run/lock", "/tmp", "/var/tmp"):
        assert not Path(folder, PWNED).exists(), folder


def test_homework_id_mismatch_is_flagged(graded) -> None:
    row = graded["rows"][("mismatch_hw04", "hw01")]
    assert "homework id mismatch: graded as hw01 but its file name says hw04" in row["status"]
    assert float(row["total"]) == 2


def test_formula_names_are_neutralized_in_scores_csv(graded) -> None:
    text = (graded["out"] / "scores.csv").read_text()
    lines = text.splitlines()
    for name in FORMULA_NAMES:
        assert any(
            line.startswith(f"'{name},") or line.startswith(f'"\'{name}",') for line in lines
        ), name
        assert not any(line.startswith(name) for line in lines)
        assert graded["rows"][(f"'{name}", "hw01")]["status"].startswith("unreadable notebook")


def test_the_student_edition_cannot_show_rubrics(graded) -> None:
    shown, stolen = cell_errors(graded, "escapes_hw01", "rubric_thief")
    assert "ImportError" in shown  # show_rubric is gone
    assert "No module named" in stolen  # the sandbox holds no checks (and no notebook)
    errors = report(graded, "escapes_hw01").split("## Cells that raised an error")[1]
    assert "applications of phi_w" not in errors.split("\n## ")[0]  # (the rubric of hw01.q4)


def test_forged_check_start_events_do_not_reset_the_time_limit(graded_with_small_limits) -> None:
    row = graded_with_small_limits["rows"][("forged_start_hw01", "hw01")]
    assert float(row["hw01.q1"]) == 2 and float(row["hw01.q3"]) == 0
    assert "| timeout |" in report(graded_with_small_limits, "forged_start")


def test_grading_works_from_a_checkout_in_a_private_folder(background: dict) -> None:
    """A checkout whose parent folder is mode 700 (like /root): the sandbox still reads it."""
    out = finish(background, "private")
    rows = list(csv.DictReader((out / "scores.csv").open()))
    assert [r["total"] for r in rows] == ["2"], rows
    assert json.loads((out / "grading.json").read_text())["isolation"] == "bubblewrap"


def test_two_submissions_graded_at_once_never_share_a_user_id(monkeypatch) -> None:
    """The random user id of a running submission is held: the next one draws again."""
    from stablernn_grader import isolation

    draws = iter([5, 5, 7, 5])
    monkeypatch.setattr(isolation.secrets, "randbelow", lambda _: next(draws))
    with isolation.sandbox_user() as first, isolation.sandbox_user() as second:
        if os.geteuid() != 0:  # an ordinary user's submissions run as that user
            assert first is None and second is None
            return
        low = isolation.SANDBOX_UIDS[0]
        assert (first, second) == (low + 5, low + 7)
    with isolation.sandbox_user() as third:  # released after its block
        assert third == low + 5 or third is None


def fallback_user_can_run() -> bool:
    """Whether the fallback's student process, under a user id of its own when grading as
    root, can reach the virtual environment and the library: they and every folder above
    them must let others in (a clone inside a ``mktemp -d`` folder of mode 700 does not)."""
    if not AS_ROOT:
        return True  # the fallback runs under the grader's own user id
    targets = [Path(sys.prefix).absolute(), ROOT]  # the virtual environment, the library
    folders = {folder for target in targets for folder in (target, *target.parents)}
    return all(folder.stat().st_mode & 0o001 for folder in folders)


def test_without_bwrap_the_fallback_says_so_loudly(monkeypatch, tmp_path: Path, capsys) -> None:
    """Where bwrap cannot run, grading.json and the console carry the NO SANDBOX warning."""
    from stablernn_grader import grading

    monkeypatch.setattr(grading, "bwrap_binary", lambda: None)
    folder = tmp_path / "submissions"
    folder.mkdir(mode=0o700)
    nbformat.write(hw01_answers("q1"), folder / "alice_hw01.ipynb")
    try:
        submissions = grading.grade_submissions(folder, tmp_path / "out", seed=11, jobs=2)
    except RuntimeError as error:
        # as root in a checkout under a folder of mode 700 (`mktemp -d`), where the user id
        # the fallback drops to cannot reach what it imports: the grader refuses, and says why
        assert not fallback_user_can_run()
        assert re.search(r"(?s)refusing to grade.*can be read", str(error)), error
        assert not (tmp_path / "out" / "scores.csv").exists()
        return
    assert submissions[0].auto_points == 2
    record = json.loads((tmp_path / "out" / "grading.json").read_text())
    assert not record["sandboxed"] and "NO SANDBOX" in record["warnings"][0]
    # no sandbox: a submission could reach another's files, so one at a time
    assert record["jobs"] == 1 and "one at a time" in record["warnings"][-1]
    assert "NO SANDBOX" in capsys.readouterr().err
    assert bwrap_binary() is not None  # this machine has the sandbox: only the test lost it


MEMORY_BUDGET_PROBE = """
import resource, sys, torch
from stablernn_grader.sandbox import apply_limits, mapped_bytes
budget = 512 * 2**20
before = mapped_bytes()
apply_limits({"memory_bytes": budget})
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
small = torch.ones(128 * 2**20, dtype=torch.uint8)  # 128 MiB: within the budget
try:
    torch.ones(1024 * 2**20, dtype=torch.uint8)  # 1 GiB: beyond it
    beyond = "allocated"
except RuntimeError:
    beyond = "refused"
print(before, soft, hard, beyond)
"""


def test_the_memory_limit_counts_what_a_submission_maps_beyond_its_start() -> None:
    """``memory_bytes`` is a budget on top of what the process maps at start (torch's CPU
    build maps ~0.6 GB, a CUDA build ~3 GB): the same budget with either build."""
    probe = subprocess.run(
        [sys.executable, "-c", MEMORY_BUDGET_PROBE], capture_output=True, text=True, timeout=120
    )
    assert probe.returncode == 0, probe.stderr
    before, soft, hard, beyond = probe.stdout.split()
    budget = 512 * 2**20
    assert soft == hard  # the student cannot raise it again
    assert budget <= int(soft) - int(before) < budget + 64 * 2**20  # measured at the call
    assert beyond == "refused"


def test_an_interpreter_in_tmp_stays_visible_in_the_sandbox(monkeypatch) -> None:
    """A checkout (and its virtual environment) under /tmp: the sandbox's private /tmp is
    mounted before the interpreter's folders are bound, so it does not hide them."""
    import tempfile

    from stablernn_grader import isolation

    bwrap = bwrap_binary()
    assert bwrap is not None
    venv = Path(tempfile.mkdtemp(dir="/tmp")) / "venv"
    try:
        venv.mkdir()
        (venv / "marker").write_text("here")
        real = isolation._interpreter_folders
        monkeypatch.setattr(isolation, "_interpreter_folders", lambda: [*real(), venv])
        workdir = venv.parent / "work"
        workdir.mkdir()
        args = isolation.Isolation("bubblewrap", bwrap).command(workdir)
        assert args.index("--tmpfs") < args.index(str(venv))
        probe = [*args[: args.index("--") + 1], "/bin/cat", str(venv / "marker")]
        seen = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert seen.stdout == "here", seen.stderr
    finally:
        shutil.rmtree(venv.parent)


# ------------------------------------------------------------- issue 37: round 2
# The seven classes of issue 37, each graded beside a control with the same answers.

SOLUTION_Q2_REFERENCE = """def truncated_rnn_states(W, U, inputs, k):
    from stablernn_lib.homework.questions.common import tanh_truncated_states
    return tanh_truncated_states(W, U, inputs, k)
"""
# class 1: the reference code, imported in the answer cell, or in another cell under an alias
REFERENCE_ALIAS_CELL = (
    "from stablernn_lib.homework.questions import common as course_helpers\n"
    "run_course_rnn = course_helpers.tanh_rnn_states"
)
SOLUTION_Q1_ALIASED = """def rnn_states(W, U, inputs):
    return run_course_rnn(W, U, inputs)
"""
# ... behind importlib with built strings, and read from the module's file and exec-ed
SOLUTION_Q1_IMPORTLIB = """import importlib
def rnn_states(W, U, inputs):
    name = ".".join(["stablernn_lib", "homework", "ques" + "tions", "com" + "mon"])
    return importlib.import_module(name).tanh_rnn_states(W, U, inputs)
"""
SOLUTION_Q2_EXEC = """import os, stablernn_lib
def truncated_rnn_states(W, U, inputs, k):
    folder = os.path.join(os.path.dirname(stablernn_lib.__file__), "homework", "ques" + "tions")
    code = {}
    exec(open(os.path.join(folder, "com" + "mon.py")).read(), code)
    return code["tanh_truncated_states"](W, U, inputs, k)
"""
# class 2: walk up the stack (and the heap) to the check's expected values
FRAME_WALK = """import gc, sys, torch
def _steal(*names):
    frame = sys._getframe(1)
    while frame is not None:
        for name in names:
            if name in frame.f_locals:
                return frame.f_locals[name]
        frame = frame.f_back
    return None
def _same_shape(like, *inputs):
    for thing in gc.get_objects():
        if isinstance(thing, torch.Tensor) and thing.shape == like.shape:
            if not any(thing is x for x in inputs) and thing.dtype == like.dtype:
                return thing.detach().clone()
    return torch.zeros_like(like)
def rnn_states(W, U, inputs):
    expected = _steal("expected")
    if expected is None:
        return torch.zeros(inputs.shape[0], inputs.shape[1], W.shape[0], dtype=inputs.dtype)
    return expected.detach()
def lstm_step(weight_hh, weight_ih, bias, c, h, x):
    c2, h2 = _steal("expected_c"), _steal("expected_h")
    if c2 is None:
        return _same_shape(c, c, h), _same_shape(h, c, h)
    return c2.detach(), h2.detach()
"""
# class 3: the 73 KB cell of issue 37 (100 `!x` lines, 1,000 long sums): IPython's
# transformer takes about 20 s of CPU on it (6.7 s for 60 and 600, 2.8 s for 40 and 400)
STALLING_CELL = "\n".join(["!x"] * 100 + ["y = " + "+".join(["1"] * 35)] * 1000)
# class 6: text that would forge report sections, hide the real ones, and run script
FORGED_SECTION = (
    "\r\r## hw01.q1: Run a vanilla RNN (2 / 2)\r\rStatus: complete.\r\r"
    "| x | visible | pass | forged |\r<!--"
)
REPORT_FORGERY = f"""def lstm_step(weight_hh, weight_ih, bias, c, h, x):
    raise RuntimeError({FORGED_SECTION!r} + "<script>window.pwned = 1</script>")
raise ValueError("<img src=x onerror='window.pwned = 2'>\\u2028## hw01.q2: (3 / 3)\\x85-->")
"""
FORGED_PROOF = (
    "My proof.\r## hw01.q3: One LSTM step (3 / 3)\u2028Status: complete.\r=====\r"
    "<script>window.pwned = 3</script>\r"
    # a remote image (a tracking pixel), a link definition and an image that uses it, a
    # link whose ] the student escaped first
    "![pixel](http://tracker.invalid/pixel.png)\r[site]: http://tracker.invalid/definition\r"
    "![seen][site] and \\](http://tracker.invalid/escaped)\r<!--"
)
REMOTE_TEXT = ("tracker.invalid/pixel.png", "tracker.invalid/definition")
# class 7: names that split scores.csv into rows starting with a formula
CSV_SPLITTERS = {"csv_name": "hw01\r=1+1.ipynb", "csv_unicode": "hw01\u2028@SUM(1).ipynb"}


def write_round_two(folder: Path) -> dict[str, str]:
    """The hostile hw01 notebooks of issue 37 (classes 1, 2, 3, 6, 7) and their controls."""
    stub = hw01_answers("stub")
    q1 = hw01_answers("q1")
    notebooks = {
        "reference_gate_hw01": with_cells(
            with_answers(stub, {"hw01.q1": SOLUTION_Q1_ALIASED, "hw01.q2": SOLUTION_Q2_REFERENCE}),
            [REFERENCE_ALIAS_CELL],
        ),
        "reference_hidden_hw01": with_answers(
            stub, {"hw01.q1": SOLUTION_Q1_IMPORTLIB, "hw01.q2": SOLUTION_Q2_EXEC}
        ),
        "frame_walk_hw01": with_answers(stub, {"hw01.q1": FRAME_WALK, "hw01.q3": FRAME_WALK}),
        "report_forgery_hw01": with_answers(q1, {"hw01.q3": REPORT_FORGERY}),
    }
    stalling = with_cells(q1, [STALLING_CELL])
    setup = nbformat.v4.new_code_cell(STALLING_CELL, metadata={"tags": ["colab-setup"]})
    stalling.cells.insert(0, setup)
    notebooks["stalling_hw01"] = stalling
    forged = notebooks["report_forgery_hw01"]
    for cell in forged.cells:
        if cell.cell_type == "markdown" and question_of(cell) == "hw01.q4":
            cell.source = FORGED_PROOF
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    for student, name in CSV_SPLITTERS.items():
        (folder / student).mkdir()
        nbformat.write(q1, folder / student / name)
    wrong_id = nbformat.from_dict(dict(q1))
    wrong_id.metadata["homework"] = {"id": "\r=1+1"}
    nbformat.write(wrong_id, folder / "csv_id.ipynb")
    return notebooks


def test_reference_code_earns_nothing_however_it_is_reached(graded) -> None:
    """Class 1: the checks' reference code, imported in the answer cell or under an alias in
    another cell (the gate: zero, and the reason), or through importlib with built strings or
    by exec-ing its file (not in the sandbox at all)."""
    for student in ("reference_gate_hw01", "reference_hidden_hw01"):
        row = graded["rows"][(student, "hw01")]
        assert float(row["hw01.q1"]) == 0 and float(row["hw01.q2"]) == 0, row
        assert row["total"] == graded["rows"][("control_stub_hw01", "hw01")]["total"]
    gate = report(graded, "reference_gate_hw01")
    assert gate.count("uses the homework's reference code") == 2
    hidden = report(graded, "reference_hidden_hw01")
    assert "No module named" in hidden and "No such file or directory" in hidden
    assert score(graded, "instructor", "hw01") == 8  # the honest answers still pass the gate


def test_a_walk_of_every_folder_finds_no_reference_code(graded) -> None:
    """The walker: every folder of its sandbox (``/``, ``sys.prefix``, ``sys.path``) searched
    for the checks' reference code, to load by file name; nothing is found, nothing earned
    (the same submission is graded as deployed in ``test_homework_gradescope.py``)."""
    row = graded["rows"][("walker_hw01", "hw01")]
    assert row["hw01.q1"] == "0" and row["hw01.q2"] == "0" and row["total"] == "0", row
    assert REFERENCE_NOT_FOUND in report(graded, "walker_hw01")


def test_the_student_process_holds_no_expected_value(graded) -> None:
    """Class 2: walking up the stack (or through the heap) of the student process finds
    only the call's inputs, never an expected value."""
    row = graded["rows"][("frame_walk_hw01", "hw01")]
    assert float(row["hw01.q1"]) == 0 and float(row["hw01.q3"]) == 0, row
    assert row["total"] == graded["rows"][("control_stub_hw01", "hw01")]["total"]


def test_the_sandbox_has_no_reference_implementations() -> None:
    """The sandbox's copy of the library lacks homework/questions (the checks and their
    reference code); the rest of the library is there, and of the grader only the modules
    the sandboxed processes run: ``stablernn_grader.grading`` cannot be imported."""
    from stablernn_grader.isolation import SANDBOX_MODULES, Isolation

    bwrap = bwrap_binary()
    if bwrap is None:
        pytest.skip("no bwrap here")
    command = Isolation("bubblewrap", bwrap).command(Path("/nonexistent"))
    python = command.index(sys.executable)
    listing = (
        "import importlib.util, os, sys; top = sys.argv[1]; sys.path.insert(0, top); "
        "lib = top + '/stablernn_lib/homework'; "
        "print(os.path.exists(lib + '/questions'), 'checks.py' in os.listdir(lib)); "
        "print(sorted(os.listdir(top + '/stablernn_grader'))); "
        "import stablernn_grader.sandbox as s; print(os.path.dirname(s.__file__)); "
        "print(importlib.util.find_spec('stablernn_grader.grading'))"
    )
    probe = command[: python + 2] + ["-c", listing, command[-1]]
    result = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["False", "True"], result.stderr
    assert lines[1] == str(sorted(SANDBOX_MODULES)), result.stdout
    assert lines[2:] == [f"{command[-1]}/stablernn_grader", "None"], result.stdout


COPY_FINDER = """import json, os, sys
found = []
for top in sys.argv[1:]:
    for here, folders, files in os.walk(top):
        if {"hw01.py", "common.py"} & set(files) or "questions" in folders:
            found.append(here)
print(json.dumps(found))
"""


def _fake_library(folder: Path) -> None:
    """A copy of the library's checks and reference code under ``folder/stablernn_lib``."""
    questions = folder / "stablernn_lib" / "homework" / "questions"
    questions.mkdir(parents=True)
    for name in ("__init__.py", "common.py", "hw01.py"):
        (questions / name).write_text("# a copy of the checks\n")


def test_no_copy_of_the_library_is_mounted_however_it_is_installed(monkeypatch, tmp_path) -> None:
    """Copies the sandbox leaves out: the library and the grader installed in the base
    interpreter's site-packages (with their metadata), a zip on sys.path holding the
    library, a checkout (and its build folder) inside a mounted folder, the grader's own
    project folder; the site-packages' other packages stay."""
    import zipfile

    from stablernn_grader import isolation

    bwrap = bwrap_binary()
    assert bwrap is not None
    base = tmp_path / "base"
    site = Path(__import__("site").getsitepackages([str(base)])[0])
    _fake_library(site)
    (site / "stablernn_lib-0.1.0.dist-info").mkdir()
    for grader in (site / "stablernn_grader", base / "grader" / "stablernn_grader"):
        grader.mkdir(parents=True)
        (grader / "grading.py").write_text("# the grader\n")
    (site / "stablernn_grader-0.1.0.dist-info").mkdir()
    (base / "grader" / "pyproject.toml").write_text("[project]\nname = 'stablernn_grader'\n")
    (site / "otherpkg").mkdir()
    (site / "otherpkg" / "__init__.py").write_text("VISIBLE = 1\n")
    archive = base / "course.pyz"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("stablernn_lib/homework/questions/hw01.py", "# the checks\n")
    checkout = base / "src" / "course"
    _fake_library(checkout)
    _fake_library(checkout / "build" / "lib")
    (checkout / "pyproject.toml").write_text("[project]\nname = 'stablernn_lib'\n")
    monkeypatch.setattr(sys, "base_prefix", str(base))
    monkeypatch.setattr(sys, "path", [*sys.path, str(archive)])
    monkeypatch.setattr(isolation, "PACKAGE", checkout / "stablernn_lib")
    monkeypatch.setattr(isolation, "GRADER", base / "grader" / "stablernn_grader")
    args = isolation.Isolation("bubblewrap", bwrap).command(tmp_path / "work")
    python = args.index(sys.executable)
    visible = f"import otherpkg; print(open({str(archive)!r}, 'rb').read())"
    probe = [*args[: python + 2], "-c", f"import sys; sys.path.append({str(site)!r}); {visible}"]
    seen = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    assert seen.stdout.strip() == "b''", seen.stderr  # otherpkg imported; the zip is empty
    walk = [*args[: python + 2], "-c", COPY_FINDER, str(base), "/opt/stablernn"]
    seen = subprocess.run(walk, capture_output=True, text=True, timeout=60)
    assert json.loads(seen.stdout) == [], seen.stdout + seen.stderr
    graders = "import glob, sys; print(glob.glob(sys.argv[1] + '/**/grading.py', recursive=True))"
    walk = [*args[: python + 2], "-c", graders, str(base)]
    seen = subprocess.run(walk, capture_output=True, text=True, timeout=60)
    assert seen.stdout.strip() == "[]", seen.stdout + seen.stderr


def test_a_stalling_cell_is_cut_not_waited_on(graded) -> None:
    """Class 3: a cell that takes IPython's transformer minutes is read under a budget,
    reported and never run; the notebook's other answers are graded as usual."""
    from stablernn_grader import reader

    row = graded["rows"][("stalling_hw01", "hw01")]
    assert row == {**graded["rows"][("control_q1_hw01", "hw01")], **_who(row)}
    text = report(graded, "stalling_hw01")
    assert text.count("not run: the grader could not read it") == 1  # not the colab-setup copy
    record = json.loads((graded["out"] / "grading.json").read_text())
    seconds = next(s["seconds"] for s in record["submissions"] if "stalling" in s["notebook"])
    print(f"the stalling submission took {seconds} s (reader budget {reader.TOTAL_S} s)")
    assert seconds < reader.TOTAL_S + 120  # not the minutes a full parse takes


def _who(row: dict) -> dict:
    return {k: row[k] for k in ("student", "notebook")}


def test_forged_report_text_changes_no_structure(graded) -> None:
    """Class 6: bare \\r, Unicode line separators and raw HTML in messages, cell errors, the
    proof and the file name: the report keeps its own sections, rendered by markdown-it and
    read back by a browser, with no HTML of the student's."""
    from markdown_it import MarkdownIt

    text = report(graded, "report_forgery_hw01")
    assert "\r" not in text and "\u2028" not in text and "\x85" not in text
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    headings = re.findall(r"<h2>(.*?)</h2>", rendered)
    assert headings == [
        "Cells that raised an error",
        "hw01.q1: Run a vanilla RNN (2 / 2)",
        "hw01.q2: The truncated model (0 / 3)",
        "hw01.q3: One LSTM step (0 / 3)",
        "hw01.q4: Proof: when truncation changes nothing (by hand / 3)",
    ], headings
    for raw in ("<script", "<img", "<!--", "-->", "<a "):
        assert raw not in rendered, raw
    assert "autograded score: <strong>2 / 8</strong>" in rendered
    assert rendered.count("<table>") == 3 and "forged" in rendered  # shown, as text
    assert all(address in rendered for address in REMOTE_TEXT)  # as text, never loaded
    seen = _in_a_browser(rendered)
    if seen is not None:
        assert seen["headings"] == headings and seen["pwned"] is None, seen
        assert seen["requests"] == [], seen  # the page asked for no address at all


def _in_a_browser(html_text: str) -> dict | None:
    """The h2 headings, ``window.pwned`` and the requests of ``html_text`` in headless
    Chromium (every request refused)."""
    from browser_support import CHROMIUM, chromium

    if not CHROMIUM.exists():
        return None
    with chromium() as browser:
        page = browser.new_page()
        requests: list[str] = []  # every request the page makes, refused (no network)

        def refuse(route) -> None:  # noqa: ANN001 (playwright's Route)
            requests.append(route.request.url)
            route.abort()

        page.route("**/*", refuse)
        page.set_content(html_text, wait_until="load")
        seen = page.evaluate(
            "() => ({headings: [...document.querySelectorAll('h2')].map(h => h.innerHTML), "
            "pwned: window.pwned === undefined ? null : window.pwned})"
        )
        return {**seen, "requests": requests}


def test_scores_csv_keeps_one_row_per_submission_whatever_the_names(graded) -> None:
    """Class 7: a \\r or a Unicode line separator in a file name or a homework id neither
    splits a row nor starts a line with a formula."""
    text = (graded["out"] / "scores.csv").read_bytes().decode()
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == len(graded["rows"]) + 1 and len({len(r) for r in rows}) == 1
    for line in re.split(r"\r\n|[\r\n\u2028\u2029\x85\v\f]", text):
        assert not line.startswith(("=", "+", "-", "@")), line
    for row in rows[1:]:
        for field in row:
            assert not any(c in field for c in "\r\n\u2028\u2029\x85"), row
            assert not field.startswith(("=", "+", "-", "@")), row
    for student in CSV_SPLITTERS:
        assert graded["rows"][(student, "hw01")]["total"] == "2"
    assert graded["rows"][("csv_id", "?")]["status"].startswith("unknown homework")


# class 4: forged records flood the grading process (one 30 MB line; then many small ones)
FLOOD_BIG_LINE = """import os
def rnn_states(W, U, inputs):
    line = ('{"event": "result", "id": 1, "returned": {"list": [' + "{}," * 10_000_000
            + '{}]}}\\n').encode()
    for fd in range(3, 64):
        try:
            os.write(fd, line)
        except OSError:
            pass
    raise ValueError("flooded")
"""
FLOOD_MANY_LINES = """import os
def truncated_rnn_states(W, U, inputs, k):
    lines = b'{"event": "result", "id": 0, "calls": [{}, {}, {}]}\\n' * 200_000
    for fd in range(3, 64):
        try:
            os.write(fd, lines)
        except OSError:
            pass
    raise ValueError("flooded")
"""
# class 5: memory of several processes together, and the writable folders filled
MEMORY_FILL = """filled = {}
for folder in ("/tmp", "/submission"):
    written = 0
    try:
        for n in range(40):  # files of 60 MB: under the 64 MB limit of one file
            with open(f"{folder}/fill{n}", "wb") as handle:
                for _ in range(60):
                    handle.write(b"x" * 2**20)
                    written += 1
    except OSError as error:
        filled[folder] = f"{written} MB, then {type(error).__name__}: {error.strerror}"
raise RuntimeError(f"filled {filled}")
"""
MEMORY_TOGETHER = """import subprocess, sys
hold = "import time; x = b'x' * (450 * 2**20); time.sleep(15)"
children = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(4)]
raise RuntimeError(f"children {[child.wait() for child in children]}")
"""
PEAK = (
    "import resource, sys; from stablernn_grader.__main__ import main; rc = main(sys.argv[1:]); "
    "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
)


def worst_notebook() -> dict:
    """A notebook at the caps: 32 MB, cells of 1 MB of distinct names and of 4-byte characters."""
    nb = json.loads(nbformat.writes(hw01_answers("q1")))
    names = "".join(f"v{i}=0\n" for i in range(110_000))[: 2**20 - 1]
    emoji = "\U0001f600" * (2**20 - 1)
    nb["cells"] += [nbformat.v4.new_code_cell(names) for _ in range(14)]
    nb["cells"] += [nbformat.v4.new_markdown_cell(emoji) for _ in range(4)]
    return nb


def write_caps(folder: Path) -> None:
    """The submissions of the capped run: floods, memory together, the worst notebook."""
    solution_q3 = solution("hw01.q3")
    floods = with_answers(
        hw01_answers("stub"),
        {"hw01.q1": FLOOD_BIG_LINE, "hw01.q2": FLOOD_MANY_LINES, "hw01.q3": solution_q3},
    )
    nbformat.write(floods, folder / "flood_hw01.ipynb")
    memory = with_cells(hw01_answers("q1"), [MEMORY_FILL, MEMORY_TOGETHER])
    nbformat.write(memory, folder / "memory_hw01.ipynb")
    text = json.dumps(worst_notebook(), ensure_ascii=False)
    assert len(text.encode()) <= 32 * 2**20
    (folder / "worst_hw01.ipynb").write_text(text)
    nbformat.write(hw01_answers("q1"), folder / "honest_hw01.ipynb")


@pytest.fixture(scope="module")
def graded_at_the_caps(background: dict) -> dict:
    out = finish(background, "caps")
    peak = int(background["output"]["caps"].split("PEAK_KB")[1].split()[0])
    return {**read_grades(out), "peak_mb": peak / 1024, "console": background["output"]["caps"]}


def test_forged_records_end_their_check_and_the_grader_stays_small(graded_at_the_caps) -> None:
    """Class 4: a 30 MB record line, and 200,000 small ones, per check: each check ends
    with a clear status at the caps, the other answers count, and the grading process
    stays small (its peak is printed: the number of grader_security.md)."""
    graded = graded_at_the_caps
    row = graded["rows"][("flood_hw01", "hw01")]
    assert (row["hw01.q1"], row["hw01.q2"], row["hw01.q3"]) == ("0", "0", "3"), row
    text = report(graded, "flood_hw01")
    assert "the check was ended: your notebook's process sent a line over 4 MB" in text
    assert "sent more than 1000 lines or 32 MB during one check" in text
    assert graded["rows"][("honest_hw01", "hw01")]["total"] == "2"
    print(f"peak memory of the grading process: {graded['peak_mb']:.0f} MB")
    assert graded["peak_mb"] < 1024


def test_the_worst_notebook_the_caps_allow_is_read_within_budget(graded_at_the_caps) -> None:
    """Class 3 and 4 at the caps: 32 MB, cells of 1 MB with 110,000 names: the cells over
    the reader's budgets are reported and not run; the honest answer still counts."""
    graded = graded_at_the_caps
    row = graded["rows"][("worst_hw01", "hw01")]
    assert row["total"] == "2", row
    assert report(graded, "worst_hw01").count("not run: the grader could not read it") == 14


def test_a_submission_is_bounded_as_a_whole(graded_at_the_caps) -> None:
    """Class 5 (--memory-mb 1024): four processes of 450 MB and the writable folders
    filled. As root the submission's memory cgroup holds all of it under 1024 MB; /tmp and
    /submission are tmpfs of 128 MB each in any case; an ordinary user is told, in the
    console and grading.json, that memory is not bounded as a whole."""
    graded = graded_at_the_caps
    errors = cell_errors_of(graded, "memory_hw01")
    (filled,) = [e for e in errors if "filled" in e]
    assert filled.count("No space left on device") == 2, filled
    for folder in ("/tmp", "/submission"):
        written = int(filled.split(f"{folder}': '")[1].split(" MB")[0])
        assert 100 <= written <= 128, filled
    (together,) = [e for e in errors if "children" in e or "ended the notebook's process" in e]
    record = json.loads((graded["out"] / "grading.json").read_text())
    memory = next(s for s in record["submissions"] if "memory_hw01" in s["notebook"])
    assert record["memory"]["tmp_mb"] == 128 and record["memory"]["writable_folder_mb"] == 128
    if record["memory"]["whole_submission"]:  # as root, where a cgroup can be made
        assert "-9" in together or "ended the notebook's process" in together  # killed
        assert memory["peak_mb"] is not None and memory["peak_mb"] <= 1024, memory
        print(f"the submission's memory cgroup peaked at {memory['peak_mb']} MB (limit 1024)")
    else:
        assert any("MEMORY NOT BOUNDED AS A WHOLE" in w for w in record["warnings"])
        assert "MEMORY NOT BOUNDED AS A WHOLE" in graded["console"]
    assert graded["rows"][("memory_hw01", "hw01")]["total"] == "2"
    assert graded["rows"][("honest_hw01", "hw01")]["total"] == "2"


def cell_errors_of(graded, student: str) -> list[str]:
    text = report(graded, student)
    return text.split("## Cells that raised an error")[1].split("\n## ")[0].splitlines()


def test_spreadsheet_safe_applies_to_every_line_of_a_field() -> None:
    from stablernn_grader.submissions import spreadsheet_safe

    assert spreadsheet_safe("=1+1") == "'=1+1" and spreadsheet_safe("alice") == "alice"
    assert spreadsheet_safe("ok\r=1+1") == "ok\r'=1+1"
    assert spreadsheet_safe("a\u2028@SUM(1)\r\n-2") == "a\u2028'@SUM(1)\r\n'-2"


def test_untrusted_report_text_is_one_line_or_a_closed_quote() -> None:
    """The helpers behind class 6: one line of inline code, escaped text, a block quote."""
    from stablernn_grader import grading

    forged = "a\rb\u2028c\x85d\x0be`|<!--"
    assert grading._inline(forged) == "`a b c d e'/<!--`"
    assert grading._escaped("<b>_x_</b>\r# h") == "&lt;b&gt;\\_x\\_&lt;/b&gt; \\# h"
    quoted = grading._quoted("proof\r## hw01.q1: (2 / 2)\u2029===\r<!--\x00")
    assert quoted == ["> proof", "> \\## hw01.q1: (2 / 2)", "> \\===", "> &lt;!--"]
