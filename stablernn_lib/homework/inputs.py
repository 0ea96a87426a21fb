"""Functions that a check hands to the student's function as *inputs*, not as answers.

Each is described by its tensors and numbers (``arguments``): the grader's sandbox sends
them as data and rebuilds them, never sending code of the checks.
"""

from __future__ import annotations

from typing import Any

import torch


class InputFunction:
    """A function given to the student's answer; ``arguments`` describe it completely."""

    arguments: tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class TanhStep(InputFunction):
    """``phi(h, x) = tanh(h W^T + x U^T)`` for batches ``h`` ``(N, S)`` and ``x`` ``(N, D)``."""

    def __init__(self, W: torch.Tensor, U: torch.Tensor) -> None:
        self.W, self.U = W, U
        self.arguments = (W, U)

    def __call__(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(h @ self.W.T + x @ self.U.T)


class TanhQuadraticLoss(InputFunction):
    """``f(v) = tanh(<A, v>) + ||v||^2 / 2`` (a smooth loss with a known gradient)."""

    def __init__(self, A: torch.Tensor) -> None:
        self.A = A
        self.arguments = (A,)

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        return torch.tanh((self.A * v).sum()) + 0.5 * (v**2).sum()


class Residual(InputFunction):
    """``grad f(w) = w - c``, the gradient of ``f(w) = ||w - c||^2 / 2``."""

    def __init__(self, target: torch.Tensor) -> None:
        self.target = target
        self.arguments = (target,)

    def __call__(self, w: torch.Tensor) -> torch.Tensor:
        return w - self.target


class BallProjection(InputFunction):
    """``w * min(1, r / ||w||)``: the projection of a vector onto the ball of radius ``r``."""

    def __init__(self, radius: float) -> None:
        self.radius = radius
        self.arguments = (radius,)

    def __call__(self, w: torch.Tensor) -> torch.Tensor:
        return w * min(1.0, self.radius / float(w.norm()))


INPUT_FUNCTIONS: dict[str, type[InputFunction]] = {
    cls.__name__: cls for cls in (TanhStep, TanhQuadraticLoss, Residual, BallProjection)
}
