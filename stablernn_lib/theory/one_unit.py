"""The one-unit system ``x_t = w sigmoid(x_{t-1}) + b`` of Pascanu et al.

Fixed points lie on the curve ``b = x - w sigmoid(x)``, stable when ``|w sigmoid'(x)| < 1``.
For ``w > 4`` two saddle-node folds at ``sigmoid'(x) = 1/w`` bound a bistable range of ``b``,
where ``d x_T / d b`` spikes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from stablernn_lib.core.gradients import clip_gradient_norm_


def iterate(w: float | Tensor, b: float | Tensor, x0: float | Tensor, steps: int) -> Tensor:
    """``x_0, ..., x_steps`` (``w, b, x0`` broadcast): ``(steps + 1, *shape)``, float64."""
    if steps < 0:
        raise ValueError(f"steps must be non-negative, got {steps}")
    w, b, x = (torch.as_tensor(v, dtype=torch.float64) for v in (w, b, x0))
    x = x + torch.zeros_like(w) + torch.zeros_like(b)
    trajectory = [x]
    for _ in range(steps):
        x = w * torch.sigmoid(x) + b
        trajectory.append(x)
    return torch.stack(trajectory)


def fixed_point_curve(w: float, x_grid: Tensor) -> dict[str, Tensor]:
    """``x``, ``b = x - w sigmoid(x)``, ``stable = |w sigmoid'(x)| < 1``, shaped like ``x_grid``."""
    x = torch.as_tensor(x_grid, dtype=torch.float64)
    s = torch.sigmoid(x)
    return {"x": x, "b": x - w * s, "stable": (w * s * (1 - s)).abs() < 1}


def saddle_nodes(w: float) -> list[tuple[float, float]]:
    """The folds ``(x, b)`` where ``w sigmoid'(x) = 1`` (two for ``w > 4``, else none):
    ``s = (1 +- sqrt(1 - 4/w)) / 2``, ``x = log(s / (1 - s))``."""
    if w <= 4:
        return []
    root = math.sqrt(1.0 - 4.0 / w)
    points = []
    for s in ((1 - root) / 2, (1 + root) / 2):
        x = math.log(s / (1 - s))
        points.append((x, x - w * s))
    return points


def fixed_points(
    w: float, b: float, lo: float | None = None, hi: float | None = None
) -> list[float]:
    """All fixed points of ``x -> w sigmoid(x) + b``, by bisection on sign changes in
    ``[b, b + w]`` (the map's range) by default."""
    lo = min(b, b + w) - 1.0 if lo is None else lo
    hi = max(b, b + w) + 1.0 if hi is None else hi
    grid = torch.linspace(lo, hi, 20001, dtype=torch.float64)
    gap = w * torch.sigmoid(grid) + b - grid
    roots = []
    for i in torch.nonzero(torch.sign(gap[:-1]) != torch.sign(gap[1:])).flatten().tolist():
        left, right = float(grid[i]), float(grid[i + 1])
        for _ in range(60):
            mid = 0.5 * (left + right)
            value = w / (1 + math.exp(-mid)) + b - mid
            left_value = w / (1 + math.exp(-left)) + b - left
            if (value > 0) == (left_value > 0):
                left = mid
            else:
                right = mid
        roots.append(0.5 * (left + right))
    return roots


def hysteresis_sweep(
    w: float, b_values: Tensor, x0: float = -5.0, steps_per_value: int = 200
) -> tuple[Tensor, Tensor]:
    """``(up, down)``: the state after ``steps_per_value`` iterations at each ``b_values[i]``,
    sweeping ``b`` up then down with the state carried over."""
    levels = torch.as_tensor(b_values, dtype=torch.float64).tolist()
    x = float(x0)
    up, down = [], []
    for sweep, record in ((levels, up), (levels[::-1], down)):
        for b in sweep:
            for _ in range(steps_per_value):  # a scalar recursion: plain floats are fastest
                x = w / (1.0 + math.exp(-x)) + b
            record.append(x)
    return torch.tensor(up, dtype=torch.float64), torch.tensor(down[::-1], dtype=torch.float64)


def final_state_gradient(
    w: float, b_values: Tensor, x0: float, steps: int
) -> tuple[Tensor, Tensor]:
    """``x_T`` and ``d x_T / d b`` (by autograd) for every ``b`` in ``b_values``."""
    b = torch.as_tensor(b_values, dtype=torch.float64).clone().requires_grad_(True)
    final = iterate(w, b, x0, steps)[-1]
    (gradient,) = torch.autograd.grad(final.sum(), b)
    return final.detach(), gradient


def train_bias(
    w: float,
    b_init: float,
    target: float,
    *,
    threshold: float | None = None,
    x0: float = -5.0,
    steps: int = 50,
    learning_rate: float = 0.02,
    iterations: int = 40,
) -> dict[str, list[float]]:
    """Gradient descent on ``b`` for ``(x_T - target)^2 / 2``, clipped at ``threshold`` (``None``:
    not); per iteration ``b`` before the step, ``loss`` and ``grad_norm`` before clipping."""
    if iterations < 1 or learning_rate <= 0:
        raise ValueError(
            f"iterations must be >= 1 and learning_rate > 0, got {iterations} and "
            f"{learning_rate}; pass e.g. iterations=40, learning_rate=0.02"
        )
    b = torch.tensor(float(b_init), dtype=torch.float64, requires_grad=True)
    history: dict[str, list[float]] = {"b": [], "loss": [], "grad_norm": []}
    for _ in range(iterations):
        loss = 0.5 * (iterate(w, b, x0, steps)[-1] - target) ** 2
        b.grad = None
        loss.backward()
        norm = clip_gradient_norm_(b, math.inf if threshold is None else threshold)
        history["b"].append(float(b.detach()))
        history["loss"].append(float(loss.detach()))
        history["grad_norm"].append(norm)
        with torch.no_grad():
            b.sub_(learning_rate * b.grad)
    return history
