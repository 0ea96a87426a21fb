"""Adversarial searches for the largest ratio measured / bound of every constant.

Adam ascent with restarts over weights, states, inputs and targets, projected after each
step onto fixed constants (``L_rho ||W||_2 <= lambda``, ``L_rho ||U||_2 <= L_x``,
``||x_t|| <= B_x``, ``||y|| <= Y``); the instance found is re-measured by the library with
the constants read off it.  A ratio above 1 would refute a lemma.
``python -m stablernn_lib tightness`` writes ``data/results/tightness.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from stablernn_lib.core import bounds
from stablernn_lib.core.contraction import project_spectral_ball
from stablernn_lib.core.io import atomic_write_json, provenance
from stablernn_lib.core.models import LSTMMap, VanillaRNN, random_vanilla_rnn
from stablernn_lib.core.norms import activation_lipschitz, spectral_norm
from stablernn_lib.core.results import results_path
from stablernn_lib.theory.lemmas import (
    RegressionInstance,
    gradient_gap_experiment,
    gradient_gaps,
    parameter_gradient,
    single_threaded,
    smoothness_experiment,
    truncation_experiment,
    truncation_gaps,
)
from stablernn_lib.theory.lstm_certificate import (
    jacobian_certificate_norms,
    lstm_certificate,
    random_stable_lstm,
    sample_box_states,
)
from stablernn_lib.theory.weights_close import (
    COMMITTED_RESULTS,
    load_results,
    proposition2_bound,
    step_sizes,
)

DEFAULT_OUT = Path("data/results/tightness.json")
# lambda grid of the one-unit linear instance that shows beta is asymptotically exact
BETA_ASYMPTOTIC_LAMS = (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)
ACTIVATION_FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "identity": lambda u: u,
}


@dataclass(frozen=True)
class TightnessConfig:
    """Sizes and budgets of one tightness run (every search uses float64)."""

    name: str
    seed: int = 0
    restarts: int = 3
    steps: int = 150
    learning_rate: float = 0.05
    hidden_size: int = 3
    input_size: int = 2
    seq_len: int = 40
    lams: tuple[float, ...] = (0.3, 0.6, 0.9)
    ks: tuple[int, ...] = (1, 3)
    activations: tuple[str, ...] = ("identity", "tanh")
    target_norms: tuple[float, ...] = (0.0, 1.0)
    input_norms: tuple[float, ...] = (1.0, 0.1)
    lstm_hidden_sizes: tuple[int, ...] = (1, 2)
    lstm_lams: tuple[float, ...] = (0.5, 0.9)
    lstm_climb_steps: int = 20
    random_instances: int = 3
    beta_lams: tuple[float, ...] = BETA_ASYMPTOTIC_LAMS  # the one-unit instance for beta

    def __post_init__(self) -> None:
        if self.restarts < 1 or self.steps < 1 or self.seq_len < 2:
            raise ValueError(
                f"need restarts >= 1, steps >= 1 and seq_len >= 2, got {self.restarts}, "
                f"{self.steps}, {self.seq_len}"
            )
        if not all(0 < lam < 1 for lam in (*self.lams, *self.lstm_lams, *self.beta_lams)):
            raise ValueError(f"every lambda must lie in (0, 1), got {self.lams}, {self.lstm_lams}")
        if max(self.ks) >= self.seq_len:
            raise ValueError(f"contexts {self.ks} must be shorter than seq_len = {self.seq_len}")
        unknown = set(self.activations) - set(ACTIVATION_FUNCTIONS)
        if unknown:
            raise ValueError(f"unknown activations {sorted(unknown)}: use tanh or identity")


CONFIGS: dict[str, TightnessConfig] = {
    # seconds: what the tests run
    "smoke": TightnessConfig(
        name="smoke",
        restarts=1,
        steps=60,
        seq_len=20,
        lams=(0.5,),
        ks=(2,),
        activations=("identity",),
        target_norms=(1.0,),
        lstm_hidden_sizes=(1,),
        lstm_lams=(0.9,),
        lstm_climb_steps=5,
        random_instances=1,
        beta_lams=(0.5, 0.9),
    ),
    # a few CPU minutes on one thread: the committed table
    "full": TightnessConfig(
        name="full", restarts=2, steps=250, lams=(0.1, 0.5, 0.9), lstm_climb_steps=60
    ),
}


def _ascend(
    objective: Callable[[], Tensor],
    params: list[Tensor],
    project: Callable[[], None],
    steps: int,
    learning_rate: float,
) -> None:
    """Projected gradient ascent on ``objective()`` with Adam, in place on ``params``."""
    optimizer = torch.optim.Adam(params, lr=learning_rate, maximize=True)
    project()
    for _ in range(steps):
        optimizer.zero_grad()
        value = objective()
        if not torch.isfinite(value):
            break
        value.backward()
        optimizer.step()
        project()


def _project_rows_(vectors: Tensor, radius: float) -> None:
    """Scale every row of ``vectors`` (in place) into the ball ``||v|| <= radius``."""
    norms = vectors.norm(dim=-1, keepdim=True).clamp(min=1e-300)
    vectors.mul_((radius / norms).clamp(max=1.0))


def _final_state(W: Tensor, U: Tensor, inputs: Tensor, activation: str) -> Tensor:
    """``h_T`` of ``h_t = rho(W h_{t-1} + U x_t)``, ``h_0 = 0``; inputs ``(T, D)``."""
    rho = ACTIVATION_FUNCTIONS[activation]
    h = torch.zeros(W.shape[0], dtype=W.dtype)
    for x in inputs:
        h = rho(W @ h + U @ x)
    return h


def _rnn(W: Tensor, U: Tensor, activation: str) -> VanillaRNN:
    """A library :class:`VanillaRNN` (bias-free, float64) with the given weights."""
    model = random_vanilla_rnn(U.shape[1], W.shape[0], 0.5, activation)
    with torch.no_grad():
        model.weight_hh.copy_(W.detach())
        model.weight_ih.copy_(U.detach())
    return model


@dataclass
class _RNNVariables:
    """Weights, inputs and target of one search, projected onto the constraint set."""

    W: Tensor
    U: Tensor
    inputs: Tensor
    target: Tensor
    lam: float
    l_rho: float
    target_norm: float
    input_norm: float = 1.0

    @classmethod
    def draw(
        cls,
        config: TightnessConfig,
        lam: float,
        activation: str,
        generator: torch.Generator,
        target_norm: float = 0.0,
        input_norm: float = 1.0,
    ) -> _RNNVariables:
        """Gaussian ``W, U``, inputs and target, projected (``target_norm = 0``: no target)."""
        H, D, T = config.hidden_size, config.input_size, config.seq_len

        def normal(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=generator, dtype=torch.float64)

        variables = cls(
            normal(H, H),
            normal(H, D),
            normal(T, D),
            normal(H),
            lam,
            activation_lipschitz(activation),
            target_norm,
            input_norm,
        )
        for tensor in variables.tensors():
            tensor.requires_grad_(True)
        variables.project()
        return variables

    def tensors(self) -> list[Tensor]:
        return [self.W, self.U, self.inputs, self.target]

    def contraction(self) -> float:
        """The instance's own ``L_rho ||W||_2`` (at most the projection radius ``lam``)."""
        return self.l_rho * spectral_norm(self.W.detach())

    @torch.no_grad()
    def project(self) -> None:
        """``L_rho ||W||_2 <= lam``, ``L_rho ||U||_2 <= 1``, ``||x_t|| <= B_x``, ``||y|| <= Y``."""
        self.W.copy_(project_spectral_ball(self.W, self.lam / self.l_rho))
        self.U.copy_(project_spectral_ball(self.U, 1.0 / self.l_rho))
        _project_rows_(self.inputs, self.input_norm)
        _project_rows_(self.target[None], self.target_norm)


