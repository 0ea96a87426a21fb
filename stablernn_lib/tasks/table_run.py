"""The WikiText-2 table inside one wall budget, in one process (issue 38): a lease's command.

::

    python -m stablernn_lib paper-run table --out DIR --budget-s 540 --config full \\
        --variants rnn-unconstrained@full-rnn-lr2 rnn-stable@full-rnn-lr2 \\
                   lstm-unconstrained lstm-stable [--seeds 1111 2 3] \\
        [--step graph|compile|eager|plain] [--projection iterative|exact] [--tf32] \\
        [--archive FILE.tgz]

trains the planned jobs one after the other with the fast step
(:mod:`~stablernn_lib.tasks.fast_step`) until ``--budget-s`` seconds minus a reserve
(for the last validation, the test evaluation and the archive) have passed.  The folder
``DIR`` is laid out as :mod:`~stablernn_lib.tasks.paper_run`'s (``plan.json``,
``results/<job>.json``, ``runs/<job>/``), so ``paper-run status`` reads it:

* a finished job: ``results/<job>.json``, ``completed`` (test and validation perplexity,
  per-epoch metrics, provenance with the device, step implementation and mean step time)
  or ``diverged``;
* the job the budget cut: ``results/<job>.json`` with ``status: "unfinished"``, its epochs
  so far and its checkpoint in ``runs/<job>/`` (the same command resumes it);
* jobs never started: ``unfinished`` records with no epochs;
* ``results/table.json``: one row per job, the budget, the table's wall time;
* with ``--archive``: after every job, one ``.tgz`` of every small file
  (:func:`~stablernn_lib.tasks.paper_run.archive_run`: no checkpoints or weights).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from stablernn_lib.core.io import atomic_write_json, provenance
from stablernn_lib.tasks.fast_step import make_step
from stablernn_lib.tasks.run_jobs import Job, archive_run, final_result
from stablernn_lib.tasks.wikitext2.data import Corpus

# Seconds kept back from the budget for what follows the last training step: that epoch's
# validation, the test evaluation and the archive (a few seconds at `full` on a GPU).
DEFAULT_RESERVE_S = 30.0


def unfinished_record(job: Job, run_dir: Path, reason: str) -> dict[str, Any]:
    """The record of a job the budget cut (or never reached): its epochs so far."""
    path = run_dir / "metrics.jsonl"
    epochs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {
        "task": "wikitext2",
        "job": job.name,
        "model": job.cell,
        "stable": job.stable,
        "status": "unfinished",
        "reason": reason,
        "config": asdict(job.config),
        "seed": job.config.seed,
        "epochs": epochs,
        "provenance": provenance(None),
    }


def run_table(
    jobs: list[Job],
    out: str | Path,
    *,
    budget_s: float | None,
    corpus: Corpus,
    device: str | None = None,
    step: str = "graph",
    projection: str = "iterative",
    tf32: bool = False,
    archive: str | Path | None = None,
    reserve_s: float = DEFAULT_RESERVE_S,
    checkpoint_every: float | None = 120.0,
    progress: bool = True,
    together: bool = False,
) -> dict[str, Any]:
    """Train ``jobs`` in turn inside ``budget_s`` seconds (None: no budget; see the module's
    text); returns the table summary also written to ``results/table.json``.  Finished
    jobs in ``out`` are skipped and a cut one resumes, so the same call continues an
    earlier one.  ``together``: the unfinished jobs are trained as one model group
    (:func:`train_group`); a group the budget cut resumes as that group when called again
    with the same jobs."""
    if budget_s is not None and budget_s <= reserve_s:
        raise ValueError(
            f"the budget ({budget_s} s) must exceed the reserve ({reserve_s} s) kept for the "
            "validation, the test evaluation and the archive; raise --budget-s"
        )
    if not jobs:
        raise ValueError("no jobs to run; give at least one variant")
    start = time.monotonic()
    deadline = math.inf if budget_s is None else start + budget_s - reserve_s
    out = Path(out)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    atomic_write_json(
        out / "plan.json",
        {
            "jobs": [job.to_json() for job in jobs],
            "device": device,
            "budget_s": budget_s,
            "step": step,
            "projection": projection,
            "tf32": tf32,
            "retries": 0,
            "provenance": provenance(device),
        },
    )
    grouped: dict[str, dict[str, Any]] = {}
    if together:
        pending = [job for job in jobs if final_result(out, job.name) is None]
        if len(pending) > 1 and time.monotonic() < deadline:
            written = train_group(
                pending,
                out,
                corpus=corpus,
                device=device,
                step=step,
                projection=projection,
                tf32=tf32,
                checkpoint_every=checkpoint_every,
                progress=progress,
                stop_at=None if budget_s is None else deadline,
            )
            grouped = {result["job"]: result for result in written}
    rows = []
    for job in jobs:
        if job.name in grouped:  # written by the group (an unfinished one resumes with it)
            result = grouped[job.name]
        elif final_result(out, job.name) is None and time.monotonic() >= deadline:
            result = unfinished_record(
                job, out / "runs" / job.name, "the budget ended before it started"
            )
            atomic_write_json(out / "results" / f"{job.name}.json", result)
        else:
            result = train_job(
                job,
                out,
                corpus=corpus,
                device=device,
                step=step,
                projection=projection,
                tf32=tf32,
                checkpoint_every=checkpoint_every,
                progress=progress,
                stop_at=None if budget_s is None else deadline,
            )
        rows.append(_row(result))
        summary = _summary(rows, jobs, budget_s, start, device, step, projection, tf32)
        atomic_write_json(out / "results" / "table.json", summary)
        if archive is not None:
            archive_run(out, archive)
    return summary


def train_job(
    job: Job,
    out: str | Path,
    *,
    corpus: Corpus,
    device: str,
    step: str = "graph",
    projection: str = "iterative",
    tf32: bool = False,
    checkpoint_every: float | None = 120.0,
    progress: bool = True,
    stop_at: float | None = None,
) -> dict[str, Any]:
    """Train one job of the folder ``out`` to its end or to ``stop_at`` (a
    ``time.monotonic()`` deadline), resuming from its checkpoint; write and return its
    ``results/<job>.json`` (``completed``, ``diverged`` or ``unfinished``).  A job with a
    final result is not trained again: its result is returned."""
    from stablernn_lib.tasks.training import TrainingDivergedError
    from stablernn_lib.tasks.wikitext2.train import train_language_model

    out = Path(out)
    finished = final_result(out, job.name)
    if finished is not None:
        return finished
    run_dir, job_start = out / "runs" / job.name, time.monotonic()
    try:
        result = train_language_model(
            job.cell,
            job.stable,
            job.config,
            corpus=corpus,
            out_dir=run_dir,
            results_dir=run_dir / "published",
            resume=True,
            device=device,
            progress=progress,
            checkpoint_every=checkpoint_every,
            step=make_step(step, tf32),
            projection=projection,
            stop_at=stop_at,
        )
    except TrainingDivergedError as error:
        result = {**unfinished_record(job, run_dir, ""), "status": "diverged"}
        result.update(error=str(error), provenance=provenance(device))
        del result["reason"]
    if result["status"] == "interrupted":
        reason = "the budget (or a stop request) ended it during its training"
        result = {
            **unfinished_record(job, run_dir, reason),
            "provenance": result["provenance"],
            "mean_step_ms": result["mean_step_ms"],
            "step_implementation": result["step_implementation"],
        }
    result = {**result, "job": job.name, "seconds_this_call": time.monotonic() - job_start}
    atomic_write_json(out / "results" / f"{job.name}.json", result)
    return result


def group_folder(jobs: list[Job]) -> str:
    """The run folder of a group: its members' names, hashed (the same set, the same folder)."""
    digest = hashlib.sha256("\n".join(sorted(job.name for job in jobs)).encode()).hexdigest()
    return f"group-{len(jobs)}-{digest[:10]}"


