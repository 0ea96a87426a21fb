"""Chapter 8's figures as the site shows them: the test perplexity of the four WikiText-2
models over their seeds beside the numbers the paper reports, and the paper's Figure 2.
Each is at most ``PHONE_WIDTH_IN`` inches wide with its legend below the axes, so that a
phone shows the whole figure with its text at 9 px or more.

The figure reads committed results (:func:`stablernn_lib.tasks.wikitext2.results.
load_seed_results`) and the paper's numbers (:mod:`stablernn_lib.core.paper_claims`).
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from stablernn_lib.core import paper_claims
from stablernn_lib.core.plot_helpers import legends_below
from stablernn_lib.core.style import BOUND_COLOR, PHONE_WIDTH_IN, model_color
from stablernn_lib.tasks.wikitext2.analysis import plot_figure2
from stablernn_lib.tasks.wikitext2.results import PAPER_TEST_PPL_KEYS, seed_summary
from stablernn_lib.tasks.wikitext2.variants import MODEL_LABELS, MODEL_VARIANTS, variant_name


def cost_of_stability_figure(
    seed_runs: dict[str, dict[int, dict[str, Any]]], scale: str = "cpu scale"
) -> Figure:
    """One column per model (RNN and LSTM, unconstrained and stable): each seed's test
    perplexity (dots), their mean ± sd (bar), and the paper's number (open diamond, with
    its mark: ✓ checked, † recalled).  ``seed_runs``: ``load_seed_results(config)``."""
    figure, axis = plt.subplots(figsize=(PHONE_WIDTH_IN, 3.4), layout="constrained")
    labels, paper_drawn = [], False
    for position, (cell, stable) in enumerate(MODEL_VARIANTS):
        name = variant_name(cell, stable)
        labels.append(f"{MODEL_LABELS[cell]}\n{'stable' if stable else 'unconstrained'}")
        runs = seed_runs.get(name)
        if runs:
            summary = seed_summary(runs)
            color = model_color(name)
            axis.plot([position] * summary.n, summary.values, "o", ms=5, color=color,
                      alpha=0.75, label="one seed (ours)" if position == 0 else None)  # fmt: skip
            axis.errorbar(position + 0.18, summary.mean, yerr=summary.sd, fmt="_", ms=14,
                          capsize=3, color=color,
                          label="mean ± sd (ours)" if position == 0 else None)  # fmt: skip
        key = PAPER_TEST_PPL_KEYS[name]
        axis.plot(position - 0.18, paper_claims.value(key), "D", ms=6, mfc="none",
                  color=BOUND_COLOR, label=None if paper_drawn else "the paper")  # fmt: skip
        paper_drawn = True
    axis.set_xticks(range(len(labels)), labels)
    axis.set_xlim(-0.6, len(labels) - 0.4)
    axis.set_ylabel("test perplexity")
    axis.set_title(f"WikiText-2, {scale}")
    axis.legend()
    return legends_below(figure, columns=2)


def figure2_figure(analysis: dict[str, Any], title: str = "") -> Figure:
    """:func:`~stablernn_lib.tasks.wikitext2.analysis.plot_figure2` (gradient norm against
    distance, log scale), ``PHONE_WIDTH_IN`` wide with its legend below the axes."""
    figure = plot_figure2(analysis, title)
    figure.set_size_inches(PHONE_WIDTH_IN, figure.get_figheight())
    figure.set_layout_engine("constrained")
    return legends_below(figure, columns=2)