def _gradient(W: Tensor, U: Tensor, inputs: Tensor, target: Tensor, activation: str) -> Tensor:
    """``grad_(W, U) ||h_T - y||^2 / 2`` flattened, differentiable (double backward)."""
    loss = 0.5 * ((_final_state(W, U, inputs, activation) - target) ** 2).sum()
    grads = torch.autograd.grad(loss, (W, U), create_graph=True)
    return torch.cat([g.reshape(-1) for g in grads])


def _record(ratio: float, **details: Any) -> dict[str, Any]:
    return {"ratio": float(ratio), **details}


def _best(records: list[dict[str, Any]]) -> dict[str, Any]:
    finite = [r for r in records if math.isfinite(r["ratio"])]
    return max(finite, key=lambda r: r["ratio"]) if finite else {"ratio": math.nan}


def lemma1_ratio(W: Tensor, U: Tensor, inputs: Tensor, activation: str, k: int) -> float:
    """``max_t ||h_t - h^k_t|| / (lambda^k L_x B_x / (1 - lambda))``, with the instance's
    ``lambda = L_rho ||W||_2``, ``L_x = L_rho ||U||_2``, ``B_x = max_t ||x_t||``."""
    model = _rnn(W, U, activation)
    inputs = inputs.detach()
    measured = float(truncation_gaps(model, inputs[:, None, :], [k])[0])
    l_rho = activation_lipschitz(activation)
    bound = bounds.lemma1_truncation_bound(
        l_rho * spectral_norm(model.weight_hh),
        l_rho * spectral_norm(model.weight_ih),
        float(inputs.norm(dim=-1).max()),
        k,
    )
    return measured / bound


