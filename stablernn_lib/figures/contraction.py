"""The figures and tables of Chapter 4 (stability as contractivity) and its LSTM page, from
:mod:`stablernn_lib.theory.contraction_experiments`; the widgets run their own small models."""

from __future__ import annotations

import re
from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from stablernn_lib.core.contraction import project_spectral_ball
from stablernn_lib.core.models import LSTMMap, random_vanilla_rnn
from stablernn_lib.core.norms import spectral_norm
from stablernn_lib.core.style import BOUND_COLOR, FULL_COLOR, TRUNCATED_COLOR, apply_style, finish
from stablernn_lib.core.tables import format_value, markdown_table, text_table
from stablernn_lib.theory import lstm_certificate
from stablernn_lib.theory.contraction_experiments import DescentHistory

MATRIX_KINDS = ("scaled orthogonal", "gaussian")


@lru_cache(maxsize=64)
def _trajectory_pair(
    lam: float, activation: str, matrix: str, steps: int, hidden_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """States ``(T + 1, H)`` of two runs of one RNN on the same inputs from two initial states."""
    if matrix not in MATRIX_KINDS:
        raise ValueError(f"matrix must be one of {MATRIX_KINDS}, got {matrix!r}")
    generator = torch.Generator().manual_seed(seed)
    model = random_vanilla_rnn(4, hidden_size, lam, activation, generator=generator)
    if matrix == "scaled orthogonal":
        gaussian = torch.randn(hidden_size, hidden_size, generator=generator, dtype=torch.float64)
        q, _ = torch.linalg.qr(gaussian)
        with torch.no_grad():
            model.weight_hh.copy_(lam * q)
    inputs = torch.randn(steps, 1, 4, generator=generator, dtype=torch.float64)
    starts = 2 * torch.randn(2, 1, hidden_size, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        runs = [torch.cat([h0, model.run(inputs, h0)[:, 0]]) for h0 in starts]
    return runs[0].numpy(), runs[1].numpy()


def trajectories_figure(
    lam: float,
    matrix: str = "scaled orthogonal",
    steps: int = 60,
    hidden_size: int = 32,
    seed: int = 0,
) -> Figure:
    """Two runs of ``h' = rho(W h + U x)`` (same inputs, different ``h_0``), ``||W||_2 = lam``:
    unit 0 of both tanh runs (left); ``||h_t - h'_t||_2`` (log scale) for the tanh and the
    linear RNN, with the bound ``lam^t ||h_0 - h'_0||_2`` (right)."""
    apply_style()
    first, second = _trajectory_pair(lam, "tanh", matrix, steps, hidden_size, seed)
    t = np.arange(first.shape[0])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.2))
    left.plot(t, first[:, 0], color=FULL_COLOR, label="run from $h_0$")
    left.plot(t, second[:, 0], color=TRUNCATED_COLOR, ls="--", label="run from $h_0'$")
    left.set(xlabel="time $t$", ylabel="unit 0 of $h_t$ (tanh)", title=f"{matrix} W")
    both = np.concatenate([first[:, 0], second[:, 0]])
    spread = both.max() - both.min()
    left.set_ylim(both.min() - 0.35 * spread, both.max() + 0.05 * spread)
    left.legend(loc="lower center", ncol=2)
    gaps = {}
    for activation, color in (("tanh", FULL_COLOR), ("identity", TRUNCATED_COLOR)):
        a, b = _trajectory_pair(lam, activation, matrix, steps, hidden_size, seed)
        gaps[activation] = np.linalg.norm(a - b, axis=1)
        right.semilogy(
            t,
            np.maximum(gaps[activation], 1e-300),
            color=color,
            label=rf"$\|h_t - h_t'\|_2$, {activation}",
        )
    start = gaps["tanh"][0]
    right.semilogy(
        t,
        start * lam ** t.astype(float),
        color=BOUND_COLOR,
        ls=":",
        label=r"$\lambda^t \|h_0 - h_0'\|_2$",
    )
    low = min(min(gap.min() for gap in gaps.values()), start * lam**steps)
    high = max(max(gap.max() for gap in gaps.values()), start * lam**steps)
    right.set_ylim(max(1e-16, low / 10), high * 10)
    right.set(xlabel="time $t$", title=rf"$\lambda = L_\rho \|W\|_2 = {lam:g}$")
    right.legend(loc="best")
    fig.tight_layout()
    return finish(fig)


