"""The one training loop of the course; a task plugs in its data, model and metric.

Every task (WikiText-2, JSB Chorales) trains the same way:

* epochs of optimizer steps (SGD or Adam) over the steps of :meth:`Task.epoch_order`;
  each step's gradient has its global norm clipped to ``clip``, and
  :meth:`Task.project` runs after every step (a stable variant projects onto its set);
* a step whose loss per token is not finite or exceeds ``diverge_above`` stops the run
  with :class:`TrainingDivergedError`, leaving the last good checkpoint in place;
* after every epoch the validation loss; the model with the best one is kept, the
  learning rate is divided by ``lr_decay`` when :meth:`Task.should_decay` says so;
* checkpoints are written atomically after every epoch, every ``checkpoint_every``
  seconds mid-epoch, and on Ctrl-C or SIGTERM (the current step finishes, the exact state
  is saved, a second Ctrl-C stops at once).  ``resume=True`` restores weights, optimizer,
  best model, position in the epoch, carried state and random-number state, so a resumed
  run ends with the same numbers as an uninterrupted one (bit for bit on a CPU);
* a tqdm bar within the epoch, one line per epoch, ``metrics.jsonl`` in the run folder.

The task builds its result dictionary (with :func:`run_provenance`)
from the progress :func:`train` returns, and :func:`save_best_model` writes ``model.pt``.
"""

from __future__ import annotations

import copy
import json
import math
import re
import signal
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from stablernn_lib.core.io import (
    atomic_torch_save,
    atomic_write_text,
    git_commit,
    provenance,
    same_config,
)
from stablernn_lib.tasks.fast_step import FastStep, PlainStep, diverged

_CHECKOUT = Path(__file__).resolve().parents[2]
# In a checkout of the course, data/ of the repository; for an installed
# library (e.g. on Colab), data/ of the working directory.
DATA_ROOT = (_CHECKOUT if (_CHECKOUT / "pyproject.toml").exists() else Path.cwd()) / "data"


# A run with another seed than its config's is config ``<name>-seed<N>`` (both tasks).
ConfigT = TypeVar("ConfigT")
SEED_SUFFIX = re.compile(r"^(?P<base>.+)-seed(?P<seed>\d+)$")


def named_config(
    config: str | ConfigT, configs: dict[str, ConfigT], kind: type[ConfigT]
) -> ConfigT:
    """``config`` when it is a ``kind`` already, else the config named ``config`` in ``configs``."""
    if isinstance(config, kind):
        return config
    if config not in configs:
        raise ValueError(f"unknown config {config!r}; use one of {sorted(configs)}")
    return configs[config]


def with_seed(config: Any, seed: int) -> Any:
    """A config dataclass (with ``name`` and ``seed``) for another seed, named
    ``<name>-seed<seed>``; the config itself for its own seed."""
    if seed == config.seed:
        return config
    return replace(config, seed=seed, name=f"{config.name}-seed{seed}")


def planned_seeds(own: int, needed: int, first_extra: int) -> tuple[int, ...]:
    """The seeds a comparison is planned with: a config's ``own`` seed, then ``needed - 1``
    more counted up from ``first_extra`` (WikiText-2: 1111, 2, 3; JSB: the config's, 1-4)."""
    return (own, *range(first_extra, first_extra + needed - 1))


def split_seed(name: str) -> tuple[str, int | None]:
    """``(base, N)`` for a config name ``<base>-seed<N>``, else ``(name, None)``."""
    match = SEED_SUFFIX.match(name)
    return (match["base"], int(match["seed"])) if match else (name, None)


def published_config(
    name: str, configs: dict[str, ConfigT], published: Collection[str]
) -> ConfigT | None:
    """The config a (possibly seeded, ``<base>-seed<N>``) name stands for when its base is
    one of the ``published`` configs (:func:`with_seed` of ``configs[base]``), else None."""
    base, seed = split_seed(name)
    if base not in published:
        return None
    return configs[base] if seed is None else with_seed(configs[base], seed)


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN/inf or exploded."""


class StopRequest:
    """Turns the first Ctrl-C (or a SIGTERM) into a request to stop after the current step."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nstopping after this step (checkpoint follows); Ctrl-C again to stop now")

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {
                sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
            }
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)


@dataclass(frozen=True)
class EpochStats:
    """What the loop measured in epoch ``epoch``: the mean training loss per token,
    the validation loss, the learning rate it ran at, its seconds and its tokens."""

    epoch: int
    train_loss: float
    val_loss: float
    lr: float
    seconds: float
    tokens: int