def lemma1_search(
    config: TightnessConfig, lam: float, k: int, activation: str, generator: torch.Generator
) -> dict[str, Any]:
    """The largest Lemma 1 ratio over ``W, U`` and the inputs (restarts of ascent)."""
    records = []
    for _ in range(config.restarts):
        v = _RNNVariables.draw(config, lam, activation, generator)

        def ratio(v: _RNNVariables = v) -> Tensor:
            full = _final_state(v.W, v.U, v.inputs, activation)
            truncated = _final_state(v.W, v.U, v.inputs[-k:], activation)
            lam_w = v.l_rho * torch.linalg.matrix_norm(v.W, ord=2)
            lx = v.l_rho * torch.linalg.matrix_norm(v.U, ord=2)
            bx = v.inputs.norm(dim=-1).max()
            return (full - truncated).norm() * (1 - lam_w) / (lam_w**k * lx * bx)

        _ascend(ratio, [v.W, v.U, v.inputs], v.project, config.steps, config.learning_rate)
        records.append(
            _record(lemma1_ratio(v.W, v.U, v.inputs, activation, k), instance_lam=v.contraction())
        )
    return {"lam": lam, "k": k, "activation": activation, **_best(records)}


def _instance(W: Tensor, U: Tensor, inputs: Tensor, target: Tensor, activation: str):
    return RegressionInstance(
        _rnn(W, U, activation), inputs.detach()[:, None, :].clone(), target.detach().clone()
    )


def lemma2_ratio(
    W: Tensor, U: Tensor, inputs: Tensor, target: Tensor, activation: str, k: int
) -> float:
    """Lemma 2's ``||grad p_T - grad p^k_T|| / (gamma k lambda^k)`` by the library."""
    instance = _instance(W, U, inputs, target, activation)
    constants = instance.constants()
    gamma = bounds.lemma2_gamma(constants)
    measured = float(gradient_gaps(instance, [k])[0])
    return measured / bounds.lemma2_gradient_bound(gamma, k, constants.lam)


def lemma2_search(
    config: TightnessConfig,
    lam: float,
    k: int,
    activation: str,
    target_norm: float,
    generator: torch.Generator,
    input_norm: float = 1.0,
) -> dict[str, Any]:
    """The largest Lemma 2 ratio over ``W, U``, inputs and target."""
    records = []
    for _ in range(config.restarts):
        v = _RNNVariables.draw(config, lam, activation, generator, target_norm, input_norm)

        def gap(v: _RNNVariables = v) -> Tensor:
            full = _gradient(v.W, v.U, v.inputs, v.target, activation)
            truncated = _gradient(v.W, v.U, v.inputs[-k:], v.target, activation)
            return (full - truncated).norm()

        _ascend(gap, v.tensors(), v.project, config.steps, config.learning_rate)
        value = lemma2_ratio(v.W, v.U, v.inputs, v.target, activation, k)
        records.append(_record(value, instance_lam=v.contraction()))
    best = _best(records)
    details = {"lam": lam, "k": k, "activation": activation, "target_norm": target_norm}
    return {**details, "input_norm": input_norm, **best}


