"""The WikiText-2 table's runs: one run folder, trained here or handed to submitit.

A job is one model (``<rnn|lstm>-<unconstrained|stable>[@config]``, a seed).  ``run`` trains
the jobs here with the fast step, one after another or as one group (``--together``), until
``--budget-s`` minus ``--reserve-s``; ``submit`` hands the same call (:class:`TableRun`) to
submitit (``local``: one detached process; ``slurm``: one GPU job per model), which requeues
it at a time limit; every call resumes.  The folder: ``plan.json``, ``results/<job>.json``,
``results/table.json``, ``runs/`` (checkpoints, ``metrics.jsonl``), ``jobs/`` (submitit's
logs).  submitit is imported only in :func:`submit`, so training here (Chapter 8's full mode
on Colab) needs only the base dependencies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import tarfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from stablernn_lib.core.io import atomic_write_json, provenance
from stablernn_lib.core.runtime import refuse_paper_scale_on_cpu
from stablernn_lib.tasks.fast_step import make_step
from stablernn_lib.tasks.training import DATA_ROOT, TrainingDivergedError
from stablernn_lib.tasks.wikitext2.data import Corpus, load_wikitext2
from stablernn_lib.tasks.wikitext2.group import ModelGroup, train_language_models_together
from stablernn_lib.tasks.wikitext2.train import CONFIGS, LMConfig, get_config

DEFAULT_RESERVE_S = 30.0  # a validation, the test evaluation and the archive at `full` on a GPU
_VARIANT = re.compile(r"^(rnn|lstm)-(stable|unconstrained)(?:@([\w.-]+))?$")
FULL_TABLE_CONFIG = "full"
FULL_TABLE_VARIANTS = (
    "rnn-unconstrained@full-rnn-lr2",
    "rnn-stable@full-rnn-lr2",
    "lstm-unconstrained",
    "lstm-stable",
)
GOOGLE_DRIVE = Path("/content/drive/MyDrive")  # where Colab mounts the reader's Drive


@dataclass(frozen=True)
class Job:
    """One model to train: cell, projection, config (its seed included)."""

    cell: str
    stable: bool
    config: LMConfig

    @property
    def name(self) -> str:
        variant = "stable" if self.stable else "unconstrained"
        return f"{self.cell}-{variant}-{self.config.name}-seed{self.config.seed}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


def make_jobs(
    variants: list[str], config: str = "full", seeds: list[int] | None = None
) -> list[Job]:
    """The jobs of ``variants`` (``lstm-unconstrained@cpu``, ...) x ``seeds`` (None: own)."""
    jobs = []
    for variant in variants:
        match = _VARIANT.match(variant)
        if match is None:
            raise ValueError(
                f"unknown variant {variant!r}; use <rnn|lstm>-<unconstrained|stable>, "
                "optionally @<config>, e.g. rnn-unconstrained@full-rnn-lr2"
            )
        cell, kind, name = match.groups()
        base = get_config(name or config)
        for seed in seeds if seeds else [base.seed]:
            jobs.append(Job(cell, kind == "stable", replace(base, seed=seed)))
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"a job is listed twice: {sorted(names)}; list each variant once")
    return jobs


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def final_result(out: Path, name: str) -> dict[str, Any] | None:
    """The result of a finished job (completed or diverged), else None."""
    result = read_json(Path(out) / "results" / f"{name}.json")
    return result if (result or {}).get("status") in ("completed", "diverged") else None


def archive_run(out: str | Path, archive: str | Path) -> Path:
    """``out``'s ``plan.json``, ``results/``, ``runs/*/metrics.jsonl`` to the .tgz ``archive``."""
    out, archive = Path(out), Path(archive)
    members = [out / "plan.json", out / "results", *sorted(out.glob("runs/*/metrics.jsonl"))]
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for member in members:
            if member.exists():
                tar.add(member, arcname=str(member.relative_to(out.parent)))
    os.replace(partial, archive)
    return archive


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text(encoding="utf8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line]


def job_record(job: Job, run_dir: Path, device: str, status: str, **fields: Any) -> dict[str, Any]:
    """The record of a job the loop gave no result (not started, or diverged)."""
    return {
        "task": "wikitext2",
        "job": job.name,
        "model": job.cell,
        "stable": job.stable,
        "status": status,
        "config": asdict(job.config),
        "seed": job.config.seed,
        "epochs": _metrics(run_dir),
        "provenance": provenance(device),
        **fields,
    }


@dataclass(frozen=True)
class Training:
    """How the jobs of a table train: device, step, projection, checkpoints."""

    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    step: str = "graph"
    projection: str = "iterative"
    tf32: bool = False
    checkpoint_every: float | None = 120.0
    progress: bool = False


def train_jobs(
    jobs: list[Job], out: Path, corpus: Corpus, how: Training, stop_at: float | None
) -> None:
    """Train ``jobs`` until their end or ``stop_at`` (monotonic) in ``runs/<job>`` or, several,
    as one group in ``runs/group-<n>-<hash>``; writes ``results/<job>.json``."""
    from stablernn_lib.tasks.wikitext2.train import train_language_model

    alone, start = len(jobs) == 1, time.monotonic()
    names = "\n".join(sorted(job.name for job in jobs)).encode()
    group = f"group-{len(jobs)}-{hashlib.sha256(names).hexdigest()[:10]}"
    run_dir = out / "runs" / (jobs[0].name if alone else group)
    loop = {
        "corpus": corpus,
        "device": how.device,
        "step": make_step(how.step, how.tf32),
        "projection": how.projection,
        "resume": True,
        "progress": how.progress,
        "checkpoint_every": how.checkpoint_every,
        "stop_at": stop_at,
    }
    try:
        if stop_at is not None and time.monotonic() >= stop_at:
            why = {"reason": "the budget ended before it started"}
            results = [job_record(j, run_dir, how.device, "unfinished", **why) for j in jobs]
        elif alone:
            job = jobs[0]
            published = {"out_dir": run_dir, "results_dir": run_dir / "published"}
            results = [train_language_model(job.cell, job.stable, job.config, **published, **loop)]
        else:
            runs = [(job.cell, job.stable, job.config) for job in jobs]
            results = train_language_models_together(runs, run_dir, **loop)
    except TrainingDivergedError as error:
        error_text = str(error)
        results = [job_record(j, run_dir, how.device, "diverged", error=error_text) for j in jobs]
    for job, result in zip(jobs, results, strict=True):
        if result["status"] == "interrupted":
            reason = "the budget (or a stop request) ended it during its training"
            result = {**result, "status": "unfinished", "reason": reason}
        if not alone:
            result["group"] = run_dir.name
        result = {**result, "job": job.name, "seconds_this_call": time.monotonic() - start}
        atomic_write_json(out / "results" / f"{job.name}.json", result)


def run_table(
    jobs: list[Job],
    out: str | Path,
    *,
    corpus: Corpus,
    budget_s: float | None = None,
    how: Training | None = None,
    reserve_s: float = DEFAULT_RESERVE_S,
    together: bool = False,
    archive: str | Path | None = None,
) -> dict[str, Any]:
    """Train the unfinished ``jobs`` in ``out`` within ``budget_s`` seconds, one after the other
    or ``together``; the summary written to ``results/table.json`` after every job."""
    if budget_s is not None and budget_s <= reserve_s:
        raise ValueError(
            f"the budget ({budget_s} s) must exceed the reserve ({reserve_s} s) kept for the "
            "validation, the test evaluation and the archive; raise --budget-s"
        )
    if not jobs:
        raise ValueError("no jobs to run; give at least one variant")
    how, out, start = how or Training(), Path(out), time.monotonic()
    stop_at = None if budget_s is None else start + budget_s - reserve_s
    planned = write_plan(out, jobs, budget_s=budget_s, **asdict(how))
    pending = [job for job in jobs if final_result(out, job.name) is None]
    grouped = together and len(pending) > 1
    if grouped:
        train_jobs(pending, out, corpus, how, stop_at)
    for job in jobs:
        if not grouped and final_result(out, job.name) is None:
            train_jobs([job], out, corpus, how, stop_at)
        rows = [_row(out, record) for record in planned]
        summary = {
            "rows": rows,
            "planned_jobs": [record["name"] for record in planned],
            "completed": sum(row["status"] == "completed" for row in rows),
            "budget_s": budget_s,
            "wall_seconds": time.monotonic() - start,
            **asdict(how),
            "provenance": provenance(how.device),
        }
        atomic_write_json(out / "results" / "table.json", summary)
        if archive is not None:
            archive_run(out, archive)
    return summary


def write_plan(out: Path, jobs: list[Job], **fields: Any) -> list[dict[str, Any]]:
    """Add ``jobs`` and ``fields`` to ``out/plan.json`` (it keeps every call's jobs); its jobs."""
    earlier = (read_json(out / "plan.json") or {"jobs": []})["jobs"]
    known = {record["name"]: record for record in [*earlier, *map(Job.to_json, jobs)]}
    plan = {"jobs": list(known.values()), **fields, "provenance": provenance(fields.get("device"))}
    atomic_write_json(out / "plan.json", plan)
    return plan["jobs"]


def _row(out: Path, record: dict[str, Any]) -> dict[str, Any]:
    """A job's row of ``results/table.json``: its status and last validation perplexity."""
    result = read_json(out / "results" / f"{record['name']}.json") or {"status": "pending"}
    keys = ("status", "test_ppl", "best_val_ppl", "mean_step_ms", "step_implementation", "error")
    row = {"job": record["name"], **{key: result[key] for key in keys if key in result}}
    epochs = result.get("epochs") or _metrics(out / "runs" / record["name"])
    if epochs and "val_ppl" in epochs[-1]:  # a group's own metrics have the members' inside
        row["val_ppl"] = epochs[-1]["val_ppl"]
    return {**row, "epochs_done": len(epochs), "epochs": record["config"]["epochs"]}


def time_steps(
    jobs: list[Job], corpus: Corpus, how: Training, steps: int = 50, warmup: int = 5
) -> tuple[float, Any]:
    """``(ms, task)``: one step of new models of ``jobs`` (one group if several) timed by
    ``torch.utils.benchmark.Timer`` after ``warmup``."""
    from torch.utils.benchmark import Timer

    from stablernn_lib.tasks.wikitext2.train import LanguageModelTask, prepare_corpus

    if steps < 1:
        raise ValueError(f"the number of timed steps must be >= 1, got {steps}")
    where = torch.device(how.device)
    data = [prepare_corpus(job.config, corpus, None) for job in jobs]
    tasks = [
        LanguageModelTask(job.cell, job.stable, job.config, one, where, how.projection)
        for job, one in zip(jobs, data, strict=True)
    ]
    task = tasks[0] if len(tasks) == 1 else ModelGroup(tasks)
    runner = make_step(how.step, how.tf32)
    state: dict[str, Any] = {"carried": None, "losses": []}

    def one_step() -> None:
        index = len(state["losses"]) % task.steps_per_epoch
        loss, _, state["carried"] = runner.run(task, index, state["carried"], jobs[0].config.clip)
        state["losses"].append(loss)

    task.model.train()
    for _ in range(warmup):
        one_step()
    timer = Timer("one_step()", globals={"one_step": one_step}, num_threads=torch.get_num_threads())
    seconds = timer.timeit(steps).mean
    task.last_loss = runner.values(state["losses"])[-1]
    task.step_description = runner.description
    torch.backends.cuda.matmul.allow_tf32 = False  # a TF32 step must not leak into the next
    return 1000 * seconds, task


def estimate_table(jobs: list[Job], corpus: Corpus, how: Training, steps: int = 50) -> str:
    """Estimated training time per job and in all: epochs x (steps x :func:`time_steps` + a
    validation pass) + the test pass, a pass taken as a third of a step per window."""
    name = torch.cuda.get_device_name() if how.device == "cuda" else "this CPU (no GPU found)"
    lines, total = [f"estimated on {name}:"], 0.0
    for job in jobs:
        step_ms, task = time_steps([job], corpus, how, steps=steps)
        eval_s = task.valid_source.shape[0] / job.config.bptt * step_ms / 3000
        epochs, per_epoch = job.config.epochs, task.steps_per_epoch
        seconds = epochs * (per_epoch * step_ms / 1000 + eval_s) + eval_s
        total += seconds
        lines.append(
            f"  {job.name:45s} {step_ms:7.2f} ms/step x {per_epoch} steps "
            f"x {epochs} epochs ~ {seconds / 60:6.1f} min"
        )
    return "\n".join([*lines, f"  the whole table ~ {total / 60:.1f} min"])


def group_pays_off(bench: dict[str, Any] | None, seconds_left: float) -> bool:
    """Whether a group's step beats the jobs' alone by 5% and its run fits in 90% of
    ``seconds_left`` (a cut group finishes no job)."""
    group = (bench or {}).get("group")
    if not group or not group.get("sum_of_alone_step_ms"):
        return False
    row = next(iter(bench["jobs"].values()))
    run_s = group["group_step_ms"] * row["steps_per_epoch"] * row["epochs"] / 1000
    faster = group["group_step_ms"] < 0.95 * group["sum_of_alone_step_ms"]
    return faster and run_s < 0.9 * seconds_left


def format_status(out: str | Path) -> str:
    """One line per job of the plan in ``out``: its state and how far it got."""
    plan = read_json(Path(out) / "plan.json")
    if plan is None:
        raise ValueError(f"{out} holds no plan.json; run or submit a table there first")
    lines = []
    for row in (_row(Path(out), record) for record in plan["jobs"]):
        ppl = [key for key in ("val_ppl", "best_val_ppl", "test_ppl") if key in row]
        detail = [f"epoch {row['epochs_done']}/{row['epochs']}"]
        detail += [f"{key.replace('_', ' ')} {row[key]:.1f}" for key in ppl]
        lines.append(f"{row['job']:45s} {row['status']:10s} {', '.join(detail)}")
    return "\n".join(lines)


@dataclass
class TableRun:
    """A picklable call of :func:`run_table` (the corpus read where it runs)."""

    jobs: list[Job]
    out: str
    corpus_folder: str | None = None
    data_dir: str | None = None
    table: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> dict[str, Any]:
        corpus = load_corpus(self.corpus_folder, self.data_dir)
        return run_table(self.jobs, self.out, corpus=corpus, **self.table)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Requeue this call at a time limit (submitit's ``Checkpointable``'s, written out)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


def submit(
    jobs: list[Job],
    out: str | Path,
    *,
    cluster: str | None = "local",
    timeout_min: int = 120,
    partition: str | None = None,
    corpus_folder: str | None = None,
    data_dir: str | None = None,
    **table: Any,
) -> list[Any]:
    """Hand the unfinished jobs of ``out`` to submitit (``cluster``: ``"local"``, ``"slurm"``,
    ``"debug"`` or None: Slurm when found); the submitit jobs."""
    import submitit  # `python -m stablernn_lib paper-run` names the extra when it is missing

    out = Path(out).resolve()
    pending = [job for job in jobs if final_result(out, job.name) is None]
    executor = submitit.AutoExecutor(folder=out / "jobs", cluster=cluster)
    write_plan(out, jobs, scheduler=f"submitit ({executor.cluster})")
    slurm = executor.cluster == "slurm"
    gpus = 1 if slurm or torch.cuda.is_available() else 0
    executor.update_parameters(name="stablernn-table", timeout_min=timeout_min, gpus_per_node=gpus)
    if slurm:  # one job a model, with a GPU (which the submitting machine may lack)
        executor.update_parameters(cpus_per_task=4, slurm_signal_delay_s=120)
        table["how"] = replace(table.get("how") or Training(), device="cuda")
    if slurm and partition is not None:
        executor.update_parameters(slurm_partition=partition)
    tables = [[job] for job in pending] if slurm else [pending]
    calls = [TableRun(part, str(out), corpus_folder, data_dir, table) for part in tables]
    return [executor.submit(call) for call in calls if call.jobs]


def default_checkpoint_dir() -> Path:
    """``stablernn-runs`` on a mounted Google Drive, else ``data/runs/wikitext2/full-table``."""
    if GOOGLE_DRIVE.is_dir():
        return GOOGLE_DRIVE / "stablernn-runs"
    return DATA_ROOT / "runs" / "wikitext2" / "full-table"


def run_full_table_on_this_gpu(
    checkpoint_dir: str | Path | None = None,
    seeds: tuple[int, ...] = (1111,),
    estimate_steps: int = 50,
) -> dict[str, Any]:
    """Train the paper-scale table on this GPU after :func:`estimate_table`, checkpointing
    every five minutes to ``checkpoint_dir`` (a later call resumes); the table summary."""
    folder = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir()
    jobs = make_jobs(list(FULL_TABLE_VARIANTS), FULL_TABLE_CONFIG, list(seeds))
    how = Training(checkpoint_every=300.0, progress=True)
    corpus = load_wikitext2(None)
    left = [job for job in jobs if final_result(folder, job.name) is None]
    print(f"{len(jobs) - len(left)} of {len(jobs)} models already finished in {folder}")
    if left:
        print(estimate_table(left, corpus, how, estimate_steps))
        print("training now; stop the cell to pause, run it again to resume", flush=True)
    return run_table(jobs, folder, corpus=corpus, how=how)


def _command(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.action == "status":
        print(format_status(out))
        return 0
    jobs = make_jobs(args.variants, args.config, args.seeds)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    full = any(job.config.name.startswith("full") for job in jobs)
    if args.action == "run" and device == "cpu" and args.device is None and full:
        refuse_paper_scale_on_cpu("the full configs train paper-size models, hours on a CPU")
    budget = args.budget_s
    together = args.together == "yes"
    if args.together == "auto":
        if args.bench_file is None:
            raise ValueError("--together auto reads the fast-step benchmark: give --bench-file")
        left = math.inf if budget is None else budget - args.reserve_s
        together = group_pays_off(read_json(Path(args.bench_file)), left)
    corpus = {"corpus_folder": args.corpus_folder and str(Path(args.corpus_folder).resolve())}
    corpus["data_dir"] = args.data
    table = {"how": Training(device, args.step, args.projection), "budget_s": budget}
    table.update(reserve_s=args.reserve_s, together=together, archive=args.archive)
    if args.action == "submit":
        where = {"cluster": args.cluster, "partition": args.partition}
        submitted = submit(jobs, out, timeout_min=args.timeout_min, **where, **corpus, **table)
        print(f"submitted {len(submitted)} job(s): {[job.job_id for job in submitted]}")
        return 0
    print(f"table: {budget} s, {'as one group' if together else 'one job after another'}")
    summary = TableRun(jobs, str(out), **corpus, table=table)()
    print(format_status(out))
    print(f"table: {summary['completed']} of {len(jobs)} completed")
    return 0


def add_job_arguments(parser: argparse.ArgumentParser, config: str, variants: list[str]) -> None:
    """The arguments naming a table's jobs, their device, projection and corpus."""
    parser.add_argument(
        "--variants", nargs="+", default=variants, help="<rnn|lstm>-<kind>[@config]"
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default=config)
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--projection", choices=["iterative", "exact"], default="iterative")
    parser.add_argument("--data", default=None, help="WikiText-2 folder ($STABLERNN_DATA)")
    parser.add_argument("--corpus-folder", default=None, help="train/valid/test.txt, unchecked")


def load_corpus(corpus_folder: str | None, data_dir: str | None) -> Corpus:
    """``corpus_folder``'s ``train/valid/test.txt`` (unchecked), else WikiText-2."""
    return Corpus.from_folder(corpus_folder) if corpus_folder else load_wikitext2(data_dir)


def register(subparsers: argparse._SubParsersAction) -> None:
    """``python -m stablernn_lib paper-run run|submit|status --out DIR ...``."""
    parser = subparsers.add_parser(
        "paper-run",
        help="train the WikiText-2 table: here within a budget, or through submitit",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("action", choices=["run", "submit", "status"])
    parser.add_argument("--out", required=True, help="the run folder")
    add_job_arguments(parser, "full", list(FULL_TABLE_VARIANTS))
    parser.add_argument("--budget-s", type=float, default=None, help="wall seconds in all")
    parser.add_argument("--reserve-s", type=float, default=DEFAULT_RESERVE_S)
    parser.add_argument("--step", choices=["plain", "eager", "graph", "compile"], default="graph")
    parser.add_argument("--together", choices=["yes", "no", "auto"], default="no")
    parser.add_argument("--bench-file", default=None, help="--together auto: its benchmark")
    parser.add_argument("--archive", default=None, help="the small files' .tgz, after each job")
    parser.add_argument("--cluster", default="local", help="submit: local, slurm or debug")
    parser.add_argument("--partition", default=None, help="submit: the Slurm partition")
    parser.add_argument("--timeout-min", type=int, default=120, help="submit: a job's limit")
    parser.set_defaults(func=_command)
