"""Paper-scale WikiText-2 runs: many models as parallel, detached, resumable processes.

One command trains a list of models on one machine (one GPU is shared by all of them)::

    python -m stablernn_lib paper-run start --out DIR --config full \\
        --variants rnn-unconstrained@full-rnn-lr2 rnn-stable lstm-unconstrained lstm-stable \\
        [--seeds 1111 2 3] [--parallel 4] [--wait]
    python -m stablernn_lib paper-run status --out DIR
    python -m stablernn_lib paper-run watch --out DIR [--for SECONDS] [--archive FILE.tgz]
    python -m stablernn_lib paper-run stop --out DIR

A variant is ``<rnn|lstm>-<unconstrained|stable>``, optionally ``@<config>`` for another
config of :data:`~stablernn_lib.tasks.wikitext2.train.CONFIGS` than ``--config`` (ablation rows are
configs).  Each (variant, seed) is one job, trained by
:func:`~stablernn_lib.tasks.wikitext2.train.train_language_model` in its own process.
``start`` returns at
once: a supervisor process, detached from the terminal (its own session), keeps at most
``--parallel`` workers running, restarts a worker that died (it resumes from its
checkpoint) up to ``--retries`` times, and exits when every job has finished.

The run folder ``DIR``:

* ``plan.json``: the jobs, each with every field of its config (a later ``start`` adds jobs
  and refuses to change one);
* ``results/<job>.json``: one small file per finished model (``completed``, with test
  perplexity, or ``diverged``, with the error and the epochs it had): the folder to copy
  off the machine;
* ``runs/<job>/``: the training folder (``checkpoint.pt`` written every
  ``--checkpoint-every`` seconds and after every epoch, ``metrics.jsonl``, ``model.pt``),
  ``progress.json`` (the step, every few seconds) and ``attempts.jsonl`` (where each
  process started);
* ``logs/``: the output of the supervisor and of every worker;
* ``supervisor.json``: the supervisor's process and, per job, its attempts and exit codes.

``watch`` prints the status every ``--every`` seconds until the jobs end or ``--for``
seconds have passed; with ``--archive`` it rewrites, after each status, a small ``.tgz`` of
the folder (:func:`archive_run`: plan, results, logs and every job's metrics so far), so
that a command cut off by a time limit still leaves what the last minute knew.

After a lost machine, ``start`` with the same arguments on what came back resumes: jobs
with a result are skipped, jobs with a checkpoint continue from it, the others start over.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from stablernn_lib.core.io import atomic_write_json, provenance, same_config
from stablernn_lib.core.runtime import refuse_paper_scale_on_cpu
from stablernn_lib.tasks.run_jobs import FINAL_STATUSES, Job, archive_run, final_result
from stablernn_lib.tasks.run_jobs import read_json as _read_json
from stablernn_lib.tasks.wikitext2.train import CONFIGS, get_config

_VARIANT = re.compile(r"^(rnn|lstm)-(stable|unconstrained)(?:@([\w.-]+))?$")
DEFAULT_VARIANTS = ("rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable")
PROGRESS_EVERY = 5.0  # seconds between two writes of progress.json


def make_jobs(
    variants: list[str], config: str = "full", seeds: list[int] | None = None
) -> list[Job]:
    """The jobs of ``variants`` (``rnn-stable``, ``lstm-unconstrained@cpu``, ...) x ``seeds``.

    ``seeds`` None: each config's own seed.  Config names pass through to ``CONFIGS``.
    """
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


# ----------------------------------------------------------------------------
# Files of the run folder
# ----------------------------------------------------------------------------


def load_plan(out: Path) -> dict[str, Any]:
    plan = _read_json(out / "plan.json")
    if plan is None:
        raise ValueError(f"{out} holds no plan.json; start a run there first (paper-run start)")
    return plan


def failures(job_state: dict[str, Any]) -> list[int]:
    """The exit codes of a job's workers that died: not 0 (done) nor 130 (stopped on request)."""
    return [code for code in job_state.get("exit_codes", []) if code not in (0, 130)]