def lemma3_ratio(
    first: tuple[Tensor, Tensor],
    second: tuple[Tensor, Tensor],
    inputs: Tensor,
    target: Tensor,
    activation: str,
) -> float:
    """``||grad p(w) - grad p(w')|| / (beta ||w - w'||)``, ``beta`` with the larger ``lambda`` and
    ``L_x`` of the two points."""
    a = _instance(*first, inputs, target, activation)
    b = _instance(*second, inputs, target, activation)
    lam, lx, bx = max(a.lam, b.lam), max(a.lx, b.lx), a.bx
    lp, sp = bounds.squared_loss_constants(
        bounds.state_norm_bound(lam, lx, bx), float(a.target.norm())
    )
    l_rho, l2_rho = activation_lipschitz(activation), bounds.activation_smoothness(activation)
    beta = bounds.lemma3_beta(bounds.GradientConstants(lam, lx, bx, lp, sp, l_rho, l2_rho))
    gap = parameter_gradient(a.model, a.inputs, a.target) - parameter_gradient(
        b.model, b.inputs, b.target
    )
    distance = float(
        torch.cat([(x - y).detach().reshape(-1) for x, y in zip(first, second, strict=True)]).norm()
    )
    return float(gap.norm()) / (beta * distance)


def lemma3_search(
    config: TightnessConfig,
    lam: float,
    activation: str,
    target_norm: float,
    generator: torch.Generator,
    input_norm: float = 1.0,
) -> dict[str, Any]:
    """The largest Lemma 3 ratio found over two parameter points, inputs and target."""
    records = []
    for _ in range(config.restarts):
        v = _RNNVariables.draw(config, lam, activation, generator, target_norm, input_norm)
        other = _RNNVariables.draw(config, lam, activation, generator, target_norm, input_norm)
        with torch.no_grad():  # start close: the local ratio is the Hessian's norm
            other.W.copy_(v.W + 1e-2 * other.W)
            other.U.copy_(v.U + 1e-2 * other.U)
        other.project()

        def project(v: _RNNVariables = v, other: _RNNVariables = other) -> None:
            v.project()
            other.project()

        def ratio(v: _RNNVariables = v, other: _RNNVariables = other) -> Tensor:
            g = _gradient(v.W, v.U, v.inputs, v.target, activation)
            g_other = _gradient(other.W, other.U, v.inputs, v.target, activation)
            distance = torch.cat([(v.W - other.W).reshape(-1), (v.U - other.U).reshape(-1)])
            return (g - g_other).norm() / distance.norm().clamp(min=1e-8)

        _ascend(
            ratio,
            [*v.tensors(), other.W, other.U],
            project,
            config.steps,
            config.learning_rate / 5,
        )
        value = lemma3_ratio((v.W, v.U), (other.W, other.U), v.inputs, v.target, activation)
        records.append(_record(value, instance_lam=max(v.contraction(), other.contraction())))
    details = {"lam": lam, "activation": activation, "target_norm": target_norm}
    return {**details, "input_norm": input_norm, **_best(records)}


def proposition2_worst_case(alpha: float, beta: float, gap: float, num_steps: int) -> float:
    """``||w_{N+1} - w'_{N+1}||`` of GD with ``alpha_t = alpha / t`` on ``p(w) = -beta w^2 / 2``,
    ``p^k(w) = p(w) - gap w`` from ``w_1 = 0``: Proposition 2's recurrence holds with equality."""
    radius = 1e300
    w = w_truncated = 0.0
    for step in step_sizes("decay", alpha, num_steps):
        w = min(max(w + step * beta * w, -radius), radius)
        w_truncated = min(max(w_truncated + step * (beta * w_truncated + gap), -radius), radius)
    return abs(w - w_truncated)


def proposition2_search(
    alphas_times_betas: tuple[float, ...] = (0.0, 0.1, 0.5, 1.0, 2.0),
    num_steps: tuple[int, ...] = (1, 2, 10, 100),
) -> list[dict[str, Any]]:
    """Ratio worst case / Proposition 2 bound on a grid of ``c = alpha beta`` and ``N``: 1 at
    ``N = 1``, falling like ``1 / Gamma(1 + c)``."""
    gamma, k, lam, alpha = 2.0, 1, 0.5, 0.1  # gap = gamma k lambda^k = 1
    rows = []
    for c in alphas_times_betas:
        beta = c / alpha
        for n in num_steps:
            measured = proposition2_worst_case(alpha, beta, gamma * k * lam**k, n)
            bound = proposition2_bound(alpha, gamma, beta, k, lam, n)
            rows.append({"alpha_beta": c, "num_steps": n, "ratio": measured / bound})
    return rows