def train_group(
    jobs: list[Job],
    out: str | Path,
    *,
    corpus: Corpus,
    device: str,
    step: str = "graph",
    projection: str = "iterative",
    tf32: bool = False,
    checkpoint_every: float | None = 120.0,
    progress: bool = True,
    stop_at: float | None = None,
) -> list[dict[str, Any]]:
    """Train ``jobs`` as one :class:`~stablernn_lib.tasks.wikitext2.group.ModelGroup` in
    ``out/runs/group-...`` (resuming its checkpoint) and write each member's
    ``results/<job>.json``: ``completed``, ``unfinished`` (cut by ``stop_at``: the group's
    checkpoint resumes all of them together) or ``diverged`` (one member diverged: the group
    stopped; the error says at which step, not which member)."""
    from stablernn_lib.tasks.training import TrainingDivergedError
    from stablernn_lib.tasks.wikitext2.group import train_language_models_together

    out = Path(out)
    run_dir = out / "runs" / group_folder(jobs)
    start = time.monotonic()
    try:
        results = train_language_models_together(
            [(job.cell, job.stable, job.config) for job in jobs],
            run_dir,
            corpus=corpus,
            device=device,
            step=make_step(step, tf32),
            projection=projection,
            resume=True,
            progress=progress,
            checkpoint_every=checkpoint_every,
            stop_at=stop_at,
        )
    except TrainingDivergedError as error:
        results = [
            {**unfinished_record(job, run_dir, ""), "status": "diverged", "error": str(error)}
            for job in jobs
        ]
    written = []
    for job, result in zip(jobs, results, strict=True):
        if result["status"] == "interrupted":
            reason = "the budget (or a stop request) ended its group's training"
            result = {**result, "status": "unfinished", "reason": reason}
        result = {**result, "job": job.name, "group": run_dir.name}
        result["seconds_this_call"] = time.monotonic() - start
        if result["status"] != "unfinished":
            result.pop("reason", None)
        atomic_write_json(out / "results" / f"{job.name}.json", result)
        written.append(result)
    return written


