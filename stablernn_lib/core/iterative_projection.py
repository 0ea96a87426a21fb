"""The spectral projection by matrix products only (no SVD, no host sync, CUDA-graph safe):

    P_r(W) = W - Q relu(M) = W - Q (M + sign(M) M) / 2,   M = Q^T W - r I,  Q = U V^T,

``Q`` and ``sign(M)`` by Newton--Schulz ``X <- (3 X - X X^T X) / 2`` on ``(..., m, n)``;
:func:`spectral_norms_float64` is the exact check to run each epoch.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Newton--Schulz steps of the two iterations (fixed, so that a CUDA graph can capture them).
POLAR_ITERATIONS = 24
SIGN_ITERATIONS = 36


def _newton_schulz(x: Tensor, iterations: int) -> Tensor:
    """``iterations`` steps of ``X <- 1.5 X - 0.5 X X^T X``: towards the polar factor of ``X``
    (each singular value in ``(0, sqrt(3))`` goes to 1, zero stays zero)."""
    for _ in range(iterations):
        x = 1.5 * x - 0.5 * (x @ (x.mT @ x))
    return x


def polar_factor(matrices: Tensor, iterations: int = POLAR_ITERATIONS) -> Tensor:
    """``U V^T`` of ``W = U diag(s) V^T`` ``(..., m, n)`` by Newton--Schulz on ``W / ||W||_F``
    (``s`` converges after about ``log(||W||_F / s) / log 1.5`` steps)."""
    scale = torch.linalg.matrix_norm(matrices).clamp(min=torch.finfo(matrices.dtype).tiny)
    return _newton_schulz(matrices / scale[..., None, None], iterations)


def project_spectral_ball_iterative(
    matrices: Tensor,
    radius: float = 1.0,
    polar_iterations: int = POLAR_ITERATIONS,
    sign_iterations: int = SIGN_ITERATIONS,
) -> Tensor:
    """``P_r(W) = W - Q relu(Q^T W - r I)`` of ``(..., m, n)`` (wide: through the transpose)."""
    if not radius > 0:
        raise ValueError(f"the radius must be positive, got {radius}")
    if matrices.dim() < 2 or not matrices.is_floating_point():
        raise ValueError(f"expected floating matrices (..., m, n), got {tuple(matrices.shape)}")
    wide = matrices.shape[-2] < matrices.shape[-1]
    w = matrices.mT if wide else matrices
    q = polar_factor(w, polar_iterations)
    s = q.mT @ w
    eye = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)
    m = 0.5 * (s + s.mT) - radius * eye
    scale = torch.linalg.matrix_norm(m).clamp(min=torch.finfo(m.dtype).tiny)
    sign = _newton_schulz(m / scale[..., None, None], sign_iterations)
    relu = 0.5 * (m + 0.5 * (sign @ m + m @ sign))
    projected = w - q @ relu
    return projected.mT if wide else projected


def spectral_norms_float64(matrices: Tensor) -> Tensor:
    """``||W||_2`` of each matrix by an SVD in float64, ``(..., m, n) -> (...)``: the exact
    certificate (it synchronizes with the host on a GPU; run it once an epoch)."""
    return torch.linalg.matrix_norm(matrices.detach().double(), ord=2)
