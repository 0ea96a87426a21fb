"""The numbers Chapter 8 and its evidence page quote in their prose, read from the committed
result files of ``data/results/wikitext2/``.

:func:`chapter8_numbers` returns one flat ``{key: value}`` dict: floats (percentages are in
percent), integers and verdict words, no sentences.  The notebooks glue every entry
(``stablernn_lib.book.glue.glue(key, value, display=False)``, read by MyST-NB) and write
``{glue:text}`key:.1f``` in their Markdown; the Colab conversion
(:mod:`stablernn_tools.colab_conversion`) substitutes the same
values.  Tests recompute each value from the files independently.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from stablernn_lib.core import criteria
from stablernn_lib.tasks.wikitext2 import convergence, findings, partial_runs
from stablernn_lib.tasks.wikitext2.data import WIKITEXT2_TOKENS, WIKITEXT2_VOCAB_SIZE
from stablernn_lib.tasks.wikitext2.train import CONFIGS, RESULTS_DIR, results_folder
from stablernn_lib.tasks.wikitext2.variants import MODEL_VARIANTS, variant_name
from stablernn_lib.theory.lstm_stability import authors_constants_constraint

Numbers = dict[str, float | int | str]


def _mean(config: str, variant: str = "lstm-stable") -> criteria.SeedSummary:
    return findings.seed_summary(findings.load_seed_results(config)[variant])


def _gap(value: float, reference: float) -> float:
    return 100 * criteria.relative_gap(value, reference)


def _worst(config: str) -> list[float]:
    """The largest one-step state-Jacobian norm of each layer of a config's stable LSTM."""
    with open(results_folder(config) / "analysis.json", encoding="utf8") as handle:
        norms = json.load(handle)["lstm-stable"]["jacobian_norms"]
    return [max(layer) for layer in norms]


def _rate_cut(run: dict[str, Any]) -> bool:
    """Whether the schedule cut a run's learning rate during its epochs."""
    return min(e["lr"] for e in run["epochs"]) < run["epochs"][0]["lr"]


def seeds_numbers() -> Numbers:
    """The four models of the cpu scale over their seeds, the cost of stability per cell
    and its verdict, and the RNN run whose schedule cut its rate."""
    runs = findings.load_seed_results("cpu")
    out: Numbers = {}
    for cell, stable in MODEL_VARIANTS:
        name = variant_name(cell, stable)
        summary = findings.seed_summary(runs[name])
        key = f"{cell}_{'stable' if stable else 'free'}"
        out[f"{key}_mean"], out[f"{key}_sd"], out[f"{key}_n"] = summary.mean, summary.sd, summary.n
    for cell in ("rnn", "lstm"):
        free, stable = (findings.seed_summary(runs[variant_name(cell, s)]) for s in (False, True))
        out[f"{cell}_gap"] = _gap(stable.mean, free.mean)
        out[f"{cell}_verdict"] = criteria.stability_cost_verdict("wikitext2", free, stable)
    cut = [seed for seed, run in runs["rnn-unconstrained"].items() if _rate_cut(run)]
    if len(cut) == 1:  # the one RNN run whose schedule cut its rate: its seed and the rest
        seed = cut[0]
        run = runs["rnn-unconstrained"][seed]
        out["rnn_cut_seed"], out["rnn_cut_ppl"] = seed, run["test_ppl"]
        out["rnn_cut_epoch"] = next(
            i for i, e in enumerate(run["epochs"]) if e["lr"] < run["epochs"][0]["lr"]
        )
        kept = [
            other["test_ppl"]
            for name in ("rnn-unconstrained", "rnn-stable")
            for s, other in runs[name].items()
            if (name, s) != ("rnn-unconstrained", seed)
        ]
        out["rnn_kept_low"], out["rnn_kept_high"] = min(kept), max(kept)
        others = [v["test_ppl"] for s, v in runs["rnn-unconstrained"].items() if s != seed]
        out["rnn_free_uncut_vs_stable"] = _gap(sum(others) / len(others), out["rnn_stable_mean"])
    out["tolerance"] = 100 * criteria.criterion("stability_cost")["relative_tolerance"]
    return out


