"""The numbers and verdict words Chapter 9 and its companion page quote, read from the results.

:func:`chapter_values` returns one flat ``{key: number or verdict word}`` mapping; the
notebooks glue each entry (``stablernn_lib.book.glue``, read by MyST-NB) and write their
sentences around it with ``{glue:text}`key:format```. Percentages are in percent (``-3.7``
for -3.7%), NLLs in nats per time step. No sentence is built here: the prose lives in the notebooks.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from stablernn_lib.core import criteria
from stablernn_lib.tasks.jsb import analysis as ma

Value = float | int | str
SHORT = {"rnn-unconstrained": "rnn", "rnn-stable": "srnn", "lstm-unconstrained": "lstm",
         "lstm-stable": "slstm", "lstm-authors-bug": "bug"}  # fmt: skip


def _percent(value: float, reference: float) -> float:
    return 100 * criteria.relative_gap(value, reference)


def seeded_values(config: str, baseline: float, results_dir: str | Path | None = None) -> dict:
    """``<prefix>_<model>_mean|sd|n|vs_base`` of every model of a seeded config, and
    ``<prefix>_<cell>_stable_below|cost_verdict`` of each pair (how far, in percent, the
    stable mean lies below the unconstrained one, and the verdict of ``stability_cost``);
    prefix ``sgd`` for ``authors``, ``tcn`` for ``adam-tcn``."""
    prefix = {"authors": "sgd", "adam-tcn": "tcn"}[config]
    runs = ma.load_seed_results(config, results_dir)
    values: dict[str, Value] = {}
    for name, each in runs.items():
        summary = ma.seed_summary(each)
        key = f"{prefix}_{SHORT[name]}"
        values |= {f"{key}_mean": summary.mean, f"{key}_sd": summary.sd, f"{key}_n": summary.n,
                   f"{key}_vs_base": -_percent(summary.mean, baseline)}  # fmt: skip
        best = sorted(run["best_epoch"] for run in each.values())
        values |= {f"{key}_best_first": best[0], f"{key}_best_last": best[-1]}
    for cell, cost in ma.stability_costs(runs).items():
        values[f"{prefix}_{cell}_stable_below"] = -100 * cost.relative
        values[f"{prefix}_{cell}_cost_verdict"] = cost.verdict
    return values


def paper_values(results_dir: str | Path | None = None) -> dict[str, Value]:
    """``paper_<model>_diff|verdict`` at the authors' setting, and ``tcn_<model>_below_paper``
    (how far the ``adam-tcn`` mean lies below the paper's number, in percent; the least and
    the most of these as ``tcn_below_paper_least|most``)."""
    values: dict[str, Value] = {}
    for name, found in ma.paper_comparisons("authors", results_dir).items():
        if found.relative is not None:
            values[f"paper_{SHORT[name]}_diff"] = 100 * found.relative
        values[f"paper_{SHORT[name]}_verdict"] = found.verdict
    tcn = ma.load_seed_results("adam-tcn", results_dir)
    for name, found in ma.paper_comparisons("authors", results_dir).items():
        if name in tcn:
            below = -_percent(ma.seed_summary(tcn[name]).mean, found.paper)
            values[f"tcn_{SHORT[name]}_below_paper"] = below
    below = [v for k, v in values.items() if k.endswith("_below_paper")]
    if below:
        values["tcn_below_paper_least"], values["tcn_below_paper_most"] = min(below), max(below)
    return values


def extent_values(results_dir: str | Path | None = None) -> dict[str, Value]:
    """How far the ``authors`` LSTMs trained: the unconstrained seeds whose best epoch came
    before epoch 400 (how many, the first and last such epoch, their largest final learning
    rate) and the stable LSTMs' earliest best epoch."""
    runs = ma.load_seed_results("authors", results_dir)
    early = sorted(
        (run["best_epoch"], run["epochs"][-1]["lr"])
        for run in runs["lstm-unconstrained"].values()
        if run["best_epoch"] < 400
    )
    return {
        "sgd_lstm_early_count": len(early),
        "sgd_lstm_early_first": early[0][0] if early else 0,
        "sgd_lstm_early_last": early[-1][0] if early else 0,
        "sgd_lstm_early_lr": max((lr for _, lr in early), default=0.0),
    }


