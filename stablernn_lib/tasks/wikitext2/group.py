"""Several language models trained as one task: one step for all, each model on its own.

:class:`ModelGroup`: one forward over ``M`` runs that read the same batches, one backward of
the sum of their losses (each member gets its own gradient), then each member's own clipping,
learning rate, projection, best weights and cuts.  On a CPU without dropout a member trains
as it does alone; dropout masks come from one generator in member order.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from stablernn_lib.tasks import checkpoints, training
from stablernn_lib.tasks.wikitext2.model import State
from stablernn_lib.tasks.wikitext2.train import (
    LanguageModelTask,
    model_result,
    prepare_corpus,
    step_record,
)

# What every member must share: the batches the loop gives them and the loop's schedule.
_SHARED = ("epochs", "batch_size", "bptt", "train_tokens", "vocab_size", "clip", "lr_decay")


class ModelGroup(training.Task):
    """``members`` (:class:`LanguageModelTask` s on one corpus) as one task of the loop."""

    loss_name = "largest member loss"

    def __init__(self, members: list[LanguageModelTask]) -> None:
        if not members:
            raise ValueError("a model group needs at least one member")
        first = members[0]
        for member in members[1:]:
            differ = [k for k in _SHARED if getattr(member.config, k) != getattr(first.config, k)]
            if differ or member.train_source.shape != first.train_source.shape:
                raise ValueError(
                    f"{member.name} and {first.name} differ in {differ or 'their data'}; a "
                    "group's members must read the same batches: train them in separate groups"
                )
        names = [member.name for member in members]
        if len(set(names)) != len(names):
            raise ValueError(f"a member is listed twice: {names}")
        self.members = members
        self.name = f"group of {len(members)}"
        self.config = first.config
        self.identity = {"members": names}
        self.model = nn.ModuleList([member.model for member in members])
        self.optimizer = torch.optim.SGD(
            [{"params": list(m.model.parameters()), "lr": m.config.lr} for m in members],
            lr=first.config.lr,
        )
        self.diverge_above = min(member.diverge_above for member in members)
        self.steps_per_epoch = first.steps_per_epoch
        device = first.train_source.device
        self.train_sums = torch.zeros(len(members), dtype=torch.float64, device=device)
        self.records = [new_record() for _ in members]
        self.val_losses: list[float] = []

    def batch(self, index: int) -> tuple[Tensor, Tensor]:
        return self.members[0].batch(index)

    def forward_loss(
        self, tokens: Tensor, targets: Tensor, carried: tuple[State, ...] | None
    ) -> tuple[Tensor, tuple[State, ...]]:
        """The sum of the members' mean losses and their states (each added to its sum)."""
        carried = carried if carried is not None else (None,) * len(self.members)
        losses, states = [], []
        for member, state in zip(self.members, carried, strict=True):
            loss, state = member.forward_loss(tokens, targets, state)
            losses.append(loss)
            states.append(state)
        stacked = torch.stack(losses)
        self.train_sums += stacked.detach().double() * targets.numel()
        self._last = stacked
        return stacked.sum(), tuple(states)

    def step_value(self, loss: Tensor) -> Tensor:
        """The largest member loss (the loop stops the group when one member diverges)."""
        return self._last.detach().max().clone()

    def loss(self, index: int, carried: Any) -> tuple[Tensor, float, int, Any]:
        tokens, targets = self.batch(index)
        loss, carried = self.forward_loss(tokens, targets, carried)
        return loss, float(self.step_value(loss)), targets.numel(), carried

    def project(self) -> None:
        for member in self.members:
            member.project()

    def validate(self) -> float:
        """The mean of the members' validation losses (each kept for its record)."""
        self.val_losses = [member.validate() for member in self.members]
        return sum(self.val_losses) / len(self.val_losses)

    def should_decay(
        self, epoch: int, val_loss: float, improved: bool, previous: list[float]
    ) -> bool:
        """Each member's best weights and lr cut by its own loss; False for the loop itself."""
        for member, record, group, loss in zip(
            self.members, self.records, self.optimizer.param_groups, self.val_losses, strict=True
        ):
            if loss < record["best_val_loss"]:
                record.update(best_val_loss=loss, best_epoch=epoch)
                record["best_model_state"] = copy.deepcopy(
                    {key: value.cpu() for key, value in member.model.state_dict().items()}
                )
            elif member.should_decay(epoch, loss, False, record["val_losses"]):
                group["lr"] /= member.config.lr_decay
            record["val_losses"].append(loss)
        return False

    def epoch_record(self, stats: training.EpochStats) -> tuple[dict[str, Any], str]:
        """The group's line: each member's metrics, which also go to its record."""
        tokens = stats.tokens
        sums = self.train_sums.tolist()
        members = {}
        for n, member in enumerate(self.members):
            lr = self.optimizer.param_groups[n]["lr"]
            member_stats = training.EpochStats(
                stats.epoch, sums[n] / tokens, self.val_losses[n], lr, stats.seconds, tokens
            )
            metrics, _ = member.epoch_record(member_stats)
            members[member.name] = metrics
            self.records[n]["history"].append(metrics)
        self.train_sums.zero_()
        parts = [f"{name} val ppl {m['val_ppl']:.1f}" for name, m in members.items()]
        line = f"epoch {stats.epoch} ({stats.seconds:.0f} s): " + "; ".join(parts)
        return {"epoch": stats.epoch, "epoch_seconds": stats.seconds, "members": members}, line

    def extra_state(self) -> dict[str, Any]:
        return {"records": self.records, "train_sums": self.train_sums.cpu()}

    def load_extra_state(self, saved: dict[str, Any]) -> None:
        self.records = saved["records"]
        self.train_sums.copy_(saved["train_sums"])


def new_record() -> dict[str, Any]:
    """A member's own progress: best validation loss, epoch and weights, its history."""
    return {
        "best_val_loss": math.inf,
        "best_epoch": 0,
        "best_model_state": None,
        "val_losses": [],
        "history": [],
    }


def train_language_models_together(
    runs: list[tuple[str, bool, Any]],
    out_dir: Any,
    *,
    corpus: Any,
    device: str | torch.device = "cpu",
    step: Any = None,
    projection: str = "exact",
    resume: bool = False,
    progress: bool = True,
    checkpoint_every: float | None = 600.0,
    stop_at: float | None = None,
) -> list[dict[str, Any]]:
    """Train ``runs`` (``(cell, stable, LMConfig)``) as one :class:`ModelGroup` in ``out_dir``;
    one result per run, in order."""
    device = torch.device(device)
    members = [
        LanguageModelTask(
            cell, stable, config, prepare_corpus(config, corpus, None), device, projection
        )
        for cell, stable, config in runs
    ]
    group = ModelGroup(members)
    out = Path(out_dir)
    checkpoints.check_fresh_start(out, resume)
    status, state = training.train(
        group,
        out,
        resume=resume,
        device=device,
        progress=progress,
        checkpoint_every=checkpoint_every,
        step=step,
        stop_at=stop_at,
    )
    return [
        {
            **model_result(member, status, state, device, record),
            "trained_in_group_of": len(members),
            **step_record(step, state, group),
        }
        for member, record in zip(members, group.records, strict=True)
    ]
