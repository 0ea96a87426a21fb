"""The one training loop of the course: projected gradient descent on a :class:`Task`.

A step minimizes :meth:`Task.loss`, clips the gradient norm to ``clip``, calls
:meth:`Task.project`; a loss per token not finite or above ``diverge_above`` stops the run.
After each epoch the best model is kept and ``lr /= lr_decay`` when :meth:`Task.should_decay`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from stablernn_lib.tasks.checkpoints import RunFolder, kept_checkpoint
from stablernn_lib.tasks.fast_step import FastStep, PlainStep, diverged

_CHECKOUT = Path(__file__).resolve().parents[2]
# data/ of the checkout, or of the working directory for an installed library.
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
    """A config for another seed, named ``<name>-seed<seed>`` (itself for its own seed)."""
    if seed == config.seed:
        return config
    return replace(config, seed=seed, name=f"{config.name}-seed{seed}")


def planned_seeds(own: int, needed: int, first_extra: int) -> tuple[int, ...]:
    """``own``, then ``needed - 1`` seeds counted up from ``first_extra``."""
    return (own, *range(first_extra, first_extra + needed - 1))


def split_seed(name: str) -> tuple[str, int | None]:
    """``(base, N)`` for a config name ``<base>-seed<N>``, else ``(name, None)``."""
    match = SEED_SUFFIX.match(name)
    return (match["base"], int(match["seed"])) if match else (name, None)


def published_config(
    name: str, configs: dict[str, ConfigT], published: Collection[str]
) -> ConfigT | None:
    """The config a name ``<base>[-seed<N>]`` stands for when ``base`` is published, else None."""
    base, seed = split_seed(name)
    if base not in published:
        return None
    return configs[base] if seed is None else with_seed(configs[base], seed)


def add_run_arguments(
    parser: argparse.ArgumentParser, configs: Collection[str], data: str, runs: str
) -> None:
    """The arguments of every training command: model, config, seed, epochs, resume, folders."""
    parser.add_argument("--model", choices=["rnn", "lstm"], required=True)
    parser.add_argument("--stable", action="store_true", help="project after every step")
    parser.add_argument("--config", choices=sorted(configs), default="smoke")
    parser.add_argument("--epochs", type=int, default=None, help="override the config's epochs")
    parser.add_argument(
        "--seed", type=int, default=None, help="another seed (config <name>-seed<N>)"
    )
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--data", default=None, help=f"{data} (default $STABLERNN_DATA)")
    parser.add_argument("--out", default=None, help=f"run folder (default {runs}/...)")


def config_of_arguments(args: argparse.Namespace, get_config: Callable[[str], ConfigT]) -> ConfigT:
    """The config of ``--config``, ``<name>-seed<N>`` with ``--seed N``, ``<name>-<N>ep`` with
    ``--epochs N`` (never published)."""
    config: Any = get_config(args.config)
    if args.seed is not None:
        config = with_seed(config, args.seed)
    if args.epochs is not None:
        config = replace(config, epochs=args.epochs, name=f"{config.name}-{args.epochs}ep")
    return config


def print_summary(result: dict[str, Any], keys: Collection[str]) -> int:
    """Print a result's ``keys`` as JSON; the command's exit status (130: interrupted)."""
    print(json.dumps({key: result[key] for key in keys if key in result}, indent=2))
    return 0 if result["status"] == "completed" else 130


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN/inf or exploded."""


@dataclass(frozen=True)
class EpochStats:
    """An epoch's mean training loss per token, validation loss, lr, seconds and tokens."""

    epoch: int
    train_loss: float
    val_loss: float
    lr: float
    seconds: float
    tokens: int