def proposition2_random_log10(results_dir: Path = COMMITTED_RESULTS) -> float | None:
    """``log10`` of the largest distance / Proposition 2 bound of the committed Figure 1
    ``alpha / t`` runs, steps ``n >= 2``; ``None`` without the run."""
    try:
        units = load_results(results_dir, "full")["units"]
    except FileNotFoundError:
        return None
    worst = -math.inf
    for unit in units:
        if unit["schedule"] != "decay":
            continue
        for distance, log_bound in list(
            zip(unit["distance"], unit["prop2_theory_log10"], strict=True)
        )[1:]:
            if distance and log_bound is not None:
                worst = max(worst, math.log10(distance) - log_bound)
    return worst if math.isfinite(worst) else None


def _lstm_box(model: LSTMMap, input_bound: float) -> tuple[Tensor, Tensor]:
    """``(half-widths of D (2H,), certificate weights (2H,))``."""
    certificate = lstm_certificate(model, input_bound)
    cell = certificate.cell_bound.to(torch.float64)
    v_c, v_h = certificate.weights
    H = model.hidden_size
    limit = torch.cat([cell, torch.ones(H, dtype=torch.float64)])
    weights = torch.cat(
        [torch.full((H,), v_c, dtype=torch.float64), torch.full((H,), v_h, dtype=torch.float64)]
    )
    return limit, weights


def _lstm_jacobian_norm(model: LSTMMap, state: Tensor, x: Tensor, weights: Tensor) -> Tensor:
    """The certificate-norm induced norm ``max_a sum_b |J_ab| w_b / w_a`` (differentiable)."""
    J = torch.autograd.functional.jacobian(
        lambda s: model.step(s[None], x[None])[0], state, create_graph=True
    )
    return ((J.abs() * weights[None, :]).sum(dim=-1) / weights).max()


def lstm_state_search(
    model: LSTMMap,
    input_bound: float,
    steps: int,
    learning_rate: float,
    generator: torch.Generator,
    restarts: int = 2,
) -> float:
    """Largest Jacobian norm / ``lambda`` over states in ``D`` and inputs in the cube: ascent on
    ``(a, b)``, ``s = limit tanh(a)``, ``x = B tanh(b)``, the best points re-measured by
    :func:`stablernn_lib.theory.lstm_certificate.jacobian_certificate_norms`."""
    lam = lstm_certificate(model, input_bound).lam
    limit, weights = _lstm_box(model, input_bound)
    best = 0.0
    for _ in range(restarts):
        a = (
            2 * torch.randn(limit.shape, generator=generator, dtype=torch.float64)
        ).requires_grad_()
        b = 2 * torch.randn(model.input_size, generator=generator, dtype=torch.float64)
        b.requires_grad_()

        def norm(a: Tensor = a, b: Tensor = b) -> Tensor:
            return _lstm_jacobian_norm(
                model, limit * torch.tanh(a), input_bound * torch.tanh(b), weights
            )

        _ascend(norm, [a, b], lambda: None, steps, learning_rate)
        with torch.no_grad():
            state = (limit * torch.tanh(a))[None]
            x = (input_bound * torch.tanh(b))[None]
        measured = float(jacobian_certificate_norms(model, state, x, input_bound)[0])
        best = max(best, measured / lam)
    return best


