"""The no-memory baseline of JSB Chorales: every key on at its training frequency.

``q_j = clip(f_j, floor, 1 - floor)``, ``f_j`` key ``j``'s frequency among the predicted
training frames; ``NLL = -(1/n) sum_t sum_j [v_{t,j} log q_j + (1 - v_{t,j}) log(1 - q_j)]``
nats per step (the floor keeps a key never heard in training from an infinite NLL).
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_FLOOR = 1e-6


def _targets(rolls: list[Tensor]) -> Tensor:
    """The predicted frames of every chorale (frames ``2..T``), stacked: ``(n, 88)`` float64."""
    if not rolls:
        raise ValueError("no chorales given; pass a non-empty list of (T, 88) piano rolls")
    return torch.cat([roll[1:] for roll in rolls]).double()


def key_frequencies(train: list[Tensor], floor: float = DEFAULT_FLOOR) -> Tensor:
    """``q_j``: the fraction of predicted training frames where key ``j`` sounds, clipped to
    ``[floor, 1 - floor]``; ``(88,)`` float64."""
    if not 0.0 < floor < 0.5:
        raise ValueError(f"floor must be in (0, 0.5), got {floor}")
    return _targets(train).mean(0).clamp(floor, 1.0 - floor)


def independent_keys_nll(
    train: list[Tensor], test: list[Tensor], floor: float = DEFAULT_FLOOR
) -> float:
    """Test NLL per time step (nats, summed over the keys) of independent keys at their
    training frequencies :func:`key_frequencies`."""
    q = key_frequencies(train, floor)
    frames = _targets(test)
    log_likelihood = frames @ q.log() + (1.0 - frames) @ (1.0 - q).log()  # (n,)
    return float(-log_likelihood.mean())
