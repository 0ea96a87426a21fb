"""The one training loop, on a toy task: resume, divergence, checkpoints, early stop.

The tasks' own tests (test_train.py, test_music.py) check their data, model and metric.
"""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from stablernn_lib.tasks.checkpoints import check_fresh_start, finished_result, run_provenance
from stablernn_lib.tasks.training import (
    EpochStats,
    Task,
    TrainingDivergedError,
    published_config,
    split_seed,
    train,
)


@dataclass(frozen=True)
class ToyConfig:
    name: str = "toy"
    epochs: int = 3
    lr: float = 0.1
    clip: float = 1.0
    lr_decay: float = 4.0
    divergence_factor: float = 100.0


class ToyTask(Task):
    """Least squares on 8 fixed points with a dropout layer (so the random state matters)."""

    def __init__(self, config: ToyConfig = ToyConfig(), radius: float | None = None) -> None:
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(8, 3, generator=generator, dtype=torch.float64)
        self.targets = self.inputs @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
        torch.manual_seed(1)
        self.model = nn.Sequential(nn.Dropout(0.2), nn.Linear(3, 1, dtype=torch.float64))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr)
        self.name, self.config, self.radius = "toy", config, radius
        self.identity = {"model": "linear"}
        self.diverge_above = config.divergence_factor
        self.steps_per_epoch = 8

    def loss(self, index: int, carried: Any) -> tuple[Tensor, float, int, Any]:
        prediction = self.model(self.inputs[index : index + 1]).squeeze(-1)
        loss = ((prediction - self.targets[index : index + 1]) ** 2).mean()
        return loss, loss.item(), 1, None

    def project(self) -> None:
        if self.radius is not None:
            with torch.no_grad():
                weight = self.model[1].weight
                weight.mul_(min(1.0, self.radius / float(weight.norm())))

    def validate(self) -> float:
        self.model.eval()
        with torch.no_grad():
            prediction = self.model(self.inputs).squeeze(-1)
        return float(((prediction - self.targets) ** 2).mean())

    def epoch_record(self, stats: EpochStats) -> tuple[dict[str, Any], str]:
        metrics = {"epoch": stats.epoch, "train": stats.train_loss, "val": stats.val_loss}
        return {**metrics, "lr": stats.lr}, f"epoch {stats.epoch}"


def _numbers(state: dict[str, Any]) -> list[tuple[float, float, float]]:
    return [(m["train"], m["val"], m["lr"]) for m in state["history"]]


def test_resume_after_a_kill_or_a_ctrl_c_ends_like_an_uninterrupted_run(tmp_path: Path) -> None:
    status, whole = train(ToyTask(), tmp_path / "whole", progress=False)
    assert status == "completed" and len(whole["history"]) == 3

    def kill(step: int, model: nn.Module) -> None:
        if step == 11:  # in epoch 2, after the checkpoint of epoch 1
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(ToyTask(), tmp_path / "kill", progress=False, on_step=kill)
    status, resumed = train(ToyTask(), tmp_path / "kill", resume=True, progress=False)
    assert status == "completed" and _numbers(resumed) == _numbers(whole)

    def interrupt(step: int, model: nn.Module) -> None:
        if step == 13:
            os.kill(os.getpid(), signal.SIGINT)

    status, stopped = train(ToyTask(), tmp_path / "int", progress=False, on_step=interrupt)
    assert status == "interrupted" and stopped["next"] == 13 - 8
    status, resumed = train(ToyTask(), tmp_path / "int", resume=True, progress=False)
    assert _numbers(resumed) == _numbers(whole) and resumed["step"] == whole["step"] == 24
    assert len((tmp_path / "int" / "metrics.jsonl").read_text().splitlines()) == 3


class MomentumTask(ToyTask):
    """The toy task under SGD with momentum: its optimizer carries state between steps."""

    def __init__(self) -> None:
        super().__init__()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)


def _stop_at(step: int, how: str) -> Any:
    def on_step(now: int, model: nn.Module) -> None:
        if now == step and how == "kill":
            raise RuntimeError("killed")
        if now == step:
            os.kill(os.getpid(), signal.SIGTERM)

    return on_step


