"""Step times of the course's WikiText-2 models, timed by ``torch.utils.benchmark``.

A time is the median per call of :func:`seconds_per_call` (``Timer.blocked_autorange``:
warm-up, blocks of calls, the device synchronised around each block).  The models have an
LM config's sizes; except in ``fast-step`` and ``lr-probe`` they read random tokens with
``p(rank r) ~ 1/r`` (an adaptive softmax's cost depends on how many targets are rare).  A
training step reads its loss on the host, as the loop does.  ``benchmark WHAT`` runs
:func:`overhead`, :func:`step_ratios` (``ratios``), :func:`output_layer`, :func:`fast_step`
or :func:`learning_rate_probe` (``lr-probe``) and writes its file (``FILES``).

The floor of a step (``fast-step``), with ``N`` = batch x bptt tokens, ``H`` hidden units,
``V`` words and the vendors' dense peaks (``DEVICE_PEAKS``)::

    floor = max(6 N H V / peak FLOP/s,  16 N V bytes / bandwidth)

(the decoder's forward and backward; the float32 logits written, read by the softmax,
their gradient written and read); the recurrence, latency-bound, is not in it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.benchmark import Timer

from stablernn_lib.core.contraction import project_spectral_ball, project_spectral_ball_by_eigh
from stablernn_lib.core.io import atomic_write_json, provenance
from stablernn_lib.tasks.table_runs import (
    Job,
    Training,
    add_job_arguments,
    load_corpus,
    make_jobs,
    time_steps,
)
from stablernn_lib.tasks.wikitext2 import benchmark_reports as reports
from stablernn_lib.tasks.wikitext2.data import (
    WIKITEXT2_TOKENS,
    WIKITEXT2_VOCAB_SIZE,
    Corpus,
    batch_starts,
    batchify,
)
from stablernn_lib.tasks.wikitext2.model import (
    WordLanguageModel,
    detach_state,
    evaluate_loss,
    project_spectral_balls_,
    project_stable_,
    rescale_authors_lstm_,
)
from stablernn_lib.tasks.wikitext2.train import CONFIGS, RESULTS_DIR, LMConfig, build_model

Constrain = Callable[[WordLanguageModel], None]
CELLS = ("rnn", "lstm")


@torch.no_grad()
def _svd_per_layer_(model: WordLanguageModel) -> None:
    """The RNN projection by one SVD per layer, where the weights live (PyTorch's kernel)."""
    for layer in range(model.projected_layers):
        weight = getattr(model.rnn, f"weight_hh_l{layer}")
        weight.copy_(project_spectral_ball(weight, 1.0))


# name -> (cell, the constraint after every step, projected layers: None = all)
STEP_VARIANTS: dict[str, tuple[str, Constrain | None, int | None]] = {
    "rnn-unconstrained": ("rnn", None, None),
    "rnn-stable": ("rnn", project_stable_, None),
    "rnn-stable-svd-on-device": ("rnn", _svd_per_layer_, None),
    "lstm-unconstrained": ("lstm", None, None),
    "lstm-authors": ("lstm", rescale_authors_lstm_, None),
    "lstm-authors-first-layer": ("lstm", rescale_authors_lstm_, 1),
    "lstm-course": ("lstm", project_stable_, None),
}
TWIN = {name: f"{cell}-unconstrained" for name, (cell, _, _) in STEP_VARIANTS.items()}
# ratio name -> (a constrained variant, its unconstrained twin)
RATIOS = {f"{v} / {TWIN[v]}": (v, TWIN[v]) for v in STEP_VARIANTS if v != TWIN[v]}
TARGET_RATIO = 1.3  # a constrained step on a GPU at most 1.3 x its unconstrained twin's
# name fragment -> (FP32 FLOP/s, TF32 tensor FLOP/s, bytes/s): vendors' datasheets, dense,
# SXM parts where there are several.
DEVICE_PEAKS: dict[str, tuple[float, float, float]] = {
    "H200": (67e12, 495e12, 4.8e12),
    "H100": (67e12, 495e12, 3.35e12),
    "A100": (19.5e12, 156e12, 2.0e12),
    "L4": (30.3e12, 120e12, 0.3e12),
    "T4": (8.1e12, 8.1e12, 0.32e12),  # no TF32: its float32 products run at FP32 rate
}


def seconds_per_call(function: Callable[[], Any], min_run_time: float) -> float:
    """The median seconds of a call of ``function`` (``Timer.blocked_autorange``)."""
    timer = Timer("f()", globals={"f": function}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def _setup(
    config: str, device: str | None, vocab: int | None = None
) -> tuple[LMConfig, torch.device, int, torch.Tensor]:
    """The LM config (``vocab`` words: default its own), the device (default: CUDA if
    present), the vocabulary and a ``(bptt + 1, batch)`` window of Zipf tokens."""
    lm = CONFIGS[config]
    where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    vocab = vocab or lm.vocab_size or WIKITEXT2_VOCAB_SIZE
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.multinomial(zipf, (lm.bptt + 1) * lm.batch_size, True, generator=generator)
    return lm, where, vocab, tokens.view(lm.bptt + 1, lm.batch_size).to(where)


def sgd_step(
    model: WordLanguageModel, lm: LMConfig, constrain: Constrain | None
) -> Callable[[torch.Tensor], float]:
    """``step(window)``: one SGD step on a ``(L + 1, batch)`` window of tokens (inputs and
    the targets one row later; the loss read on the host), then ``constrain(model)``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lm.lr)
    carried: list[Any] = [None]

    def step(window: torch.Tensor) -> float:
        optimizer.zero_grad(set_to_none=True)
        outputs, carried[0] = model.recur(model.embed(window[:-1]), detach_state(carried[0]))
        loss = model.token_nll(outputs, window[1:]).mean()
        value = loss.item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), lm.clip)
        optimizer.step()
        if constrain is not None:
            constrain(model)
        return value

    return step


def variant_seconds(
    name: str, lm: LMConfig, vocab: int, window: torch.Tensor, min_run_time: float
) -> tuple[float, WordLanguageModel]:
    """The median seconds of one :func:`sgd_step` on ``window`` of the model ``name`` of
    ``STEP_VARIANTS`` (the same initial weights for all, constrained once), and the model."""
    cell, constrain, layers = STEP_VARIANTS[name]
    model = build_model(cell, False, replace(lm, projected_layers=layers), vocab)
    model = model.to(window.device).train()
    if constrain is not None:
        constrain(model)
    step = sgd_step(model, lm, constrain)
    return seconds_per_call(lambda: step(window), min_run_time), model


def _record(
    config: str, lm: LMConfig, vocab: int, where: torch.device, min_run_time: float, **fields: Any
) -> dict[str, Any]:
    """A result: the config, its model's sizes, where it was measured, then ``fields``."""
    sizes = ("hidden_size", "num_layers", "output", "batch_size", "bptt", "adaptive_cutoffs")
    return {
        "config": config,
        "model": {key: getattr(lm, key) for key in sizes},
        "vocab_size": vocab,
        "device_type": where.type,
        "threads": torch.get_num_threads(),
        "min_run_time": min_run_time,
        "provenance": provenance(where),
        **fields,
    }


def step_ratios(
    config: str = "cpu", device: str | None = None, min_run_time: float = 1.0
) -> dict[str, Any]:
    """The step of every ``STEP_VARIANTS`` entry, the ``RATIOS`` and the solvers alone."""
    lm, where, vocab, tokens = _setup(config, device)
    load = os.getloadavg()[0]  # other work on the machine: the timings are noisier under load
    seconds = {
        name: variant_seconds(name, lm, vocab, tokens, min_run_time)[0] for name in STEP_VARIANTS
    }
    shape = (lm.num_layers, lm.hidden_size, lm.hidden_size)
    host = 1.2 * torch.randn(shape, generator=torch.Generator().manual_seed(1)) / shape[1] ** 0.5
    weights, on_device = list(host.to(where).clone()), host.to(where)
    solvers: dict[str, Callable[[], Any]] = {
        "host_eigh_float32": lambda: project_spectral_ball_by_eigh(host, 1.0, host.dtype),
        "host_eigh_float64": lambda: project_spectral_ball_by_eigh(host, 1.0),
        "host_svd_float32": lambda: project_spectral_ball(host, 1.0),
        "fast_path": lambda: project_spectral_balls_(weights),
    }
    if where.type == "cuda":
        solvers["device_svd_float32"] = lambda: project_spectral_ball(on_device, 1.0)
    return _record(
        config,
        lm,
        vocab,
        where,
        min_run_time,
        load_average_before=load,
        step_seconds=seconds,
        ratios={name: seconds[a] / seconds[b] for name, (a, b) in RATIOS.items()},
        target_ratio_on_gpu=TARGET_RATIO,
        solver_seconds={k: seconds_per_call(f, min_run_time) for k, f in solvers.items()},
    )


def overhead(
    config: str = "smoke",
    device: str | None = None,
    min_run_time: float = 1.0,
    figure2_distance: int = 8,
) -> dict[str, Any]:
    """Per cell, the stable step (``rnn-stable``, ``lstm-course``) against the unconstrained
    one, the projection alone, tokens/s and epoch times; Figure 2's two methods."""
    from stablernn_lib.tasks.wikitext2 import measurements  # matplotlib: not on the fast-step path

    lm, where, vocab, tokens = _setup(config, device)
    train_rows = (lm.train_tokens or WIKITEXT2_TOKENS["train"]) // lm.batch_size
    steps_per_epoch, per_step = len(batch_starts(train_rows, lm.bptt)), lm.bptt * lm.batch_size
    generator = torch.Generator().manual_seed(0)

    def random_batches(rows: int) -> torch.Tensor:
        tokens = torch.randint(vocab, (rows * lm.eval_batch_size,), generator=generator)
        return batchify(tokens, lm.eval_batch_size).to(where)

    models: dict[str, Any] = {}
    for cell, stable in zip(CELLS, ("rnn-stable", "lstm-course"), strict=True):
        plain, model = variant_seconds(f"{cell}-unconstrained", lm, vocab, tokens, min_run_time)
        constrained, stable_model = variant_seconds(stable, lm, vocab, tokens, min_run_time)
        alone = seconds_per_call(lambda m=stable_model: project_stable_(m), min_run_time)
        evaluation = random_batches(20 * lm.bptt)
        eval_s = seconds_per_call(
            lambda m=model, e=evaluation: evaluate_loss(m, e, lm.bptt), min_run_time
        )
        models[cell] = {
            "step_seconds_unconstrained": plain,
            "step_seconds_stable": constrained,
            "projection_seconds": alone,
            "stable_overhead": constrained / plain - 1,
            "projection_overhead": alone / plain,
            "train_tokens_per_second": per_step / plain,
            "epoch_seconds_unconstrained": steps_per_epoch * plain,
            "epoch_seconds_stable": steps_per_epoch * constrained,
            "eval_tokens_per_second": (evaluation.shape[0] - 1) * lm.eval_batch_size / eval_s,
        }
    model = build_model("lstm", False, lm, vocab).to(where).eval()
    source = random_batches(figure2_distance + 2)
    figure2: dict[str, Any] = {"max_distance": figure2_distance}
    methods = {
        "fast": measurements.gradient_by_distance,
        "naive": measurements.gradient_by_distance_naive,
    }
    profiles = {}
    for name, method in methods.items():
        run = partial(method, model, source, figure2_distance, max_windows=1)
        profiles[name], figure2[f"{name}_seconds"] = run(), seconds_per_call(run, min_run_time)
    pairs = zip(profiles["fast"]["mean_norm"], profiles["naive"]["mean_norm"], strict=True)
    figure2["pairs"] = int(sum(profiles["fast"]["count"]))
    figure2["speedup"] = figure2["naive_seconds"] / figure2["fast_seconds"]
    figure2["max_relative_difference"] = max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
    fields = {"steps_per_epoch": steps_per_epoch, "epochs": lm.epochs, "models": models}
    return _record(config, lm, vocab, where, min_run_time, **fields, figure2=figure2)


def output_layer(
    config: str = "cpu", device: str | None = None, min_run_time: float = 1.0
) -> dict[str, Any]:
    """The unconstrained step with a plain softmax over all 33,278 words against the
    adaptive softmax of the config, RNN and LSTM."""
    lm, where, vocab, tokens = _setup(config, device, WIKITEXT2_VOCAB_SIZE)
    seconds: dict[str, dict[str, float]] = {"softmax": {}, "adaptive": {}}
    for output, cells in seconds.items():
        for cell in CELLS:
            name, layer = f"{cell}-unconstrained", replace(lm, output=output)
            cells[cell], _ = variant_seconds(name, layer, vocab, tokens, min_run_time)
    speedup = {cell: seconds["softmax"][cell] / seconds["adaptive"][cell] for cell in CELLS}
    return _record(config, lm, vocab, where, min_run_time, step_seconds=seconds, speedup=speedup)


def step_floor(tokens: int, hidden: int, vocab: int, device: str, tf32: bool) -> dict[str, Any]:
    """The floor of a step on a device (see the module's text); None parts when unknown."""
    flops, moved = 6.0 * tokens * hidden * vocab, 4 * 4.0 * tokens * vocab
    floor: dict[str, Any] = {"flops": flops, "bytes": moved, "compute_ms": None, "memory_ms": None}
    peaks = next((p for key, p in DEVICE_PEAKS.items() if key in device), None)
    if peaks is not None:
        floor["compute_ms"] = 1000 * flops / (peaks[1] if tf32 else peaks[0])
        floor["memory_ms"] = 1000 * moved / peaks[2]
        floor["floor_ms"] = max(floor["compute_ms"], floor["memory_ms"])
    return floor


def fast_step(
    jobs: list[Job],
    corpus: Corpus,
    *,
    device: str,
    modes: tuple[str, ...],
    projection: str = "iterative",
    tf32: bool = False,
    steps: int = 50,
    group_mode: str | None = None,
) -> dict[str, Any]:
    """Per job: ms per step of each mode (``plain`` on the exact projection, the fast modes
    on ``projection``, in TF32 when ``tf32``), the speed-up over plain, the ratio to the
    floor, the loss of the last step; with ``group_mode``, all jobs as one group in that
    mode beside the sum of their steps alone."""
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    load, fast = os.getloadavg()[0], [mode for mode in modes if mode != "plain"]
    rows: dict[str, dict[str, Any]] = {}
    for job in jobs:
        row: dict[str, Any] = {"step_ms": {}, "last_loss": {}, "step_implementation": {}}
        for mode in modes:
            exact = "exact" if mode == "plain" else projection
            how = Training(device, mode, exact, tf32 and mode != "plain")
            row["step_ms"][mode], task = time_steps([job], corpus, how, steps)
            row["last_loss"][mode] = task.last_loss
            row["step_implementation"][mode] = task.step_description
        tokens, hidden = job.config.batch_size * job.config.bptt, job.config.hidden_size
        floor = step_floor(tokens, hidden, task.vocab_size, name, tf32)
        row.update(steps_per_epoch=task.steps_per_epoch, epochs=job.config.epochs, floor=floor)
        if "plain" in modes and fast:
            plain = row["step_ms"]["plain"]
            row["speedup_over_plain"] = {mode: plain / row["step_ms"][mode] for mode in fast}
        if floor.get("floor_ms"):
            row["ratio_to_floor"] = {m: ms / floor["floor_ms"] for m, ms in row["step_ms"].items()}
        rows[job.name] = row
    group = None
    if group_mode is not None and len(jobs) > 1:
        ms, task = time_steps(jobs, corpus, Training(device, group_mode, projection, tf32), steps)
        alone = [rows[job.name]["step_ms"].get(group_mode) for job in jobs]
        group = {
            "mode": group_mode,
            "step_implementation": task.step_description,
            "members": [job.name for job in jobs],
            "group_step_ms": ms,
            "sum_of_alone_step_ms": None if None in alone else sum(alone),
        }
    return {
        "device_name": name,
        "corpus": corpus.source,
        "modes": list(modes),
        "group": group,
        "projection": projection,
        "tf32": tf32,
        "steps": steps,
        "threads": torch.get_num_threads(),
        "load_average_before": load,
        "jobs": rows,
        "provenance": provenance(device),
    }


def format_fast_step(result: dict[str, Any]) -> str:
    """One line per job: ms per step of each mode, speed-up, ratio to the floor."""
    lines = [f"step times on {result['device_name']} (ms):"]
    for name, row in result["jobs"].items():
        parts = [", ".join(f"{mode} {ms:.2f}" for mode, ms in row["step_ms"].items())]
        for key, label in (("speedup_over_plain", "speed-up"), ("ratio_to_floor", "/ floor")):
            if key in row:
                parts.append(f"{label} " + ", ".join(f"{m} {v:.2f}x" for m, v in row[key].items()))
        lines.append(f"  {name:45s} {' '.join(parts)}")
    if group := result.get("group"):
        alone = group["sum_of_alone_step_ms"] or math.nan
        lines.append(
            f"  all {len(group['members'])} as one group ({group['mode']}): "
            f"{group['group_step_ms']:.2f} ms a step; alone, summed: {alone:.2f} ms"
        )
    return "\n".join(lines)


LR_PROBE_TRIALS = (("rnn", 20.0), ("rnn", 10.0), ("rnn", 5.0), ("lstm", 20.0), ("lstm", 5.0))


def learning_rate_probe(
    config: str = "cpu",
    steps: int = 300,
    every: int = 50,
    data_dir: str | None = None,
    output: str | None = None,
) -> dict[str, Any]:
    """Training perplexity of each block of ``every`` of the first ``steps`` SGD steps on
    WikiText-2, per (cell, lr) of ``LR_PROBE_TRIALS``: unconstrained models of the config
    (``output`` replacing its output layer)."""
    from stablernn_lib.tasks.wikitext2.train import prepare_corpus

    lm = replace(CONFIGS[config], output=output or CONFIGS[config].output)
    data = prepare_corpus(lm, None, data_dir)
    source = batchify(data.train, lm.batch_size)
    trials = []
    starts = batch_starts(source.shape[0], lm.bptt)[:steps]
    for cell, lr in LR_PROBE_TRIALS:
        trial = replace(lm, lr=lr)
        step = sgd_step(build_model(cell, False, trial, data.vocab_size).train(), trial, None)
        losses = [step(source[start : start + lm.bptt + 1]) for start in starts]
        blocks = [losses[i : i + every] for i in range(0, len(losses), every)]
        ppl = [math.exp(sum(block) / len(block)) for block in blocks]
        trials.append({"cell": cell, "lr": lr, "block_ppl": ppl})
    fields = {"steps": steps, "every": every, "output": lm.output, "trials": trials}
    return _record(config, lm, data.vocab_size, torch.device("cpu"), 0.0, **fields)


# what -> (its result file, the lines it prints)
FILES: dict[str, tuple[str, Callable[[dict[str, Any]], str] | None]] = {
    "overhead": ("benchmark-{kind}-{config}.json", reports.format_benchmark),
    "ratios": ("benchmark-{config}-{kind}-ratios.json", reports.format_step_ratios),
    "output-layer": ("benchmark-{kind}-output-layer.json", reports.format_output_layer),
    "fast-step": ("benchmark-{config}-{kind}-fast-step.json", None),
    "lr-probe": ("lr-probe-{config}{output}.json", None),
}


def _command(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name, show = FILES[args.what]
    output = f"-{args.output}" if args.output else ""
    path = Path(args.out or RESULTS_DIR) / name.format(
        kind="cpu" if device == "cpu" else "gpu", config=args.config, output=output
    )
    if args.what == "fast-step":
        jobs = make_jobs(args.variants, args.config, args.seeds)
        corpus = load_corpus(args.corpus_folder, args.data)
        common = {"device": device, "projection": args.projection, "steps": args.steps}
        result = fast_step(
            jobs, corpus, modes=tuple(args.modes), group_mode=args.group_mode, **common
        )
        show, mode = format_fast_step, args.modes[-1]
        if args.tf32_check and mode != "plain":  # its loss after the same steps in TF32
            tf32 = fast_step(jobs, corpus, modes=(mode,), tf32=True, **common)
            for job, row in tf32["jobs"].items():
                fp32, loss = result["jobs"][job]["last_loss"][mode], row["last_loss"][mode]
                row["tf32_vs_fp32"] = {"mode": mode, "loss_fp32": fp32, "loss_tf32": loss}
                row["tf32_vs_fp32"]["relative_difference"] = abs(loss - fp32) / abs(fp32)
            print(format_fast_step(tf32))
            atomic_write_json(path.parent / "tf32" / path.name, tf32)
    elif args.what == "lr-probe":
        result = learning_rate_probe(args.config, data_dir=args.data, output=args.output)
    else:
        measure = {"overhead": overhead, "ratios": step_ratios, "output-layer": output_layer}
        result = measure[args.what](args.config, device, args.min_run_time)
    if show is not None:
        print(show(result))
    print(f"written to {atomic_write_json(path, result)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """``benchmark overhead|ratios|output-layer|fast-step|lr-probe --config NAME ...``."""
    parser = subparsers.add_parser(
        "benchmark",
        help="step times and ratios of the WikiText-2 models (torch.utils.benchmark)",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("what", choices=list(FILES))
    parser.add_argument("--out", default=None, help="the results folder (data/results/wikitext2)")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--output", default=None, help="lr-probe: this output layer instead")
    add_job_arguments(
        parser, "smoke", ["rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable"]
    )
    fast = parser.add_argument_group("fast-step")
    fast.add_argument("--modes", nargs="+", default=["plain", "graph"], help="steps to time")
    fast.add_argument("--group-mode", default=None, help="also all jobs as one group, this mode")
    fast.add_argument("--steps", type=int, default=50, help="timed steps per mode")
    fast.add_argument("--tf32-check", action="store_true", help="the last fast mode in TF32 too")
    parser.set_defaults(func=_command)


if __name__ == "__main__":  # python -m stablernn_tools.benchmark WHAT ...: this command alone
    parser = argparse.ArgumentParser(prog="python -m stablernn_tools.benchmark")
    register(parser.add_subparsers())
    arguments = parser.parse_args(["benchmark", *sys.argv[1:]])
    raise SystemExit(arguments.func(arguments))
