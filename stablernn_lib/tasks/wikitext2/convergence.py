"""The LSTM pair trained until the learning-rate decay is used up (config ``cpu-converged``).

Chapter 8's question: does the certified constraint's cost, measured after 6 epochs at the
cpu scale, shrink when both models train to convergence?  ``cpu-converged`` is ``cpu`` with
one change, how long it trains: at most 40 epochs, ended at the start of the first epoch
whose learning rate the schedule has cut below ``stop_below_lr`` (0.02: the fourth cut).

One seed per model (1111).  Each model is read against the 6-epoch model's seeds with the
criteria's single-seed rule; the gap between the two one-seed models is a number, and the
criteria give no verdict on it.  This module only reads the committed result files.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from stablernn_lib.core import criteria
from stablernn_lib.core.style import model_color
from stablernn_lib.tasks.plotting import finish_axis
from stablernn_lib.tasks.wikitext2.findings import (
    load_full_results,
    load_seed_results,
    lstm_models_table,
    seed_summary,
)
from stablernn_lib.tasks.wikitext2.partial_runs import equal_epoch_gaps
from stablernn_lib.tasks.wikitext2.train import CONFIGS, results_folder
from stablernn_lib.tasks.wikitext2.variants import MODEL_LABELS, variant_name

CONFIG, SHORT = "cpu-converged", "cpu"
PAIR = (variant_name("lstm", False), variant_name("lstm", True))


def load_converged() -> dict[str, dict[str, Any]]:
    """The committed ``cpu-converged`` runs of its own seed, by variant (``lstm-stable``, ...)."""
    seed = CONFIGS[CONFIG].seed
    return {name: by_seed[seed] for name, by_seed in load_seed_results(CONFIG).items()
            if seed in by_seed}  # fmt: skip


def best_epoch(run: dict[str, Any]) -> int:
    """The epoch (from 1) of the lowest validation loss: the weights the test is measured on
    (the first such epoch, as the training loop keeps a model only when the loss improves)."""
    losses = [epoch["val_loss"] for epoch in run["epochs"]]
    return losses.index(min(losses)) + 1


def learning_rate_cuts(run: dict[str, Any]) -> int:
    """How many times the schedule cut the learning rate during the epochs a run trained."""
    rates = [epoch["lr"] for epoch in run["epochs"]]
    return sum(after < before for before, after in zip(rates, rates[1:], strict=False))


def _label(name: str) -> str:
    cell, variant = name.split("-")
    return f"{MODEL_LABELS[cell]}, {variant}"


def extent_sentence(name: str, run: dict[str, Any]) -> str:
    """How long a run trained and why it ended, its best epoch and its test perplexity."""
    ran, planned = len(run["epochs"]), run["config"]["epochs"]
    early = run.get("stopped_early")
    cuts = learning_rate_cuts(run) + (1 if early else 0)  # an early stop follows a cut
    final = early["lr"] if early else run["epochs"][-1]["lr"]
    if early:
        why = (
            f"it stopped at the start of epoch {ran + 1}, the schedule having cut its learning "
            f"rate {cuts} times, to {final:.4g}, below {early['stop_below_lr']:g}"
        )
    else:
        why = f"it ran every epoch, its learning rate cut {cuts} times (to {final:.4g})"
    return (
        f"{_label(name)}: {ran} of at most {planned} epochs; {why}; best validation "
        f"perplexity {run['best_val_ppl']:.1f} at epoch {best_epoch(run)}; test perplexity "
        f"{run['test_ppl']:.1f}."
    )


def against_short_sentence(name: str, run: dict[str, Any]) -> str:
    """A converged model against the 6-epoch model of the same variant: the same seed, and
    the seeds' mean with the single-seed rule of ``criteria.json`` (effect > 5 sd)."""
    short = load_seed_results(SHORT)[name]
    summary = seed_summary(short)
    same = short[CONFIGS[CONFIG].seed]["test_ppl"]
    change = run["test_ppl"] - summary.mean
    k = criteria.criterion("single_seed_ablation")["sd_multiple"]
    readable = criteria.single_seed_readable(run["test_ppl"], summary)
    return (
        f"{_label(name)} after {len(run['epochs'])} epochs against 6: test perplexity "
        f"{run['test_ppl']:.1f} against {same:.1f} with the same seed and {summary.describe()} "
        f"over its seeds; the change, {change:+.1f}, is "
        f"{'beyond' if readable else 'within'} {k:g} sd of those seeds ({k * summary.sd:.1f})"
        f"{': readable from one seed' if readable else ': not readable from one seed'}."
    )