def test_stopped_and_resumed_runs_end_bit_for_bit_like_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    """One run stopped four times (SIGTERM mid-epoch, SIGTERM after an epoch's last step, a
    kill after the checkpoint of an epoch's end, a kill after a mid-epoch checkpoint), each
    time resumed by a new process's task: the weights, the optimizer's momentum and the
    log equal those of the uninterrupted run exactly (dropout draws from the random state)."""
    whole_task = MomentumTask()
    _, whole = train(whole_task, tmp_path / "whole", progress=False)
    out = tmp_path / "stopped"
    stops = [(5, "sigterm", None), (8, "sigterm", None), (11, "kill", None), (19, "kill", 0.0)]
    kept = [(0, 5), (0, 8), (1, 0), (2, 2)]  # (epochs done, next step) of each checkpoint
    for resume, ((step, how, every), where) in enumerate(zip(stops, kept, strict=True)):
        try:
            status, _ = train(
                MomentumTask(),
                out,
                resume=bool(resume),
                progress=False,
                on_step=_stop_at(step, how),
                checkpoint_every=every,
            )
            assert status == "interrupted"
        except RuntimeError as error:
            assert how == "kill" and "killed" in str(error)
        saved = torch.load(out / "checkpoint.pt", weights_only=False)["progress"]
        assert (saved["epoch"], saved["next"]) == where
    task = MomentumTask()
    status, resumed = train(task, out, resume=True, progress=False)
    assert status == "completed" and resumed["step"] == whole["step"] == 24
    for mine, theirs in zip(task.model.parameters(), whole_task.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)
        momentum = task.optimizer.state[mine]["momentum_buffer"]
        assert torch.equal(momentum, whole_task.optimizer.state[theirs]["momentum_buffer"])
    assert resumed["history"] == whole["history"]
    log = (out / "metrics.jsonl").read_text()
    assert log == (tmp_path / "whole" / "metrics.jsonl").read_text() and log.count("\n") == 3


def test_each_training_session_records_the_commit_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stablernn_lib.tasks.checkpoints as checkpoints

    def stop(step: int, model: nn.Module) -> None:
        if step in (3, 6):
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(checkpoints, "git_commit", lambda: "aaa")
    status, state = train(ToyTask(), tmp_path, progress=False, on_step=stop)
    assert status == "interrupted" and state["trained_at_commits"] == ["aaa"]
    status, state = train(ToyTask(), tmp_path, resume=True, progress=False, on_step=stop)
    assert status == "interrupted" and state["step"] == 6
    assert state["trained_at_commits"] == ["aaa"]  # same checkout: recorded once
    monkeypatch.setattr(checkpoints, "git_commit", lambda: "bbb")
    status, state = train(ToyTask(), tmp_path, resume=True, progress=False)
    assert status == "completed" and state["trained_at_commits"] == ["aaa", "bbb"]
    record = run_provenance(state, "cpu")
    assert record["trained_at_commits"] == ["aaa", "bbb"] and "git_commit" in record


def test_a_checkpoint_of_another_run_or_an_unasked_overwrite_is_refused(tmp_path: Path) -> None:
    train(ToyTask(ToyConfig(epochs=1)), tmp_path, progress=False)
    with pytest.raises(ValueError, match="resume=True"):
        check_fresh_start(tmp_path, resume=False)
    other = ToyTask(ToyConfig(epochs=1))
    other.identity = {"model": "quadratic"}
    with pytest.raises(ValueError, match="another run.*model=linear"):
        train(other, tmp_path, resume=True, progress=False)


def test_a_finished_result_is_recognised_only_for_the_same_run(tmp_path: Path) -> None:
    config = ToyConfig()
    path = tmp_path / "result.json"
    result = {"status": "completed", "model": "linear", "config": asdict(config)}
    path.write_text(json.dumps(result))
    assert finished_result(path, {"model": "linear"}, config) is not None
    assert finished_result(path, {"model": "other"}, config) is None
    assert finished_result(path, {"model": "linear"}, ToyConfig(epochs=9)) is None


