"""Contraction ``||phi_w(h, x) - phi_w(h', x)|| <= lambda ||h - h'||``, ``lambda < 1``: the constant
(``L_rho ||W||_2`` for ``h' = rho(W h + U x)``), the projection onto the stable set, measured
Lipschitz constants."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.func import jacrev, vmap

from stablernn_lib.core.models import RecurrentMap, VanillaRNN
from stablernn_lib.core.norms import activation_lipschitz, check_matrix, spectral_norm


def contraction_constant(model: VanillaRNN) -> float:
    """``lambda = L_rho ||W||_2`` for a vanilla (or linear) RNN; stable when ``< 1``."""
    if not isinstance(model, VanillaRNN):
        raise TypeError(
            f"contraction_constant needs a VanillaRNN or LinearRNN, got {type(model).__name__}; "
            "for an LSTM use stablernn_lib.theory.lstm_certificate.lstm_contraction_bound"
        )
    return activation_lipschitz(model.activation) * spectral_norm(model.weight_hh)


def project_spectral_ball(matrix: Tensor, radius: float = 1.0) -> Tensor:
    """``U diag(min(s, radius)) V^T`` for ``W = U diag(s) V^T`` ``(..., m, n)``: the nearest
    matrix of ``{||W||_2 <= radius}`` in Frobenius norm; by
    :func:`project_spectral_ball_by_eigh` when the SVD raises or fails :func:`svd_reproduces`."""
    check_matrix(matrix)
    if not radius > 0:
        raise ValueError(f"the radius must be positive, got {radius}")
    check_finite(matrix)
    try:
        U, s, Vh = torch.linalg.svd(matrix, full_matrices=False)
    except torch.linalg.LinAlgError:
        return project_spectral_ball_by_eigh(matrix, radius)
    if not svd_reproduces(matrix, U, s, Vh):
        return project_spectral_ball_by_eigh(matrix, radius)
    return (U * s.clamp(max=radius).unsqueeze(-2)) @ Vh


def svd_reproduces(
    matrix: Tensor, U: Tensor, s: Tensor, Vh: Tensor, tolerance: float = 1e-3
) -> bool:
    """Whether ``||U diag(s) Vh - W||_F <= tolerance ||W||_F`` for every matrix (NaN fails):
    LAPACK's CPU SVD can silently return wrong factors for many singular values at the radius."""
    residual = torch.linalg.matrix_norm((U * s.unsqueeze(-2)) @ Vh - matrix)
    return bool((residual <= tolerance * torch.linalg.matrix_norm(matrix)).all())


def check_finite(matrix: Tensor) -> None:
    """Raise when a matrix to project has NaN or infinite entries (a host sync on a GPU)."""
    if not torch.isfinite(matrix).all():
        raise ValueError(
            "the matrix to project has NaN or infinite entries: the run diverged before "
            "the projection; lower the learning rate or resume from an earlier checkpoint"
        )


def project_spectral_ball_by_eigh(
    matrix: Tensor, radius: float, dtype: torch.dtype = torch.float64
) -> Tensor:
    """:func:`project_spectral_ball` from ``W^T W = V diag(s^2) V^T`` ``(..., m, n)``:
    ``W V diag(min(1, radius / s)) V^T``, in ``dtype``, returned in the matrix's dtype
    (cheaper than an SVD, and safe with the repeated singular values projections make)."""
    wide = matrix.shape[-2] < matrix.shape[-1]
    w = matrix.to(dtype).mT if wide else matrix.to(dtype)
    eigenvalues, V = torch.linalg.eigh(w.mT @ w)
    singular_values = eigenvalues.clamp(min=0).sqrt()
    scale = (radius / singular_values.clamp(min=radius)).unsqueeze(-2)
    projected = w @ ((V * scale) @ V.mT)
    return (projected.mT if wide else projected).to(matrix.dtype)


@torch.no_grad()
def project_to_stable_(model: VanillaRNN, radius: float = 1.0) -> VanillaRNN:
    """Project ``W`` in place so that ``||W||_2 <= radius`` (stable if ``L_rho radius < 1``)."""
    if not isinstance(model, VanillaRNN):
        raise TypeError(f"project_to_stable_ needs a VanillaRNN, got {type(model).__name__}")
    model.weight_hh.copy_(project_spectral_ball(model.weight_hh, radius))
    return model


def _check_points(model: RecurrentMap, states: Tensor, inputs: Tensor) -> None:
    if states.dim() != 2 or states.shape[1] != model.state_size:
        raise ValueError(
            f"states must have shape (N, {model.state_size}), got {tuple(states.shape)}"
        )
    if inputs.dim() != 2 or inputs.shape != (states.shape[0], model.input_size):
        raise ValueError(
            f"inputs must have shape (N, {model.input_size}) with N = {states.shape[0]}, "
            f"got {tuple(inputs.shape)}"
        )


def state_jacobians(model: RecurrentMap, states: Tensor, inputs: Tensor) -> Tensor:
    """Jacobians ``d phi_w / d h`` at ``N`` points: ``(N, S), (N, D) -> (N, S, S)``."""
    _check_points(model, states, inputs)

    def single(state: Tensor, x: Tensor) -> Tensor:
        return model.step(state.unsqueeze(0), x.unsqueeze(0)).squeeze(0)

    return vmap(jacrev(single))(states.detach(), inputs.detach())


def jacobian_norms(model: RecurrentMap, states: Tensor, inputs: Tensor) -> Tensor:
    """Spectral norms ``(N,)`` of the state Jacobians at ``N`` points (their maximum: a lower
    bound on the Lipschitz constant in ``h``); in float64, where LAPACK's SVD converges."""
    jacobians = state_jacobians(model, states, inputs).detach()
    return torch.linalg.matrix_norm(jacobians.double(), ord=2).to(jacobians.dtype)


@torch.no_grad()
def empirical_lipschitz(
    model: RecurrentMap,
    inputs: Tensor,
    num_pairs: int = 1000,
    scale: float = 1.0,
    generator: torch.Generator | None = None,
) -> float:
    """Largest ``||phi(h, x) - phi(h', x)|| / ||h - h'||`` over ``num_pairs // N`` pairs of
    ``N(0, scale^2)`` states per input row ``(N, D)``: a lower bound on the Lipschitz constant."""
    if inputs.dim() != 2 or inputs.shape[1] != model.input_size:
        raise ValueError(
            f"inputs must have shape (N, {model.input_size}), got {tuple(inputs.shape)}"
        )
    if num_pairs < 1 or scale <= 0:
        raise ValueError("num_pairs must be >= 1 and scale > 0")
    repeats = max(1, num_pairs // inputs.shape[0])
    x = inputs.repeat(repeats, 1)
    shape = (x.shape[0], model.state_size)
    h = torch.randn(shape, generator=generator, dtype=x.dtype).to(x.device) * scale
    h_prime = torch.randn(shape, generator=generator, dtype=x.dtype).to(x.device) * scale
    numerator = (model.step(h, x) - model.step(h_prime, x)).norm(dim=-1)
    return float((numerator / (h - h_prime).norm(dim=-1)).max())
