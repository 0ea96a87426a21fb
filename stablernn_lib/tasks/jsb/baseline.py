"""The no-memory baseline of JSB Chorales: every key on at its training frequency.

A model that ignores the past predicts key ``j`` of every next frame with one fixed
probability ``q_j``.  The best such ``q_j`` on the training set is the frequency ``f_j``
of key ``j`` among the predicted training frames (frames ``2..T`` of every chorale, the
targets the recurrent models are scored on), and its NLL per time step is

    NLL = -(1/n) sum_t sum_j [v_{t,j} log q_j + (1 - v_{t,j}) log(1 - q_j)]

in nats summed over the 88 keys, the unit of :func:`~stablernn_lib.tasks.jsb.train.evaluate_nll`.
``q = clip(f, floor, 1 - floor)``: a key never heard in training would otherwise get
probability 0 and an infinite NLL the first time it sounds in the test set (on JSB, one
test frame has such a key; with the default floor it costs ``log(1e6) / 4,648`` nats
per step).  A model "uses memory" only when it beats this number clearly
(``beats_baseline`` in ``data/results/criteria.json``).
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
