"""``L_rho = sup |rho'|`` of the activations and ``||W||_2`` (the largest singular value), so
that ``lambda = L_rho ||W||_2``; a leaf module that ``models`` and ``contraction`` import."""

from __future__ import annotations

import torch
from torch import Tensor

ACTIVATION_LIPSCHITZ: dict[str, float] = {
    "tanh": 1.0,
    "relu": 1.0,
    "identity": 1.0,
    "sigmoid": 0.25,
}


def activation_lipschitz(name: str) -> float:
    """The Lipschitz constant ``L_rho = sup |rho'|`` of a named activation."""
    if name not in ACTIVATION_LIPSCHITZ:
        raise ValueError(
            f"no known Lipschitz constant for activation {name!r}; "
            f"use one of {sorted(ACTIVATION_LIPSCHITZ)}"
        )
    return ACTIVATION_LIPSCHITZ[name]


def check_matrix(matrix: Tensor) -> None:
    """Raise a clear error unless ``matrix`` is a floating tensor of shape ``(..., m, n)``."""
    if not isinstance(matrix, Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(matrix).__name__}")
    if matrix.dim() < 2:
        raise ValueError(
            f"expected a matrix (or a batch of matrices), got shape {tuple(matrix.shape)}"
        )
    if not matrix.is_floating_point():
        raise TypeError(f"expected a floating tensor, got {matrix.dtype}; use matrix.double()")


def spectral_norm(matrix: Tensor) -> float:
    """The largest singular value ``||W||_2`` of a matrix ``(m, n)``."""
    check_matrix(matrix)
    if matrix.dim() != 2:
        raise ValueError(f"spectral_norm takes one matrix, got shape {tuple(matrix.shape)}")
    return float(torch.linalg.matrix_norm(matrix.detach(), ord=2))
