"""A sharper stability certificate for the vanilla RNN: diagonal scaling.

A positive diagonal ``D`` commutes with a coordinatewise activation, so
``||D (phi(h, x) - phi(h', x))||_2 <= L_rho ||D W D^-1||_2 ||D (h - h')||_2``: a contraction
in ``||D .||_2`` when ``lambda_D = L_rho ||D W D^-1||_2 < 1`` (never below ``L_rho rho(W)``).
``log ||D W D^-1||_2`` is convex in ``log d`` (Sezginer and Overton, 1990), with gradient
``u**2 - v**2`` (top singular vectors) where the top singular value is simple.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from stablernn_lib.core.norms import check_matrix


@dataclass(frozen=True)
class DiagonalCertificate:
    """``scales = d (H,)`` (max entry 1), ``lam = L_rho ||D W D^-1||_2``, ``spectral_lam =
    L_rho ||W||_2``, ``spectral_radius = L_rho rho(W)`` (a lower bound on every ``lam``),
    ``condition = max d / min d`` (the factor between ``||D .||_2`` and ``||.||_2``)."""

    scales: Tensor
    lam: float
    spectral_lam: float
    spectral_radius: float
    condition: float

    @property
    def certifies(self) -> bool:
        """Whether the model is proved contractive (``lam < 1``) in ``||D .||_2``."""
        return self.lam < 1


def scaled_matrix(matrix: Tensor, scales: Tensor) -> Tensor:
    """``D W D^-1`` with ``D = diag(scales)``: entries ``d_i W_ij / d_j``."""
    return scales[:, None] * matrix / scales[None, :]


def _log_norm(matrix: Tensor, log_scales: Tensor) -> tuple[float, Tensor]:
    """``(log ||D W D^-1||_2, its gradient u**2 - v**2)`` with ``D = diag(exp(t))``."""
    M = scaled_matrix(matrix, torch.exp(log_scales))
    U, s, Vh = torch.linalg.svd(M)
    if s[0] == 0:
        return -math.inf, torch.zeros_like(log_scales)
    return math.log(float(s[0])), U[:, 0] ** 2 - Vh[0] ** 2


def _balanced_start(matrix: Tensor, sweeps: int = 20) -> Tensor:
    """Osborne's balancing: ``t`` minimising ``||D W D^-1||_F`` (off-diagonal part), sweeps."""
    A = matrix.abs().clone()
    A.fill_diagonal_(0)
    t = torch.zeros(matrix.shape[0], dtype=matrix.dtype)
    for _ in range(sweeps):
        for i in range(len(t)):
            scaled = scaled_matrix(A, torch.exp(t))
            column, row = float((scaled[:, i] ** 2).sum()), float((scaled[i] ** 2).sum())
            if column > 0 and row > 0:
                t[i] += 0.25 * math.log(column / row)
    return t - t.max()


def diagonal_certificate(
    weight_hh: Tensor, l_rho: float = 1.0, iterations: int = 300, max_condition: float = 1e6
) -> DiagonalCertificate:
    """The best diagonal scaling found for ``W (H, H)``, ``L_rho ||D W D^-1||_2 <= L_rho ||W||_2``:
    the better of ``D = I`` and Osborne's balancing, then descent on ``log ||D W D^-1||_2`` with a
    monotone line search; ``max_condition`` caps ``max d / min d``."""
    check_matrix(weight_hh)
    if weight_hh.dim() != 2 or weight_hh.shape[0] != weight_hh.shape[1]:
        raise ValueError(f"weight_hh must be a square matrix (H, H), got {tuple(weight_hh.shape)}")
    if not l_rho > 0:
        raise ValueError(f"l_rho must be positive, got {l_rho}")
    W = weight_hh.detach().to(torch.float64).cpu()
    cap = math.log(max_condition)
    starts = [torch.zeros(W.shape[0], dtype=torch.float64), _balanced_start(W)]
    starts = [t.clamp(min=t.max() - cap) for t in starts]
    t = min(starts, key=lambda start: _log_norm(W, start)[0])
    value, grad = _log_norm(W, t)
    step = 1.0
    for _ in range(iterations):
        if step < 1e-10 or float(grad.abs().max()) < 1e-12:
            break
        trial = t - step * grad
        trial = trial.clamp(min=trial.max() - cap)
        trial_value, trial_grad = _log_norm(W, trial)
        if trial_value < value:
            t, value, grad, step = trial, trial_value, trial_grad, 2 * step
        else:
            step /= 2
    scales = torch.exp(t - t.max())
    identity_norm = float(torch.linalg.matrix_norm(W, ord=2))
    scaled_norm = float(torch.linalg.matrix_norm(scaled_matrix(W, scales), ord=2))
    if scaled_norm > identity_norm:  # never worse than D = I (rounding only)
        scales, scaled_norm = torch.ones_like(scales), identity_norm
    radius = float(torch.linalg.eigvals(W).abs().max())
    return DiagonalCertificate(
        scales=scales,
        lam=l_rho * scaled_norm,
        spectral_lam=l_rho * identity_norm,
        spectral_radius=l_rho * radius,
        condition=float(scales.max() / scales.min()),
    )


def scaled_pair_ratios(
    model, scales: Tensor, states: Tensor, others: Tensor, inputs: Tensor
) -> Tensor:
    """``||D (phi(h, x) - phi(h', x))||_2 / ||D (h - h')||_2`` for pairs ``(N, H)``: ``(N,)``."""
    with torch.no_grad():
        top = (scales * (model.step(states, inputs) - model.step(others, inputs))).norm(dim=-1)
        return top / (scales * (states - others)).norm(dim=-1)


def certificate_rows(models: dict[str, object]) -> list[dict[str, object]]:
    """Per vanilla-RNN language model (an ``nn.RNN`` at ``.rnn``) and layer: ``||W||_2`` and
    ``||D W D^-1||_2``; LSTMs are skipped."""
    rows = []
    for name, model in models.items():
        rnn = model.rnn
        if not isinstance(rnn, torch.nn.RNN):
            continue
        for layer in range(rnn.num_layers):
            certificate = diagonal_certificate(getattr(rnn, f"weight_hh_l{layer}"))
            rows.append(
                {
                    "model": name,
                    "layer": layer,
                    "spectral_lam": certificate.spectral_lam,
                    "diagonal_lam": certificate.lam,
                    "spectral_radius": certificate.spectral_radius,
                    "condition": certificate.condition,
                }
            )
    return rows


def certificate_table(rows: list[dict[str, object]]) -> str:
    """Markdown table of :func:`certificate_rows`, with which certificate proves stability
    (plain LaTeX: Colab and Jupyter do not know the book's macros such as ``\\norm``)."""
    lines = [
        "| model | layer | $\\lVert W \\rVert_2$ | best $\\lVert DWD^{-1} \\rVert_2$ "
        "| $\\rho(W)$ | $\\max d / \\min d$ | certified by $\\lVert W \\rVert_2$ "
        "| certified by $D$ |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['layer']} | {row['spectral_lam']:.3f} | "
            f"{row['diagonal_lam']:.3f} | {row['spectral_radius']:.3f} | "
            f"{row['condition']:.1f} | {'yes' if row['spectral_lam'] < 1 else 'no'} | "
            f"{'yes' if row['diagonal_lam'] < 1 else 'no'} |"
        )
    return "\n".join(lines)
