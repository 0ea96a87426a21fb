"""Chapter 8's figures from committed results: WikiText-2 test perplexity per seed beside the
paper's, Figure 2, and the evidence page's validation curves."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from stablernn_lib.core import criteria, paper_claims
from stablernn_lib.core.plot_helpers import finish_axis, legends_below
from stablernn_lib.core.style import BOUND_COLOR, PHONE_WIDTH_IN, model_color
from stablernn_lib.tasks.wikitext2.measurements import plot_figure2
from stablernn_lib.tasks.wikitext2.results import (
    PAIR,
    PAPER_TEST_PPL_KEYS,
    SHORT,
    Run,
    model_label,
    seed_summary,
)
from stablernn_lib.tasks.wikitext2.train import CONFIGS
from stablernn_lib.tasks.wikitext2.variants import (
    MODEL_LABELS,
    MODEL_VARIANTS,
    VARIANTS_BY_NAME,
    variant_name,
)


def cost_of_stability_figure(
    seed_runs: dict[str, dict[int, dict[str, Any]]], scale: str = "cpu scale"
) -> Figure:
    """Per model of ``seed_runs`` (``load_seed_results(config)``): each seed's test perplexity
    (dots), mean ± sd (bar) and the paper's number (open diamond)."""
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
    """:func:`~stablernn_lib.tasks.wikitext2.measurements.plot_figure2`, ``PHONE_WIDTH_IN`` wide,
    legend below."""
    figure = plot_figure2(analysis, title)
    figure.set_size_inches(PHONE_WIDTH_IN, figure.get_figheight())
    figure.set_layout_engine("constrained")
    return legends_below(figure, columns=2)


def _plot_runs(axis: Any, runs: dict[str, Run], label: Any) -> None:
    """Validation perplexity per epoch of each run (log scale), in the variants' order."""
    for name, (_, stable) in VARIANTS_BY_NAME.items():
        if (run := runs.get(name)) is not None:
            axis.semilogy(
                [row["epoch"] for row in run["epochs"]],
                [row["val_ppl"] for row in run["epochs"]],
                "s--" if stable else "o-",
                ms=3,
                color=model_color(name),
                label=label(name, run),
            )


def plot_convergence(runs: dict[str, Run], title: str = "") -> Figure:
    """Validation perplexity per epoch of the converged pair (log), and the stable model's gap
    per epoch in percent; the cpu scale's 6 epochs marked."""
    figure, (curves, gaps) = plt.subplots(1, 2, figsize=(8.2, 3.4))
    _plot_runs(
        curves,
        {name: runs[name] for name in PAIR if name in runs},
        lambda name, run: model_label(name) + (" (unfinished)" if run.get("unfinished") else ""),
    )
    free, stable = (runs.get(name) for name in PAIR)
    if free is not None and stable is not None:
        common = range(min(len(free["epochs"]), len(stable["epochs"])))
        gaps.plot(
            [i + 1 for i in common],
            [
                criteria.percent_gap(stable["epochs"][i]["val_ppl"], free["epochs"][i]["val_ppl"])
                for i in common
            ],
            "s-",
            ms=3,
            color=model_color(PAIR[1]),
            label="stable vs unconstrained",
        )
    for axis in (curves, gaps):
        axis.axvline(CONFIGS[SHORT].epochs, ls=":", lw=0.9, color="0.4", label="6 epochs (cpu)")
    gaps.set_xlabel("epoch")
    gaps.set_ylabel("validation gap (%)")
    gaps.legend(fontsize=8)
    return finish_axis(figure, curves, "epoch", "validation perplexity", title, 8)


def plot_partial_runs(runs: dict[str, Run], title: str = "") -> Figure:
    """Validation perplexity against epoch for each unfinished run (log scale)."""
    figure, axis = plt.subplots(figsize=(6, 3.6))
    _plot_runs(
        axis,
        runs,
        lambda name, run: (
            f"{MODEL_LABELS[VARIANTS_BY_NAME[name][0]]}"
            f"{', stable' if name.endswith('-stable') else ''}, lr {run['config']['lr']:g}"
        ),
    )
    return finish_axis(figure, axis, "epoch", "validation perplexity", title, None)
