"""The jobs of a paper-scale run and the files of its run folder, shared by the runners.

A job is one model to train (cell, projection, config with its seed).  A run folder holds
``plan.json``, ``results/<job>.json`` (one small file per finished job), ``runs/<job>/``
(its training folder) and ``logs/``; :mod:`~stablernn_lib.tasks.paper_run` (detached
processes), :mod:`~stablernn_lib.tasks.table_run` (one process, one budget) and
:mod:`~stablernn_lib.tasks.slurm_run` (Slurm jobs) all write this layout.
"""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from stablernn_lib.tasks.wikitext2.train import LMConfig

FINAL_STATUSES = ("completed", "diverged")


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
        config = asdict(self.config)
        return {"name": self.name, "cell": self.cell, "stable": self.stable, "config": config}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Job:
        config = LMConfig(**record["config"])
        config = replace(config, adaptive_cutoffs=tuple(config.adaptive_cutoffs))
        return cls(record["cell"], record["stable"], config)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def final_result(out: Path, name: str) -> dict[str, Any] | None:
    """The result of a finished job (completed or diverged), else None."""
    result = read_json(out / "results" / f"{name}.json")
    return result if result is not None and result.get("status") in FINAL_STATUSES else None


def archive_run(out: str | Path, archive: str | Path) -> Path:
    """Write the small files of a run folder to the gzipped tar ``archive``, atomically.

    Members: ``plan.json``, ``supervisor.json``, ``results/``, ``logs/`` and every job's
    ``runs/<job>/metrics.jsonl`` (an unfinished job's epochs so far), each under the run
    folder's name; never the checkpoints and weights (about 110 MB a model at `full`).
    """
    out, archive = Path(out), Path(archive)
    members = [out / "plan.json", out / "supervisor.json", out / "results", out / "logs"]
    members += sorted((out / "runs").glob("*/metrics.jsonl"))
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for member in members:
            if member.exists():
                tar.add(member, arcname=str(member.relative_to(out.parent)))
    os.replace(partial, archive)
    return archive
