"""One optimizer step of the loop (zero, backward, clip each parameter group, step, project):
:class:`PlainStep` reads the loss every step; :class:`FastStep` keeps it on the device (read
every ``sync_every`` steps) and on CUDA captures a CUDA graph (``mode="graph"``) or compiles
the forward (``"compile"``); ``tf32=True``: float32 products in TF32.  Its task provides
``batch(index)``, ``forward_loss(inputs, targets, carried) -> (mean loss, carried)`` and
``step_value(loss)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch
from torch import Tensor

StepMode = Literal["eager", "graph", "compile"]


def diverged(task: Any, per_token: float) -> bool:
    """Whether a step's loss per token stops the run (not finite, or above the task's limit)."""
    return not math.isfinite(per_token) or per_token > task.diverge_above


def clip_each_group(optimizer: torch.optim.Optimizer, clip: float) -> None:
    """Clip the gradient of each parameter group to global norm ``clip``, each by its own."""
    for group in optimizer.param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], clip)


class PlainStep:
    """The step of the committed runs: the loss read on the host every step."""

    sync_every = 1
    description = "plain"

    def run(self, task: Any, index: int, carried: Any, clip: float) -> tuple[Any, int, Any]:
        """One step at batch ``index``: ``(loss per token, tokens, carried state)``; no update
        when the loss diverged (the loop raises on it at once)."""
        task.optimizer.zero_grad(set_to_none=True)
        loss, per_token, tokens, carried = task.loss(index, carried)
        if diverged(task, per_token):
            return per_token, tokens, carried
        loss.backward()
        clip_each_group(task.optimizer, clip)
        task.optimizer.step()
        task.project()
        return per_token, tokens, carried

    @staticmethod
    def values(losses: list[Any]) -> list[float]:
        """The losses of the steps since the last read, as floats (one synchronization)."""
        if losses and isinstance(losses[0], Tensor):
            return torch.stack(losses).double().cpu().tolist()
        return [float(value) for value in losses]


def _check_plain_sgd(optimizer: torch.optim.Optimizer) -> None:
    if type(optimizer) is not torch.optim.SGD or any(
        group["momentum"] or group["weight_decay"] or group["nesterov"]
        for group in optimizer.param_groups
    ):
        raise ValueError(
            "the captured step updates the weights as plain SGD (no momentum, no weight "
            f"decay); this task uses {type(optimizer).__name__}: use FastStep(mode='eager')"
        )


def _state_buffers(carried: Any) -> Any:
    """Zeroed device tensors shaped like a carried state (a tensor or a tuple of states)."""
    if isinstance(carried, Tensor):
        return torch.zeros_like(carried)
    return tuple(_state_buffers(part) for part in carried)


def _copy_state_(into: Any, state: Any) -> None:
    """Copy a state (None: zeros) into the buffers ``into`` (the same nesting)."""
    if isinstance(into, Tensor):
        if state is None:
            into.zero_()
        else:
            into.copy_(state.detach())
        return
    parts = (None,) * len(into) if state is None else state
    for target, part in zip(into, parts, strict=True):
        _copy_state_(target, part)


@dataclass
class FastStep:
    """The step without a host synchronization per step, for one task (a captured graph
    holds its buffers); ``warmup`` eager steps before the capture."""

    mode: StepMode = "eager"
    sync_every: int = 100
    tf32: bool = False
    warmup: int = 3
    description: str = field(init=False, default="")
    _steps: int = field(init=False, default=0)
    _graph: Any = field(init=False, default=None)
    _compiled: Any = field(init=False, default=None)
    _static: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in get_args(StepMode):
            raise ValueError(f"unknown step mode {self.mode!r}; use one of {get_args(StepMode)}")
        if self.sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {self.sync_every}")
        self.description = f"fast-{self.mode}" + ("-tf32" if self.tf32 else "")

    values = staticmethod(PlainStep.values)

    def run(self, task: Any, index: int, carried: Any, clip: float) -> tuple[Any, int, Any]:
        """One step at batch ``index``: ``(loss on the device, tokens, carried state)``."""
        inputs, targets = task.batch(index)
        on_cuda = inputs.is_cuda
        if not on_cuda and self.mode != "eager":
            self.description = f"fast-eager ({self.mode} needs CUDA)"
        if self.tf32 and on_cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
        self._steps += 1
        if self.mode == "graph" and on_cuda and self._steps > self.warmup:
            done = self._graph_step(task, inputs, targets, carried, clip)
            if done is not None:
                return done
        forward = task.forward_loss
        if self.mode == "compile" and on_cuda:
            if self._compiled is None:
                self._compiled = torch.compile(task.forward_loss, mode="reduce-overhead")
            torch.compiler.cudagraph_mark_step_begin()
            forward = self._compiled
        task.optimizer.zero_grad(set_to_none=True)
        loss, carried = forward(inputs, targets, carried)
        loss.backward()
        clip_each_group(task.optimizer, clip)
        task.optimizer.step()
        task.project()
        return task.step_value(loss), targets.numel(), carried

    def _update_(self, task: Any, clip: float) -> None:
        """Clip and SGD with the learning rate of the device tensor, then the projection."""
        clip_each_group(task.optimizer, clip)
        for group, neg_lr in zip(task.optimizer.param_groups, self._neg_lr, strict=True):
            params = [p for p in group["params"] if p.grad is not None]
            torch._foreach_add_(params, torch._foreach_mul([p.grad for p in params], neg_lr))
        task.project()

    def _graph_step(
        self, task: Any, inputs: Tensor, targets: Tensor, carried: Any, clip: float
    ) -> tuple[Tensor, int, Any] | None:
        """The captured step; None when the capture failed (the step then runs eagerly, and
        every later one: ``description`` says why)."""
        static = self._static
        if self._graph is None:
            _check_plain_sgd(task.optimizer)
            if carried is None:
                raise RuntimeError("capture needs a carried state: warm up with >= 1 step")
            groups = len(task.optimizer.param_groups)
            self._neg_lr = torch.zeros(groups, device=inputs.device)
            self._lrs: list[float] = []
            static.update(inputs=inputs.clone(), targets=targets.clone())
            static["state"] = _state_buffers(carried)
            try:
                self._capture(task, clip)
            except RuntimeError as error:  # an operation that cannot be captured
                torch.cuda.synchronize()
                self.mode, self._graph = "eager", None
                self.description = f"fast-eager (graph capture failed: {str(error)[:120]})"
                task.optimizer.zero_grad(set_to_none=True)
                return None
        lrs = [group["lr"] for group in task.optimizer.param_groups]
        if lrs != self._lrs:  # the loop's decay (per model of a group), into the graph
            self._neg_lr.copy_(-torch.tensor(lrs, dtype=self._neg_lr.dtype))
            self._lrs = lrs
        if carried is not static["state"]:
            _copy_state_(static["state"], carried)
        if inputs.shape != static["inputs"].shape:  # the epoch's last, shorter window
            for param in task.model.parameters():
                if param.grad is not None:
                    param.grad.zero_()
            loss, state = task.forward_loss(inputs, targets, static["state"])
            loss.backward()
            self._update_(task, clip)
            _copy_state_(static["state"], state)
            return task.step_value(loss), targets.numel(), static["state"]
        static["inputs"].copy_(inputs)
        static["targets"].copy_(targets)
        self._graph.replay()
        return static["loss"].clone(), targets.numel(), static["state"]

    def _capture(self, task: Any, clip: float) -> None:
        static = self._static
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        saved = task.extra_state()  # e.g. a group's loss sums, which a forward adds to
        with torch.cuda.stream(side):  # one forward and backward, no update
            loss, _ = task.forward_loss(static["inputs"], static["targets"], static["state"])
            loss.backward()
        torch.cuda.current_stream().wait_stream(side)
        task.load_extra_state(saved)
        task.optimizer.zero_grad(set_to_none=True)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            loss, state = task.forward_loss(static["inputs"], static["targets"], static["state"])
            loss.backward()
            self._update_(task, clip)
            _copy_state_(static["state"], state)
            static["loss"] = task.step_value(loss)


STEPS = ("plain", *get_args(StepMode))


def make_step(name: str, tf32: bool = False, sync_every: int = 100) -> PlainStep | FastStep:
    """The step implementation called ``name`` (``STEPS``: ``plain`` or a fast mode)."""
    if name not in STEPS:
        raise ValueError(f"unknown step {name!r}; use one of {STEPS}")
    if name == "plain":
        return PlainStep()
    return FastStep(mode=name, tf32=tf32, sync_every=sync_every)  # type: ignore[arg-type]
