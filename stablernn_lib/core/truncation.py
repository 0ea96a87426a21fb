"""The truncated model of context ``k``: ``h^k_t = phi_w(h^k_{t-1}, x_t)`` with ``h^k_{t-k} = 0``
(the last ``k`` inputs only; ``h^k_t = h_t`` for ``t <= k``)."""

from __future__ import annotations

import torch
from torch import Tensor

from stablernn_lib.core.models import RecurrentMap


def _check_context(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"the context k must be an int, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"the context k must be at least 1, got {k}; k = 1 keeps one input")


def truncated_states(model: RecurrentMap, inputs: Tensor, k: int) -> Tensor:
    """``h^k_1, ..., h^k_T``: inputs ``(T, B, D)`` -> ``(T, B, S)``, the ``T`` windows stacked
    along the batch (depth ``min(k, T)``); positions before ``x_1`` leave the state at zero."""
    model.check_inputs(inputs)
    _check_context(k)
    T, B, D = inputs.shape
    depth = min(k, T)
    # windows[j, t] = x_{t - depth + 1 + j} (zero-padded before the sequence starts)
    padded = torch.cat([inputs.new_zeros(depth - 1, B, D), inputs])
    windows = padded.unfold(0, depth, 1).permute(3, 0, 1, 2)  # (depth, T, B, D)
    times = torch.arange(T, device=inputs.device)
    state = model.zero_state(T * B)
    for j in range(depth):
        source = times - depth + 1 + j  # index of the input used at this step
        valid = (source >= 0).repeat_interleave(B).unsqueeze(-1)
        stepped = model.step(state, windows[j].reshape(T * B, D))
        state = torch.where(valid, stepped, state)
    return state.reshape(T, B, model.state_size)


def truncated_states_reference(model: RecurrentMap, inputs: Tensor, k: int) -> Tensor:
    """The same states as :func:`truncated_states`, one window at a time (for tests)."""
    model.check_inputs(inputs)
    _check_context(k)
    states = []
    for t in range(inputs.shape[0]):
        window = inputs[max(0, t - k + 1) : t + 1]
        states.append(model.run(window)[-1])
    return torch.stack(states)