def first_epochs_agreement(name: str, run: dict[str, Any]) -> float:
    """The largest relative difference in validation perplexity over the epochs that a
    converged run shares with the committed 6-epoch run of the same seed (same config up to
    then: the two should agree up to float rounding between versions of the code)."""
    short = load_seed_results(SHORT)[name][CONFIGS[CONFIG].seed]["epochs"]
    return max(
        abs(a["val_ppl"] - b["val_ppl"]) / b["val_ppl"]
        for a, b in zip(run["epochs"], short, strict=False)
    )


def gap_sentences(runs: dict[str, dict[str, Any]]) -> list[str]:
    """The course constraint's cost once both models are trained to convergence, against its
    cost after 6 epochs (same seed, and the seeds' means), and at equal epochs on the way."""
    free, stable = (runs.get(name) for name in PAIR)
    if free is None or stable is None:
        return ["The pair has not finished yet: no gap at convergence."]
    short = load_seed_results(SHORT)
    seed = CONFIGS[CONFIG].seed
    gap = criteria.relative_gap(stable["test_ppl"], free["test_ppl"])
    gap_same = criteria.relative_gap(short[PAIR[1]][seed]["test_ppl"],
                                     short[PAIR[0]][seed]["test_ppl"])  # fmt: skip
    gap_mean = criteria.relative_gap(seed_summary(short[PAIR[1]]).mean,
                                     seed_summary(short[PAIR[0]]).mean)  # fmt: skip
    sentences = [
        f"The course constraint costs {gap:+.1%} in test perplexity once both are trained "
        f"until the decay is used up ({stable['test_ppl']:.1f} against {free['test_ppl']:.1f}; "
        f"one seed each, {seed}), against {gap_same:+.1%} after 6 epochs with the same seed "
        f"and {gap_mean:+.1%} over the 6-epoch seeds. Two one-seed models: the gap is a "
        "number, not a verdict of the criteria."
    ]
    equal = equal_epoch_gaps(runs)["lstm"]
    uncut, last = equal.get("uncut"), equal["last"]
    if uncut is not None:
        sentences.append(
            f"At equal epochs, validation perplexity: {uncut['gap']:+.1%} after epoch "
            f"{uncut['epoch']}, the last before the schedule cut either rate; "
            f"{last['gap']:+.1%} after epoch {last['epoch']}, the last both ran (learning "
            f"rates {last['stable_lr']:.4g} stable, {last['unconstrained_lr']:.4g} "
            "unconstrained)."
        )
    return sentences


def models_table() -> str:
    """The LSTM pair of seed 1111 after 6 epochs and trained until the decay is used up, side
    by side (:func:`~stablernn_lib.tasks.wikitext2.findings.lstm_models_table`): test
    perplexity, the gap to the unconstrained model of the same training, and what the
    measurements of each trained model (``lm-analysis``) found."""
    short, converged = (load_full_results(results_folder(c)) for c in (SHORT, CONFIG))
    rows = []
    for results in (short, converged):
        free = results.get(PAIR[0], {}).get("test_ppl")
        for name in PAIR:
            when = "6 epochs"
            if results is converged:
                ran = f" ({len(results[name]['epochs'])} epochs)" if name in results else ""
                when = f"until the decay is used up{ran}"
            rows.append((f"{name.split('-')[1]}, {when}", results, name, free))
    return lstm_models_table(rows, f"LSTM, cpu scale, seed {CONFIGS[CONFIG].seed}")


def plot_convergence(runs: dict[str, dict[str, Any]], title: str = "") -> Figure:
    """Left: validation perplexity per epoch of each run (log scale), the 6 epochs of the cpu
    scale marked.  Right: the stable model's relative gap per common epoch, in percent."""
    figure, (curves, gaps) = plt.subplots(1, 2, figsize=(8.2, 3.4))
    for name in PAIR:
        run = runs.get(name)
        if run is None:
            continue
        epochs = [row["epoch"] for row in run["epochs"]]
        values = [row["val_ppl"] for row in run["epochs"]]
        style = "s--" if name.endswith("stable") else "o-"
        curves.semilogy(epochs, values, style, ms=3, color=model_color(name), label=_label(name))
    free, stable = (runs.get(name) for name in PAIR)
    if free is not None and stable is not None:
        common = range(min(len(free["epochs"]), len(stable["epochs"])))
        gaps.plot(
            [i + 1 for i in common],
            [100 * criteria.relative_gap(stable["epochs"][i]["val_ppl"],
                                         free["epochs"][i]["val_ppl"]) for i in common],
            "s-", ms=3, color=model_color(PAIR[1]), label="stable vs unconstrained",
        )  # fmt: skip
    for axis in (curves, gaps):
        axis.axvline(CONFIGS[SHORT].epochs, ls=":", lw=0.9, color="0.4", label="6 epochs (cpu)")
    gaps.set_xlabel("epoch")
    gaps.set_ylabel("validation gap (%)")
    gaps.legend(fontsize=8)
    return finish_axis(figure, curves, "epoch", "validation perplexity", title, 8)