def ablation_numbers(free: float, course: float) -> Numbers:
    """The LSTM rows changed one factor at a time: their mean test perplexity, gap to the
    unconstrained LSTM (``free``), share of the course model's gap closed, worst one-step
    Jacobian norm, and the split of layer 2's cost between the forget cap and the rest."""
    course_gap = _gap(course, free)
    out: Numbers = {}
    for key, config in (
        ("first_layer", "cpu-first-layer"),
        ("authors_first", "cpu-authors-first"),
        ("authors_all", "cpu-authors-all"),
        ("free_forget", "cpu-free-forget"),
        ("upper", "cpu-free-forget-upper"),
    ):
        summary = _mean(config)
        gap = _gap(summary.mean, free)
        out[f"{key}_ppl"], out[f"{key}_sd"], out[f"{key}_n"] = summary.mean, summary.sd, summary.n
        out[f"{key}_gap"] = gap
        out[f"{key}_share"] = 100 * (course_gap - gap) / course_gap
        out[f"{key}_worst_jac"] = max(_worst(config))
    out["upper_layer1_jac"], out["upper_layer2_jac"] = _worst("cpu-free-forget-upper")
    authors = _mean("cpu-authors-first")
    out["authors_first_verdict"] = criteria.stability_cost_verdict(
        "wikitext2", _mean("cpu", "lstm-unconstrained"), authors
    )
    first, upper = out["first_layer_ppl"], out["upper_ppl"]
    out["layer2_cost"], out["cap_recovers"] = course - first, course - upper
    out["other_gates_cost"] = upper - first
    lr20 = findings.load_seed_results("cpu-lr20")
    out["lr20_free"] = findings.seed_summary(lr20["lstm-unconstrained"]).mean
    out["lr20_stable"] = findings.seed_summary(lr20["lstm-stable"]).mean
    out["lr20_gap"] = _gap(out["lr20_stable"], out["lr20_free"])
    return out


def converged_numbers() -> Numbers:
    """The LSTM pair trained until the decay is used up: epochs, test perplexities, the gap
    beside the 6-epoch gap, the change from the 6-epoch seeds, and what its analysis found."""
    runs = convergence.load_converged()
    out: Numbers = {}
    for key, name in (("conv_free", "lstm-unconstrained"), ("conv_stable", "lstm-stable")):
        extent = convergence.run_extent(runs[name])
        against = convergence.against_short(name, runs[name])
        out[f"{key}_epochs"], out[f"{key}_ppl"] = extent.epochs, extent.test_ppl
        out[f"{key}_cuts"] = extent.cuts
        out[f"{key}_change"] = _gap(against.test_ppl, against.short.mean)
        out[f"{key}_limit"] = against.limit
        out[f"{key}_drift"] = 100 * convergence.first_epochs_agreement(name, runs[name])
    out["conv_stop_lr"] = convergence.run_extent(runs["lstm-stable"]).final_lr
    gap = convergence.converged_gap(runs)
    out["conv_gap"], out["conv_gap_same_seed_short"] = gap.converged, gap.same_seed_short
    equal = partial_runs.equal_epoch_gaps(runs)["lstm"]["uncut"]
    out["conv_uncut_epoch"], out["conv_uncut_gap"] = equal["epoch"], 100 * equal["gap"]
    analysis = findings.load_full_results(results_folder("cpu-converged"))["analysis"]
    short = findings.load_full_results(results_folder("cpu"))["analysis"]
    for key, name in (("conv_free", "lstm-unconstrained"), ("conv_stable", "lstm-stable")):
        entry = analysis[name]
        k = findings.smallest_k_within(entry["truncated_eval"])
        out[f"{key}_k"] = "none up to 100" if k is None else k
        curve = entry["truncated_eval"]
        out[f"{key}_k100_excess"] = _gap(curve["ppl"][-1], curve["recurrent_ppl"])
        for layer, norms in enumerate(entry["jacobian_norms"], start=1):
            out[f"{key}_jac_l{layer}"] = float(torch.tensor(norms).median())
            out[f"{key}_short_jac_l{layer}"] = float(
                torch.tensor(short[name]["jacobian_norms"][layer - 1]).median()
            )
        out[f"{key}_worst_jac"] = max(max(layer) for layer in entry["jacobian_norms"])
    return out


def unfinished_numbers() -> Numbers:
    """The full scale's unfinished runs: epochs reached and the validation gaps at equal
    epochs (before either rate was cut, and at the last epoch both ran)."""
    runs = partial_runs.load_partial_runs()
    if not runs:
        return {}
    epochs = sorted(len(run["epochs"]) for run in runs.values())
    gaps = partial_runs.equal_epoch_gaps(runs)
    out: Numbers = {"full_epochs_min": epochs[0], "full_epochs_max": epochs[-1]}
    for cell, both in gaps.items():
        for when in ("uncut", "last"):
            out[f"full_{cell}_{when}_epoch"] = both[when]["epoch"]
            out[f"full_{cell}_{when}_gap"] = 100 * both[when]["gap"]
    lstm_free, lstm_stable = (runs[variant_name("lstm", s)]["epochs"] for s in (False, True))
    out["full_lstm_gap6"] = _gap(lstm_stable[5]["val_ppl"], lstm_free[5]["val_ppl"])
    cpu = findings.load_full_results(results_folder("cpu"))
    out["cpu_lstm_val_gap6"] = _gap(
        cpu["lstm-stable"]["epochs"][5]["val_ppl"],
        cpu["lstm-unconstrained"]["epochs"][5]["val_ppl"],
    )
    return out


