"""The pre-registered criteria: summaries over seeds and the verdicts read from the file."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from stablernn_lib.core import criteria
from stablernn_lib.core.criteria import SeedSummary, summarize
from stablernn_lib.core.results import results_path


def test_the_committed_file_has_every_rule_the_chapters_read() -> None:
    rules = json.loads(results_path("criteria.json").read_text())
    assert rules["seeds"] == {"why": rules["seeds"]["why"], "wikitext2": 3, "jsb": 5}
    for name in (
        "stability_cost",
        "seed_noise",
        "single_seed_ablation",
        "reproduces_paper",
        "beats_baseline",
        "truncation",
        "gradient_vanishes",
        "weights_close",
    ):
        assert "rule" in rules[name], name
    assert criteria.criterion("stability_cost")["relative_tolerance"] == 0.05
    with pytest.raises(KeyError, match="no criterion 'nope'"):
        criteria.criterion("nope")


def test_summary_matches_numpy_sample_statistics() -> None:
    values = {2: 170.0, 1111: 165.7, 3: 168.2}
    summary = summarize(values)
    assert summary.seeds == (2, 3, 1111)
    assert summary.values == (170.0, 168.2, 165.7)
    expected = np.array(list(values.values()))
    assert math.isclose(summary.mean, expected.mean(), rel_tol=1e-12)
    assert math.isclose(summary.sd, expected.std(ddof=1), rel_tol=1e-12)
    assert summary.describe() == "168.0 ± 2.2 (n = 3; seed 2: 170.0, 3: 168.2, 1111: 165.7)"
    assert summarize({1111: 165.7}).describe() == "165.7 (one seed, 1111)"


def test_bad_summaries_are_refused() -> None:
    with pytest.raises(ValueError, match="one value per seed"):
        SeedSummary((), ())
    with pytest.raises(ValueError, match="diverged"):
        SeedSummary((1.0, math.nan), (1, 2))


def three(mean: float, spread: float) -> SeedSummary:
    return SeedSummary((mean - spread, mean, mean + spread), (1, 2, 3))


def test_stability_cost_verdicts_follow_the_rule() -> None:
    free = three(100.0, 1.0)  # sd 1
    assert criteria.stability_cost_verdict("wikitext2", free, three(104.9, 1.0)) == "supported"
    assert criteria.stability_cost_verdict("wikitext2", free, three(95.0, 1.0)) == "supported"
    assert criteria.stability_cost_verdict("wikitext2", free, three(106.0, 1.0)) == (
        "not supported"
    )
    # 6% worse, but the seeds spread by 5: within 2 pooled sds (7.2) -> inconclusive
    assert criteria.stability_cost_verdict("wikitext2", free, three(106.0, 5.0)) == ("inconclusive")
    two = SeedSummary((100.0, 101.0), (1, 2))
    assert criteria.stability_cost_verdict("wikitext2", two, two).startswith("no verdict")
    # JSB needs five seeds
    assert criteria.stability_cost_verdict("jsb", free, free).startswith("no verdict (fewer than 5")
    with pytest.raises(ValueError, match="unknown task"):
        criteria.stability_cost_verdict("ptb", free, free)


def test_noise_and_single_seed_rules_use_the_pooled_and_reference_sd() -> None:
    a, b = three(100.0, 1.0), three(103.0, 2.0)
    pooled = math.sqrt((1.0 + 4.0) / 2)
    assert math.isclose(criteria.pooled_sd(a, b), pooled)
    assert criteria.beyond_noise(a, b) == (2 * pooled < 3.0)
    assert criteria.beyond_noise(a, three(104.0, 1.0))  # 4 > 2 * 1
    assert not criteria.beyond_noise(a, three(101.9, 1.0))
    assert criteria.single_seed_readable(105.1, a)  # 5.1 > 5 * 1
    assert not criteria.single_seed_readable(104.9, a)
    assert not criteria.single_seed_readable(500.0, SeedSummary((100.0,), (1,)))


def test_baseline_and_paper_rules() -> None:
    model = three(10.0, 0.1)
    assert criteria.beats_baseline(model, 10.6)  # 10 < 10.6 * 0.95 = 10.07
    assert not criteria.beats_baseline(model, 10.5)  # 10 > 9.975
    assert criteria.reproduces_paper(model, 10.4, "cpu", paper_scale=True) == "reproduced"
    assert criteria.reproduces_paper(model, 10.6, "cpu", paper_scale=True) == "not reproduced"
    assert criteria.reproduces_paper(model, 10.0, "cpu", paper_scale=False) == (
        "not comparable: cpu"
    )


def test_seeds_label_says_how_many_seeds() -> None:
    from stablernn_lib.core.criteria import seeds_label

    assert (seeds_label(1), seeds_label(2), seeds_label(5)) == ("1 seed", "2 seeds", "5 seeds")


def test_gaps_in_percent_and_the_smallest_context_within_the_tolerance() -> None:
    assert criteria.percent_gap(110.0, 100.0) == pytest.approx(10.0)
    assert criteria.gap_label(97.0, 100.0) == "-3.0%"
    curve = ([1, 2, 4, 8], [120.0, 104.0, 100.9, 100.2])
    assert criteria.smallest_context(*curve, recurrent=100.0, tolerance=0.01) == 4
    assert criteria.smallest_context(*curve, recurrent=100.0, tolerance=0.001) is None


def test_the_gradient_vanishes_below_the_rules_ratio() -> None:
    ratio = criteria.criterion("gradient_vanishes")["ratio"]
    assert criteria.vanishes_verdict(0.5 * ratio) == "supported"
    assert criteria.vanishes_verdict(2 * ratio) == "not supported"