def _process_start(pid: int) -> str | None:
    """The start time of a live (not zombie) process, from /proc (Linux); None if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _process_record(pid: int) -> dict[str, Any]:
    return {"pid": pid, "host": socket.gethostname(), "start": _process_start(pid)}


def _alive(record: dict[str, Any] | None) -> bool:
    """Whether the process of a record (pid, host, start) still runs on this machine."""
    if not record or record.get("host") != socket.gethostname():
        return False
    start = _process_start(record["pid"])
    return start is not None and start == record.get("start")


# ----------------------------------------------------------------------------
# start / stop
# ----------------------------------------------------------------------------


def start_run(
    jobs: list[Job],
    out: str | Path,
    *,
    device: str | None = None,
    parallel: int | None = None,
    threads: int | None = None,
    retries: int = 2,
    checkpoint_every: float = 300.0,
    data_dir: str | Path | None = None,
    corpus_folder: str | Path | None = None,
) -> dict[str, Any]:
    """Write (or extend) the plan in ``out`` and start the detached supervisor; returns the plan.

    ``parallel``: workers at once (default: all jobs); ``threads``: CPU threads per worker
    (default: the machine's cores shared among them).  ``corpus_folder``: train on the
    ``train/valid/test.txt`` of that folder without checking them against WikiText-2's
    sha256 (tests and offline demos); else WikiText-2 from ``data_dir`` /
    ``$STABLERNN_DATA`` / the download.
    """
    out = Path(out)
    if not jobs:
        raise ValueError("no jobs to run; give at least one variant")
    if _alive(_read_json(out / "supervisor.json")):
        raise ValueError(f"a supervisor is already running in {out}; see paper-run status")
    old = _read_json(out / "plan.json")
    known = {record["name"]: record for record in (old or {}).get("jobs", [])}
    for job in jobs:
        saved = known.get(job.name)
        if saved is not None and not same_config(saved["config"], job.config):
            raise ValueError(
                f"{out} already has a job {job.name} with another config; use another --out "
                "folder, or delete that job's files to change it"
            )
        known.setdefault(job.name, job.to_json())
    parallel = parallel or len(known)
    plan = {
        "jobs": list(known.values()),
        "device": device or ("cuda" if torch.cuda.is_available() else "cpu"),
        "parallel": parallel,
        "threads": threads or max(1, (os.cpu_count() or 1) // min(parallel, len(known))),
        "retries": retries,
        "checkpoint_every": checkpoint_every,
        "data_dir": None if data_dir is None else str(data_dir),
        "corpus_folder": None if corpus_folder is None else str(Path(corpus_folder).resolve()),
        "provenance": provenance(device),
    }
    atomic_write_json(out / "plan.json", plan)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    with open(out / "logs" / "supervisor.log", "a", encoding="utf8") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "stablernn_lib.tasks.paper_run", "supervise", str(out)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_child_env(plan["threads"]),
            start_new_session=True,  # setsid: survives the end of this command
        )
    record = _process_record(process.pid)
    atomic_write_json(out / "supervisor.json", {**record, "jobs": {}})
    return plan


def _child_env(threads: int) -> dict[str, str]:
    """The environment of a child: this library first on the path, ``threads`` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def stop_run(out: str | Path) -> int:
    """Ask the run to stop: every worker saves its checkpoint and exits.

    The signal goes to the supervisor, which passes it on to its workers; to the workers
    themselves only when no supervisor runs (a second signal would stop a worker at once,
    without its checkpoint).  Returns how many processes were signalled.
    """
    out = Path(out)
    supervisor = _read_json(out / "supervisor.json")
    records = [supervisor]
    if not _alive(supervisor):
        records = [_read_json(path) for path in sorted((out / "runs").glob("*/worker.json"))]
    signalled = 0
    for record in records:
        if _alive(record):
            os.kill(record["pid"], signal.SIGTERM)
            signalled += 1
    return signalled


# ----------------------------------------------------------------------------
# The supervisor and the workers (run as `python -m stablernn_lib.tasks.paper_run ...`)
# ----------------------------------------------------------------------------


def supervise(out: Path) -> None:
    """Keep ``parallel`` workers busy until every job has finished (or a stop is asked)."""
    plan = load_plan(out)
    state = {**_process_record(os.getpid()), "jobs": {}}
    running: dict[str, subprocess.Popen] = {}
    stopping = []

    def on_term(signum: int, frame: Any) -> None:
        stopping.append(signum)
        for process in running.values():
            process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while True:
        for name, process in list(running.items()):
            if process.poll() is not None:
                del running[name]
                state["jobs"][name]["exit_codes"].append(process.returncode)
        pending = [
            record["name"]
            for record in plan["jobs"]
            if record["name"] not in running
            and final_result(out, record["name"]) is None
            and len(failures(state["jobs"].get(record["name"], {}))) <= plan["retries"]
        ]
        while pending and not stopping and len(running) < plan["parallel"]:
            name = pending.pop(0)
            log = open(out / "logs" / f"{name}.log", "a", encoding="utf8")  # noqa: SIM115
            running[name] = subprocess.Popen(
                [sys.executable, "-m", "stablernn_lib.tasks.paper_run", "worker", str(out), name],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(plan["threads"]),
            )
            log.close()
            state["jobs"].setdefault(name, {"exit_codes": []})
        atomic_write_json(out / "supervisor.json", state)
        if not running and (stopping or not pending):
            return
        time.sleep(1.0)


def worker(out: Path, name: str) -> int:
    """Train one job to its end (resuming from its checkpoint); 0 when it has a final result."""
    from stablernn_lib.tasks.training import TrainingDivergedError
    from stablernn_lib.tasks.wikitext2.data import Corpus, batch_starts, load_wikitext2
    from stablernn_lib.tasks.wikitext2.train import prepare_corpus, train_language_model

    plan = load_plan(out)
    records = {record["name"]: record for record in plan["jobs"]}
    job = Job.from_json(records[name])
    run_dir = out / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "worker.json", _process_record(os.getpid()))
    torch.set_num_threads(plan["threads"])
    folder = plan["corpus_folder"]
    corpus = Corpus.from_folder(folder) if folder else load_wikitext2(plan["data_dir"])
    data = prepare_corpus(job.config, corpus, None)
    steps = len(batch_starts(len(data.train) // job.config.batch_size, job.config.bptt))
    _record_attempt(run_dir)
    last = [0.0]

    def on_step(step: int, model: Any) -> None:
        if time.monotonic() - last[0] >= PROGRESS_EVERY:
            last[0] = time.monotonic()
            progress = {"step": step, "steps_per_epoch": steps, "epochs": job.config.epochs}
            atomic_write_json(run_dir / "progress.json", {**progress, "time": time.time()})

    try:
        result = train_language_model(
            job.cell,
            job.stable,
            job.config,
            corpus=corpus,
            out_dir=run_dir,
            results_dir=run_dir / "published",
            resume=True,
            device=plan["device"],
            progress=False,
            on_step=on_step,
            checkpoint_every=plan["checkpoint_every"],
        )
    except TrainingDivergedError as error:
        result = {
            "task": "wikitext2",
            "model": job.cell,
            "stable": job.stable,
            "status": "diverged",
            "error": str(error),
            "config": asdict(job.config),
            "seed": job.config.seed,
            "provenance": provenance(plan["device"]),
            "epochs": _metrics(run_dir),
        }
    if result["status"] not in FINAL_STATUSES:
        print(f"{name}: {result['status']}, resumable from its checkpoint", flush=True)
        return 130
    attempts = (run_dir / "attempts.jsonl").read_text(encoding="utf8").splitlines()
    result = {**result, "job": name, "attempts": [json.loads(line) for line in attempts]}
    atomic_write_json(out / "results" / f"{name}.json", result)
    print(f"{name}: {result['status']}", flush=True)
    return 0


def _record_attempt(run_dir: Path) -> None:
    """Append where this process starts: the checkpoint's step (0 without one)."""
    checkpoint = run_dir / "checkpoint.pt"
    step = 0
    if checkpoint.exists():
        step = torch.load(checkpoint, map_location="cpu", weights_only=False)["progress"]["step"]
    entry = {"start_step": step, "host": socket.gethostname(), "time": time.time()}
    with open(run_dir / "attempts.jsonl", "a", encoding="utf8") as handle:
        handle.write(json.dumps(entry) + "\n")


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf8").splitlines() if line]


# ----------------------------------------------------------------------------
# status
# ----------------------------------------------------------------------------


def run_status(out: str | Path) -> list[dict[str, Any]]:
    """One row per job: ``state`` and how far it got.

    States: ``completed`` / ``diverged`` (a result file), ``running`` (a live worker on
    this machine), ``failed`` (its retries used up), ``stopped`` (a checkpoint, no
    worker: ``start`` resumes it), ``pending`` (nothing yet).
    """
    out = Path(out)
    plan = load_plan(out)
    supervisor = _read_json(out / "supervisor.json") or {"jobs": {}}
    rows = []
    for record in plan["jobs"]:
        name = record["name"]
        run_dir = out / "runs" / name
        epochs = record["config"]["epochs"]
        history = _metrics(run_dir)
        row: dict[str, Any] = {"job": name, "epochs": epochs, "epochs_done": len(history)}
        result = final_result(out, name)
        exits = supervisor["jobs"].get(name, {}).get("exit_codes", [])
        if result is not None:
            row["state"] = result["status"]
            history = result.get("epochs") or history
            row["epochs_done"] = len(history)
            row.update({k: result[k] for k in ("best_val_ppl", "test_ppl") if k in result})
            row["error"] = result.get("error")
        elif _alive(_read_json(run_dir / "worker.json")):
            row["state"] = "running"
            progress = _read_json(run_dir / "progress.json")
            if progress:
                row["epoch_position"] = progress["step"] / progress["steps_per_epoch"]
        elif len(failures({"exit_codes": exits})) > plan["retries"]:
            row["state"] = "failed"
        else:
            row["state"] = "stopped" if (run_dir / "checkpoint.pt").exists() else "pending"
        row["exit_codes"] = exits
        if history:
            row["last_val_ppl"] = history[-1]["val_ppl"]
            row["epoch_seconds"] = history[-1]["epoch_seconds"]
        rows.append(row)
    return rows


def format_status(out: str | Path) -> str:
    """The status of every job as readable lines, then the supervisor's."""
    out = Path(out)
    lines = []
    for row in run_status(out):
        where = f"epoch {row['epochs_done']}/{row['epochs']}"
        if "epoch_position" in row:
            where = f"epoch {row['epoch_position']:.2f}/{row['epochs']}"
        detail = []
        if "last_val_ppl" in row:
            detail.append(f"val ppl {row['last_val_ppl']:.1f}")
        if "epoch_seconds" in row:
            detail.append(f"{row['epoch_seconds']:.0f} s/epoch")
        if "test_ppl" in row:
            detail.append(f"best val {row['best_val_ppl']:.1f}, test {row['test_ppl']:.1f}")
        if row.get("error"):
            detail.append(row["error"].split(". ")[0])
        if row["state"] == "failed":
            detail.append(f"exit codes {row['exit_codes']}, see logs/{row['job']}.log")
        lines.append(f"{row['job']:40s} {row['state']:9s} {where:15s} {', '.join(detail)}")
    alive = _alive(_read_json(out / "supervisor.json"))
    lines.append(f"supervisor: {'running' if alive else 'not running'} ({out})")
    return "\n".join(lines)


def wait_for(
    out: str | Path,
    every: float = 60.0,
    timeout: float | None = None,
    archive: str | Path | None = None,
) -> bool:
    """Print the status every ``every`` seconds until the supervisor ends or ``timeout``
    seconds have passed; True if it ended.  With ``archive``, each status is followed by
    :func:`archive_run`, so a command killed at its time limit leaves the last minute's files.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        ended = not _alive(_read_json(Path(out) / "supervisor.json"))
        print(format_status(out), flush=True)
        if archive is not None:
            archive_run(out, archive)
        if ended:
            return True
        if deadline is not None and time.monotonic() + every > deadline:
            return False
        time.sleep(every)


# ----------------------------------------------------------------------------
# The whole table on the reader's GPU (Chapter 8's MODE = "full", e.g. on Colab)
# ----------------------------------------------------------------------------

FULL_TABLE_CONFIG = "full"
FULL_TABLE_VARIANTS = (
    "rnn-unconstrained@full-rnn-lr2",
    "rnn-stable@full-rnn-lr2",
    "lstm-unconstrained",
    "lstm-stable",
)
GOOGLE_DRIVE = Path("/content/drive/MyDrive")  # where Colab mounts the reader's Drive


def default_checkpoint_dir() -> Path:
    """``stablernn-runs`` on the reader's Google Drive when it is mounted (Colab), else
    ``data/runs/wikitext2/full-table`` here."""
    if GOOGLE_DRIVE.is_dir():
        return GOOGLE_DRIVE / "stablernn-runs"
    from stablernn_lib.tasks.training import DATA_ROOT

    return DATA_ROOT / "runs" / "wikitext2" / "full-table"


def run_full_table_on_this_gpu(
    checkpoint_dir: str | Path | None = None,
    seeds: tuple[int, ...] = (1111,),
    estimate_steps: int = 50,
) -> dict[str, Any]:
    """Train the WikiText-2 table at paper scale (``FULL_TABLE_VARIANTS`` of
    ``FULL_TABLE_CONFIG`` x ``seeds``) on this machine's GPU, resumably.

    First times ``estimate_steps`` steps of every model not finished yet and prints the
    estimated time of the table on this GPU
    (:func:`~stablernn_lib.tasks.table_run.estimate_table`); then trains the jobs one after
    the other with the fast step, checkpointing (after every epoch and every five minutes)
    to ``checkpoint_dir`` (default :func:`default_checkpoint_dir`: Google Drive when
    mounted, so a disconnected Colab session resumes where it stopped when this is called
    again).
    Returns the table summary (``results/table.json`` in that folder).  To stop: the
    notebook's stop button (the current step finishes and a checkpoint is written).
    """
    from stablernn_lib.tasks import table_run
    from stablernn_lib.tasks.wikitext2.data import load_wikitext2

    folder = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir()
    jobs = make_jobs(list(FULL_TABLE_VARIANTS), FULL_TABLE_CONFIG, list(seeds))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "this CPU (no GPU found)"
    corpus = load_wikitext2(None)
    left = [job for job in jobs if final_result(folder, job.name) is None]
    print(f"{len(jobs) - len(left)} of {len(jobs)} models already finished in {folder}")
    if left:
        estimate = table_run.estimate_table(
            left, corpus, device=device, estimate_steps=estimate_steps
        )
        print(table_run.format_estimate(estimate, name), flush=True)
        print("training now; stop the cell to pause, run it again to resume", flush=True)
    return table_run.run_table(
        jobs, folder, budget_s=None, corpus=corpus, device=device, checkpoint_every=300.0
    )


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------


def _command(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.action == "status":
        print(format_status(out))
        return 0
    if args.action == "watch":
        wait_for(out, args.every, timeout=args.for_seconds, archive=args.archive)
        return 0
    if args.action == "stop":
        print(f"asked {stop_run(out)} process(es) to stop; each saves its checkpoint first")
        return 0
    jobs = make_jobs(args.variants, args.config, args.seeds)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.action == "table":
        return _table_command(args, jobs, out, device)
    if args.action == "bench":
        return _bench_command(args, jobs, out, device)
    if args.action == "slurm":
        from stablernn_lib.tasks.slurm_run import submit_runs

        submitted = submit_runs(
            jobs,
            out,
            cluster=args.slurm_cluster,
            partition=args.slurm_partition,
            timeout_min=args.slurm_timeout_min,
            data_dir=args.data,
            corpus_folder=args.corpus_folder,
            step=args.step,
            projection=args.projection,
            tf32=args.tf32,
        )
        print(f"submitted {len(submitted)} job(s): {[job.job_id for job in submitted]}")
        return 0
    if (
        device == "cpu"
        and args.device is None
        and any(job.config.name.startswith("full") for job in jobs)
    ):
        refuse_paper_scale_on_cpu(
            "the full configs train paper-size models, many hours per model on a CPU"
        )
    plan = start_run(
        jobs,
        out,
        device=device,
        parallel=args.parallel,
        threads=args.threads,
        retries=args.retries,
        checkpoint_every=args.checkpoint_every,
        data_dir=args.data,
    )
    print(
        f"started {len(plan['jobs'])} job(s) in {out} on {device}, {plan['parallel']} at a "
        f"time, {plan['threads']} thread(s) each; `paper-run status --out {out}` shows them"
    )
    if args.wait or args.archive is not None:
        wait_for(out, args.every, timeout=args.for_seconds, archive=args.archive)
    return 0


def _corpus_of(args: argparse.Namespace) -> Any:
    from stablernn_lib.tasks.wikitext2.data import Corpus, load_wikitext2

    if args.corpus_folder:
        return Corpus.from_folder(args.corpus_folder)
    return load_wikitext2(args.data)


def _bench_command(args: argparse.Namespace, jobs: list[Job], out: Path, device: str) -> int:
    """``paper-run bench``: plain and fast step times of every job, written into ``--out``."""
    from stablernn_lib.tasks import fast_benchmark

    result = fast_benchmark.fast_step_benchmark(
        jobs,
        _corpus_of(args),
        device=device,
        modes=tuple(args.modes),
        projection=args.projection,
        tf32=args.tf32,
        steps=args.bench_steps,
        group_mode=args.group_mode,
    )
    print(fast_benchmark.format_benchmark(result))
    print(fast_benchmark.write_benchmark(result, out, args.config))
    return 0


def _table_command(args: argparse.Namespace, jobs: list[Job], out: Path, device: str) -> int:
    """``paper-run table``: with ``--bench``, the benchmark first (its file in
    ``--bench-out``); then the jobs inside what is left of ``--budget-s`` (one process,
    the budget counted from its start)."""
    from stablernn_lib.tasks import fast_benchmark, table_run

    start = time.monotonic()
    if args.deadline_unix is not None:  # the wall clock of the caller's budget
        args.budget_s = args.deadline_unix - time.time()
    corpus = _corpus_of(args)
    together = args.together == "yes"
    if args.bench:
        common = {"device": device, "projection": args.projection, "steps": args.bench_steps}
        bench = fast_benchmark.fast_step_benchmark(
            jobs, corpus, modes=tuple(args.bench), group_mode=args.group_mode, **common
        )
        print(fast_benchmark.format_benchmark(bench), flush=True)
        folder = Path(args.bench_out or out)
        print(fast_benchmark.write_benchmark(bench, folder, args.config), flush=True)
        fast = [mode for mode in args.bench if mode != "plain"]
        if args.tf32_check and fast:
            tf32 = fast_benchmark.fast_step_benchmark(
                jobs, corpus, modes=(fast[-1],), tf32=True, **common
            )
            print(fast_benchmark.format_benchmark(tf32), flush=True)
            fast_benchmark.write_benchmark(tf32, folder / "tf32", args.config)
        if args.together == "auto" and args.budget_s is not None:
            left = args.budget_s - (time.monotonic() - start) - args.reserve_s
            together = table_run.group_pays_off(bench, left)
    if args.estimate_steps:
        estimate = table_run.estimate_table(
            jobs,
            corpus,
            device=device,
            step=args.step,
            projection=args.projection,
            tf32=args.tf32,
            estimate_steps=args.estimate_steps,
        )
        print(table_run.format_estimate(estimate, device), flush=True)
    budget = None if args.budget_s is None else args.budget_s - (time.monotonic() - start)
    print(f"table: {budget} s, {'as one group' if together else 'one job after another'}")
    summary = table_run.run_table(
        jobs,
        out,
        budget_s=None if budget is None else max(budget, args.reserve_s + 1),
        corpus=corpus,
        device=device,
        step=args.step,
        projection=args.projection,
        tf32=args.tf32,
        archive=args.archive,
        reserve_s=args.reserve_s,
        progress=False,
        together=together,
    )
    print(format_status(out))
    print(
        f"table: {summary['completed']} of {len(jobs)} completed in {summary['wall_seconds']:.0f} s"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """``python -m stablernn_lib paper-run start|status|watch|stop|table --out DIR ...``."""
    parser = subparsers.add_parser(
        "paper-run",
        help="train many WikiText-2 models in parallel, detached and resumable",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "action", choices=["start", "status", "watch", "stop", "table", "bench", "slurm"]
    )
    parser.add_argument("--out", required=True, help="the run folder")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=list(DEFAULT_VARIANTS),
        help="<rnn|lstm>-<unconstrained|stable>[@config]",
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default="full")
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--parallel", type=int, default=None, help="workers at once (all)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per worker")
    parser.add_argument("--retries", type=int, default=2, help="restarts of a dead worker")
    parser.add_argument("--checkpoint-every", type=float, default=300.0, help="seconds")
    parser.add_argument("--data", default=None, help="WikiText-2 folder ($STABLERNN_DATA)")
    parser.add_argument("--wait", action="store_true", help="print the status until done")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between statuses")
    parser.add_argument(
        "--for",
        dest="for_seconds",
        type=float,
        default=None,
        help="watch (and start --wait): return after this many seconds even if jobs still run",
    )
    parser.add_argument(
        "--archive",
        default=None,
        help="watch: after each status, write the run's small files to this .tgz (atomically)",
    )
    table = parser.add_argument_group("table (one process, one wall budget: issue 38)")
    table.add_argument("--budget-s", type=float, default=None, help="wall seconds in all")
    table.add_argument("--reserve-s", type=float, default=30.0, help="kept for eval+archive")
    table.add_argument("--step", choices=["plain", "eager", "graph", "compile"], default="graph")
    table.add_argument("--projection", choices=["iterative", "exact"], default="iterative")
    table.add_argument("--tf32", action="store_true", help="TF32 matrix products (CUDA)")
    table.add_argument("--estimate-steps", type=int, default=0, help="time N steps first")
    table.add_argument("--corpus-folder", default=None, help="train/valid/test.txt, unchecked")
    table.add_argument("--bench-steps", type=int, default=50, help="bench: timed steps")
    table.add_argument(
        "--group-mode", default=None, help="bench: also time all jobs as one group, this step"
    )
    table.add_argument(
        "--together",
        choices=["yes", "no", "auto"],
        default="no",
        help="table: train the jobs as one model group (auto: when --bench says it pays off)",
    )
    table.add_argument(
        "--deadline-unix", type=float, default=None, help="table: --budget-s ends at this time"
    )
    table.add_argument("--bench", nargs="+", default=None, help="table: benchmark these first")
    table.add_argument("--bench-out", default=None, help="table: the benchmark's folder")
    table.add_argument("--tf32-check", action="store_true", help="table: bench TF32 vs FP32")
    table.add_argument(
        "--modes", nargs="+", default=["plain", "graph"], help="bench: the steps to time"
    )
    slurm = parser.add_argument_group("slurm (submitit, one job per run)")
    slurm.add_argument("--slurm-cluster", default=None, help="slurm, local or debug (auto)")
    slurm.add_argument("--slurm-partition", default=None)
    slurm.add_argument("--slurm-timeout-min", type=int, default=120)
    parser.set_defaults(func=_command)


def main(argv: list[str] | None = None) -> int:
    """``python -m stablernn_lib.tasks.paper_run supervise OUT`` / ``worker OUT JOB`` (internal)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "supervise":
        supervise(Path(args[1]))
        return 0
    if len(args) == 3 and args[0] == "worker":
        return worker(Path(args[1]), args[2])
    raise SystemExit("internal entry point; use `python -m stablernn_lib paper-run ...`")


if __name__ == "__main__":
    raise SystemExit(main())