def _perturbed(model: LSTMMap, scale: float, generator: torch.Generator) -> LSTMMap:
    """A copy with weights multiplied by ``exp(scale * noise)`` and biases shifted."""
    other = LSTMMap(model.input_size, model.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        for mine, theirs in zip(other.parameters(), model.parameters(), strict=True):
            noise = torch.randn(theirs.shape, generator=generator, dtype=torch.float64)
            if theirs.dim() == 1:
                mine.copy_(theirs + scale * noise)
            else:
                mine.copy_(theirs * torch.exp(scale * noise))
    return other


def lstm_search(
    config: TightnessConfig, hidden_size: int, lam: float, generator: torch.Generator
) -> dict[str, Any]:
    """A random LSTM at certificate ``lam``, then hill climbing on its weights (a perturbation
    is kept when the certificate stays below 1 and the ratio grows)."""
    model = random_stable_lstm(config.input_size, hidden_size, lam, generator=generator)
    steps = max(10, config.steps // 5)
    ratio = lstm_state_search(model, 1.0, steps, config.learning_rate, generator)
    for _ in range(config.lstm_climb_steps):
        candidate = _perturbed(model, 0.3, generator)
        if not lstm_certificate(candidate, 1.0).lam < 1:
            continue
        candidate_ratio = lstm_state_search(
            candidate, 1.0, steps, config.learning_rate, generator, restarts=1
        )
        if candidate_ratio > ratio:
            model, ratio = candidate, candidate_ratio
    certificate = lstm_certificate(model, 1.0)
    return {
        "hidden_size": hidden_size,
        "start_lam": lam,
        "final_lam": certificate.lam,
        # M_11 / rho(M) = max forget gate / lambda: near 1 when the forget gate dominates
        "forget_share": float(certificate.matrix[0, 0]) / certificate.lam,
        "ratio": ratio,
    }


def random_baselines(config: TightnessConfig) -> dict[str, float | None]:
    """The worst ratios on random instances, as drawn by the chapters' experiments."""
    n = config.random_instances
    common = {
        "num_instances": n,
        "seed": config.seed,
        "progress": False,
        "seq_len": config.seq_len,
        "hidden_size": config.hidden_size,
        "input_size": config.input_size,
    }

    def worst(experiment: Callable[[str], Any]) -> float:
        """The largest ratio of ``experiment(activation)`` over the config's activations."""
        return max(float(np.nanmax(experiment(act).tightness())) for act in config.activations)

    lemma1 = worst(lambda act: truncation_experiment(config.lams, config.ks, model=act, **common))
    lemma2 = worst(
        lambda act: gradient_gap_experiment(config.lams, config.ks, activation=act, **common)
    )
    lemma3 = worst(lambda act: smoothness_experiment(config.lams, activation=act, **common))
    generator = torch.Generator().manual_seed(config.seed)
    lstm = 0.0
    for hidden in config.lstm_hidden_sizes:
        for lam in config.lstm_lams:
            for _ in range(n):
                model = random_stable_lstm(config.input_size, hidden, lam, generator=generator)
                states, x = sample_box_states(model, 1.0, 300, generator)
                norms = jacobian_certificate_norms(model, states, x, 1.0)
                lstm = max(lstm, float(norms.max()) / lstm_certificate(model, 1.0).lam)
    return {
        "lemma1": lemma1,
        "lemma2_gamma": lemma2,
        "lemma3_beta": lemma3,
        "proposition2_log10": proposition2_random_log10(),
        "lstm_lambda": lstm,
    }


Job = Callable[[torch.Generator], dict[str, Any]]


def search_jobs(config: TightnessConfig) -> list[tuple[str, Job]]:
    """Every search of a run as ``(bound, job)``; job ``i`` draws from its own generator
    (:func:`job_generator`), so any one search can be recomputed alone."""
    jobs: list[tuple[str, Job]] = []
    for act in config.activations:
        for lam in config.lams:
            for k in config.ks:
                jobs.append(
                    ("lemma1", lambda g, a=act, l=lam, k=k: lemma1_search(config, l, k, a, g))
                )
                for y in config.target_norms:
                    for b in config.input_norms:
                        jobs.append(
                            (
                                "lemma2_gamma",
                                lambda g, a=act, l=lam, k=k, y=y, b=b: lemma2_search(
                                    config, l, k, a, y, g, b
                                ),
                            )
                        )
            for y in config.target_norms:
                for b in config.input_norms:
                    jobs.append(
                        (
                            "lemma3_beta",
                            lambda g, a=act, l=lam, y=y, b=b: lemma3_search(config, l, a, y, g, b),
                        )
                    )
    for hidden in config.lstm_hidden_sizes:
        for lam in config.lstm_lams:
            jobs.append(("lstm_lambda", lambda g, h=hidden, l=lam: lstm_search(config, h, l, g)))
    return jobs


def job_generator(config: TightnessConfig, index: int) -> torch.Generator:
    """The generator of job ``index`` of :func:`search_jobs`."""
    return torch.Generator().manual_seed(1_000_003 * config.seed + index)


@single_threaded
def rerun_search(config: TightnessConfig, bound: str, position: int) -> dict[str, Any]:
    """Recompute the ``position``-th search of ``bound`` of a run (as in its ``searches``)."""
    indices = [i for i, (name, _) in enumerate(search_jobs(config)) if name == bound]
    index = indices[position]
    return search_jobs(config)[index][1](job_generator(config, index))


def lemma3_linear_unit_ratio(lam: float, tol: float = 1e-12) -> float:
    """Lemma 3's ratio on ``h_t = lam h_{t-1} + 1``, loss ``h_T^2 / 2``, ``lam^T < tol``: the
    second point is ``(W, U) = (lam, 1)`` moved ``1e-6`` along the Hessian's top eigenvector, so
    the ratio is ``||Hessian||_2 / beta + O(1e-6)`` (-> 1 as ``lam -> 1``)."""
    if not 0 < lam < 1:
        raise ValueError(f"lam must lie in (0, 1), got {lam}")
    steps = max(2, math.ceil(math.log(tol) / math.log(lam)))
    inputs = torch.ones(steps, 1, dtype=torch.float64)
    target = torch.zeros(1, dtype=torch.float64)

    def loss(theta: Tensor) -> Tensor:
        h = torch.zeros((), dtype=torch.float64)
        for _ in range(steps):
            h = theta[0] * h + theta[1]
        return 0.5 * h**2

    point = torch.tensor([lam, 1.0], dtype=torch.float64)
    hessian = torch.autograd.functional.hessian(loss, point)
    direction = torch.linalg.eigh(hessian).eigenvectors[:, -1].abs()  # Perron: >= 0
    other = point - 1e-6 * direction

    def weights(theta: Tensor) -> tuple[Tensor, Tensor]:
        return theta[:1].reshape(1, 1), theta[1:].reshape(1, 1)

    return lemma3_ratio(weights(point), weights(other), inputs, target, "identity")


def beta_asymptotic(lams: tuple[float, ...] = BETA_ASYMPTOTIC_LAMS) -> list[dict[str, float]]:
    """:func:`lemma3_linear_unit_ratio` on a grid of ``lambda``."""
    return [{"lam": lam, "ratio": lemma3_linear_unit_ratio(lam)} for lam in lams]


@single_threaded
def run_tightness(config: TightnessConfig, progress: bool = True) -> dict[str, Any]:
    """Every search of this module and the random baselines; a JSON-ready dict."""
    start = time.perf_counter()
    jobs = search_jobs(config)
    searches: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in jobs}
    for index, (name, job) in enumerate(
        tqdm(jobs, desc="tightness searches", disable=not progress)
    ):
        searches[name].append(job(job_generator(config, index)))
    searches["proposition2"] = proposition2_search()
    searches["lemma3_linear_unit"] = beta_asymptotic(config.beta_lams)
    random = random_baselines(config)
    worst = {name: _best(rows)["ratio"] for name, rows in searches.items()}
    return {
        "config": asdict(config),
        "seed": config.seed,
        "provenance": provenance(),
        "duration_s": time.perf_counter() - start,
        "worst_adversarial": worst,
        "worst_random": random,
        "searches": searches,
    }


TABLE_ROWS: tuple[tuple[str, str | None, str], ...] = (
    ("lemma1", "lemma1", "Lemma 1: $\\lambda^k L_x B_x / (1 - \\lambda)$"),
    ("lemma2_gamma", "lemma2_gamma", "Lemma 2: $\\gamma k \\lambda^k$"),
    ("lemma3_beta", "lemma3_beta", "Lemma 3: $\\beta \\Vert w - w'\\Vert$"),
    (
        "lemma3_linear_unit",
        None,
        "Lemma 3, one-unit linear RNN, $\\lambda \\le 0.99$ (no search)",
    ),
    (
        "proposition2",
        "proposition2_log10",
        "Proposition 2: $\\alpha\\gamma k\\lambda^k N^{\\alpha\\beta+1}$",
    ),
    ("lstm_lambda", "lstm_lambda", "Chapter 4 LSTM theorem: $\\lambda = \\rho(M)$"),
)


def tightness_table(results: dict[str, Any]) -> str:
    """A Markdown table: worst adversarial ratio next to the worst random one, per bound."""
    lines = [
        "| bound | worst ratio, adversarial search | worst ratio, random instances |",
        "|---|---|---|",
    ]
    for key, random_key, label in TABLE_ROWS:
        adversarial = results["worst_adversarial"][key]
        random = None if random_key is None else results["worst_random"][random_key]
        if random_key is None:
            shown = "n/a"
        elif random_key.endswith("_log10"):
            shown = "n/a" if random is None else f"$10^{{{random:.0f}}}$ (Figure 1 run)"
        else:
            shown = f"{random:.3g}"
        lines.append(f"| {label} | {adversarial:.5g} | {shown} |")
    return "\n".join(lines)


COMMITTED = results_path(DEFAULT_OUT.name)  # in the checkout or installed with the package


def load_committed(path: Path = COMMITTED) -> dict[str, Any]:
    """The committed full run (``data/results/tightness.json``)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"no tightness results at {path}; run `python -m stablernn_lib tightness --config full`"
        )
    return json.loads(path.read_text(encoding="utf8"))


def worst_settings_table(results: dict[str, Any]) -> str:
    """Markdown table: for each searched bound, the setting where the worst ratio was found."""
    lines = ["| bound | worst ratio | found at |", "|---|---:|---|"]
    for key, _, label in TABLE_ROWS:
        best = _best(results["searches"][key])
        setting = ", ".join(
            f"{name} = {value:.3g}" if isinstance(value, float) else f"{name} = {value}"
            for name, value in best.items()
            if name != "ratio"
        )
        lines.append(f"| {label} | {best['ratio']:.4g} | {setting} |")
    return "\n".join(lines)


def per_setting_table(results: dict[str, Any], key: str) -> str:
    """Markdown table of one bound's searches: a row per setting, a column per projection
    radius ``lam``; each cell ``ratio (lambda of the instance found)``."""
    rows = results["searches"][key]
    lams = sorted({row["lam"] for row in rows})
    shown = ("ratio", "lam", "instance_lam")
    settings: dict[tuple, dict[float, dict[str, Any]]] = {}
    for row in rows:
        setting = tuple((name, value) for name, value in sorted(row.items()) if name not in shown)
        settings.setdefault(setting, {})[row["lam"]] = row
    lines = [
        "| setting | " + " | ".join(f"radius {lam:g}" for lam in lams) + " |",
        "|---|" + "---:|" * len(lams),
    ]
    for setting, by_lam in settings.items():
        label = ", ".join(
            f"{name} = {value:g}" if isinstance(value, float) else f"{name} = {value}"
            for name, value in setting
        )
        cells = [
            f"{by_lam[lam]['ratio']:.3g} ($\\lambda$ = {by_lam[lam]['instance_lam']:.3g})"
            if lam in by_lam
            else ""
            for lam in lams
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def proposition2_table(results: dict[str, Any]) -> str:
    """Markdown table of the Proposition 2 ratios by ``alpha beta`` (rows) and ``N`` (columns)."""
    rows = results["searches"]["proposition2"]
    steps = sorted({row["num_steps"] for row in rows})
    products = sorted({row["alpha_beta"] for row in rows})
    ratio = {(row["alpha_beta"], row["num_steps"]): row["ratio"] for row in rows}
    lines = [
        "| $\\alpha\\beta$ | " + " | ".join(f"$N = {n}$" for n in steps) + " |",
        "|---:|" + "---:|" * len(steps),
    ]
    for c in products:
        lines.append(f"| {c:g} | " + " | ".join(f"{ratio[c, n]:.3g}" for n in steps) + " |")
    return "\n".join(lines)


def _command(args: argparse.Namespace) -> int:
    config = CONFIGS[args.config]
    if args.seed is not None:
        config = replace(config, seed=args.seed)
    results = run_tightness(config)
    atomic_write_json(args.out, results)
    print(tightness_table(results))
    print(f"tightness {config.name}: {results['duration_s']:.0f} s; written to {args.out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``tightness``: adversarial searches of measured / bound for every bound."""
    parser = subparsers.add_parser(
        "tightness", help="adversarial search for the worst ratio measured / bound of each bound"
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default="full")
    parser.add_argument("--seed", type=int, default=None, help="override the config's seed")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON result file")
    parser.set_defaults(func=_command)
