"""Atomic writes (a temporary file renamed into place), provenance, and saved configs."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch


def _atomic_replace(path: Path, write: Any, mode: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; results are for everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return _atomic_replace(Path(path), lambda handle: handle.write(text), "w")


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to ``path`` atomically (a checkpoint is never half-written)."""
    return _atomic_replace(Path(path), lambda handle: torch.save(obj, handle), "wb")


def _git(*args: str, cwd: Path) -> str:
    """The stripped output of ``git args`` in ``cwd`` (OSError, CalledProcessError on failure)."""
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def git_commit(cwd: str | Path | None = None) -> str:
    """The current git commit (with ``-dirty`` when the tree has changes), or "unknown"."""
    where = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    try:
        commit = _git("rev-parse", "HEAD", cwd=where)
        dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=where)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def criteria_commit(cwd: str | Path | None = None) -> str:
    """The last commit of ``data/results/criteria.json`` (the rules a result is judged by);
    "unknown" outside a git checkout, "uncommitted" when the file has uncommitted changes."""
    where = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    path = "data/results/criteria.json"
    try:
        top = Path(_git("rev-parse", "--show-toplevel", cwd=where))
        commit = _git("log", "-1", "--format=%H", "--", path, cwd=top)
        changed = _git("status", "--porcelain", "--", path, cwd=top)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if changed or not commit:
        return "uncommitted"
    return commit


def device_name(device: torch.device | str | None = None) -> str:
    """A readable name of the device that ran the computation."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    unit = "thread" if threads == 1 else "threads"
    return f"cpu ({platform.processor() or platform.machine()}, {threads} {unit})"


def readable_device(device: str) -> str:
    """A provenance device string as shown: ``"cpu (x86_64, 1 threads)"`` (as some committed
    records spell it) reads ``"cpu (x86_64, 1 thread)"``; any other string is unchanged."""
    return device.replace(", 1 threads)", ", 1 thread)")


def provenance(device: torch.device | str | None = None) -> dict[str, str]:
    """Where a result came from: git commit, device, versions and time (UTC)."""
    return {
        "git_commit": git_commit(),
        "criteria_commit": criteria_commit(),
        "device": device_name(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def describe_provenance(record: dict[str, str]) -> str:
    """One line saying where a result came from (the dict written by :func:`provenance`)."""
    return (
        f"computed on {record['device']} at git commit {record['git_commit'][:12]}, "
        f"{record['created_utc']} (torch {record['torch']}, Python {record['python']})"
    )


def same_config(saved: dict[str, Any], config: Any) -> bool:
    """Whether a config saved in a checkpoint or result file is the dataclass ``config``: fields
    missing from the file take their defaults, tuples equal JSON's lists, and a field the
    class does not have means another config."""
    kind = type(config)
    if not set(saved) <= {field.name for field in dataclasses.fields(kind)}:
        return False
    as_json = json.loads(json.dumps(dataclasses.asdict(kind(**saved))))
    return as_json == json.loads(json.dumps(dataclasses.asdict(config)))
