"""The formula mutants of ``make formula-mutants``: each still applies to the code, and
the committed run killed every one of them."""

from __future__ import annotations

import json
from pathlib import Path

from stablernn_tools.formula_mutants import MUTANTS, OUT


def test_every_formula_mutant_applies_exactly_once() -> None:
    # a bound rewritten since: update its mutant (and re-run make formula-mutants)
    for mutant in MUTANTS:
        assert Path(mutant.path).read_text(encoding="utf8").count(mutant.old) == 1, mutant.name
        assert mutant.old != mutant.new and mutant.tests, mutant.name
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)


def test_the_committed_run_killed_every_formula_mutant() -> None:
    result = json.loads(OUT.read_text(encoding="utf8"))
    assert result["baseline"]["passed"] is True
    assert [row["name"] for row in result["rows"]] == [m.name for m in MUTANTS]
    assert [row["verdict"] for row in result["rows"]] == ["killed"] * len(MUTANTS)
    assert result["all_killed"] is True and result["counts"] == {"killed": len(MUTANTS)}
