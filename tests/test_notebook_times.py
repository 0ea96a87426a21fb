"""The notebook run times shown on the instructor page (stablernn_tools.notebook_times).

The times themselves are benchmarks and never judged; these tests check that the table
names every notebook of the book, says which ones were not measured or changed since,
and that the suite's recording path writes what the table reads.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from stablernn_tools import notebook_times
from stablernn_tools.book_config import toc_files
from stablernn_tools.notebook_checks import forget_stale_build

ROOT = Path(__file__).resolve().parents[1]


def _toc_notebooks(root: Path) -> list[str]:
    names = [f"{name}.ipynb" for name in toc_files(root / "_toc.yml")]
    return [name for name in names if (root / name).is_file()]


def _row(table: str, docname: str) -> str:
    link = f"{{doc}}`{Path(docname).name} </{docname}>`"
    rows = [line for line in table.splitlines() if line.startswith(f"| {link} |")]
    assert len(rows) == 1, f"{docname}: {len(rows)} rows in\n{table}"
    return rows[0]


def _book(tmp_path: Path, names: list[str]) -> Path:
    """A book with chapters ``names`` (docnames) and their empty notebooks."""
    entries = "".join(f"  - file: {name}\n" for name in names)
    (tmp_path / "_toc.yml").write_text(f"format: jb-book\nroot: intro\nchapters:\n{entries}")
    for name in names:
        (tmp_path / f"{name}.ipynb").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{name}.ipynb").write_text("{}")
    return tmp_path


def test_the_table_lists_every_notebook_of_the_toc():
    table = notebook_times.times_markdown(ROOT)
    notebooks = _toc_notebooks(ROOT)
    assert "chapters/07b_tightness.ipynb" in notebooks and len(notebooks) >= 19
    recorded = (notebook_times.read_times(ROOT) or {}).get("notebooks", {})
    for name in notebooks:
        row = _row(table, name.removesuffix(".ipynb"))
        entry = recorded.get(name)
        if entry is None:
            assert "not measured yet" in row
        elif not entry.get("error"):
            assert f"| {entry['wall_s']:.1f} | {entry['cpu_s']:.1f} |" in row
    assert f"of {len(notebooks)} measured" in table


def test_the_instructor_page_shows_the_table():
    page = (ROOT / "instructor.md").read_text(encoding="utf-8")
    assert "```{notebook-times}\n```" in page
    assert "benchmarks, not limits" in page


def test_a_missing_file_or_notebook_reads_not_measured_yet(tmp_path):
    book = _book(tmp_path, ["chapters/01_a", "chapters/02_b"])
    table = notebook_times.times_markdown(book)
    assert "not measured yet" in _row(table, "chapters/01_a")
    assert "does not exist" in table and "0 of 2 measured" in table
    record = {
        "machine": {
            "cpu_count": 2,
            "torch_threads": 2,
            "omp_num_threads": "unset",
            "platform": "Linux x86_64",
        },
        "notebooks": {
            "chapters/01_a.ipynb": {"cpu_s": 3.0, "wall_s": 4.25, "load_average_1min": 0.5}
        },
        "provenance": {"git_commit": "unknown", "created_utc": "2026-11-21T23:07:07+00:00"},
    }
    (book / "data/results").mkdir(parents=True)
    (book / notebook_times.TIMES_FILE).write_text(json.dumps(record))
    table = notebook_times.times_markdown(book)
    assert "| 4.2 | 3.0 | 0.5 |" in _row(table, "chapters/01_a")
    assert "not measured yet" in _row(table, "chapters/02_b")
    assert "1 of 2 measured" in table
    assert "2026-11-21 23:07 UTC" in table and "torch 2 threads" in table
    assert "could not be checked" in table  # commit unknown: no claim that nothing changed


def test_the_recording_path_writes_what_the_table_reads(tmp_path):
    book = _book(tmp_path, ["chapters/01_a", "chapters/02_b"])
    times = {
        "chapters/01_a.ipynb": {
            "cpu_s": 1.5,
            "wall_s": 2.0,
            "load_average_1min": 3.25,
            "cpu_count": 2,
            "error": None,
        },
        "chapters/02_b.ipynb": {
            "cpu_s": 0.1,
            "wall_s": 0.2,
            "load_average_1min": 3.0,
            "cpu_count": 2,
            "error": "Traceback ...\nValueError: boom",
        },
    }
    notebook_times.write_times(times, book, kernel_env={"OMP_NUM_THREADS": "1"}, in_parallel=2)
    record = notebook_times.read_times(book)
    assert record["notebooks"]["chapters/02_b.ipynb"] == {"error": "ValueError: boom"}
    # the kernels' settings, not the test process's: one thread each, two at a time
    assert record["machine"]["torch_threads"] == 1 and record["machine"]["cpu_count"] >= 1
    assert record["machine"]["omp_num_threads"] == "1"
    assert record["machine"]["notebooks_in_parallel"] == 2
    assert {"git_commit", "created_utc", "torch"} <= set(record["provenance"])
    table = notebook_times.times_markdown(book)
    assert "| 2.0 | 1.5 | 3.2 |" in _row(table, "chapters/01_a")
    assert "failed in the measured run" in _row(table, "chapters/02_b")
    assert "torch 1 threads (OMP_NUM_THREADS 1), 2 notebook(s) at a time" in table


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def test_a_notebook_changed_since_the_measured_commit_is_flagged(tmp_path):
    book = _book(tmp_path, ["chapters/01_a", "chapters/02_b"])
    try:
        _git(book, "init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs git")
    _git(book, "add", ".")
    _git(book, "commit", "-q", "-m", "book")
    commit = _git(book, "rev-parse", "HEAD")
    (book / "chapters/02_b.ipynb").write_text('{"changed": 1}')
    names = ["chapters/01_a.ipynb", "chapters/02_b.ipynb"]
    assert notebook_times.changed_since(commit, names, book) == {"chapters/02_b.ipynb"}
    assert notebook_times.changed_since("0" * 40, names, book) is None  # unknown commit
    entry = {"cpu_s": 1.0, "wall_s": 1.0}
    record = {"notebooks": dict.fromkeys(names, entry), "provenance": {"git_commit": commit}}
    (book / "data/results").mkdir(parents=True)
    (book / notebook_times.TIMES_FILE).write_text(json.dumps(record))
    table = notebook_times.times_markdown(book)
    assert "changed since" in _row(table, "chapters/02_b")
    assert "changed since" not in _row(table, "chapters/01_a")
    assert "1 of the 2 measured notebooks changed" in table


def test_recording_the_times_keeps_the_executed_notebooks_cached(tmp_path):
    """The suite writes the times after running the notebooks; that must not void them."""
    (tmp_path / "data/results").mkdir(parents=True)
    cache = tmp_path / "_build" / ".jupyter_cache"
    assert not forget_stale_build(tmp_path)
    cache.mkdir()
    (tmp_path / notebook_times.TIMES_FILE).write_text('{"notebooks": {}}')
    assert not forget_stale_build(tmp_path) and cache.is_dir()