class Task:
    """One run of a task (a subclass fills in model, optimizer, data, metric); ``config`` has
    ``epochs``, ``clip``, ``lr_decay``; ``identity``: what makes two runs the same run (e.g.
    ``{"model": "lstm", "stable": True}``); ``diverge_above``: the largest loss per token."""

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

    def loss(self, index: int, carried: Any) -> tuple[Tensor, float, int, Any]:
        """``(loss to differentiate, loss per token, tokens, carried state)`` of step
        ``index`` (``carried`` is None at the start of an epoch)."""
        raise NotImplementedError

    def project(self) -> None:
        """Called after every optimizer step (a stable variant projects here)."""

    def validate(self) -> float:
        """The validation loss per token after an epoch's steps."""
        raise NotImplementedError

    def should_decay(
        self, epoch: int, val_loss: float, improved: bool, previous: list[float]
    ) -> bool:
        """Whether to divide the learning rate by ``lr_decay`` after ``epoch``."""
        return not improved

    def epoch_record(self, stats: EpochStats) -> tuple[dict[str, Any], str]:
        """An epoch's line of ``metrics.jsonl`` and the sentence printed after it."""
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        """Saved with every checkpoint besides weights, optimizer and progress."""
        return {}

    def load_extra_state(self, saved: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""


def read_losses(
    task: Task, runner: PlainStep | FastStep, pending: list[tuple[int, Any, int]], run: RunFolder
) -> list[float]:
    """Read the ``pending`` steps' losses per token (one host sync) into the epoch's sums,
    stopping at a diverged one; empties ``pending``."""
    values = runner.values([loss for _, loss, _ in pending])
    for (position, _, tokens), per_token in zip(pending, values, strict=True):
        if diverged(task, per_token):
            raise TrainingDivergedError(
                f"training diverged at epoch {run.state['epoch'] + 1}, step {position}: "
                f"{task.loss_name} {per_token:.4g} (limit {task.diverge_above:.3g}). "
                f"{kept_checkpoint(run.path)} "
                "Fix: lower lr or clip in the config and start a new run."
            )
        run.state["epoch_sum"] += per_token * tokens
        run.state["epoch_count"] += tokens
    pending.clear()
    return values


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
    """Train ``task`` in the run folder ``out`` (:class:`~.checkpoints.RunFolder`); ``(status,
    progress)``, status ``"completed"`` or ``"interrupted"`` (a stop request, ``stop_at``).
    ``on_step(step, model)`` runs after every step; ``step``: :mod:`~.fast_step`."""
    config, runner = task.config, step if step is not None else PlainStep()
    with RunFolder(task, out, resume, checkpoint_every, stop_at) as run:
        state = run.state
        while state["epoch"] < config.epochs and not run.stop_requested:
            epoch, lr = state["epoch"] + 1, task.optimizer.param_groups[0]["lr"]
            if run.lr_below(stop_below_lr, lr, progress):
                break
            task.model.train()
            carried = run.start_epoch(device or torch.device("cpu"))
            order, pending = state["order"], []
            bar = tqdm(
                range(state["next"], len(order)),
                total=len(order),
                initial=state["next"],
                desc=f"{task.name} epoch {epoch}/{config.epochs}",
                disable=not progress,
                leave=False,
            )
            for position in bar:
                loss, tokens, carried = runner.run(task, order[position], carried, config.clip)
                pending.append((position, loss, tokens))
                state["step"] += 1
                if len(pending) >= runner.sync_every or position + 1 == len(order):
                    values = read_losses(task, runner, pending, run)
                    bar.set_postfix({task.loss_name: f"{values[-1]:.3f}"}, refresh=False)
                if on_step is not None:
                    on_step(state["step"], task.model)
                if run.should_save():  # the exact state, mid-epoch
                    read_losses(task, runner, pending, run)
                    run.save_mid_epoch(position + 1, carried)
                if run.stop_requested:
                    break
            bar.close()
            if run.stop_requested:
                break
            seconds, val_loss = run.epoch_seconds(), task.validate()
            if not math.isfinite(val_loss):
                raise TrainingDivergedError(
                    f"validation {task.loss_name} is {val_loss} after epoch {epoch}. "
                    f"{kept_checkpoint(run.path)} Fix: lower lr or clip in the config."
                )
            train_loss = state["epoch_sum"] / state["epoch_count"]
            stats = EpochStats(epoch, train_loss, val_loss, lr, seconds, state["epoch_count"])
            metrics, line = task.epoch_record(stats)
            improved = val_loss < state["best_val_loss"]
            if improved:
                run.keep_best(epoch, val_loss)
            if task.should_decay(epoch, val_loss, improved, state["val_losses"]):
                for group in task.optimizer.param_groups:
                    group["lr"] = lr / config.lr_decay
            run.end_epoch(epoch, val_loss, metrics)
            if progress:
                print(line, flush=True)
    stopped = run.stop_requested and state["epoch"] < config.epochs
    return ("interrupted" if stopped else "completed"), state