FAMILIES = {
    "diagonal": (lambda a, b: [[a, 0.0], [0.0, b]], ((0, 0), (1, 1))),
    "symmetric": (lambda a, b: [[a, b], [b, a]], ((0, 0), (0, 1))),
    "rotation-scaling": (lambda a, b: [[a, -b], [b, a]], ((0, 0), (1, 0))),
}


def family_matrix(family: str, a: float, b: float) -> torch.Tensor:
    """The ``2 x 2`` matrix with coordinates ``(a, b)`` in a family (see ``FAMILIES``)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    return torch.tensor(FAMILIES[family][0](a, b), dtype=torch.float64)


def projected_point(family: str, a: float, b: float, radius: float = 1.0) -> tuple[float, float]:
    """``(a, b)`` of the projection of the family's matrix onto ``{||W||_2 <= radius}``."""
    projected = project_spectral_ball(family_matrix(family, a, b), radius)
    (i, j), (k, m) = FAMILIES[family][1]
    return float(projected[i, j]), float(projected[k, m])


@lru_cache(maxsize=8)
def _unit_ball_boundary(family: str, radius: float, points: int = 721) -> np.ndarray:
    """Boundary of ``{||W(a, b)||_2 <= radius}``: ``radius * d / ||W(d)||_2`` for unit ``d``
    (``W`` is linear in ``(a, b)``, the norm homogeneous: each direction meets it once)."""
    angles = np.linspace(0, 2 * np.pi, points)
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    mats = torch.stack([family_matrix(family, float(a), float(b)) for a, b in directions])
    norms = torch.linalg.matrix_norm(mats, ord=2).numpy()
    return radius * directions / norms[:, None]


def projection_figure(a: float, b: float, radius: float = 1.0, limit: float = 2.0) -> Figure:
    """``{||W||_2 <= radius}`` and the projection of ``W(a, b)`` in three planes of ``2 x 2``
    matrices (each closed under it, Frobenius norm a multiple of ``sqrt(a^2 + b^2)``)."""
    apply_style()
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 3.6))
    names = {"diagonal": "[[a,0],[0,b]]", "symmetric": "[[a,b],[b,a]]"}
    for axis, family in zip(axes, FAMILIES, strict=True):
        boundary = _unit_ball_boundary(family, radius)
        axis.fill(boundary[:, 0], boundary[:, 1], color="#cfe0f1", ec=FULL_COLOR, lw=1.2)
        pa, pb = projected_point(family, a, b, radius)
        axis.plot([a, pa], [b, pb], color=BOUND_COLOR, ls="--", lw=1)
        axis.plot(a, b, "o", color=TRUNCATED_COLOR, label="$W$")
        axis.plot(pa, pb, "s", color=FULL_COLOR, label=r"$P(W)$")
        norm = spectral_norm(family_matrix(family, a, b))
        axis.set(
            xlim=(-limit, limit),
            ylim=(-limit, limit),
            aspect="equal",
            xlabel="a",
            ylabel="b",
            title=f"{family} {names.get(family, '[[a,-b],[b,a]]')}\n$\\|W\\|_2$ = {norm:.2f}",
        )
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    return finish(fig)


def projected_descent_figure(runs: list[DescentHistory], radius: float = 1.0) -> Figure:
    """Loss and ``||W||_2`` against the step for plain and projected gradient descent."""
    apply_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.2))
    for run in runs:
        color, label = (FULL_COLOR, "projected") if run.projected else (TRUNCATED_COLOR, "plain")
        steps = np.arange(1, len(run.loss) + 1)
        left.semilogy(steps, run.loss, color=color, label=label)
        right.plot(steps, run.spectral_norm, color=color, label=label)
    right.axhline(radius, color=BOUND_COLOR, ls=":", label="radius")
    left.set(xlabel="step", ylabel="training loss")
    right.set(xlabel="step", ylabel=r"$\|W\|_2$")
    left.legend()
    right.legend()
    fig.tight_layout()
    return finish(fig)


