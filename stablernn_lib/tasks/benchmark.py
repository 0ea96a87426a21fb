"""Timings of Chapter 8, measured in one run and printed as ratios.

* projection overhead: a stable training step (SGD step + projection) against
  an unconstrained one, for the RNN and the LSTM (targets: <= 10% on a GPU,
  <= 25% on the CPU smoke config); reported both as the ratio of the two
  median step times and as the median time of the projection alone over the
  median unconstrained step (less noisy when steps take milliseconds);
* Figure 2: the batched gradient profile against the per-pair method;
* tokens per second of training and of evaluation, per model, on this device,
  and what they imply: the time of one epoch of the config's training data
  (steps per epoch times the median step) and of the config's ``epochs``.

The models have the sizes of the chosen LM config and read random tokens,
Zipf-distributed like word frequencies (the cost of an adaptive softmax depends
on how many targets are rare words; the rest does not depend on the text).
Stable and unconstrained steps alternate, so that a machine busy with other
work slows both alike; each figure is the
median over the timed repetitions (the order of the pair alternates too).

``python -m stablernn_lib benchmark --config smoke|cpu|full``; a cpu or full run
writes ``data/results/wikitext2/benchmark-<cpu|gpu>-<config>.json``.

``--ratios`` instead times the step of every constrained model against its unconstrained
one, side by side (:mod:`stablernn_lib.tasks.step_ratios`,
``benchmark-<config>-<cpu|gpu>-ratios.json``).

``--output-layer`` instead times one training step of the config's models with a
plain softmax over the vocabulary against an adaptive softmax
(:func:`output_layer_benchmark`, ``benchmark-<cpu|gpu>-output-layer.json``): the
measurement behind the ``cpu`` config's output layer.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from stablernn_lib.core.io import atomic_write_json, provenance, readable_device
from stablernn_lib.tasks.timing import benchmark_setup, constrained_step, timer, zipf_tokens
from stablernn_lib.tasks.wikitext2.analysis import gradient_by_distance, gradient_by_distance_naive
from stablernn_lib.tasks.wikitext2.data import (
    WIKITEXT2_TOKENS,
    WIKITEXT2_VOCAB_SIZE,
    batch_starts,
    batchify,
    get_batch,
)
from stablernn_lib.tasks.wikitext2.model import (
    WordLanguageModel,
    detach_state,
    evaluate_loss,
    project_stable_,
)
from stablernn_lib.tasks.wikitext2.train import (
    CONFIGS,
    RESULTS_DIR,
    build_model,
    prepare_corpus,
)


def _training_step(model: WordLanguageModel, tokens: torch.Tensor, clip: float, lr: float):
    """One SGD step of :func:`~stablernn_lib.tasks.wikitext2.train.train_language_model`,
    as a closure."""
    return constrained_step(model, tokens, clip, lr, project_stable_ if model.stable else None)


def run_benchmark(
    config: str = "smoke",
    device: str | torch.device | None = None,
    repeats: int = 30,
    warmup: int = 2,
    figure2_distance: int = 8,
    progress: bool = True,
) -> dict[str, Any]:
    """Measure everything listed in the module docstring; returns a JSON-ready dict."""
    lm, device, now, vocab = benchmark_setup(config, device)
    train_tokens = lm.train_tokens or WIKITEXT2_TOKENS["train"]
    steps_per_epoch = len(batch_starts(train_tokens // lm.batch_size, lm.bptt))
    generator = torch.Generator().manual_seed(0)
    tokens = zipf_tokens(vocab, (lm.bptt + 1, lm.batch_size), generator).to(device)
    result: dict[str, Any] = {
        "config": config,
        "device_type": device.type,
        "vocab_size": vocab,
        "batch_size": lm.batch_size,
        "bptt": lm.bptt,
        "steps_per_epoch": steps_per_epoch,
        "epochs": lm.epochs,
        "repeats": repeats,
        "provenance": provenance(device),
        "models": {},
    }
    for cell in ("rnn", "lstm"):
        models = {s: build_model(cell, s, lm, vocab).to(device).train() for s in (False, True)}
        steps = {s: _training_step(models[s], tokens, lm.clip, lm.lr) for s in (False, True)}
        times: dict[bool, list[float]] = {False: [], True: []}
        projection: list[float] = []
        repetitions = tqdm(
            range(warmup + repeats),
            desc=f"timing {cell} training steps ({config} config, {device.type})",
            disable=not progress,
            leave=False,
        )
        for repeat in repetitions:
            for stable in (False, True) if repeat % 2 == 0 else (True, False):
                start = now()
                steps[stable]()
                elapsed = now() - start
                if repeat >= warmup:
                    times[stable].append(elapsed)
            start = now()
            project_stable_(models[True])
            if repeat >= warmup:
                projection.append(now() - start)
        plain, stable = statistics.median(times[False]), statistics.median(times[True])
        eval_source = batchify(
            torch.randint(vocab, (lm.eval_batch_size * 20 * lm.bptt,), generator=generator),
            lm.eval_batch_size,
        ).to(device)
        evaluate_loss(models[False], eval_source, lm.bptt)  # warm-up
        start = now()
        evaluate_loss(models[False], eval_source, lm.bptt)
        eval_seconds = now() - start
        tokens_per_step = lm.bptt * lm.batch_size
        result["models"][cell] = {
            "step_seconds_unconstrained": plain,
            "step_seconds_stable": stable,
            "projection_seconds": statistics.median(projection),
            "stable_overhead": stable / plain - 1,
            "projection_overhead": statistics.median(projection) / plain,
            "train_tokens_per_second": tokens_per_step / plain,
            "train_tokens_per_second_stable": tokens_per_step / stable,
            "epoch_seconds_unconstrained": steps_per_epoch * plain,
            "epoch_seconds_stable": steps_per_epoch * stable,
            "eval_tokens_per_second": (eval_source.shape[0] - 1)
            * lm.eval_batch_size
            / eval_seconds,
        }
    result["figure2"] = _figure2_speed(lm, vocab, device, figure2_distance, generator)
    return result


def _figure2_speed(
    lm, vocab: int, device: torch.device, distance: int, generator
) -> dict[str, Any]:
    """Seconds of the batched and the per-pair gradient profile on one window of the test batch."""
    now = timer(device)
    model = build_model("lstm", False, lm, vocab).to(device).eval()
    source = batchify(
        torch.randint(vocab, ((distance + 2) * lm.eval_batch_size,), generator=generator),
        lm.eval_batch_size,
    ).to(device)
    gradient_by_distance(model, source, distance, max_windows=1)  # warm-up
    start = now()
    fast = gradient_by_distance(model, source, distance, max_windows=1)
    fast_seconds = now() - start
    start = now()
    naive = gradient_by_distance_naive(model, source, distance, max_windows=1)
    naive_seconds = now() - start
    agree = max(
        abs(a - b) / max(abs(b), 1e-12)
        for a, b in zip(fast["mean_norm"], naive["mean_norm"], strict=True)
    )
    return {
        "max_distance": distance,
        "pairs": int(sum(fast["count"])),
        "fast_seconds": fast_seconds,
        "naive_seconds": naive_seconds,
        "speedup": naive_seconds / fast_seconds,
        "max_relative_difference": agree,
    }


def output_layer_benchmark(
    config: str = "cpu",
    device: str | torch.device | None = None,
    repeats: int = 20,
    warmup: int = 2,
    progress: bool = True,
) -> dict[str, Any]:
    """Median training-step time, plain softmax vs adaptive softmax, RNN and LSTM.

    The models have the sizes of the LM config (unconstrained, full vocabulary of
    33,278 words) and read Zipf-distributed tokens (``p(rank r) ~ 1/r``, like word
    frequencies: the adaptive softmax's cost depends on how many targets fall in its
    tail clusters).  The two output layers alternate, so that load slows both alike.
    """
    lm = CONFIGS[config]
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    now = timer(device)
    vocab = WIKITEXT2_VOCAB_SIZE
    generator = torch.Generator().manual_seed(0)
    tokens = zipf_tokens(vocab, (lm.bptt + 1, lm.batch_size), generator).to(device)
    outputs = {"softmax": {}, "adaptive": {}}
    result: dict[str, Any] = {
        "config": config,
        "device_type": device.type,
        "vocab_size": vocab,
        "hidden_size": lm.hidden_size,
        "num_layers": lm.num_layers,
        "batch_size": lm.batch_size,
        "bptt": lm.bptt,
        "adaptive_cutoffs": list(lm.adaptive_cutoffs),
        "adaptive_div_value": lm.adaptive_div_value,
        "targets": "Zipf-distributed token ids, p(rank r) proportional to 1/r",
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "provenance": provenance(device),
        "step_seconds": outputs,
    }
    for cell in ("rnn", "lstm"):
        steps = {}
        for output in outputs:
            variant = replace(lm, output=output)
            model = build_model(cell, False, variant, vocab).to(device).train()
            steps[output] = _training_step(model, tokens, lm.clip, lm.lr)
        times: dict[str, list[float]] = {name: [] for name in outputs}
        for repeat in tqdm(
            range(warmup + repeats),
            desc=f"timing {cell} softmax vs adaptive ({config} sizes, {device.type})",
            disable=not progress,
            leave=False,
        ):
            for name in ("softmax", "adaptive") if repeat % 2 == 0 else ("adaptive", "softmax"):
                start = now()
                steps[name]()
                if repeat >= warmup:
                    times[name].append(now() - start)
        for name in outputs:
            outputs[name][cell] = statistics.median(times[name])
        result.setdefault("speedup", {})[cell] = (
            outputs["softmax"][cell] / outputs["adaptive"][cell]
        )
    return result


LR_PROBE_TRIALS: tuple[tuple[str, float], ...] = (
    ("rnn", 20.0),
    ("rnn", 10.0),
    ("rnn", 5.0),
    ("lstm", 20.0),
    ("lstm", 5.0),
)


def learning_rate_probe(
    config: str = "cpu",
    trials: tuple[tuple[str, float], ...] = LR_PROBE_TRIALS,
    steps: int = 300,
    every: int = 50,
    data_dir: str | Path | None = None,
    progress: bool = True,
    output: str | None = None,
) -> dict[str, Any]:
    """Training perplexity over the first ``steps`` SGD steps on WikiText-2, per (cell, lr).

    Unconstrained models of the config (its sizes, output layer unless ``output`` is
    given, clip, batches), the first ``steps`` windows of the real training split; the
    perplexity of each block of ``every`` steps (exp of the mean loss).  The measurement
    behind the config's lr.
    """
    lm = CONFIGS[config]
    lm = replace(lm, output=output or lm.output)
    data = prepare_corpus(lm, None, data_dir)
    source = batchify(data.train, lm.batch_size)
    starts = batch_starts(source.shape[0], lm.bptt)[:steps]
    result: dict[str, Any] = {
        "config": config,
        "steps": steps,
        "every": every,
        "output": lm.output,
        "threads": torch.get_num_threads(),
        "provenance": provenance(torch.device("cpu")),
        "trials": [],
    }
    for cell, lr in trials:
        model = build_model(cell, False, replace(lm, lr=lr), data.vocab_size).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        state, losses = None, []
        for start in tqdm(starts, desc=f"{cell} lr {lr:g}", disable=not progress, leave=False):
            tokens, targets = get_batch(source, start, lm.bptt)
            outputs, state = model.recur(model.embed(tokens), detach_state(state))
            loss = model.token_nll(outputs, targets).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), lm.clip)
            optimizer.step()
            losses.append(loss.item())
        blocks = [losses[i : i + every] for i in range(0, len(losses), every)]
        result["trials"].append(
            {"cell": cell, "lr": lr, "block_ppl": [math.exp(sum(b) / len(b)) for b in blocks]}
        )
    return result


def format_output_layer(result: dict[str, Any]) -> str:
    """The output-layer benchmark in a few lines."""
    lines = [
        f"output layer ({result['config']} sizes, V = {result['vocab_size']:,}) "
        f"on {readable_device(result['provenance']['device'])}"
    ]
    for cell in ("rnn", "lstm"):
        softmax = result["step_seconds"]["softmax"][cell]
        adaptive = result["step_seconds"]["adaptive"][cell]
        lines.append(
            f"  {cell:4s}: softmax {1000 * softmax:.0f} ms, adaptive {1000 * adaptive:.0f} ms "
            f"a step -> {result['speedup'][cell]:.1f}x"
        )
    return "\n".join(lines)


def format_benchmark(result: dict[str, Any]) -> str:
    """The ratios and rates as a few readable lines (at most ~80 characters each)."""
    device = readable_device(result["provenance"]["device"])
    lines = [f"benchmark ({result['config']} config) on {device}"]
    for cell, m in result["models"].items():
        lines += [
            f"  {cell:4s}: step {1000 * m['step_seconds_unconstrained']:.1f} ms, "
            f"stable {1000 * m['step_seconds_stable']:.1f} ms "
            f"-> overhead {100 * m['stable_overhead']:+.1f}%",
            f"        projection alone {1000 * m['projection_seconds']:.2f} ms "
            f"= {100 * m['projection_overhead']:.1f}% of a step",
            f"        train {m['train_tokens_per_second']:,.0f} tok/s, "
            f"eval {m['eval_tokens_per_second']:,.0f} tok/s",
        ]
    f2 = result["figure2"]
    lines += [
        f"  Figure 2 ({f2['pairs']} pairs, distance <= {f2['max_distance']}): "
        f"batched {f2['fast_seconds']:.3f} s, per pair {f2['naive_seconds']:.3f} s",
        f"        -> {f2['speedup']:.0f}x faster "
        f"(max relative difference {f2['max_relative_difference']:.1e})",
    ]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _milliseconds(seconds: float) -> str:
    return f"{1000 * seconds:.1f}" if seconds < 0.1 else f"{1000 * seconds:.0f}"


def training_time_table(benchmarks: dict[str, dict[str, Any]]) -> str:
    """Markdown table: per benchmark and model, the training time its step times imply.

    Each cell gives unconstrained / stable.  Epoch time = steps per epoch x
    median step time (evaluation excluded): an extrapolation from measured
    steps, not the time of a run.
    """
    lines = [
        "| config | measured on | model | one step | steps per epoch | one epoch | all epochs |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for result in benchmarks.values():
        epochs, device = result["epochs"], readable_device(result["provenance"]["device"])
        for cell in ("rnn", "lstm"):
            m = result["models"][cell]
            plain, stable = m["epoch_seconds_unconstrained"], m["epoch_seconds_stable"]
            lines.append(
                f"| {result['config']} | {device} | {cell.upper()} "
                f"| {_milliseconds(m['step_seconds_unconstrained'])} / "
                f"{_milliseconds(m['step_seconds_stable'])} ms | {result['steps_per_epoch']:,} "
                f"| {_duration(plain)} / {_duration(stable)} "
                f"| {epochs} x: {_duration(epochs * plain)} / {_duration(epochs * stable)} |"
            )
    return "\n".join(lines)


def result_path(result: dict[str, Any], results_dir: Path = RESULTS_DIR) -> Path:
    """``<results_dir>/benchmark-<cpu|gpu>-<config>.json`` for a benchmark result."""
    kind = "cpu" if result["device_type"] == "cpu" else "gpu"
    return results_dir / f"benchmark-{kind}-{result['config']}.json"


def _command(args: argparse.Namespace) -> int:
    if args.lr_probe:
        result = learning_rate_probe(args.config)
        for trial in result["trials"]:
            blocks = ", ".join(f"{ppl:.3g}" for ppl in trial["block_ppl"])
            print(f"  {trial['cell']:4s} lr {trial['lr']:4g}, ppl by block: {blocks}")
        path = Path(args.out) if args.out else RESULTS_DIR / f"lr-probe-{args.config}.json"
        atomic_write_json(path, result)
        print(f"written to {path}")
        return 0
    if args.ratios:
        from stablernn_lib.tasks.step_ratios import (
            format_step_ratios,
            ratios_path,
            step_ratio_benchmark,
        )

        result = step_ratio_benchmark(args.config, args.device, repeats=args.repeats)
        print(format_step_ratios(result))
        path = atomic_write_json(Path(args.out) if args.out else ratios_path(result), result)
        print(f"written to {path}")
        return 0
    if args.output_layer:
        result = output_layer_benchmark(args.config, args.device, repeats=args.repeats)
        print(format_output_layer(result))
        kind = "cpu" if result["device_type"] == "cpu" else "gpu"
        path = Path(args.out) if args.out else RESULTS_DIR / f"benchmark-{kind}-output-layer.json"
        atomic_write_json(path, result)
        print(f"written to {path}")
        return 0
    result = run_benchmark(args.config, args.device, repeats=args.repeats)
    print(format_benchmark(result))
    if args.out is not None or args.config in ("cpu", "full"):
        path = Path(args.out) if args.out else result_path(result)
        atomic_write_json(path, result)
        print(f"written to {path}")
    else:
        print(json.dumps({c: m["stable_overhead"] for c, m in result["models"].items()}))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """``python -m stablernn_lib benchmark --config smoke|full``."""
    parser = subparsers.add_parser(
        "benchmark",
        help="projection overhead, Figure-2 speed-up, tokens/s (WikiText-2 models)",
        description="Timings of Chapter 8 measured in one run.",
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default="smoke")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--out", default=None, help="JSON file for the result")
    parser.add_argument(
        "--output-layer",
        action="store_true",
        help="time plain vs adaptive softmax at the config's sizes instead",
    )
    parser.add_argument(
        "--ratios",
        action="store_true",
        help="instead, step time of each constrained model over its unconstrained one",
    )
    parser.add_argument(
        "--lr-probe",
        action="store_true",
        help="instead, training perplexity of the first 300 steps on WikiText-2 per lr",
    )
    parser.set_defaults(func=_command)
