"""The mutation report: fresh mutmut verdicts, earlier runs labelled as such, not-run rows."""

from __future__ import annotations

import json
from pathlib import Path

from stablernn_lib.book.mutation_report import markdown, module_summary


def test_fresh_earlier_and_missing_modules(tmp_path: Path) -> None:
    meta = tmp_path / "pkg" / "fresh.py.meta"
    meta.parent.mkdir()
    codes = {"pkg.fresh.x_f__mutmut_1": 1, "pkg.fresh.x_f__mutmut_2": 0,
             "pkg.fresh.x_f__mutmut_3": 0, "pkg.fresh.x_f__mutmut_4": None}  # fmt: skip
    meta.write_text(json.dumps({"exit_code_by_key": codes}), encoding="utf8")
    accepted = {"pkg.fresh.x_f__mutmut_2": "Equivalent: reason."}
    fresh = module_summary("pkg.fresh", tmp_path, accepted)
    # 3 run, 1 accepted: 1 killed of 2 non-equivalent.
    assert fresh["status"] == "partial"
    assert abs(fresh["kill_rate"] - 0.5) < 1e-12
    assert fresh["survivors"]["pkg.fresh.x_f__mutmut_3"] == "NOT EXPLAINED"
    old = {"status": "complete", "mutants": 2, "counts": {"killed": 2}, "accepted": 0,
           "kill_rate": 1.0, "survivors": {}, "module": "pkg.core.old"}  # fmt: skip
    earlier = {"pkg.core.old": {"run_as": "pkg.old", "commit": "abc1234", "summary": old}}
    summaries = [
        fresh,
        module_summary("pkg.core.old", tmp_path, accepted, earlier),
        module_summary("pkg.missing", tmp_path, accepted, earlier),
    ]
    text = markdown(summaries, with_diffs=False)
    assert "| pkg.core.old | complete (earlier run, at abc1234, as `pkg.old`) | 2 | 2 |" in text
    assert "| pkg.missing | not run |" in text
    assert "| pkg.fresh | partial | 4 | 1 | 0 | 2 | 0 | 1 | 1 | 50.0 % |" in text


def test_unrun_meta_falls_back_to_the_earlier_run(tmp_path: Path) -> None:
    meta = tmp_path / "pkg" / "core" / "old.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": {"pkg.core.old.x_f__mutmut_1": None}}))
    old = {"status": "complete", "mutants": 1, "counts": {"killed": 1}, "accepted": 0,
           "kill_rate": 1.0, "survivors": {}, "module": "pkg.core.old"}  # fmt: skip
    earlier = {"pkg.core.old": {"run_as": "pkg.old", "commit": "abc1234", "summary": old}}
    assert module_summary("pkg.core.old", tmp_path, {}, earlier)["commit"] == "abc1234"
    assert module_summary("pkg.core.old", tmp_path, {})["status"] == "not run"


def test_mutmut_exit_codes_are_read_as_mutmut_reads_them() -> None:
    from stablernn_lib.book.mutation_report import verdict

    # 33 is mutmut 3's "no tests" (never a kill), -24 and 36 its timeouts, 37 a type-check kill
    assert [verdict(c) for c in (1, 0, 5, 33, -24, 36, 37, None, -11)] == [
        "killed", "survived", "no tests", "no tests", "timeout", "timeout", "killed",
        "not run", "other",
    ]  # fmt: skip