def verification_table(rows: list[dict[str, object]]) -> str:
    """The rows of ``lstm_verification_rows``: proved constants (``p = inf``, 1), largest
    Jacobian norm and pair ratio in the certificate's and the Euclidean norm."""
    headers = {
        "model": "model",
        "certificate": "proved (∞)",
        "certificate_l1": "proved (1)",
        "jacobian_certificate_norm": "Jacobian (cert.)",
        "pairs_certificate_norm": "pairs (cert.)",
        "jacobian_euclidean": "Jacobian (Eucl.)",
        "pairs_euclidean": "pairs (Eucl.)",
    }
    return markdown_table(
        [{key: row[key] if key == "model" else float(row[key]) for key in headers} for row in rows],
        headers,
    )


def contraction_table(rows: list[dict[str, object]]) -> str:
    """Per row of ``lstm_verification_rows``: proved ``lambda_inf`` and largest measured one-step
    constant in the certificate's and the Euclidean norm, each with its verdict "< 1"."""
    cells = []
    for row in rows:
        proved = float(row["certificate"])
        measured = max(
            float(row["jacobian_certificate_norm"]), float(row["pairs_certificate_norm"])
        )
        euclidean = max(float(row["jacobian_euclidean"]), float(row["pairs_euclidean"]))
        verdicts = (
            f"{format_value(v)} ({'< 1' if v < 1 else '≥ 1'})"
            for v in (proved, measured, euclidean)
        )
        cells.append([f"{row['model']}", *verdicts])
    columns = "model | certified λ | measured, certificate's norm | measured, Euclidean"
    return text_table(columns, cells, right=(1, 2, 3))


def gate_norm_table(model: LSTMMap) -> str:
    """:func:`~stablernn_lib.theory.lstm_certificate.gate_norm_table` with the blocks in math
    (``$W_i$``), without its forget-bias line."""
    table = lstm_certificate.gate_norm_table(model).split("\n\n")[0]
    return re.sub(r"^\| `(\w+)` \|", r"| $\1$ |", table, flags=re.MULTILINE)


def lstm_verification_figure(rows: list[dict[str, object]]) -> Figure:
    """Measured Lipschitz constants (certificate's norm and Euclidean) against the proof's bound."""
    apply_style()
    fig, axis = plt.subplots(figsize=(9.0, 3.8))
    positions = np.arange(len(rows))
    proved = np.array([float(row["certificate"]) for row in rows])
    shown = np.where(np.isfinite(proved), proved, np.nan)
    axis.scatter(positions, shown, marker="_", s=400, color=BOUND_COLOR, label="proved bound")
    axis.scatter(
        positions - 0.12,
        [row["jacobian_certificate_norm"] for row in rows],
        color=FULL_COLOR,
        label="measured, certificate norm",
    )
    axis.scatter(
        positions + 0.12,
        [row["jacobian_euclidean"] for row in rows],
        color=TRUNCATED_COLOR,
        marker="D",
        label="measured, Euclidean",
    )
    axis.axhline(1.0, color="black", lw=0.8, ls=":")
    axis.set_yscale("log")
    axis.set_xticks(positions, [str(row["model"]) for row in rows], rotation=35, ha="right")
    axis.set_ylabel("Lipschitz constant of one step")
    axis.legend(loc="upper left")
    fig.tight_layout()
    return finish(fig)


def iterated_norms_figure(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> Figure:
    """Largest spectral norm of the ``r``-step Jacobian against ``r``, one curve per model, from
    :func:`stablernn_lib.theory.contraction_experiments.iterated_norm_curves`."""
    apply_style()
    fig, axis = plt.subplots(figsize=(6.5, 3.4))
    for (name, (steps, norms)), color in zip(
        curves.items(), [FULL_COLOR, TRUNCATED_COLOR, BOUND_COLOR, "#7a9a01"], strict=False
    ):
        axis.semilogy(steps, norms, "o-", color=color, label=name, ms=3)
    axis.axhline(1.0, color="black", lw=0.8, ls=":")
    axis.set(xlabel="number of steps $r$", ylabel=r"max $\|\partial s_r / \partial s_0\|_2$")
    axis.legend()
    fig.tight_layout()
    return finish(fig)
