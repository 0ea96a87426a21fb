"""Step times of the plain and the fast training step, and their distance to the device's floor.

For each model of a table (issue 38), on one device in one run: the milliseconds of a
training step with :class:`~stablernn_lib.tasks.fast_step.PlainStep` and with each fast mode,
and the floor of a step on that device::

    FLOPs  = 6 N H V             (decoder: forward, and backward to weights and inputs;
                                  N = batch x bptt tokens, H hidden units, V words)
    bytes  = 4 x 4 N V           (the float32 logits written, read by the softmax, their
                                  gradient written and read)
    floor  = max(FLOPs / peak rate, bytes / bandwidth)

with the vendor's dense peak rate (FP32, or TF32 tensor cores when ``tf32``) and memory
bandwidth (``DEVICE_PEAKS``; None for a device not listed, e.g. a CPU).  The recurrence
(35 dependent steps x layers of small products) is latency-bound and not in the floor.

``python -m stablernn_lib paper-run bench --config full --out DIR`` writes
``DIR/benchmark-<config>-<cpu|gpu>-fast-step.json``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from stablernn_lib.core.io import atomic_write_json, provenance
from stablernn_lib.tasks.fast_step import make_step

# name fragment -> (FP32 FLOP/s, TF32 tensor FLOP/s, bytes/s): vendors' datasheets, dense
# (no sparsity), SXM parts where there are several.
DEVICE_PEAKS: dict[str, tuple[float, float, float]] = {
    "H200": (67e12, 495e12, 4.8e12),
    "H100": (67e12, 495e12, 3.35e12),
    "A100": (19.5e12, 156e12, 2.0e12),
    "L4": (30.3e12, 120e12, 0.3e12),
    "T4": (8.1e12, 8.1e12, 0.32e12),  # no TF32: its float32 products run at FP32 rate
}


def device_peaks(device_name: str) -> tuple[float, float, float] | None:
    """``(FP32, TF32, bandwidth)`` of a device whose name contains a key of ``DEVICE_PEAKS``."""
    for key, peaks in DEVICE_PEAKS.items():
        if key in device_name:
            return peaks
    return None


def step_floor(
    tokens: int, hidden: int, vocab: int, device_name: str, tf32: bool
) -> dict[str, Any]:
    """The floor of a step on a device (see the module's text); None parts when unknown."""
    flops, moved = 6.0 * tokens * hidden * vocab, 4 * 4.0 * tokens * vocab
    peaks = device_peaks(device_name)
    if peaks is None:
        return {"flops": flops, "bytes": moved, "compute_ms": None, "memory_ms": None}
    rate = peaks[1] if tf32 else peaks[0]
    compute, memory = 1000 * flops / rate, 1000 * moved / peaks[2]
    return {
        "flops": flops,
        "bytes": moved,
        "compute_ms": compute,
        "memory_ms": memory,
        "floor_ms": max(compute, memory),
    }


def time_steps(
    job: Any,
    corpus: Any,
    *,
    device: str,
    step: str,
    projection: str = "iterative",
    tf32: bool = False,
    steps: int = 50,
    warmup: int = 5,
    group_with: list[Any] | None = None,
) -> tuple[float, Any]:
    """Milliseconds per training step of ``job`` (a throwaway model, ``warmup`` steps first,
    which include a graph capture), read after ``steps`` steps; returns ``(ms, task)``.
    ``group_with``: more jobs, stepped together with ``job`` as one
    :class:`~stablernn_lib.tasks.wikitext2.group.ModelGroup` (the ms of a group step)."""
    from stablernn_lib.tasks.wikitext2.group import ModelGroup
    from stablernn_lib.tasks.wikitext2.train import LanguageModelTask, prepare_corpus

    if steps < 1:
        raise ValueError(f"the number of timed steps must be >= 1, got {steps}")
    tasks = [
        LanguageModelTask(
            one.cell,
            one.stable,
            one.config,
            prepare_corpus(one.config, corpus, None),
            torch.device(device),
            projection,
        )
        for one in [job, *(group_with or [])]
    ]
    task = ModelGroup(tasks) if group_with else tasks[0]
    runner = make_step(step, tf32, sync_every=steps + warmup)
    carried, losses = None, []
    task.model.train()
    clock = time.perf_counter()
    for n in range(warmup + steps):
        if n == warmup:
            runner.values(losses)  # waits for the warm-up steps
            losses, clock = [], time.perf_counter()
        loss, _, carried = runner.run(task, n % task.steps_per_epoch, carried, job.config.clip)
        losses.append(loss)
    last = runner.values(losses)[-1]  # waits for the timed steps
    torch.backends.cuda.matmul.allow_tf32 = False  # a TF32 step must not leak into the next
    task.last_loss = last  # the loss of the last step (from the same seed: comparable)
    task.step_description = runner.description
    return 1000 * (time.perf_counter() - clock) / steps, task


def fast_step_benchmark(
    jobs: list[Any],
    corpus: Any,
    *,
    device: str,
    modes: tuple[str, ...] = ("plain", "graph"),
    projection: str = "iterative",
    tf32: bool = False,
    steps: int = 50,
    warmup: int = 5,
    group_mode: str | None = None,
) -> dict[str, Any]:
    """Per job: ms per step of each mode (``plain`` on the exact projection, the fast modes
    on ``projection``), each fast mode's speed-up over plain and its ratio to the floor, the
    loss of the last timed step.  With ``tf32`` the fast modes run with TF32 and the first
    of them once more in FP32 from the same seed on the same batches: ``tf32_vs_fp32`` is
    the relative difference of the loss after ``warmup + steps`` steps.  ``group_mode``
    (one of ``modes``): also the ms of one step of all jobs as one group in that mode,
    beside the sum of their steps alone (whether to train them together)."""
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rows = {}
    fast = [mode for mode in modes if mode != "plain"]
    for job in jobs:
        row: dict[str, Any] = {"step_ms": {}}
        for mode in modes:
            ms, task = time_steps(
                job,
                corpus,
                device=device,
                step=mode,
                projection="exact" if mode == "plain" else projection,
                tf32=tf32 and mode != "plain",
                steps=steps,
                warmup=warmup,
            )
            row["step_ms"][mode] = ms
            row.setdefault("last_loss", {})[mode] = task.last_loss
            row.setdefault("step_implementation", {})[mode] = task.step_description
        if tf32 and fast:  # the same steps in FP32: what TF32 changed in the loss
            _, fp32 = time_steps(
                job,
                corpus,
                device=device,
                step=fast[0],
                projection=projection,
                steps=steps,
                warmup=warmup,
            )
            tf32_loss = row["last_loss"][fast[0]]
            row["tf32_vs_fp32"] = {
                "mode": fast[0],
                "after_steps": warmup + steps,
                "loss_fp32": fp32.last_loss,
                "loss_tf32": tf32_loss,
                "relative_difference": abs(tf32_loss - fp32.last_loss) / abs(fp32.last_loss),
            }
        config = job.config
        row.update(steps_per_epoch=task.steps_per_epoch, epochs=config.epochs)
        floor = step_floor(
            config.batch_size * config.bptt, config.hidden_size, task.vocab_size, name, tf32
        )
        row["floor"] = floor
        plain = row["step_ms"].get("plain")
        for mode, ms in row["step_ms"].items():
            if plain is not None and mode != "plain":
                row.setdefault("speedup_over_plain", {})[mode] = plain / ms
            if floor.get("floor_ms"):
                row.setdefault("ratio_to_floor", {})[mode] = ms / floor["floor_ms"]
        rows[job.name] = row
    for job_name, row in rows.items():  # issue 38's target: a stable step <= 1.3x its twin's
        twin = rows.get(job_name.replace("-stable-", "-unconstrained-", 1))
        if "-stable-" in job_name and twin is not None:
            row["over_unconstrained"] = {
                mode: ms / twin["step_ms"][mode] for mode, ms in row["step_ms"].items()
            }
    group: dict[str, Any] | None = None
    if group_mode is not None and len(jobs) > 1:
        ms, task = time_steps(
            jobs[0],
            corpus,
            device=device,
            step=group_mode,
            projection=projection,
            tf32=tf32,
            steps=steps,
            warmup=warmup,
            group_with=jobs[1:],
        )
        alone = [rows[job.name]["step_ms"].get(group_mode) for job in jobs]
        group = {
            "mode": group_mode,
            "step_implementation": task.step_description,
            "members": [job.name for job in jobs],
            "group_step_ms": ms,
            "sum_of_alone_step_ms": sum(alone) if None not in alone else None,
        }
    return {
        "device_name": name,
        "corpus": getattr(corpus, "source", None),
        "modes": list(modes),
        "group": group,
        "projection": projection,
        "tf32": tf32,
        "steps": steps,
        "warmup": warmup,
        "threads": torch.get_num_threads(),
        "load_average_before": load_before,
        "jobs": rows,
        "provenance": provenance(device),
    }


def write_benchmark(result: dict[str, Any], folder: Any, config_name: str) -> Any:
    """Write ``benchmark-<config>-<cpu|gpu>-fast-step.json`` into ``folder``; returns the path."""
    from pathlib import Path

    kind = "cpu" if result["device_name"] == "cpu" else "gpu"
    path = Path(folder) / f"benchmark-{config_name}-{kind}-fast-step.json"
    atomic_write_json(path, result)
    return path


def format_benchmark(result: dict[str, Any]) -> str:
    """One line per job: ms per step of each mode, speed-up, ratio to the floor."""
    lines = [f"step times on {result['device_name']} (ms):"]
    for name, row in result["jobs"].items():
        times = ", ".join(f"{mode} {ms:.2f}" for mode, ms in row["step_ms"].items())
        extra = ""
        if "speedup_over_plain" in row:
            extra += " speed-up " + ", ".join(
                f"{m} {v:.2f}x" for m, v in row["speedup_over_plain"].items()
            )
        if "ratio_to_floor" in row:
            extra += " / floor " + ", ".join(
                f"{m} {v:.1f}x" for m, v in row["ratio_to_floor"].items()
            )
        lines.append(f"  {name:45s} {times}{extra}")
    group = result.get("group")
    if group:
        lines.append(
            f"  all {len(group['members'])} as one group ({group['mode']}): "
            f"{group['group_step_ms']:.2f} ms a step; alone, summed: "
            f"{group['sum_of_alone_step_ms'] or float('nan'):.2f} ms"
        )
    return "\n".join(lines)
