"""The table's runs on a Slurm cluster with ``submitit``: one job per run, resumable.

::

    pip install "stablernn_lib[slurm]"    # submitit
    python -m stablernn_lib paper-run slurm --out DIR --config full \\
        --variants rnn-unconstrained@full-rnn-lr2 rnn-stable@full-rnn-lr2 \\
                   lstm-unconstrained lstm-stable --seeds 1111 2 3 \\
        [--slurm-partition gpu] [--slurm-timeout-min 120] [--data WIKITEXT2_FOLDER]

writes ``DIR/plan.json`` and submits one Slurm job per (variant, seed), each asking for one
GPU.  A job trains its run with :func:`~stablernn_lib.tasks.table_run.train_job` (the fast
step, checkpoints every two minutes in ``DIR/runs/<job>/``) and writes
``DIR/results/<job>.json``, the folder layout of ``paper-run`` (``paper-run status --out
DIR`` reads it).  When Slurm preempts a job or its time limit comes, submitit calls
:meth:`RunJob.checkpoint`, which requeues the same job: it resumes from its last
checkpoint (at most two minutes of training are done again).
Submitting again skips the runs that have a final result.  ``DIR`` must be on a file
system that every node sees.  ``--slurm-cluster local`` runs the jobs as local processes
(submitit's local executor; how the tests run it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from stablernn_lib.core.io import atomic_write_json, provenance
from stablernn_lib.tasks.run_jobs import Job, final_result


def _submitit() -> Any:
    try:
        import submitit
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "paper-run slurm needs submitit: pip install 'stablernn_lib[slurm]' "
            "(or pip install submitit)"
        ) from error
    return submitit


@dataclass
class RunJob:
    """What one Slurm job runs: one run of the plan in ``out`` (a picklable callable)."""

    record: dict[str, Any]
    out: str
    data_dir: str | None = None
    corpus_folder: str | None = None
    step: str = "graph"
    projection: str = "iterative"
    tf32: bool = False

    def __call__(self) -> dict[str, Any]:
        from stablernn_lib.tasks.table_run import train_job
        from stablernn_lib.tasks.wikitext2.data import Corpus, load_wikitext2

        corpus = (
            Corpus.from_folder(self.corpus_folder)
            if self.corpus_folder
            else load_wikitext2(self.data_dir)
        )
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return train_job(
            Job.from_json(self.record),
            self.out,
            corpus=corpus,
            device=device,
            step=self.step,
            projection=self.projection,
            tf32=self.tf32,
            progress=False,
        )

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit at preemption or timeout: requeue this job (it resumes from
        the last checkpoint of its run folder)."""
        return _submitit().helpers.DelayedSubmission(self)


def submit_runs(
    jobs: list[Job],
    out: str | Path,
    *,
    cluster: str | None = None,
    partition: str | None = None,
    timeout_min: int = 120,
    gpus_per_node: int = 1,
    cpus_per_task: int = 4,
    data_dir: str | Path | None = None,
    corpus_folder: str | Path | None = None,
    step: str = "graph",
    projection: str = "iterative",
    tf32: bool = False,
) -> list[Any]:
    """Submit one job per run of ``jobs`` that has no final result in ``out``; returns the
    submitit jobs.  ``cluster``: None (Slurm when found), ``"slurm"``, ``"local"`` or
    ``"debug"`` (submitit's names); the job logs go to ``out/slurm/``."""
    submitit = _submitit()
    out = Path(out).resolve()
    if not jobs:
        raise ValueError("no jobs to submit; give at least one variant")
    atomic_write_json(
        out / "plan.json",
        {
            "jobs": [job.to_json() for job in jobs],
            "device": "cuda",
            "scheduler": "slurm (submitit)",
            "retries": 0,
            "provenance": provenance(None),
        },
    )
    executor = submitit.AutoExecutor(folder=out / "slurm", cluster=cluster)
    parameters: dict[str, Any] = {"timeout_min": timeout_min, "cpus_per_task": cpus_per_task}
    if executor.cluster == "slurm":
        parameters.update(gpus_per_node=gpus_per_node, slurm_signal_delay_s=120)
        if partition is not None:
            parameters["slurm_partition"] = partition
    executor.update_parameters(name="stablernn-table", **parameters)
    submitted = []
    for job in jobs:
        if final_result(out, job.name) is not None:
            continue
        run = RunJob(
            job.to_json(),
            str(out),
            None if data_dir is None else str(data_dir),
            None if corpus_folder is None else str(Path(corpus_folder).resolve()),
            step,
            projection,
            tf32,
        )
        submitted.append(executor.submit(run))
    return submitted
