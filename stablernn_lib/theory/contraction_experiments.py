"""The experiments of Chapter 4 and its LSTM page, whose results
:mod:`stablernn_lib.figures.contraction` draws."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from stablernn_lib.core.contraction import project_spectral_ball, project_to_stable_
from stablernn_lib.core.models import LSTMMap, random_lstm, random_vanilla_rnn
from stablernn_lib.core.norms import spectral_norm
from stablernn_lib.theory.lstm_certificate import (
    authors_rescaled_lstm,
    concentrated_authors_lstm,
    iterated_jacobian_norms,
    measured_contraction,
    project_lstm_,
    random_stable_lstm,
    sample_box_states,
)


def spectral_projection_check(
    shape: tuple[int, int] = (4, 3),
    radius: float = 1.0,
    num_candidates: int = 20000,
    seed: int = 0,
) -> dict[str, float]:
    """``||W - P(W)||_F``, the smallest ``||W - A||_F`` over random ``A`` of the spectral ball
    (matrices rescaled into it and perturbations of ``P(W)`` pulled back), and ``||P(W)||_2``."""
    generator = torch.Generator().manual_seed(seed)
    W = 2 * torch.randn(shape, generator=generator, dtype=torch.float64)
    P = project_spectral_ball(W, radius)
    far = torch.randn((num_candidates // 2, *shape), generator=generator, dtype=torch.float64)
    far = far * radius / torch.linalg.matrix_norm(far, ord=2)[:, None, None]
    far = far * torch.rand(len(far), 1, 1, generator=generator, dtype=torch.float64)
    near = P + 0.05 * torch.randn(
        (num_candidates // 2, *shape), generator=generator, dtype=torch.float64
    )
    near = near / torch.linalg.matrix_norm(near, ord=2).clamp(min=radius)[:, None, None]
    candidates = torch.cat([far, near]) * radius
    return {
        "distance_to_projection": float((W - P).norm()),
        "closest_candidate": float((W - candidates).flatten(1).norm(dim=1).min()),
        "projection_spectral_norm": spectral_norm(P),
    }


@dataclass(frozen=True)
class DescentHistory:
    """Loss and ``||W||_2`` after every step of one (projected) gradient descent run."""

    loss: np.ndarray
    spectral_norm: np.ndarray
    projected: bool


def gradient_descent_rnn(
    project: bool,
    radius: float = 1.0,
    steps: int = 120,
    learning_rate: float = 0.5,
    hidden_size: int = 8,
    input_size: int = 3,
    seq_len: int = 20,
    batch: int = 32,
    teacher_lam: float = 1.6,
    seed: int = 0,
) -> DescentHistory:
    """Full-batch GD of a tanh RNN on the MSE to a teacher's states (``||W||_2 = teacher_lam``);
    with ``project``, ``W`` is projected onto ``{||W||_2 <= radius}`` after every step."""
    generator = torch.Generator().manual_seed(seed)
    teacher = random_vanilla_rnn(input_size, hidden_size, teacher_lam, generator=generator)
    student = random_vanilla_rnn(input_size, hidden_size, 0.5, generator=generator)
    inputs = torch.randn(seq_len, batch, input_size, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        targets = teacher.run(inputs)
    losses, norms = [], []
    for _ in tqdm(range(steps), desc="projected GD" if project else "plain GD", leave=False):
        student.zero_grad()
        loss = (student.run(inputs) - targets).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for param in student.parameters():
                param -= learning_rate * param.grad
        if project:
            project_to_stable_(student, radius)
        losses.append(float(loss.detach()))
        norms.append(spectral_norm(student.weight_hh))
    return DescentHistory(np.array(losses), np.array(norms), project)


def lstm_verification_rows(
    hidden_size: int = 16,
    input_size: int = 4,
    lams: tuple[float, ...] = (0.6, 0.8, 0.95),
    random_scales: tuple[float, ...] = (0.5, 1.0),
    num_states: int = 240,
    seed: int = 0,
) -> list[dict[str, object]]:
    """Certificates and measured contraction for random stable, random, projected and
    authors'-constrained LSTMs (inputs with ``||x||_inf <= 1``); one dict per model."""
    generator = torch.Generator().manual_seed(seed)
    sizes = (input_size, hidden_size)
    models: list[tuple[str, LSTMMap]] = [
        (f"built with λ = {lam}", random_stable_lstm(*sizes, lam, 1.0, generator=generator))
        for lam in lams
    ]
    for scale in random_scales:
        models.append((f"random, scale {scale}", random_lstm(*sizes, scale, generator=generator)))
        projected = random_lstm(*sizes, scale, generator=generator)
        project_lstm_(projected, lam=0.9)
        models.append((f"random, scale {scale}, projected to 0.9", projected))
    for forget_bias in (0.0, 1.0):
        model = authors_rescaled_lstm(
            *sizes, bias_std=0.1, forget_bias=forget_bias, generator=generator
        )
        models.append((f"authors' rescaling, forget bias {forget_bias:g}", model))
    for bias in (0.0, 5.0):
        model = concentrated_authors_lstm(*sizes, bias)
        models.append((f"authors' constraint, one unit reads all (bias {bias:g})", model))
    return [
        {"model": name, **measured_contraction(model, 1.0, num_states, generator)}
        for name, model in tqdm(models, desc="measuring LSTMs", leave=False)
    ]


def iterated_norm_curves(
    models: dict[str, LSTMMap],
    max_steps: int = 40,
    input_bound: float = 1.0,
    num_states: int = 90,
    seed: int = 0,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{name: (steps, norms)}``: the largest spectral norm of the ``r``-step Jacobian over box
    states and inputs with ``||x||_inf <= input_bound``, ``r`` on a log grid up to ``max_steps``."""
    generator = torch.Generator().manual_seed(seed)
    steps = np.unique(np.geomspace(1, max_steps, 12).astype(int))
    curves = {}
    for name, model in models.items():
        states, _ = sample_box_states(model, input_bound, num_states, generator)
        norms = []
        for r in steps:
            shape = (r, len(states), model.input_size)
            uniform = 2 * torch.rand(shape, generator=generator, dtype=states.dtype) - 1
            inputs = input_bound * uniform
            norms.append(float(iterated_jacobian_norms(model, states, inputs).max()))
        curves[name] = (steps, np.array(norms))
    return curves
