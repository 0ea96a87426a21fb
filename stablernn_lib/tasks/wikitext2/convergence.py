"""The LSTM pair trained until the learning-rate decay is used up (config ``cpu-converged``).

Chapter 8's question: does the certified constraint's cost, measured after 6 epochs at the
cpu scale, shrink when both models train to convergence?  ``cpu-converged`` is ``cpu`` with
one change, how long it trains: at most 40 epochs, ended at the start of the first epoch
whose learning rate the schedule has cut below ``stop_below_lr`` (0.02: the fourth cut).

One seed per model (1111).  Each model is read against the 6-epoch model's seeds with the
criteria's single-seed rule; the gap between the two one-seed models is a number, and the
criteria give no verdict on it.  A run that has not finished is read from the per-epoch
metrics committed for it (``unfinished/``, :func:`findings.unfinished_epochs`): validation
perplexity only, marked ``"unfinished"``, read by no rule.  This module only reads the
committed files.
"""

from __future__ import annotations

from dataclasses import asdict
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
    unfinished_epochs,
)
from stablernn_lib.tasks.wikitext2.partial_runs import equal_epoch_gaps
from stablernn_lib.tasks.wikitext2.train import CONFIGS, results_folder
from stablernn_lib.tasks.wikitext2.variants import MODEL_LABELS, variant_name

CONFIG, SHORT = "cpu-converged", "cpu"
PAIR = (variant_name("lstm", False), variant_name("lstm", True))


def load_converged() -> dict[str, dict[str, Any]]:
    """The committed ``cpu-converged`` runs of its own seed, by variant (``lstm-stable``, ...).

    A finished run is its result file.  An unfinished one, where its per-epoch metrics are
    committed, is ``{"epochs": [...], "config": {...}, "unfinished": True}``: no test
    perplexity and no best model yet."""
    seed = CONFIGS[CONFIG].seed
    runs = {name: by_seed[seed] for name, by_seed in load_seed_results(CONFIG).items()
            if seed in by_seed}  # fmt: skip
    for name in PAIR:
        epochs = unfinished_epochs(CONFIG, name)
        if name not in runs and epochs:
            runs[name] = {"epochs": epochs, "config": asdict(CONFIGS[CONFIG]), "unfinished": True}
    return runs


def best_epoch(run: dict[str, Any]) -> int:
    """The epoch (from 1) of the lowest validation loss: the weights the test is measured on
    (the first such epoch, as the training loop keeps a model only when the loss improves)."""
    losses = [epoch["val_loss"] for epoch in run["epochs"]]
    return losses.index(min(losses)) + 1


def best_val_ppl(run: dict[str, Any]) -> float:
    """The lowest validation perplexity of the epochs a run has trained (finished or not)."""
    return min(epoch["val_ppl"] for epoch in run["epochs"])


def learning_rate_cuts(run: dict[str, Any]) -> int:
    """How many times the schedule cut the learning rate during the epochs a run trained."""
    rates = [epoch["lr"] for epoch in run["epochs"]]
    return sum(after < before for before, after in zip(rates, rates[1:], strict=False))


def _times(count: int) -> str:
    """ "once", "twice", "3 times"; "not yet" for zero."""
    return {0: "not yet", 1: "once", 2: "twice"}.get(count, f"{count} times")


def _label(name: str) -> str:
    cell, variant = name.split("-")
    return f"{MODEL_LABELS[cell]}, {variant}"


def extent_sentence(name: str, run: dict[str, Any]) -> str:
    """How long a run trained and why it ended, its best epoch and its test perplexity
    (for an unfinished run: how far it got, and that it has no test perplexity yet)."""
    ran, planned = len(run["epochs"]), run["config"]["epochs"]
    best = f"best validation perplexity {best_val_ppl(run):.1f} at epoch {best_epoch(run)}"
    if run.get("unfinished"):
        return (
            f"{_label(name)}: unfinished, {ran} of at most {planned} epochs so far, its "
            f"learning rate cut {_times(learning_rate_cuts(run))} (now "
            f"{run['epochs'][-1]['lr']:.4g}); {best}; no test perplexity before it ends."
        )
    early = run.get("stopped_early")
    cuts = learning_rate_cuts(run) + (1 if early else 0)  # an early stop follows a cut
    final = early["lr"] if early else run["epochs"][-1]["lr"]
    if early:
        why = (
            f"it stopped at the start of epoch {ran + 1}, the schedule having cut its learning "
            f"rate {_times(cuts)}, to {final:.4g}, below {early['stop_below_lr']:g}"
        )
    else:
        why = f"it ran every epoch, its learning rate cut {_times(cuts)} (to {final:.4g})"
    return (
        f"{_label(name)}: {ran} of at most {planned} epochs; {why}; {best}; test perplexity "
        f"{run['test_ppl']:.1f}."
    )


