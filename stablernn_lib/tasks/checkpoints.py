"""A training run's folder: ``checkpoint.pt`` (weights, optimizer, extra state, progress,
random state; atomic), ``metrics.jsonl``, then ``model.pt`` and ``result.json``.

A resumed run computes exactly what the uninterrupted one does; Ctrl-C and SIGTERM stop after
the current step (twice: at once).  ``stop_below_lr`` ends a run whose lr fell below it: the
skipped epochs could have moved the weights by at most ``epochs_left * steps_per_epoch * lr *
clip`` (recorded), a clipped, projected SGD step moving them by at most ``lr * clip``.
"""

from __future__ import annotations

import copy
import json
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from stablernn_lib.core.io import (
    atomic_torch_save,
    atomic_write_text,
    git_commit,
    provenance,
    same_config,
)


def new_progress() -> dict[str, Any]:
    """The progress of a run that has not started (it is saved in every checkpoint)."""
    return {
        "epoch": 0,
        "order": None,
        "next": 0,
        "carried_state": None,
        "epoch_sum": 0.0,
        "epoch_count": 0,
        "epoch_seconds": 0.0,
        "step": 0,
        "best_val_loss": float("inf"),
        "best_epoch": 0,
        "best_model_state": None,
        "val_losses": [],
        "history": [],
        "wall_seconds": 0.0,
        "trained_at_commits": [],
    }


# The progress entries a new epoch starts afresh.
_EPOCH_ENTRIES = ("order", "next", "carried_state", "epoch_sum", "epoch_count", "epoch_seconds")

# Older names of progress entries, read from the checkpoints that used them.
_RENAMED = {
    "next_batch": "next",
    "next_index": "next",
    "epoch_loss_sum": "epoch_sum",
    "epoch_nll_sum": "epoch_sum",
    "epoch_tokens": "epoch_count",
    "epoch_steps": "epoch_count",
}


def kept_checkpoint(checkpoint_path: Path) -> str:
    """A sentence saying which checkpoint a stopped run left behind."""
    if not checkpoint_path.exists():
        return "No epoch had finished, so there is no checkpoint."
    saved = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
    epoch = saved["progress"]["epoch"]
    return f"The last good checkpoint {checkpoint_path} (after epoch {epoch}) was kept."


def check_fresh_start(out: Path, resume: bool) -> Path:
    """The checkpoint path of the run folder ``out``; refuses to overwrite one unless resuming."""
    checkpoint_path = out / "checkpoint.pt"
    if checkpoint_path.exists() and not resume:
        raise ValueError(
            f"{checkpoint_path} already exists; pass resume=True (--resume) to continue "
            "that run, or choose another out_dir (--out) / delete the folder to start over"
        )
    return checkpoint_path


def finished_result(path: Path, identity: dict[str, Any], config: Any) -> dict[str, Any] | None:
    """The completed result at ``path`` of this very run (same identity and config), else None."""
    if not path.is_file():
        return None
    result = json.loads(path.read_text(encoding="utf8"))
    same_run = all(result.get(key) == value for key, value in identity.items())
    if result.get("status") != "completed" or not same_run:
        return None
    return result if same_config(result.get("config", {}), config) else None


def finished_or_fresh(
    out: Path, name: str, identity: dict[str, Any], config: Any, resume: bool, progress: bool
) -> dict[str, Any] | None:
    """Refuse a used folder unless resuming; resuming, this very run's completed result or None."""
    check_fresh_start(out, resume)
    finished = finished_result(out / "result.json", identity, config) if resume else None
    if finished is not None and progress:
        print(f"{name}: already completed, skipped ({out})")
    return finished


def run_provenance(state: dict[str, Any], device: torch.device | str | None) -> dict[str, Any]:
    """:func:`~stablernn_lib.core.io.provenance` now, plus ``trained_at_commits``."""
    return {**provenance(device), "trained_at_commits": list(state["trained_at_commits"])}


def save_best_model(task: Any, state: dict[str, Any], path: Path, **saved: Any) -> None:
    """Load the best weights into ``task.model``; save them, config and identity to ``path``."""
    task.model.load_state_dict(state["best_model_state"])
    atomic_torch_save(
        {
            "config": asdict(task.config),
            **task.identity,
            **saved,
            "state_dict": state["best_model_state"],
        },
        path,
    )


def load_best_model(run_dir: str | Path, command: str) -> dict[str, Any]:
    """What :func:`save_best_model` saved in ``run_dir``; ``command`` trains such a run."""
    path = Path(run_dir) / "model.pt"
    if not path.is_file():
        raise ValueError(
            f"{path} does not exist; train the model first (python -m stablernn_lib {command} "
            "...) and let it finish"
        )
    return torch.load(path, map_location="cpu", weights_only=False)