def measurement_numbers() -> Numbers:
    """What the four measurements of the cpu scale (seed 1111) found: Figure 2's ratios, the
    smallest context within 1%, the Jacobian norms and the weight distances."""
    analysis = findings.load_full_results(results_folder("cpu"))["analysis"]
    vanishes, truncation = criteria.criterion("gradient_vanishes"), criteria.criterion("truncation")
    out: Numbers = {
        "analysis_seed": analysis["lm_config"]["seed"],
        "test_sample": analysis["config"]["test_tokens"],
        "fig2_distance": vanishes["distance"],
        "fig2_limit": 100 * vanishes["ratio"],
        "max_k": truncation["max_k"],
    }
    for cell, stable in MODEL_VARIANTS:
        name = variant_name(cell, stable)
        key = f"{cell}_{'stable' if stable else 'free'}"
        entry = analysis[name]
        norms = entry["figure2"]["mean_norm"]
        out[f"{key}_fig2_ratio"] = 100 * norms[vanishes["distance"]] / norms[0]
        out[f"{key}_fig2_last"] = 100 * norms[-1] / norms[0]
        vanished = norms[vanishes["distance"]] / norms[0] < vanishes["ratio"]
        out[f"{key}_fig2_verdict"] = "supported" if vanished else "not supported"
        k = findings.smallest_k_within(entry["truncated_eval"])
        out[f"{key}_k"] = "none up to 100" if k is None else k
        curve = entry["truncated_eval"]
        out[f"{key}_k100_excess"] = _gap(curve["ppl"][-1], curve["recurrent_ppl"])
        layers = [torch.tensor(layer) for layer in entry["jacobian_norms"]]
        for number, layer in enumerate(layers, start=1):
            out[f"{key}_jac_l{number}"] = float(layer.median())
            out[f"{key}_below1_l{number}"] = 100 * float((layer < 1).double().mean())
        out[f"{key}_worst_jac"] = max(float(layer.max()) for layer in layers)
    out["fig2_last_distance"] = len(analysis["rnn-unconstrained"]["figure2"]["mean_norm"]) - 1
    out["rnn_free_fig2_35"] = 100 * (
        analysis["rnn-unconstrained"]["figure2"]["mean_norm"][35]
        / analysis["rnn-unconstrained"]["figure2"]["mean_norm"][0]
    )
    for cell in ("rnn", "lstm"):
        record = analysis[f"weights_close-{cell}"]
        out["weights_steps"] = record["step"][-1]
        for name, values in record["relative_distance"].items():
            out[f"wc_{cell}_{name.replace('=', '')}"] = 100 * values[-1]
    stable_rows = analysis["rnn-stable"].get("diagonal_certificates", [])
    if stable_rows:  # the diagonal scaling's constant, largest over the stable RNN's layers
        out["diag_stable_max"] = max(row["diagonal_lam"] for row in stable_rows)
    return out


def _threads(device: str) -> int:
    """The thread count of a provenance device string such as ``"cpu (x86_64, 2 threads)"``."""
    return int(device.rpartition(", ")[2].split()[0])


