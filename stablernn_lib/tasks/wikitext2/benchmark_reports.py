"""The committed benchmark files of WikiText-2 as the lines and tables Chapter 8 shows.

The files are written by ``python -m stablernn_tools benchmark`` (``overhead``: per cell the
stable and unconstrained step, tokens/s, Figure 2's speed-up; ``output-layer``; ``ratios``).
"""

from __future__ import annotations

from typing import Any

from stablernn_lib.core.io import readable_device


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
    """Markdown table: per benchmark and model, unconstrained / stable training time, an
    epoch = steps per epoch x median step time (an extrapolation, evaluation excluded)."""
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


def format_step_ratios(result: dict[str, Any]) -> str:
    """The step times and ratios as readable lines."""
    lines = [
        f"training-step ratios ({result['config']} config) on "
        f"{readable_device(result['provenance']['device'])}, "
        f"load average {result['load_average_before']:.1f} before"
    ]
    for name, seconds in result["step_seconds"].items():
        lines.append(f"  {name:26s} {1000 * seconds:8.2f} ms a step")
    for name, ratio in result["ratios"].items():
        lines.append(f"  {name:46s} {ratio:5.2f}x")
    solver = ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in result["solver_seconds"].items())
    lines.append(f"  projection of the stacked recurrent matrices alone: {solver}")
    return "\n".join(lines)