class Task:
    """One run of a task: its model, optimizer, data and metric (a subclass fills them in).

    Attributes set by the subclass: ``name`` (the run's name), ``config`` (a dataclass with
    ``epochs``, ``clip``, ``lr_decay``), ``identity`` (what makes two runs the same run,
    e.g. ``{"model": "lstm", "stable": True}``; saved in checkpoints and results),
    ``model``, ``optimizer``, ``diverge_above`` (the largest loss per token a step may
    have), ``loss_name`` (how messages name that loss), ``steps_per_epoch``.
    """

    name: str
    config: Any
    identity: dict[str, Any]
    model: nn.Module
    optimizer: torch.optim.Optimizer
    diverge_above: float
    loss_name: str = "loss"
    steps_per_epoch: int

    def epoch_order(self) -> list[int]:
        """The steps of a new epoch, in order (an index each, given to :meth:`loss`)."""
        return list(range(self.steps_per_epoch))

    def loss(self, index: int, carried: Any) -> tuple[Tensor, float, float, int, Any]:
        """Step ``index``: ``(loss to differentiate, loss per token, summed loss, tokens,
        state carried to the next step)``; ``carried`` is None at the start of an epoch."""
        raise NotImplementedError

    def project(self) -> None:
        """Called after every optimizer step (a stable variant projects here)."""

    def step_value(self, loss: Tensor) -> Tensor:
        """What a fast step reads of a step's loss (a device tensor; a copy, since a captured
        graph overwrites its output): the loss per token, or a group's largest."""
        return loss.detach().clone()

    def clip_gradients(self, clip: float) -> None:
        """Clip the gradient's global norm to ``clip`` (a group of models: each its own)."""
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)

    def end_epoch(self) -> None:
        """Called after an epoch's last step, before the validation (e.g. a certificate)."""

    def validate(self) -> float:
        """The validation loss per token of the current model."""
        raise NotImplementedError

    def should_decay(
        self, epoch: int, val_loss: float, improved: bool, previous: list[float]
    ) -> bool:
        """Whether to divide the learning rate by ``lr_decay`` after ``epoch``."""
        return not improved

    def epoch_metrics(self, stats: EpochStats) -> dict[str, Any]:
        """The line of ``metrics.jsonl`` and of the result's ``epochs`` for one epoch."""
        raise NotImplementedError

    def epoch_line(self, metrics: dict[str, Any]) -> str:
        """What is printed after an epoch."""
        raise NotImplementedError

    def postfix(self, loss: float) -> dict[str, str]:
        """What the progress bar shows of a step's loss per token."""
        return {"loss": f"{loss:.3f}"}

    def extra_state(self) -> dict[str, Any]:
        """Saved with every checkpoint besides weights, optimizer and progress."""
        return {}

    def load_extra_state(self, saved: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""


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
        "best_val_loss": math.inf,
        "best_epoch": 0,
        "best_model_state": None,
        "val_losses": [],
        "history": [],
        "wall_seconds": 0.0,
        "trained_at_commits": [],
    }


# Names of the progress entries in checkpoints written before the loop was shared.
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
    with open(path, encoding="utf8") as handle:
        result = json.load(handle)
    same_run = all(result.get(key) == value for key, value in identity.items())
    if result.get("status") != "completed" or not same_run:
        return None
    return result if same_config(result.get("config", {}), config) else None


def finished_or_fresh(
    out: Path, name: str, identity: dict[str, Any], config: Any, resume: bool, progress: bool
) -> dict[str, Any] | None:
    """Before run ``name`` starts in ``out``: refuse a used folder unless resuming
    (:func:`check_fresh_start`); when resuming, the completed result of this very run if
    there is one (said when ``progress``: a rerun has nothing to do), else None."""
    check_fresh_start(out, resume)
    finished = finished_result(out / "result.json", identity, config) if resume else None
    if finished is not None and progress:
        print(f"{name}: already completed, skipped ({out})")
    return finished


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _moved(state: Any, device: torch.device) -> Any:
    """A carried state (None, a tensor or a tuple of states, e.g. a model group's) on
    ``device``, detached."""
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.detach().to(device)
    return tuple(_moved(part, device) for part in state)