def benchmark_numbers() -> Numbers:
    """The step-time ratios of the committed ratio files (GPU and CPU), and the idle-machine
    epoch of the stable LSTM against the training time its step times predict."""
    out: Numbers = {}
    gpu_path = RESULTS_DIR / "benchmark-full-gpu-ratios.json"
    cpu_path = RESULTS_DIR / "benchmark-cpu-cpu-ratios.json"
    if gpu_path.is_file():
        gpu = json.loads(gpu_path.read_text(encoding="utf8"))
        ratios, steps = gpu["ratios"], gpu["step_seconds"]
        out["gpu_device"] = gpu["provenance"]["device"]
        out["gpu_course_ratio"] = ratios["lstm-course / lstm-unconstrained"]
        out["gpu_authors_ratio"] = ratios["lstm-authors / lstm-unconstrained"]
        out["gpu_rnn_ratio"] = ratios["rnn-stable / rnn-unconstrained"]
        out["gpu_svd_ratio"] = ratios["rnn-stable-svd-on-device / rnn-unconstrained"]
        out["gpu_projection_ms"] = 1000 * gpu["solver_seconds"]["fast_path"]
        out["gpu_eigh_ms"] = 1000 * gpu["solver_seconds"]["host_eigh_float32"]
        out["gpu_rnn_step_ms"] = 1000 * steps["rnn-unconstrained"]
        out["gpu_target_ratio"] = gpu["target_ratio_on_gpu"]
    epoch_path = RESULTS_DIR / "timing" / "lstm-stable-cpu-1-epoch-idle.json"
    bench_path = RESULTS_DIR / "benchmark-cpu-cpu.json"
    layer_path = RESULTS_DIR / "benchmark-cpu-output-layer.json"
    if layer_path.is_file() and bench_path.is_file():  # why the cpu scale's output layer
        steps = json.loads(layer_path.read_text(encoding="utf8"))["step_seconds"]
        per_epoch = json.loads(bench_path.read_text(encoding="utf8"))["steps_per_epoch"]
        plain, adaptive = steps["softmax"].values(), steps["adaptive"].values()
        ratios = [steps["softmax"][cell] / steps["adaptive"][cell] for cell in steps["softmax"]]
        out["ol_softmax_ms_min"], out["ol_softmax_ms_max"] = 1000 * min(plain), 1000 * max(plain)
        out["ol_adaptive_ms_min"] = 1000 * min(adaptive)
        out["ol_adaptive_ms_max"] = 1000 * max(adaptive)
        out["ol_ratio_min"], out["ol_ratio_max"] = min(ratios), max(ratios)
        out["ol_softmax_epoch_min"] = per_epoch * min(plain) / 60
        out["ol_softmax_epoch_max"] = per_epoch * max(plain) / 60
    if bench_path.is_file():  # the cpu scale's epoch on the idle machine, two threads
        bench = json.loads(bench_path.read_text(encoding="utf8"))
        minutes = [model[kind] / 60 for model in bench["models"].values()
                   for kind in ("epoch_seconds_stable", "epoch_seconds_unconstrained")]  # fmt: skip
        out["steps_per_epoch"] = bench["steps_per_epoch"]
        out["cpu_epoch_min"], out["cpu_epoch_max"] = min(minutes), max(minutes)
    if epoch_path.is_file() and bench_path.is_file():  # one timed epoch against the estimate
        epoch = json.loads(epoch_path.read_text(encoding="utf8"))
        bench = json.loads(bench_path.read_text(encoding="utf8"))
        out["idle_epoch_minutes"] = epoch["wall_seconds"] / 60
        out["idle_epoch_predicted_minutes"] = bench["models"]["lstm"]["epoch_seconds_stable"] / 60
    idle_analysis = findings.load_idle_timing("cpu")
    if bench_path.is_file() and idle_analysis is not None:  # the cpu scale's whole budget
        runs = findings.load_full_results(results_folder("cpu"))
        bench = json.loads(bench_path.read_text(encoding="utf8"))
        committed, idle = findings.time_budget(runs, bench, idle_analysis)["total"]
        out["budget_committed_hours"], out["budget_idle_hours"] = committed / 3600, idle / 3600
        out["budget_committed_threads"] = _threads(runs["lstm-stable"]["provenance"]["device"])
        out["budget_idle_threads"] = _threads(bench["provenance"]["device"])
    if cpu_path.is_file():
        cpu = json.loads(cpu_path.read_text(encoding="utf8"))
        out["cpu_rnn_step_ms"] = 1000 * cpu["step_seconds"]["rnn-unconstrained"]
        out["cpu_rnn_ratio"] = cpu["ratios"]["rnn-stable / rnn-unconstrained"]
    return out


def chapter8_numbers() -> Numbers:
    """Every number the prose of Chapter 8 and of its evidence page quotes, by key."""
    out: Numbers = {
        "vocab_size": WIKITEXT2_VOCAB_SIZE,
        **{f"{split}_tokens": count for split, count in WIKITEXT2_TOKENS.items()},
        "cpu_epochs": CONFIGS["cpu"].epochs,
        "cpu_lr": CONFIGS["cpu"].lr,
        "full_epochs": CONFIGS["full"].epochs,
        "full_lr": CONFIGS["full"].lr,
        "seed": CONFIGS["cpu"].seed,
        "seeds_needed": criteria.load_criteria()["seeds"]["wikitext2"],
        "seeds_needed_jsb": criteria.load_criteria()["seeds"]["jsb"],  # Chapter 9's rule, beside
        "lstm_lambda": authors_constants_constraint().contraction_bound(input_bound=1.0),
    }
    out.update(seeds_numbers())
    out.update(ablation_numbers(out["lstm_free_mean"], out["lstm_stable_mean"]))
    out.update(converged_numbers())
    out.update(unfinished_numbers())
    out.update(measurement_numbers())
    out.update(benchmark_numbers())
    anchor = 142.07  # one user's run of the example's defaults at lr 20 (the evidence page)
    out["anchor_gap"] = _gap(out["lr20_free"], anchor)  # our unconstrained LSTM at lr 20 too
    return out