def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    def sabotage(step: int, model: nn.Module) -> None:
        if step == 10:
            with torch.no_grad():
                model[1].weight.fill_(math.nan)

    kept = r"loss nan.*after epoch 1\) was kept.*lower lr"
    with pytest.raises(TrainingDivergedError, match=kept):
        train(ToyTask(), tmp_path, progress=False, on_step=sabotage)
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert saved["progress"]["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in saved["model_state"].values())


def test_an_exploding_loss_stops_before_any_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(TrainingDivergedError, match="No epoch had finished"):
        train(ToyTask(ToyConfig(divergence_factor=1e-6)), tmp_path, progress=False)
    assert not (tmp_path / "checkpoint.pt").exists()


def test_the_projection_runs_after_every_step(tmp_path: Path) -> None:
    norms = []
    task = ToyTask(radius=0.5)

    def record(step: int, model: nn.Module) -> None:
        norms.append(float(model[1].weight.detach().norm()))

    train(task, tmp_path, progress=False, on_step=record)
    assert len(norms) == 24 and max(norms) <= 0.5 + 1e-12


def test_stop_below_lr_ends_the_run_with_the_bound_on_what_was_skipped(tmp_path: Path) -> None:
    config = ToyConfig(epochs=5, lr_decay=1e6)  # any epoch without improvement kills the lr

    class NeverImproves(ToyTask):
        def validate(self) -> float:
            return 1.0

    status, state = train(NeverImproves(config), tmp_path, progress=False, stop_below_lr=1e-3)
    assert status == "completed" and len(state["history"]) == 2
    stopped = state["stopped_early"]
    assert stopped["after_epoch"] == 2
    assert stopped["max_weight_change"] == pytest.approx(3 * 8 * stopped["lr"] * config.clip)


def test_a_checkpoint_with_older_progress_names_still_resumes(tmp_path: Path) -> None:
    def kill(step: int, model: nn.Module) -> None:
        if step == 9:
            raise RuntimeError("killed")

    _, whole = train(ToyTask(), tmp_path / "whole", progress=False)
    with pytest.raises(RuntimeError):
        train(ToyTask(), tmp_path / "old", progress=False, on_step=kill)
    path = tmp_path / "old" / "checkpoint.pt"
    saved = torch.load(path, weights_only=False)
    progress = saved["progress"]
    for old, new in (
        ("next_batch", "next"),
        ("epoch_loss_sum", "epoch_sum"),
        ("epoch_tokens", "epoch_count"),
    ):
        progress[old] = progress.pop(new)
    for key in ("val_losses", "best_epoch", "order"):
        del progress[key]
    torch.save(saved, path)
    _, resumed = train(ToyTask(), tmp_path / "old", resume=True, progress=False)
    assert _numbers(resumed) == _numbers(whole)


@dataclass(frozen=True)
class SeededConfig:
    name: str
    seed: int = 1111


def test_a_seeded_name_stands_for_its_published_config_with_that_seed() -> None:
    assert split_seed("cpu-small-seed12") == ("cpu-small", 12)
    assert split_seed("cpu-small") == ("cpu-small", None)
    assert split_seed("cpu-seedling") == ("cpu-seedling", None)
    configs = {"a": SeededConfig("a"), "b": SeededConfig("b")}
    assert published_config("a-seed3", configs, ("a",)) == SeededConfig("a-seed3", 3)
    assert published_config("a-seed1111", configs, ("a",)) is configs["a"]
    assert published_config("a", configs, ("a",)) is configs["a"]
    assert published_config("b-seed3", configs, ("a",)) is None
    assert published_config("b", configs, ("a",)) is None


def test_planned_seeds_follow_each_tasks_convention() -> None:
    from stablernn_lib.tasks.training import planned_seeds

    assert planned_seeds(1111, 3, first_extra=2) == (1111, 2, 3)
    assert planned_seeds(1111, 5, first_extra=1) == (1111, 1, 2, 3, 4)
    assert planned_seeds(7, 1, first_extra=1) == (7,)


def test_the_loop_fits_a_page_and_a_task_plugs_in_with_few_hooks() -> None:
    import inspect

    assert len(inspect.getsource(train).splitlines()) <= 80
    hooks = [name for name, value in vars(Task).items() if callable(value) and name[0] != "_"]
    assert len(hooks) <= 8, hooks
