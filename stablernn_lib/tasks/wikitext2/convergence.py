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

from dataclasses import asdict, dataclass
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from stablernn_lib.core import criteria
from stablernn_lib.core.plot_helpers import finish_axis
from stablernn_lib.core.style import model_color
from stablernn_lib.tasks.wikitext2.findings import (
    load_full_results,
    load_seed_results,
    lstm_models_table,
    seed_summary,
    unfinished_epochs,
)
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


@dataclass(frozen=True)
class RunExtent:
    """How long a ``cpu-converged`` run trained and why it ended.

    ``cuts``: the learning-rate cuts, counting the one that ended an early stop;
    ``final_lr``: the rate after the last cut; ``stop_below``: the threshold that ended it
    (None when it ran every epoch); ``test_ppl``: None while it is unfinished."""

    epochs: int
    planned: int
    cuts: int
    final_lr: float
    stop_below: float | None
    best_val_ppl: float
    best_epoch: int
    test_ppl: float | None
    unfinished: bool


def run_extent(run: dict[str, Any]) -> RunExtent:
    """:class:`RunExtent` of a run of :func:`load_converged` (finished or not)."""
    early = run.get("stopped_early")
    unfinished = bool(run.get("unfinished"))
    return RunExtent(
        epochs=len(run["epochs"]),
        planned=run["config"]["epochs"],
        cuts=learning_rate_cuts(run) + (1 if early else 0),  # an early stop follows a cut
        final_lr=early["lr"] if early else run["epochs"][-1]["lr"],
        stop_below=early["stop_below_lr"] if early else None,
        best_val_ppl=best_val_ppl(run),
        best_epoch=best_epoch(run),
        test_ppl=None if unfinished else run["test_ppl"],
        unfinished=unfinished,
    )


@dataclass(frozen=True)
class AgainstShort:
    """A converged model's test perplexity against the 6-epoch model of the same variant:
    the same seed's, the seeds' summary, the change from their mean, and whether it exceeds
    the single-seed rule's ``limit`` (5 sd of those seeds)."""

    test_ppl: float
    same_seed: float
    short: criteria.SeedSummary
    change: float
    limit: float
    readable: bool


def against_short(name: str, run: dict[str, Any]) -> AgainstShort | None:
    """:class:`AgainstShort` of a finished converged run; None for an unfinished one."""
    if run.get("unfinished"):
        return None
    short = load_seed_results(SHORT)[name]
    summary = seed_summary(short)
    k = criteria.criterion("single_seed_ablation")["sd_multiple"]
    return AgainstShort(
        test_ppl=run["test_ppl"],
        same_seed=short[CONFIGS[CONFIG].seed]["test_ppl"],
        short=summary,
        change=run["test_ppl"] - summary.mean,
        limit=k * summary.sd,
        readable=criteria.single_seed_readable(run["test_ppl"], summary),
    )


@dataclass(frozen=True)
class ConvergedGap:
    """The course constraint's cost in test perplexity, in percent: trained until the decay
    is used up (one seed each), after 6 epochs with the same seed, and over the 6-epoch
    seeds' means.  Two one-seed models: a number, not a verdict of the criteria."""

    converged: float
    same_seed_short: float
    mean_short: float


def converged_gap(runs: dict[str, dict[str, Any]]) -> ConvergedGap | None:
    """:class:`ConvergedGap` once both runs of :data:`PAIR` have finished, else None."""
    free, stable = (runs.get(name) for name in PAIR)
    if free is None or stable is None or free.get("unfinished") or stable.get("unfinished"):
        return None
    short = load_seed_results(SHORT)
    seed = CONFIGS[CONFIG].seed
    return ConvergedGap(
        converged=100 * criteria.relative_gap(stable["test_ppl"], free["test_ppl"]),
        same_seed_short=100
        * criteria.relative_gap(short[PAIR[1]][seed]["test_ppl"], short[PAIR[0]][seed]["test_ppl"]),
        mean_short=100
        * criteria.relative_gap(
            seed_summary(short[PAIR[1]]).mean, seed_summary(short[PAIR[0]]).mean
        ),
    )


def _label(name: str) -> str:
    cell, variant = name.split("-")
    return f"{MODEL_LABELS[cell]}, {variant}"


def first_epochs_agreement(name: str, run: dict[str, Any]) -> float:
    """The largest relative difference in validation perplexity over the epochs that a
    converged run shares with the committed 6-epoch run of the same seed (same config up to
    then: the two should agree up to float rounding between versions of the code)."""
    short = load_seed_results(SHORT)[name][CONFIGS[CONFIG].seed]["epochs"]
    return max(
        abs(a["val_ppl"] - b["val_ppl"]) / b["val_ppl"]
        for a, b in zip(run["epochs"], short, strict=False)
    )


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
            reference = None if name == PAIR[0] else free  # the reference row has no gap
            rows.append((f"{name.split('-')[1]}, {when}", results, name, reference))
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