def _resume(task: Task, checkpoint_path: Path) -> dict[str, Any]:
    """Load the checkpoint of this run into ``task``; returns its progress."""
    saved = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
    same_run = all(saved.get(key) == value for key, value in task.identity.items())
    if not (same_run and same_config(saved["config"], task.config)):
        who = ", ".join(f"{key}={saved.get(key)}" for key in task.identity)
        raise ValueError(
            f"{checkpoint_path} was written by another run ({who}, config "
            f"{saved['config']['name']}); resume it with the same arguments, or choose "
            "another out_dir"
        )
    task.model.load_state_dict(saved["model_state"])
    task.optimizer.load_state_dict(saved["optimizer_state"])
    task.load_extra_state(saved)
    if "rng" in saved:
        _set_rng_state(saved["rng"])
    return {**new_progress(), **{_RENAMED.get(k, k): v for k, v in saved["progress"].items()}}


def _read_losses(
    task: Task,
    runner: PlainStep | FastStep,
    pending: list[tuple[int, Any, int]],
    state: dict[str, Any],
    bar: Any,
    epoch: int,
    checkpoint_path: Path,
) -> None:
    """Read the ``pending`` steps' losses (one host synchronization), stop the run at a
    diverged one, add them to the epoch's sums; empties ``pending``."""
    values = runner.values([loss for _, loss, _ in pending])
    for (position, _, tokens), per_token in zip(pending, values, strict=True):
        if diverged(task, per_token):
            raise TrainingDivergedError(
                f"training diverged at epoch {epoch}, step {position}: "
                f"{task.loss_name} {per_token:.4g} (limit {task.diverge_above:.3g}). "
                f"{kept_checkpoint(checkpoint_path)} "
                "Fix: lower lr or clip in the config and start a new run."
            )
        state["epoch_sum"] += per_token * tokens
        state["epoch_count"] += tokens
    if any(position % 50 == 0 for position, _, _ in pending):
        bar.set_postfix(task.postfix(values[-1]))
    pending.clear()