def moved(state: Any, device: torch.device) -> Any:
    """A carried state (None, a tensor or a tuple of states) on ``device``, detached."""
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.detach().to(device)
    return tuple(moved(part, device) for part in state)


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RunFolder:
    """The checkpoint, log and stop requests of ``task``'s run in ``out`` (a context manager
    for the signal handlers); ``state`` is the progress."""

    def __init__(
        self,
        task: Any,
        out: Path,
        resume: bool,
        checkpoint_every: float | None = None,
        stop_at: float | None = None,
    ) -> None:
        self.task, self.out, self.path = task, out, out / "checkpoint.pt"
        self.checkpoint_every, self.stop_at = checkpoint_every, stop_at
        self.stop_requested = False
        self.state = self._resumed() if resume and self.path.exists() else new_progress()
        commit = git_commit()
        if self.state["trained_at_commits"][-1:] != [commit]:
            self.state["trained_at_commits"] = [*self.state["trained_at_commits"], commit]
        out.mkdir(parents=True, exist_ok=True)
        self.log = out / "metrics.jsonl"
        atomic_write_text(self.log, "".join(json.dumps(m) + "\n" for m in self.state["history"]))
        self._previous: dict[int, Any] | None = None
        self._session_start = self._last_save = self._epoch_clock = time.perf_counter()

    def _resumed(self) -> dict[str, Any]:
        """Load the checkpoint of this run into the task; its progress."""
        task = self.task
        saved = torch.load(self.path, map_location="cpu", weights_only=False)
        same_run = all(saved.get(key) == value for key, value in task.identity.items())
        if not (same_run and same_config(saved["config"], task.config)):
            who = ", ".join(f"{key}={saved.get(key)}" for key in task.identity)
            raise ValueError(
                f"{self.path} was written by another run ({who}, config "
                f"{saved['config']['name']}); resume it with the same arguments, or choose "
                "another out_dir"
            )
        task.model.load_state_dict(saved["model_state"])
        task.optimizer.load_state_dict(saved["optimizer_state"])
        task.load_extra_state(saved)
        if "rng" in saved:
            _set_rng_state(saved["rng"])
        renamed = {_RENAMED.get(key, key): value for key, value in saved["progress"].items()}
        return {**new_progress(), **renamed}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.stop_requested:
            raise KeyboardInterrupt
        self.stop_requested = True
        print("\nstopping after this step (checkpoint follows); Ctrl-C again to stop now")

    def __enter__(self) -> RunFolder:
        if threading.current_thread() is threading.main_thread():
            self._previous = {
                sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
            }
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def lr_below(self, stop_below_lr: float | None, lr: float, progress: bool) -> bool:
        """Whether ``lr < stop_below_lr`` ends the run (after epoch 1); records the bound."""
        state = self.state
        if stop_below_lr is None or lr >= stop_below_lr or state["epoch"] == 0:
            return False
        left = self.task.config.epochs - state["epoch"]
        state["stopped_early"] = {
            "after_epoch": state["epoch"],
            "lr": lr,
            "stop_below_lr": stop_below_lr,
            "max_weight_change": left * self.task.steps_per_epoch * lr * self.task.config.clip,
        }
        if progress:
            print(f"{self.task.name}: lr {lr:g} < {stop_below_lr:g}, stopped", flush=True)
        return True

    def start_epoch(self, device: torch.device) -> Any:
        """Start the epoch's clock and order; the carried state on ``device``."""
        if self.state["order"] is None:
            self.state["order"] = self.task.epoch_order()
        self._epoch_clock = time.perf_counter() - self.state["epoch_seconds"]
        return moved(self.state["carried_state"], device)

    def epoch_seconds(self) -> float:
        return time.perf_counter() - self._epoch_clock

    def should_save(self) -> bool:
        """Whether to checkpoint now: a stop request, the deadline, or ``checkpoint_every``."""
        if self.stop_at is not None and time.monotonic() >= self.stop_at:
            self.stop_requested = True
        every = self.checkpoint_every
        due = every is not None and time.perf_counter() - self._last_save >= every
        return self.stop_requested or due

    def save_mid_epoch(self, next_position: int, carried: Any) -> None:
        """Checkpoint the exact state before step ``next_position`` of the epoch."""
        self.state.update(
            next=next_position,
            carried_state=moved(carried, torch.device("cpu")),
            epoch_seconds=self.epoch_seconds(),
        )
        self._save()

    def keep_best(self, epoch: int, val_loss: float) -> None:
        """The current weights (on the host) as the best so far."""
        self.state["best_val_loss"], self.state["best_epoch"] = val_loss, epoch
        weights = self.task.model.state_dict().items()
        self.state["best_model_state"] = copy.deepcopy({k: v.cpu() for k, v in weights})

    def end_epoch(self, epoch: int, val_loss: float, metrics: dict[str, Any]) -> None:
        """Record a finished epoch: progress, checkpoint, a line of ``metrics.jsonl``."""
        self.state["val_losses"].append(val_loss)
        self.state["history"].append(metrics)
        fresh = new_progress()
        self.state.update({key: fresh[key] for key in _EPOCH_ENTRIES}, epoch=epoch)
        self._save()
        with open(self.log, "a", encoding="utf8") as log:
            log.write(json.dumps(metrics) + "\n")

    def _save(self) -> None:
        task, state = self.task, self.state
        now = time.perf_counter()
        state["wall_seconds"] += now - self._session_start
        self._session_start = self._last_save = now
        atomic_torch_save(
            {
                "config": asdict(task.config),
                **task.identity,
                **task.extra_state(),
                "model_state": task.model.state_dict(),
                "optimizer_state": task.optimizer.state_dict(),
                "progress": state,
                "rng": _rng_state(),
            },
            self.path,
        )