def against_short_sentence(name: str, run: dict[str, Any]) -> str:
    """A converged model against the 6-epoch model of the same variant: the same seed, and
    the seeds' mean with the single-seed rule of ``criteria.json`` (effect > 5 sd).  An
    unfinished run has no test perplexity and is not read."""
    if run.get("unfinished"):
        return f"{_label(name)}: unfinished, so not yet read against the 6-epoch seeds."
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
    cost after 6 epochs (same seed, and the seeds' means), and at equal epochs on the way.

    While a run is unfinished: no gap in test perplexity; the gap of best validation
    perplexities so far, which can only shrink while the stable model alone trains on (a
    best-so-far is never raised, and the unconstrained model's is final once it has
    finished); and the gaps at equal epochs."""
    free, stable = (runs.get(name) for name in PAIR)
    if free is None or stable is None:
        return ["The pair has not finished yet: no gap at convergence."]
    if free.get("unfinished") or stable.get("unfinished"):
        which = " and ".join(_label(n) for n in PAIR if runs[n].get("unfinished"))
        best = criteria.relative_gap(best_val_ppl(stable), best_val_ppl(free))
        sentences = [
            f"Not finished yet ({which}): no gap in test perplexity, and no reading by the "
            f"criteria. Best validation perplexity so far: stable {best_val_ppl(stable):.1f} "
            f"(epoch {best_epoch(stable)} of {len(stable['epochs'])}), unconstrained "
            f"{best_val_ppl(free):.1f} (epoch {best_epoch(free)} of {len(free['epochs'])}), "
            f"{best:+.1%}."
        ]
        if not free.get("unfinished"):
            sentences[0] += (
                " The unconstrained model has finished, so its best is final and the stable "
                "model's can only fall: the gap of best validation perplexities at convergence "
                f"will be at most {best:+.1%}."
            )
            sentences.append(_distance_to_tolerance(free, stable))
        return sentences + _equal_epoch_sentences(runs)
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
    return sentences + _equal_epoch_sentences(runs)


def _distance_to_tolerance(free: dict[str, Any], stable: dict[str, Any]) -> str:
    """How far the unfinished stable model's best validation perplexity still has to fall to
    come within the criteria's tolerance of the finished unconstrained model, beside what the
    unconstrained model's own learning-rate cuts gave it (its best before the first cut
    against its final best).  Arithmetic on validation perplexities, not a verdict."""
    tolerance = criteria.criterion("stability_cost")["relative_tolerance"]
    target = best_val_ppl(free) * (1 + tolerance)
    needed = 1 - target / best_val_ppl(stable)
    start_lr = free["epochs"][0]["lr"]
    uncut = [epoch for epoch in free["epochs"] if epoch["lr"] == start_lr]
    before = min(epoch["val_ppl"] for epoch in uncut)
    gained = 1 - best_val_ppl(free) / before
    return (
        f"Within the criteria's {tolerance:.0%} tolerance (read here on validation "
        f"perplexity; the criteria judge test perplexity) the stable model's best would have "
        f"to fall to {target:.1f}, {needed:.1%} below its best so far; the unconstrained "
        f"model's learning-rate cuts lowered its own best by {gained:.1%} (from {before:.1f}, "
        f"its best before the first cut, after {len(uncut)} epochs). Arithmetic on the "
        "numbers so far, not a prediction."
    )


def _equal_epoch_sentences(runs: dict[str, dict[str, Any]]) -> list[str]:
    """The validation gap at equal epochs: the last before either rate was cut, the last
    both ran."""
    sentences = []
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
                if name in results:
                    ran = f" ({len(results[name]['epochs'])} epochs)"
                elif epochs := unfinished_epochs(CONFIG, name):
                    ran = f" (unfinished, {len(epochs)} epochs so far)"
                else:
                    ran = ""
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
        label = _label(name) + (" (unfinished)" if run.get("unfinished") else "")
        curves.semilogy(epochs, values, style, ms=3, color=model_color(name), label=label)
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