def _row(result: dict[str, Any]) -> dict[str, Any]:
    keys = ("job", "status", "test_ppl", "best_val_ppl", "mean_step_ms", "step_implementation")
    row = {key: result[key] for key in keys if key in result}
    row["epochs_done"] = len(result.get("epochs") or [])
    row["epochs"] = result["config"]["epochs"]
    return row


def _summary(
    rows: list[dict[str, Any]],
    jobs: list[Job],
    budget_s: float | None,
    start: float,
    device: str,
    step: str,
    projection: str,
    tf32: bool,
) -> dict[str, Any]:
    return {
        "rows": rows,
        "planned_jobs": [job.name for job in jobs],
        "completed": sum(row["status"] == "completed" for row in rows),
        "budget_s": budget_s,
        "wall_seconds": time.monotonic() - start,
        "step": step,
        "projection": projection,
        "tf32": tf32,
        "provenance": provenance(device),
    }


def group_pays_off(bench: dict[str, Any], seconds_left: float) -> bool:
    """Whether to train a benchmark's jobs as one group: its step is faster than the jobs'
    steps alone, summed (by 5%), and its whole run (every epoch's steps) fits in 90% of
    ``seconds_left``, so that the group finishes (a cut group finishes no job at all)."""
    group = bench.get("group")
    if not group or not group.get("sum_of_alone_step_ms"):
        return False
    row = next(iter(bench["jobs"].values()))
    run_s = group["group_step_ms"] * row["steps_per_epoch"] * row["epochs"] / 1000
    return group["group_step_ms"] < 0.95 * group["sum_of_alone_step_ms"] and (
        run_s < 0.9 * seconds_left
    )


def estimate_table(
    jobs: list[Job],
    corpus: Corpus,
    *,
    device: str,
    step: str = "graph",
    projection: str = "iterative",
    tf32: bool = False,
    estimate_steps: int = 50,
    warmup: int = 5,
) -> dict[str, Any]:
    """Time ``estimate_steps`` steps of each job on a throwaway copy of its model (after
    ``warmup`` steps, which include a graph capture) and extrapolate the whole table.

    Per job: ``step_ms``, ``steps_per_epoch`` and ``seconds`` = epochs x (steps x step time
    + a validation pass), the validation pass taken as a third of a step per window of
    validation data (a forward pass only); plus the test evaluation once.  An estimate,
    not a measurement of the table.
    """
    from stablernn_lib.tasks.fast_benchmark import time_steps

    rows = {}
    for job in jobs:
        step_ms, task = time_steps(
            job,
            corpus,
            device=device,
            step=step,
            projection=projection,
            tf32=tf32,
            steps=estimate_steps,
            warmup=warmup,
        )
        step_s = step_ms / 1000
        windows = task.valid_source.shape[0] / job.config.bptt
        eval_s = windows * step_s / 3
        epochs = job.config.epochs
        seconds = epochs * (task.steps_per_epoch * step_s + eval_s) + eval_s
        rows[job.name] = {
            "step_ms": 1000 * step_s,
            "steps_per_epoch": task.steps_per_epoch,
            "epochs": epochs,
            "seconds": seconds,
        }
        del task
    return {"jobs": rows, "seconds": sum(row["seconds"] for row in rows.values())}


def format_estimate(estimate: dict[str, Any], device_name: str) -> str:
    """The estimate as lines a reader can act on (per job, then the table)."""
    lines = [f"estimated on {device_name}:"]
    for name, row in estimate["jobs"].items():
        lines.append(
            f"  {name:45s} {row['step_ms']:7.2f} ms/step x {row['steps_per_epoch']} steps "
            f"x {row['epochs']} epochs ~ {row['seconds'] / 60:6.1f} min"
        )
    lines.append(f"  the whole table ~ {estimate['seconds'] / 60:.1f} min")
    return "\n".join(lines)
