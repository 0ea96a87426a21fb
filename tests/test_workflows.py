"""The GitHub Actions workflows: linted by actionlint and zizmor, pinned, least privilege.

``.github/workflows/test.yml`` runs ``make test`` on pull requests; ``pages.yml`` builds the
student site with ``make book`` on every push to main, deploys it to GitHub Pages and
pushes the same files to the ``gh-pages`` branch that the Colab buttons open.  Both tools
run here with no finding allowed (zizmor with its most pedantic persona, offline), and
the structure that matters for safety is read back from the YAML.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def tool(name: str) -> str:
    """The tool from the virtual environment (the test extra installs it), else from PATH."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: install the test extra (pip install -e '.[test]')")
    return str(found)


def workflow(name: str) -> dict:
    return yaml.load((WORKFLOWS / name).read_text(), Loader=yaml.BaseLoader)


def test_actionlint_finds_nothing() -> None:
    command = [tool("actionlint"), "-shellcheck", tool("shellcheck"), "-no-color"]
    result = subprocess.run(
        [*command, *sorted(map(str, WORKFLOWS.glob("*.yml")))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_zizmor_finds_nothing() -> None:
    result = subprocess.run(
        [tool("zizmor"), "--offline", "--persona", "pedantic", "--no-progress", str(WORKFLOWS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout, result.stdout


def test_every_action_is_pinned_to_a_commit_with_its_version() -> None:
    lines = [
        line.strip().removeprefix("- ").removeprefix("uses: ")
        for path in sorted(WORKFLOWS.glob("*.yml"))
        for line in path.read_text().splitlines()
        if "uses:" in line
    ]
    assert len(lines) >= 6
    assert [line for line in lines if not PINNED.match(line)] == []


def test_each_workflow_asks_for_least_permissions() -> None:
    test, pages = workflow("test.yml"), workflow("pages.yml")
    for document in (test, pages):
        assert document["permissions"] == {}  # nothing unless a job asks
    assert test["jobs"]["test"]["permissions"] == {"contents": "read"}
    assert set(test["on"]) == {"pull_request"}
    jobs = pages["jobs"]
    assert jobs["build"]["permissions"] == {"contents": "read", "pages": "read"}
    assert jobs["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    assert jobs["colab-notebooks"]["permissions"] == {"contents": "write"}
    assert pages["on"]["push"]["branches"] == ["main"]


def test_the_pages_workflow_publishes_the_student_site_only() -> None:
    pages = workflow("pages.yml")
    build = pages["jobs"]["build"]["steps"]
    runs = " ".join(step.get("run", "") for step in build)
    assert "make book" in runs and "instructor" not in runs
    upload = next(s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html"  # make book's output: the student site
    deploy = pages["jobs"]["deploy"]["steps"][0]["uses"]
    assert deploy.startswith("actions/deploy-pages@")
    assert "make test" in workflow("test.yml")["jobs"]["test"]["steps"][-1]["run"]
