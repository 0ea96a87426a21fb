"""The pre-registered criteria (``data/results/criteria.json``) and their verdicts.  Over seeds:
mean +- sample sd; "beyond seed noise": means over ``k`` pooled sds ``sqrt((sd_a^2 + sd_b^2) / 2)``
apart."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from stablernn_lib.core.results import results_path

TASKS = ("wikitext2", "jsb")


@lru_cache(maxsize=1)
def load_criteria() -> dict[str, Any]:
    """The committed criteria file, parsed."""
    path = results_path("criteria.json")
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the pre-registered criteria are part of the course's results; "
            "restore it from git (git checkout -- data/results/criteria.json)"
        )
    with open(path, encoding="utf8") as handle:
        return json.load(handle)


def _check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; use one of {TASKS}")
    return task


@dataclass(frozen=True)
class SeedSummary:
    """One model's metric over its seeds: ``values`` in seed order, with ``seeds``."""

    values: tuple[float, ...]
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values or len(self.values) != len(self.seeds):
            raise ValueError("a SeedSummary needs one value per seed, and at least one")
        if not all(math.isfinite(v) for v in self.values):
            raise ValueError(f"non-finite metric among {self.values}: a diverged run?")

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def sd(self) -> float:
        """Sample standard deviation (0 for one seed: no spread measured)."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    def describe(self, digits: int = 1, each: bool = True) -> str:
        """``mean ± sd (n = 3; seed 2: a, 3: b, 1111: c)``, ``mean ± sd (n = 3)`` when not
        ``each``, or the single value with its seed."""
        listed = ", ".join(
            f"{s}: {v:.{digits}f}" for s, v in zip(self.seeds, self.values, strict=True)
        )
        if self.n == 1:
            return f"{self.values[0]:.{digits}f} (one seed, {self.seeds[0]})"
        seeds = f"; seed {listed}" if each else ""
        return f"{self.mean:.{digits}f} ± {self.sd:.{digits}f} (n = {self.n}{seeds})"


def seeds_label(n: int) -> str:
    """``"1 seed"``, ``"3 seeds"``: how many seeds a number rests on."""
    return f"{n} seed{'s' if n != 1 else ''}"


def enough_seeds(task: str, *summaries: SeedSummary) -> bool:
    """Whether every model has the seeds a claim needs (``criteria.seeds[task]``)."""
    needed = load_criteria()["seeds"][_check_task(task)]
    return all(s.n >= needed for s in summaries)


def pooled_sd(a: SeedSummary, b: SeedSummary) -> float:
    return math.sqrt((a.sd**2 + b.sd**2) / 2)


def beyond_noise(a: SeedSummary, b: SeedSummary) -> bool:
    """``|mean_a - mean_b| > k * pooled sd`` with ``k = criteria.seed_noise.sd_multiple``."""
    k = load_criteria()["seed_noise"]["sd_multiple"]
    return abs(a.mean - b.mean) > k * pooled_sd(a, b)


def relative_gap(value: float, reference: float) -> float:
    """``(value - reference) / reference``: how much worse (> 0) a lower-is-better metric is."""
    return (value - reference) / reference


def percent_gap(value: float, reference: float) -> float:
    """:func:`relative_gap` in percent."""
    return 100 * relative_gap(value, reference)


def smallest_context(
    ks: Sequence[int], values: Sequence[float], recurrent: float, tolerance: float
) -> int | None:
    """The first ``k`` whose loss or perplexity is at most ``recurrent * (1 + tolerance)``."""
    close = [k for k, value in zip(ks, values, strict=True) if value <= recurrent * (1 + tolerance)]
    return close[0] if close else None


def gap_label(value: float, reference: float) -> str:
    """:func:`percent_gap` with its sign to one decimal, as ``"+3.2%"``."""
    return f"{percent_gap(value, reference):+.1f}%"


def stability_cost_verdict(task: str, free: SeedSummary, stable: SeedSummary) -> str:
    """ "supported", "not supported", "inconclusive" or "no verdict (...)" for "stability costs
    little" (criteria.stability_cost)."""
    if not enough_seeds(task, free, stable):
        needed = load_criteria()["seeds"][task]
        return f"no verdict (fewer than {needed} seeds)"
    tolerance = load_criteria()["stability_cost"]["relative_tolerance"]
    if relative_gap(stable.mean, free.mean) <= tolerance:
        return "supported"
    return "not supported" if beyond_noise(free, stable) else "inconclusive"


def single_seed_readable(row: float, reference: SeedSummary) -> bool:
    """Whether a one-seed ablation row may be read: its effect exceeds ``k`` seed sds of the
    reference (criteria.single_seed_ablation; needs a reference with at least two seeds)."""
    if reference.n < 2:
        return False
    k = load_criteria()["single_seed_ablation"]["sd_multiple"]
    return abs(row - reference.mean) > k * reference.sd


def beats_baseline(model: SeedSummary, baseline: float) -> bool:
    """Whether a model's mean is below the trivial baseline by more than the margin
    (criteria.beats_baseline, a fraction of the baseline's value)."""
    margin = load_criteria()["beats_baseline"]["relative_margin"]
    return model.mean < baseline * (1 - margin)


def reproduces_paper(model: SeedSummary, paper: float, scale: str, paper_scale: bool) -> str:
    """ "reproduced" / "not reproduced" within criteria.reproduces_paper, judged only at the
    paper's scale; elsewhere "not comparable: <scale>"."""
    if not paper_scale:
        return f"not comparable: {scale}"
    tolerance = load_criteria()["reproduces_paper"]["relative_tolerance"]
    close = abs(relative_gap(model.mean, paper)) <= tolerance
    return "reproduced" if close else "not reproduced"


def summarize(values_by_seed: dict[int, float]) -> SeedSummary:
    """A :class:`SeedSummary` from ``{seed: value}`` (seeds in increasing order)."""
    seeds = tuple(sorted(values_by_seed))
    return SeedSummary(tuple(values_by_seed[s] for s in seeds), seeds)


def criterion(name: str) -> dict[str, Any]:
    """One rule of the file (e.g. ``criterion("truncation")["relative_tolerance"]``)."""
    rules = load_criteria()
    if name not in rules:
        raise KeyError(f"no criterion {name!r} in criteria.json; it has {sorted(rules)}")
    return rules[name]


def vanishes_verdict(ratio: float) -> str:
    """The ``gradient_vanishes`` verdict on a mean gradient norm at its distance over at 0."""
    return "supported" if ratio < criterion("gradient_vanishes")["ratio"] else "not supported"