def train(
    task: Task,
    out: Path,
    *,
    resume: bool = False,
    device: torch.device | None = None,
    progress: bool = True,
    on_step: Callable[[int, nn.Module], None] | None = None,
    checkpoint_every: float | None = None,
    stop_below_lr: float | None = None,
    step: PlainStep | FastStep | None = None,
    stop_at: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """Train ``task`` in the run folder ``out``; returns ``(status, progress)``.

    ``status`` is ``"completed"`` or ``"interrupted"``.  ``on_step(step, model)`` runs after
    every step (and projection).  ``checkpoint_every``: seconds between mid-epoch
    checkpoints (None: only after epochs and on a stop request).  ``stop_below_lr``: end
    the run, as completed and recorded in ``progress["stopped_early"]``, at the start of
    an epoch (after the first) whose learning rate is below it: a clipped SGD step moves
    the weights by at most ``lr * clip`` (a projection onto a convex set holding the
    previous iterate moves them no further), so the skipped epochs could have moved them
    by at most ``epochs_left * steps_per_epoch * lr * clip``.  ``step``: how each step is
    taken (:mod:`~stablernn_lib.tasks.fast_step`; default :class:`PlainStep`, the loss read
    on the host every step); its ``sync_every`` steps are read, checked and summed at once.
    After an epoch's steps :meth:`Task.end_epoch` runs, then the validation.  ``stop_at``:
    a ``time.monotonic()`` deadline; the first step that ends after it stops the run as a
    Ctrl-C does (checkpoint, ``"interrupted"``), so a wall budget leaves a resumable run.
    """
    config = task.config
    runner = step if step is not None else PlainStep()
    checkpoint_path = out / "checkpoint.pt"
    state = new_progress()
    if resume and checkpoint_path.exists():
        state = _resume(task, checkpoint_path)
    commit = git_commit()
    if state["trained_at_commits"][-1:] != [commit]:
        state["trained_at_commits"] = [*state["trained_at_commits"], commit]
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "metrics.jsonl"
    atomic_write_text(log_path, "".join(json.dumps(m) + "\n" for m in state["history"]))

    def save_checkpoint() -> None:
        atomic_torch_save(
            {
                "config": asdict(config),
                **task.identity,
                **task.extra_state(),
                "model_state": task.model.state_dict(),
                "optimizer_state": task.optimizer.state_dict(),
                "progress": state,
                "rng": _rng_state(),
            },
            checkpoint_path,
        )

    session_start = last_save = time.perf_counter()
    wall_before = state["wall_seconds"]
    status = "completed"
    with StopRequest() as stop:
        while state["epoch"] < config.epochs and status == "completed":
            epoch = state["epoch"] + 1
            lr = task.optimizer.param_groups[0]["lr"]
            if stop_below_lr is not None and lr < stop_below_lr and state["epoch"] > 0:
                left = config.epochs - state["epoch"]
                state["stopped_early"] = {
                    "after_epoch": state["epoch"],
                    "lr": lr,
                    "stop_below_lr": stop_below_lr,
                    "max_weight_change": left * task.steps_per_epoch * lr * config.clip,
                }
                if progress:
                    print(f"{task.name}: lr {lr:g} < {stop_below_lr:g}, stopped", flush=True)
                break
            task.model.train()
            if state["order"] is None:
                state["order"] = task.epoch_order()
            carried = _moved(state["carried_state"], device or torch.device("cpu"))
            epoch_clock = time.perf_counter() - state["epoch_seconds"]
            bar = tqdm(
                range(state["next"], len(state["order"])),
                total=len(state["order"]),
                initial=state["next"],
                desc=f"{task.name} epoch {epoch}/{config.epochs}",
                disable=not progress,
                leave=False,
            )
            pending: list[tuple[int, Any, int]] = []

            for position in bar:
                loss, tokens, carried = runner.run(
                    task, state["order"][position], carried, config.clip
                )
                pending.append((position, loss, tokens))
                state["step"] += 1
                if len(pending) >= runner.sync_every or position + 1 == len(state["order"]):
                    _read_losses(task, runner, pending, state, bar, epoch, checkpoint_path)
                if on_step is not None:
                    on_step(state["step"], task.model)
                due = checkpoint_every is not None and (
                    time.perf_counter() - last_save >= checkpoint_every
                )
                if stop_at is not None and time.monotonic() >= stop_at:
                    stop.requested = True
                if stop.requested or due:  # the exact state, mid-epoch
                    _read_losses(task, runner, pending, state, bar, epoch, checkpoint_path)
                    state.update(
                        next=position + 1,
                        carried_state=_moved(carried, torch.device("cpu")),
                        epoch_seconds=time.perf_counter() - epoch_clock,
                        wall_seconds=wall_before + time.perf_counter() - session_start,
                    )
                    save_checkpoint()
                    last_save = time.perf_counter()
                if stop.requested:
                    status = "interrupted"
                    break
            bar.close()
            if status != "completed":
                break
            epoch_seconds = time.perf_counter() - epoch_clock
            task.end_epoch()
            val_loss = task.validate()
            if not math.isfinite(val_loss):
                raise TrainingDivergedError(
                    f"validation {task.loss_name} is {val_loss} after epoch {epoch}. "
                    f"{kept_checkpoint(checkpoint_path)} Fix: lower lr or clip in the config."
                )
            lr = task.optimizer.param_groups[0]["lr"]
            train_loss = state["epoch_sum"] / state["epoch_count"]
            metrics = task.epoch_metrics(
                EpochStats(epoch, train_loss, val_loss, lr, epoch_seconds, state["epoch_count"])
            )
            improved = val_loss < state["best_val_loss"]
            if improved:
                state["best_val_loss"], state["best_epoch"] = val_loss, epoch
                state["best_model_state"] = copy.deepcopy(
                    {key: value.cpu() for key, value in task.model.state_dict().items()}
                )
            if task.should_decay(epoch, val_loss, improved, state["val_losses"]):
                for group in task.optimizer.param_groups:
                    group["lr"] = lr / config.lr_decay
            state["val_losses"].append(val_loss)
            state["history"].append(metrics)
            state.update(
                epoch=epoch,
                order=None,
                next=0,
                carried_state=None,
                epoch_sum=0.0,
                epoch_count=0,
                epoch_seconds=0.0,
                wall_seconds=wall_before + time.perf_counter() - session_start,
            )
            save_checkpoint()
            with open(log_path, "a", encoding="utf8") as log:
                log.write(json.dumps(metrics) + "\n")
            if progress:
                print(task.epoch_line(metrics), flush=True)
    return status, state


def run_provenance(state: dict[str, Any], device: torch.device | str | None) -> dict[str, Any]:
    """:func:`~stablernn_lib.core.io.provenance` of a result written now, plus
    ``trained_at_commits``: the checkout of each session that trained the run (the first
    and every resume that moved to another commit), since ``git_commit`` is the one at
    write time."""
    return {**provenance(device), "trained_at_commits": list(state["trained_at_commits"])}


def save_best_model(task: Task, state: dict[str, Any], path: Path, **saved: Any) -> None:
    """Load the best weights of a completed run into ``task.model`` and save them to ``path``
    with the config, the run's identity and ``saved`` (what the task's loader needs)."""
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
