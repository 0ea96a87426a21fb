"""Measured cost of the states of a vanilla RNN on ``T`` steps: ``sequential`` (``model.run``,
``T`` dependent steps), ``parallel`` (the truncated model, ``k`` steps on all windows at once),
``per_window`` (one window at a time, ``T k`` steps) and ``fused`` (``torch.nn.RNN``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from stablernn_lib.core.models import random_vanilla_rnn
from stablernn_lib.core.style import BOUND_COLOR, FULL_COLOR, TRUNCATED_COLOR, apply_style, finish
from stablernn_lib.core.tables import text_table
from stablernn_lib.core.truncation import truncated_states, truncated_states_reference

FUSED_COLOR = "#2e7d32"
METHOD_COLORS = {
    "sequential": FULL_COLOR,
    "parallel": TRUNCATED_COLOR,
    "per_window": BOUND_COLOR,
    "fused": FUSED_COLOR,
}


def best_time(function: Callable[[], object], repeats: int, device: torch.device) -> float:
    """The fastest of ``repeats`` timed calls, in seconds (after one warm-up call)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    function()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


@torch.no_grad()
def time_truncated_evaluation(
    lengths: Sequence[int],
    k: int,
    *,
    hidden_size: int = 64,
    batch: int = 8,
    device: str | torch.device = "cpu",
    repeats: int = 3,
    per_window_max_length: int = 256,
    seed: int = 0,
) -> list[dict]:
    """Rows ``device, T, k``, ``<method>_s``, their ratios and ``max_difference`` (parallel
    against per-window) of a random tanh RNN (``lambda = 0.9``, float32) per ``T`` of
    ``lengths``; the per-window loop only up to ``per_window_max_length``."""
    device = torch.device(device)
    if any(length < 1 for length in lengths) or k < 1:
        raise ValueError("every length T and the context k must be positive integers")
    generator = torch.Generator().manual_seed(seed)
    model = random_vanilla_rnn(8, hidden_size, 0.9, generator=generator, dtype=torch.float32)
    model = model.to(device)
    fused = model.to_torch()
    rows = []
    for length in tqdm(list(lengths), desc=f"timing on {device.type}", leave=False):
        inputs = torch.randn(length, batch, 8, generator=generator).to(device)
        row = {"device": device.type, "T": length, "k": k}
        row["sequential_s"] = best_time(lambda x=inputs: model.run(x), repeats, device)
        row["parallel_s"] = best_time(
            lambda x=inputs: truncated_states(model, x, k), repeats, device
        )
        row["fused_s"] = best_time(lambda x=inputs: fused(x), repeats, device)
        row["per_window_s"] = None
        row["max_difference"] = None
        if length <= per_window_max_length:
            row["per_window_s"] = best_time(
                lambda x=inputs: truncated_states_reference(model, x, k), 2, device
            )
            difference = truncated_states(model, inputs, k) - truncated_states_reference(
                model, inputs, k
            )
            row["max_difference"] = float(difference.abs().max())
        row["sequential_over_parallel"] = row["sequential_s"] / row["parallel_s"]
        row["sequential_over_fused"] = row["sequential_s"] / row["fused_s"]
        row["per_window_over_parallel"] = (
            None if row["per_window_s"] is None else row["per_window_s"] / row["parallel_s"]
        )
        rows.append(row)
    return rows


def timings_table(rows: Sequence[dict]) -> str:
    """Markdown table of :func:`time_truncated_evaluation` rows (times in ms, then ratios)."""
    cells = []
    for row in rows:
        window = "–" if row["per_window_s"] is None else f"{row['per_window_s'] * 1e3:.2f}"
        ratio = row["per_window_over_parallel"]
        window_ratio = "–" if ratio is None else f"{ratio:.1f}"
        cells.append(
            f"{row['device']} | {row['T']:,} | {row['k']} | {row['sequential_s'] * 1e3:.2f} "
            f"| {row['parallel_s'] * 1e3:.2f} | {window} | {row['fused_s'] * 1e3:.2f} "
            f"| {row['sequential_over_parallel']:.1f} | {window_ratio} "
            f"| {row['sequential_over_fused']:.1f}"
        )
    columns = "device | T | k | sequential, ms | parallel, ms | per-window, ms | fused, ms"
    return text_table(f"{columns} | seq/par | win/par | seq/fused", cells, right=range(1, 10))


def timing_figure(rows: Sequence[dict]) -> Figure:
    """Time versus ``T`` (log-log) for each method and device."""
    apply_style()
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
    devices = sorted({row["device"] for row in rows})
    styles = dict(zip(devices, ("-", "--"), strict=False))
    for device in devices:
        subset = [row for row in rows if row["device"] == device]
        for method, color in METHOD_COLORS.items():
            points = [
                (row["T"], row[f"{method}_s"]) for row in subset if row[f"{method}_s"] is not None
            ]
            if points:
                lengths, seconds = zip(*points, strict=True)
                ax.loglog(
                    lengths,
                    seconds,
                    styles[device],
                    marker="o",
                    ms=4,
                    color=color,
                    label=f"{method.replace('_', '-')} ({device})",
                )
    k = rows[0]["k"] if rows else "?"
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("seconds (best of repeats)")
    ax.set_title(f"evaluating all states, context k = {k}")
    ax.legend()
    fig.tight_layout()
    return finish(fig)


def summarize_timings(rows: Sequence[dict]) -> str:
    """Markdown, one paragraph per device: the longest sequence timed and the measured ratios."""
    paragraphs = []
    for device in sorted({row["device"] for row in rows}):
        longest = max((row for row in rows if row["device"] == device), key=lambda r: r["T"])
        ratio = longest["sequential_over_parallel"]
        faster = f"{ratio:.1f} times faster" if ratio >= 1 else f"{1 / ratio:.1f} times slower"
        text = (
            f"**{device}.** At T = {longest['T']:,} and k = {longest['k']}, the parallel "
            f"truncated evaluation took {longest['parallel_s'] * 1e3:.2f} ms against "
            f"{longest['sequential_s'] * 1e3:.2f} ms for the sequential run ({faster}). "
            f"PyTorch's fused `nn.RNN` took {longest['fused_s'] * 1e3:.2f} ms, so our "
            f"step-by-step map costs {longest['sequential_over_fused']:.1f} times the fused kernel."
        )
        timed = [row for row in rows if row["device"] == device and row["per_window_s"]]
        if timed:
            last = max(timed, key=lambda r: r["T"])
            text += (
                f" The per-window loop at T = {last['T']:,} took "
                f"{last['per_window_over_parallel']:.0f} times as long as the parallel version."
            )
        paragraphs.append(text)
    return "\n\n".join(paragraphs)