def measured_values(
    config: str, results_dir: str | Path | None = None, curve_key: str = "truncated_eval"
) -> dict[str, Value]:
    """``<prefix>_<model>_k|short|grad|vanishes|jac_min|jac_median|jac_max|jac_below`` of the
    seed-1111 models of a config (prefix ``m_sgd`` for ``authors``, ``m_tcn`` for
    ``adam-tcn``, ``m_full`` for ``full``); ``grad`` and ``jac_below`` in percent."""
    prefix = {"authors": "m_sgd", "adam-tcn": "m_tcn", "full": "m_full"}[config]
    analysis = ma.load_full_analysis(results_dir, config)
    if analysis is None:
        return {}
    values: dict[str, Value] = {}
    for name, found in ma.measured(analysis, curve_key=curve_key).items():
        key = f"{prefix}_{SHORT[name]}"
        if found.context is not None:
            values[f"{key}_k"] = found.context
        values[f"{key}_short"] = found.truncation
        if found.gradient_ratio is not None:
            values[f"{key}_grad"] = 100 * found.gradient_ratio
            values[f"{key}_vanishes"] = found.vanishes
        if found.jacobians is not None:
            jac = found.jacobians
            values[f"{key}_jac_min"], values[f"{key}_jac_max"] = jac.smallest, jac.largest
            values[f"{key}_jac_median"], values[f"{key}_jac_below"] = (
                jac.median,
                100 * jac.below_one,
            )
    return values


GAP_CONTEXTS = (1, 4, 8, 16, 32)


def truncation_gaps(
    config: str = "authors",
    results_dir: str | Path | None = None,
    curve_key: str = "truncated_eval_after",
) -> dict[str, Value]:
    """``m_sgd_<model>_gap<k>``: the gap g(k) = NLL(k) - NLL(recurrent), in nats per step, of
    each seed-1111 model's truncation curve at the contexts :data:`GAP_CONTEXTS`, and
    ``m_sgd_<model>_tolerance``: what the ``truncation`` rule's relative tolerance is in nats
    for that model (its recurrent NLL times the tolerance)."""
    prefix = {"authors": "m_sgd", "adam-tcn": "m_tcn", "full": "m_full"}[config]
    analysis = ma.load_full_analysis(results_dir, config)
    if analysis is None:
        return {}
    tolerance = criteria.criterion("truncation")["relative_tolerance"]
    values: dict[str, Value] = {}
    for name, entry in analysis.items():
        if not isinstance(entry, dict) or curve_key not in entry:
            continue
        curve = entry[curve_key]
        key = f"{prefix}_{SHORT[name]}"
        losses = dict(zip(curve["k"], curve["loss"], strict=True))
        for k in GAP_CONTEXTS:
            if k in losses:
                values[f"{key}_gap{k}"] = losses[k] - curve["recurrent_loss"]
        values[f"{key}_tolerance"] = tolerance * curve["recurrent_loss"]
    return values


def chapter_values(baseline: float, results_dir: str | Path | None = None) -> dict[str, Value]:
    """Every number and verdict word the prose of Chapter 9 and its companion page quotes
    (``baseline``: the no-memory model's test NLL, which the notebook computes from the data)."""
    values: dict[str, Value] = {
        "seeds_needed": criteria.load_criteria()["seeds"]["jsb"],
        "seeds_needed_wikitext2": criteria.load_criteria()["seeds"]["wikitext2"],
        "cost_tolerance": 100 * criteria.criterion("stability_cost")["relative_tolerance"],
        "baseline_margin": 100 * criteria.criterion("beats_baseline")["relative_margin"],
        "truncation_tolerance": 100 * criteria.criterion("truncation")["relative_tolerance"],
        "gradient_distance": criteria.criterion("gradient_vanishes")["distance"],
        "gradient_ratio": 100 * criteria.criterion("gradient_vanishes")["ratio"],
        "reproduce_tolerance": 100 * criteria.criterion("reproduces_paper")["relative_tolerance"],
        "single_seed_sd": criteria.criterion("single_seed_ablation")["sd_multiple"],
    }
    for config in ("authors", "adam-tcn"):
        values |= seeded_values(config, baseline, results_dir)
    values |= paper_values(results_dir) | extent_values(results_dir)
    values |= measured_values("authors", results_dir, "truncated_eval_after")
    values |= truncation_gaps("authors", results_dir)
    values |= measured_values("adam-tcn", results_dir) | measured_values("full", results_dir)
    full = ma.load_results(results_dir)
    for name, run in full.items():
        values[f"full_{SHORT[name]}_nll"] = run["test_nll"]
        values[f"full_{SHORT[name]}_vs_base"] = -_percent(run["test_nll"], baseline)
        values[f"full_{SHORT[name]}_above_base"] = _percent(run["test_nll"], baseline)
    adam = ma.load_results(results_dir, config="adam")
    for name, run in adam.items():
        values[f"adam_{SHORT[name]}_nll"] = run["test_nll"]
    rises = [
        later["train_nll"] - earlier["train_nll"]
        for runs in (full, adam)
        if "rnn-stable" in runs
        for earlier, later in itertools.pairwise(runs["rnn-stable"]["epochs"])
    ]
    if rises:
        values["ablation_srnn_largest_rise"] = max(rises)
    return values
