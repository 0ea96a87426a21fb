"""The mutation report: verdicts from mutmut's meta files or, without them, from the
committed verdicts; the committed report is what a fresh checkout rebuilds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from stablernn_tools.mutation_report import (
    ACCEPTED,
    OUT,
    VERDICTS,
    markdown,
    mutants_unchanged,
    mutated_modules,
    read_meta,
    record_from_codes,
    recorded_path,
    source_path,
    summarize,
    verdict,
)

CODES = {"pkg.fresh.x_f__mutmut_1": 1, "pkg.fresh.x_f__mutmut_2": 0,
         "pkg.fresh.x_f__mutmut_3": 0, "pkg.fresh.x_f__mutmut_4": None}  # fmt: skip
ACCEPT = {"pkg.fresh.x_f__mutmut_2": "Equivalent: reason."}


def _table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_a_partial_run_counts_only_the_mutants_run() -> None:
    record = record_from_codes(CODES, "abc1234", "2026-11-25 10:00 UTC")
    assert record["counts"] == {"killed": 1, "not run": 1, "survived": 2}
    assert record["not_run"] == ["pkg.fresh.x_f__mutmut_4"]
    fresh = summarize("pkg.fresh", record, ACCEPT)
    # 3 run, 1 accepted: 1 killed of 2 non-equivalent.
    assert fresh["status"] == "partial"
    assert abs(fresh["kill_rate"] - 0.5) < 1e-12
    assert fresh["survivors"]["pkg.fresh.x_f__mutmut_3"] == "NOT EXPLAINED"
    text = markdown([fresh, summarize("pkg.missing", None, ACCEPT)], {})
    assert _table(text)[1:] == [
        "| pkg.fresh | partial | abc1234 (2026-11-25 10:00 UTC) | 4 | 1 | 0 | 2 | 0 | 1 | 1 "
        "| 50.0 % |",
        "| pkg.missing | not run | | | | | | | | | |",
    ]


def test_a_meta_file_overrides_the_committed_verdicts(tmp_path: Path) -> None:
    assert read_meta("pkg.fresh", tmp_path) == {}  # no meta file: the committed record is used
    meta = tmp_path / "pkg" / "fresh.py.meta"
    meta.parent.mkdir()
    meta.write_text(json.dumps({"exit_code_by_key": dict.fromkeys(CODES)}), encoding="utf8")
    assert read_meta("pkg.fresh", tmp_path) == {}  # nothing run yet: likewise
    meta.write_text(json.dumps({"exit_code_by_key": CODES}), encoding="utf8")
    codes = read_meta("pkg.fresh", tmp_path)
    assert codes == CODES
    old = {"commit": "old1234", "survivors": {"pkg.fresh.x_f__mutmut_2": "-a\n+b"}}
    new = record_from_codes(codes, "new5678", "2026-11-25 10:00 UTC", old)
    assert new["commit"] == "new5678"
    assert new["survivors"] == dict.fromkeys(["pkg.fresh.x_f__mutmut_2", "pkg.fresh.x_f__mutmut_3"])
    same = record_from_codes(codes, "old1234", "2026-11-25 10:00 UTC", old)
    assert same["survivors"]["pkg.fresh.x_f__mutmut_2"] == "-a\n+b"  # diff kept for its code


def test_no_empty_diff_block() -> None:
    s = summarize("pkg.fresh", record_from_codes(CODES, "abc1234", "today"), ACCEPT)
    text = markdown([s], {"pkg.fresh.x_f__mutmut_2": "-    return a\n+    return b"})
    assert "  ```diff\n  -    return a\n  +    return b\n  ```" in text
    assert text.count("```diff") == 1  # mutmut_3 has no diff: no block


def test_a_fresh_checkout_reproduces_the_committed_table() -> None:
    records = json.loads(VERDICTS.read_text(encoding="utf8"))
    accepted = json.loads(ACCEPTED.read_text(encoding="utf8"))
    summaries = [summarize(m, records.get(m), accepted) for m in mutated_modules()]
    diffs = {n: d for r in records.values() for n, d in r["survivors"].items()}
    committed = OUT.with_suffix(".md").read_text(encoding="utf8")
    assert committed.startswith(markdown(summaries, diffs))
    assert json.loads(OUT.with_suffix(".json").read_text(encoding="utf8")) == {"modules": summaries}
    for record in records.values():  # every survivor named in the counts, and no others
        counts = record["counts"]
        assert len(record["survivors"]) == counts.get("survived", 0) + counts.get("no tests", 0)
        assert sum(counts.values()) == record["mutants"]


def test_mutmut_exit_codes_are_read_as_mutmut_reads_them() -> None:
    # 33 is mutmut 3's "no tests" (never a kill), -24 and 36 its timeouts, 37 a type-check kill
    assert [verdict(c) for c in (1, 0, 5, 33, -24, 36, 37, None, -11)] == [
        "killed", "survived", "no tests", "no tests", "timeout", "timeout", "killed",
        "not run", "other",
    ]  # fmt: skip


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False)


def test_the_report_is_not_older_than_the_code_it_describes() -> None:
    """Each row's module must be, on disk, the code mutmut mutated ('code at'), or one of
    which mutmut makes the very same mutants: an edit of a bound after its mutation run fails
    here until ``make mutants`` is re-run for it."""
    if _git("rev-parse", "--is-inside-work-tree").returncode != 0:
        pytest.skip("not a git checkout: the commits of the report cannot be compared")
    records = json.loads(VERDICTS.read_text(encoding="utf8"))
    stale = []
    for module in mutated_modules():
        if module not in records:
            continue  # a "not run" row claims nothing
        commit, path = records[module]["commit"], str(source_path(module))
        then = recorded_path(module, records[module])
        if "+" in commit:
            stale.append(f"{module}: mutated with uncommitted changes ({commit})")
            continue
        if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            pytest.skip(f"commit {commit} is not in this clone (shallow?)")
        changed = then != path or _git("diff", "--quiet", commit, "--", path).returncode != 0
        if changed and not mutants_unchanged(module, commit, then):
            stale.append(f"{module}: {path} changed since {commit}")
    assert not stale, "re-run make mutants for: " + "; ".join(stale)


def test_an_edit_that_changes_no_mutant_is_not_stale(tmp_path, monkeypatch) -> None:
    """A comment, a docstring, or a function mutmut does not mutate (a decorated one), keeps
    every mutant; an edited formula or a new pragma does not; a moved module keeps them,
    compared with its path then."""
    module_dir = tmp_path / "pkg"
    module_dir.mkdir()
    source = module_dir / "fresh.py"
    source.write_text('def f(a, b):\n    """Sum."""\n    return a + b\n', encoding="utf8")
    # mutmut reads its settings once per process, from the working folder's pyproject.toml:
    # this folder has its own, so the test passes whichever test read them first
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["pkg/"]\n')
    monkeypatch.chdir(tmp_path)
    for command in (
        ["init", "-q"],
        ["add", "pkg/fresh.py"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a"],
    ):
        assert _git(*command).returncode == 0  # fmt: skip
    commit = _git("rev-parse", "HEAD").stdout.strip()
    source.write_text(
        "# the sum\nimport functools\n\n\n@functools.cache\ndef g(a):\n    return 2 * a\n\n\n"
        'def f(a, b):\n    """Sum."""\n    return a + b\n',
        encoding="utf8",
    )
    assert mutants_unchanged("pkg.fresh", commit)
    source.write_text('"""The sum."""\n\n\ndef f(a, b):\n    """a + b."""\n    return a + b\n')
    assert mutants_unchanged("pkg.fresh", commit)  # docstrings only
    source.write_text("def f(a, b):\n    return a + b  # pragma: no mutate\n")
    assert not mutants_unchanged("pkg.fresh", commit)  # mutmut skips that line now
    source.write_text('def f(a, b):\n    """Sum."""\n    return a + 2 * b\n', encoding="utf8")
    assert not mutants_unchanged("pkg.fresh", commit)
    source.write_text('def f(a, b):\n    "Sum."\n    return b + a\n', encoding="utf8")
    assert not mutants_unchanged("pkg.fresh", commit)  # the same mutants of other code
    assert not mutants_unchanged("pkg.fresh", "0" * 40)  # a commit git does not know
    source.rename(module_dir / "moved.py")  # git mv: the same functions under a new name
    (module_dir / "moved.py").write_text('def f(a, b):\n    """Sum."""\n    return a + b\n')
    assert not mutants_unchanged("pkg.moved", commit)  # no pkg/moved.py at the commit
    assert mutants_unchanged("pkg.moved", commit, "pkg/fresh.py")
    assert recorded_path("pkg.moved", {"path": "pkg/fresh.py"}) == "pkg/fresh.py"
    assert recorded_path("pkg.fresh", {}) == "pkg/fresh.py"
