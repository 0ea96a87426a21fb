"""The main figure of Chapter 9: every seed's test NLL on JSB Chorales, read from the results.

:func:`seed_results_figure` draws, for each model and each seeded configuration, one dot per
seed and a bar at the mean, the paper's number beside it and the no-memory baseline as a
line (the legend below the axes), so that the reader sees the spread behind every mean of
the chapter's table.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from stablernn_lib.core import paper_claims
from stablernn_lib.core.plot_helpers import legends_below
from stablernn_lib.core.style import BOUND_COLOR, PHONE_WIDTH_IN, model_color
from stablernn_lib.tasks.jsb.results import LABELS, PAPER_KEYS, TABLE_VARIANTS, seed_summary

MARKERS = ("o", "s", "^")


def seed_results_figure(
    runs_by_label: dict[str, dict[str, dict[int, dict[str, Any]]]], baseline: float
) -> Figure:
    """Test NLL per time step of every seed (dots) and the mean (bar) of each model, one
    group of columns per model and one column per labelled set of runs
    (``{label: load_seed_results(config)}``); a star marks the paper's number, the dashed
    line the no-memory ``baseline``."""
    figure, axis = plt.subplots(figsize=(PHONE_WIDTH_IN, 3.6), layout="constrained")
    width = 0.8 / max(len(runs_by_label), 1)
    for group, (cell, variant) in enumerate(TABLE_VARIANTS):
        name = f"{cell}-{variant}"
        color = model_color(name)
        for column, (label, runs) in enumerate(runs_by_label.items()):
            if name not in runs:
                continue
            x = group - 0.4 + width * (column + 0.5)
            values = [run["test_nll"] for _, run in sorted(runs[name].items())]
            spread = [
                x + width * 0.5 * (i / max(len(values) - 1, 1) - 0.5) for i in range(len(values))
            ]
            axis.scatter(spread, values, color=color, marker=MARKERS[column % len(MARKERS)],
                         s=22, zorder=3, label=label if group == 0 else None)  # fmt: skip
            mean = seed_summary(runs[name]).mean
            axis.hlines(mean, x - width * 0.4, x + width * 0.4, color=color, lw=2.2, zorder=2)
        paper = float(paper_claims.value(PAPER_KEYS[(cell, variant)]))
        axis.scatter([group + 0.45], [paper], marker="*", s=90, color="black", zorder=3,
                     label="the paper (†)" if group == 0 else None)  # fmt: skip
    axis.axhline(baseline, color=BOUND_COLOR, ls="--", lw=1.2, label="no-memory baseline")
    axis.set_xticks(range(len(TABLE_VARIANTS)))
    axis.set_xticklabels([LABELS[f"{c}-{v}"] for c, v in TABLE_VARIANTS])
    axis.set_ylabel("test NLL per step (nats)")
    axis.legend()
    return legends_below(figure, columns=2)
