"""Proposition 2 (weights close), Theorem 1 (predictions close) and the Figure 1 experiment.

Projected gradient descent on ``p_T`` and on ``p^k_T`` from the same ``w_1`` with steps
``alpha_t``: the projection is non-expansive, so ``e_t = ||w_t - w'_t||`` obeys
``e_{t+1} <= (1 + alpha_t beta) e_t + alpha_t gamma k lambda^k``, ``e_1 = 0`` (Lemmas 2, 3);
with ``alpha_t = alpha / t``, ``e_{N+1} <= alpha gamma k lambda^k N^(alpha beta + 1)``.  The
experiment trains the recurrent ``W (H, H)`` of a vanilla RNN on Gaussian regression
(``U`` fixed) in ``{||W||_2 <= lambda}``.  Bounds are ``log10`` values: they overflow a float.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import io
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sympy as sp
import torch
from scipy.special import gammaln
from torch import Tensor
from tqdm.auto import tqdm

from stablernn_lib.core.bounds import (
    GradientConstants,
    activation_smoothness,
    lemma1_truncation_bound,
    lemma2_gamma,
    lemma3_beta,
    squared_loss_constants,
    state_norm_bound,
)
from stablernn_lib.core.contraction import project_to_stable_
from stablernn_lib.core.io import atomic_write_json, atomic_write_text, provenance
from stablernn_lib.core.models import VanillaRNN, random_vanilla_rnn
from stablernn_lib.core.norms import activation_lipschitz, spectral_norm
from stablernn_lib.core.results import results_path
from stablernn_lib.core.runtime import check_mode

SCHEDULES: tuple[str, ...] = ("decay", "constant")
DEFAULT_OUT = Path("data/results/figure1")
REPO_ROOT = Path(__file__).resolve().parents[2]
# the committed full run (read by Chapter 7), in the checkout or installed with the package
COMMITTED_RESULTS = results_path("figure1")
RERUN_RESULTS = REPO_ROOT / "data" / "runs" / "figure1"  # reruns from the notebook (ignored)


def step_sizes(schedule: str, alpha: float, num_steps: int) -> np.ndarray:
    """Steps ``alpha_t`` for ``t = 1..N``: ``alpha / t`` ("decay") or ``alpha`` ("constant")."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown step schedule {schedule!r}: use one of {SCHEDULES}")
    if not alpha > 0:
        raise ValueError(f"the step size alpha must be positive, got {alpha}")
    if num_steps < 1:
        raise ValueError(f"num_steps must be at least 1, got {num_steps}")
    t = np.arange(1, num_steps + 1, dtype=float)
    return alpha / t if schedule == "decay" else np.full(num_steps, float(alpha))


def _log10(value: float) -> float:
    return math.log10(value) if value > 0 else -math.inf


def proposition2_bound_log10(
    alpha: float, gamma: float, beta: float, k: int, lam: float, num_steps: int
) -> float:
    """``log10(alpha gamma k lambda^k N^(alpha beta + 1))``, the bound of Proposition 2."""
    if min(alpha, gamma, beta) < 0 or num_steps < 1 or k < 1 or not 0 < lam < 1:
        raise ValueError(
            "Proposition 2 needs alpha, gamma, beta >= 0, k >= 1, N >= 1 and 0 < lambda < 1; "
            f"got alpha={alpha}, gamma={gamma}, beta={beta}, k={k}, lambda={lam}, N={num_steps}"
        )
    return (
        _log10(alpha * gamma * k) + k * math.log10(lam) + (alpha * beta + 1) * math.log10(num_steps)
    )


def proposition2_bound(
    alpha: float, gamma: float, beta: float, k: int, lam: float, num_steps: int
) -> float:
    """``alpha gamma k lambda^k N^(alpha beta + 1)`` (``math.inf`` when it overflows a float)."""
    exponent = proposition2_bound_log10(alpha, gamma, beta, k, lam, num_steps)
    return 10.0**exponent if exponent < 308 else math.inf


def recurrence_bound_log10(
    steps: np.ndarray, beta: float | np.ndarray, gradient_gap: float | np.ndarray
) -> np.ndarray:
    """``log10 e_t``, ``t = 1..N+1``, of ``e_{t+1} = (1 + alpha_t beta_t) e_t + alpha_t g_t``,
    ``e_1 = 0`` (``-inf``).  ``steps (N,)``; ``beta``, ``gradient_gap`` constants or ``(N,)``.
    Iterated in log space: the constants overflow a float."""
    steps = np.asarray(steps, dtype=float)
    beta = np.broadcast_to(np.asarray(beta, dtype=float), steps.shape)
    gap = np.broadcast_to(np.asarray(gradient_gap, dtype=float), steps.shape)
    if np.any(steps < 0) or np.any(beta < 0) or np.any(gap < 0):
        raise ValueError("steps, beta and gradient_gap must be non-negative")
    log_e = np.empty(steps.size + 1)
    log_e[0] = -np.inf
    with np.errstate(divide="ignore"):
        growth, forcing = np.log1p(steps * beta), np.log(steps * gap)
    for t in range(steps.size):
        log_e[t + 1] = np.logaddexp(growth[t] + log_e[t], forcing[t])
    return log_e / math.log(10)


def decay_recurrence_solution_log10(
    alpha: float, beta: float, gradient_gap: float, num_steps: int
) -> float:
    """Exact ``log10 e_{N+1}`` for ``alpha_t = alpha / t`` and constants, ``c = alpha beta``:
    ``e_{N+1} = (g / beta) (Gamma(N + 1 + c) / (Gamma(N + 1) Gamma(1 + c)) - 1)``, or
    ``alpha g H_N`` (harmonic number) for ``beta = 0``."""
    if gradient_gap == 0:
        return -math.inf
    c = alpha * beta
    if c == 0:
        harmonic = float(np.sum(1.0 / np.arange(1, num_steps + 1)))
        return math.log10(alpha * gradient_gap * harmonic)
    x = gammaln(num_steps + 1 + c) - gammaln(num_steps + 1) - gammaln(1 + c)  # >= 0
    log_bracket = x + math.log(-math.expm1(-x))  # log(exp(x) - 1)
    return (math.log(gradient_gap / beta) + log_bracket) / math.log(10)


def product_bound_slack(c: float, num_steps: int) -> np.ndarray:
    """``log prod_{j=t+1}^N (1 + c/j) - c log(N/t)`` for ``t = 1..N``; never positive
    (``log(1 + x) <= x``, ``sum_{j=t+1}^N 1/j <= log(N/t)``)."""
    if c < 0 or num_steps < 1:
        raise ValueError(f"need c >= 0 and num_steps >= 1, got c={c}, num_steps={num_steps}")
    j = np.arange(1, num_steps + 1, dtype=float)
    log_terms = np.log1p(c / j)
    # tail[t-1] = sum_{j=t+1}^N log(1 + c/j)
    tail = np.concatenate([np.cumsum(log_terms[::-1])[::-1][1:], [0.0]])
    return tail - c * np.log(num_steps / j)


def symbolic_recurrence_solution() -> sp.Expr:
    """sympy's ``e(t)`` solving ``e(t+1) = (1 + c/t) e(t) + d/t``, ``e(1) = 0``
    (``c = alpha beta``, ``d = alpha gamma k lambda^k``)."""
    t, c, d = sp.symbols("t c d", positive=True)
    e = sp.Function("e")
    return sp.rsolve(e(t + 1) - (1 + c / t) * e(t) - d / t, e(t), {e(1): 0})


def symbolic_unrolling(num_steps: int) -> tuple[sp.Expr, sp.Expr]:
    """``e_{N+1}`` iterated and as the unrolled sum
    ``sum_{t=1}^N (d/t) prod_{j=t+1}^N (1 + c/j)``, as sympy expressions."""
    c, d = sp.symbols("c d", positive=True)
    iterated = sp.Integer(0)
    for t in range(1, num_steps + 1):
        iterated = (1 + c / t) * iterated + d / t
    unrolled = sum(
        (d / t) * sp.prod([1 + c / j for j in range(t + 1, num_steps + 1)])
        for t in range(1, num_steps + 1)
    )
    return sp.expand(iterated), sp.expand(unrolled)


def theorem1_prediction_bound(
    lam: float, lx: float, bx: float, weight_distance: float, k: int, *, l_rho: float = 1.0
) -> float:
    """``||h_T(w) - h^k_T(w')|| <= L_rho B_h ||w - w'|| / (1 - lambda) + lambda^k B_h``,
    ``B_h = L_x B_x / (1 - lambda)`` (``y_T = h_T``, so ``L_f = 1``)."""
    if weight_distance < 0:
        raise ValueError(f"weight_distance must be non-negative, got {weight_distance}")
    bh = state_norm_bound(lam, lx, bx)
    return l_rho * bh * weight_distance / (1 - lam) + lemma1_truncation_bound(lam, lx, bx, k)


@dataclass(frozen=True)
class Figure1Config:
    """One Figure 1 configuration: inputs i.i.d. ``N(0, 1/D)``, targets the last state of a
    teacher RNN (same ``U``, ``||W||_2 = lambda``) plus ``N(0, noise_std^2)``."""

    name: str
    activations: tuple[str, ...]
    input_size: int
    hidden_size: int
    seq_len: int
    num_train: int
    num_test: int
    lam: float
    ks: tuple[int, ...]
    num_steps: int
    alpha: float
    schedules: tuple[str, ...]
    seeds: tuple[int, ...]
    noise_std: float = 0.1
    num_records: int = 40

    def __post_init__(self) -> None:
        if not 0 < self.lam < 1:
            raise ValueError(f"lam must lie in (0, 1) for a stable model, got {self.lam}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks must be a non-empty tuple of contexts >= 1, got {self.ks}")
        for schedule in self.schedules:
            step_sizes(schedule, self.alpha, 1)
        for activation in self.activations:
            activation_smoothness(activation)  # Lemmas 2-3 need a smooth activation


CONFIGS: dict[str, Figure1Config] = {
    "smoke": Figure1Config(
        name="smoke",
        activations=("tanh",),
        input_size=4,
        hidden_size=8,
        seq_len=16,
        num_train=32,
        num_test=64,
        lam=0.8,
        ks=(1, 2, 4, 8, 16),
        num_steps=60,
        alpha=1.0,
        schedules=SCHEDULES,
        seeds=(0,),
        num_records=20,
    ),
    "full": Figure1Config(
        name="full",
        activations=("identity", "tanh"),
        input_size=8,
        hidden_size=16,
        seq_len=32,
        num_train=64,
        num_test=256,
        lam=0.8,
        ks=(1, 2, 4, 8, 16, 24),
        num_steps=1000,
        alpha=1.0,
        schedules=SCHEDULES,
        seeds=(0, 1, 2),
    ),
}


def get_config(name: str) -> Figure1Config:
    """The named configuration (``"smoke"`` or ``"full"``)."""
    if name not in CONFIGS:
        raise ValueError(f"unknown Figure 1 config {name!r}: use one of {sorted(CONFIGS)}")
    return CONFIGS[name]


@dataclass
class Figure1Instance:
    """A regression instance and the start ``w_1``: ``*_inputs (T, n, D)``, ``*_targets (n, H)``."""

    activation: str
    lam: float
    start: VanillaRNN
    train_inputs: Tensor
    train_targets: Tensor
    test_inputs: Tensor
    test_targets: Tensor


def make_instance(
    config: Figure1Config, activation: str, seed: int, lam: float | None = None
) -> Figure1Instance:
    """Draw the teacher, the start ``w_1`` (``||W||_2 = lambda``) and the data from ``seed``."""
    lam = config.lam if lam is None else lam
    generator = torch.Generator().manual_seed(seed)
    sizes = (config.input_size, config.hidden_size)
    teacher = random_vanilla_rnn(*sizes, lam, activation, generator=generator)
    start = random_vanilla_rnn(*sizes, lam, activation, generator=generator)
    with torch.no_grad():
        start.weight_ih.copy_(teacher.weight_ih)
    start.weight_ih.requires_grad_(False)

    def draw(num: int) -> tuple[Tensor, Tensor]:
        shape = (config.seq_len, num, config.input_size)
        inputs = torch.randn(shape, generator=generator, dtype=torch.float64)
        inputs /= math.sqrt(config.input_size)
        with torch.no_grad():
            clean = teacher.output(teacher.run(inputs)[-1])
        noise = torch.randn(clean.shape, generator=generator, dtype=torch.float64)
        return inputs, clean + config.noise_std * noise

    train_inputs, train_targets = draw(config.num_train)
    test_inputs, test_targets = draw(config.num_test)
    return Figure1Instance(
        activation, lam, start, train_inputs, train_targets, test_inputs, test_targets
    )


def final_predictions(model: VanillaRNN, inputs: Tensor, k: int | None = None) -> Tensor:
    """``y_T = h_T``, or ``y^k_T = h^k_T`` of the last ``k`` inputs: ``(T, n, D) -> (n, H)``."""
    window = inputs if k is None else inputs[-k:]
    return model.output(model.run(window)[-1])


def final_state_loss(
    model: VanillaRNN, inputs: Tensor, targets: Tensor, k: int | None = None
) -> Tensor:
    """``p_T = (1 / 2n) sum_i ||y_T^(i) - target^(i)||^2`` (``p^k_T`` when ``k`` is given)."""
    return 0.5 * (final_predictions(model, inputs, k) - targets).pow(2).sum(-1).mean()


def recurrent_weight_gradient(
    model: VanillaRNN, inputs: Tensor, targets: Tensor, k: int | None = None
) -> tuple[float, Tensor]:
    """The loss and its gradient with respect to ``W (H, H)``."""
    loss = final_state_loss(model, inputs, targets, k)
    (gradient,) = torch.autograd.grad(loss, model.weight_hh)
    return float(loss.detach()), gradient


def theory_constants(instance: Figure1Instance) -> dict[str, float]:
    """``L_x, B_x, B_h, L_p, S_p``, Lemma 2's ``gamma`` and Lemma 3's ``beta`` of the instance
    (``B_x``: the largest training ``||x_t||``; loss constants from the largest target norm)."""
    activation, lam = instance.activation, instance.lam
    l_rho, l2_rho = activation_lipschitz(activation), activation_smoothness(activation)
    lx = l_rho * spectral_norm(instance.start.weight_ih)
    bx = float(instance.train_inputs.norm(dim=-1).max())
    bh = state_norm_bound(lam, lx, bx)
    lp, sp_ = squared_loss_constants(bh, float(instance.train_targets.norm(dim=-1).max()))
    constants = GradientConstants(lam, lx, bx, lp, sp_, l_rho=l_rho, l2_rho=l2_rho)
    return {
        "lx": lx,
        "bx": bx,
        "bh": bh,
        "lp": lp,
        "sp": sp_,
        "gamma": lemma2_gamma(constants),
        "beta": lemma3_beta(constants),
    }


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Torch on one thread: for tiny matrices extra threads only wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class RecurrentTrajectory:
    """Projected GD on ``p_T``: weights ``w_t (N+1, H, H)``, gradients ``grad p_T(w_t) (N, H, H)``,
    losses ``(N,)``."""

    weights: Tensor
    gradients: Tensor
    losses: np.ndarray


def _projected_step_(model: VanillaRNN, gradient: Tensor, step: float, lam: float) -> None:
    with torch.no_grad():
        model.weight_hh -= step * gradient
    project_to_stable_(model, lam)


@single_thread()
def recurrent_trajectory(instance: Figure1Instance, steps: np.ndarray) -> RecurrentTrajectory:
    """Projected GD on the recurrent loss (one run serves every ``k``)."""
    model = copy.deepcopy(instance.start)
    weights, gradients, losses = [model.weight_hh.detach().clone()], [], []
    for step in steps:
        loss, gradient = recurrent_weight_gradient(
            model, instance.train_inputs, instance.train_targets
        )
        _projected_step_(model, gradient, float(step), instance.lam)
        weights.append(model.weight_hh.detach().clone())
        gradients.append(gradient)
        losses.append(loss)
    return RecurrentTrajectory(torch.stack(weights), torch.stack(gradients), np.array(losses))


@dataclass
class TruncatedRun:
    """Projected GD on ``p^k_T``: ``distance (N+1,) = e_t``; per step ``(N,)``: ``smoothness =
    ||grad p_T(w_t) - grad p_T(w'_t)|| / e_t`` (0 when ``e_t = 0``), ``gradient_gap =
    ||grad p_T(w'_t) - grad p^k_T(w'_t)||``."""

    model: VanillaRNN
    distance: np.ndarray
    smoothness: np.ndarray
    gradient_gap: np.ndarray
    losses: np.ndarray


@single_thread()
def truncated_run(
    instance: Figure1Instance, k: int, steps: np.ndarray, recurrent: RecurrentTrajectory
) -> TruncatedRun:
    """Projected GD on the truncated loss of context ``k`` from the same ``w_1``."""
    model = copy.deepcopy(instance.start)
    data = (instance.train_inputs, instance.train_targets)
    distance, smoothness, gradient_gap, losses = [], [], [], []
    for t, step in enumerate(steps):
        gap = float((recurrent.weights[t] - model.weight_hh.detach()).norm())
        loss, truncated_gradient = recurrent_weight_gradient(model, *data, k=k)
        _, full_gradient = recurrent_weight_gradient(model, *data)
        moved = float((recurrent.gradients[t] - full_gradient).norm())
        distance.append(gap)
        smoothness.append(moved / gap if gap > 0 else 0.0)
        gradient_gap.append(float((full_gradient - truncated_gradient).norm()))
        losses.append(loss)
        _projected_step_(model, truncated_gradient, float(step), instance.lam)
    distance.append(float((recurrent.weights[-1] - model.weight_hh.detach()).norm()))
    return TruncatedRun(
        model, np.array(distance), np.array(smoothness), np.array(gradient_gap), np.array(losses)
    )


def record_steps(num_steps: int, num_points: int) -> np.ndarray:
    """About ``num_points`` log-spaced step counts in ``[1, N]`` (always including ``N``)."""
    points = np.unique(np.round(np.logspace(0, math.log10(num_steps), num_points)).astype(int))
    return np.union1d(points, [num_steps])


def _finite_or_none(value: float) -> float | None:
    return float(f"{value:.6g}") if math.isfinite(value) else None


def _curve(values: np.ndarray, at: np.ndarray) -> list[float | None]:
    """``values`` indexed by ``t = 1..N+1``, read after ``n`` steps (index ``n``)."""
    return [_finite_or_none(float(values[n])) for n in at]


def _theorem1(
    instance: Figure1Instance, k: int, recurrent_weights: Tensor, run: TruncatedRun
) -> dict[str, float]:
    """Theorem 1's gaps, bound and test losses of the two trained models on the test set."""
    recurrent = copy.deepcopy(instance.start)
    with torch.no_grad():
        recurrent.weight_hh.copy_(recurrent_weights)
        y_recurrent = final_predictions(recurrent, instance.test_inputs)
        y_truncated = final_predictions(run.model, instance.test_inputs, k)
        y_between = final_predictions(run.model, instance.test_inputs)
        targets = instance.test_targets
        loss_recurrent = float(0.5 * (y_recurrent - targets).pow(2).sum(-1).mean())
        loss_truncated = float(0.5 * (y_truncated - targets).pow(2).sum(-1).mean())
    gaps = (y_recurrent - y_truncated).norm(dim=-1)
    l_rho = activation_lipschitz(instance.activation)
    lx = l_rho * spectral_norm(instance.start.weight_ih)
    bx = float(instance.test_inputs.norm(dim=-1).max())
    return {
        "prediction_gap_mean": float(gaps.mean()),
        "prediction_gap_max": float(gaps.max()),
        "weights_part_max": float((y_recurrent - y_between).norm(dim=-1).max()),
        "truncation_part_max": float((y_between - y_truncated).norm(dim=-1).max()),
        "bound_from_measured_distance": theorem1_prediction_bound(
            instance.lam, lx, bx, float(run.distance[-1]), k, l_rho=l_rho
        ),
        "target_norm_mean": float(targets.norm(dim=-1).mean()),
        "test_loss_recurrent": loss_recurrent,
        "test_loss_truncated": loss_truncated,
    }


def summarize_unit(
    config: Figure1Config,
    instance: Figure1Instance,
    schedule: str,
    k: int,
    steps: np.ndarray,
    recurrent: RecurrentTrajectory,
    run: TruncatedRun,
) -> dict[str, Any]:
    """One (activation, schedule, seed, k) run as JSON, curves at :func:`record_steps`.  Bounds
    ``*_log10``: ``stepwise`` iterates the recurrence with the per-step ratios, ``empirical``
    with their maxima (``beta_hat``, ``gamma_hat = max gap / (k lambda^k)``), ``theory`` with
    Lemmas 2, 3; ``prop2_*``: ``alpha gamma k lambda^k n^(alpha beta + 1)``, proved for "decay"."""
    lam, num_steps, alpha = instance.lam, steps.size, config.alpha
    theory = theory_constants(instance)
    beta_hat = float(run.smoothness.max())
    gap_hat = float(run.gradient_gap.max())
    gamma_hat = gap_hat / (k * lam**k)
    at = record_steps(num_steps, config.num_records)

    def prop2(gamma: float, beta: float) -> list[float | None]:
        return [
            _finite_or_none(proposition2_bound_log10(alpha, gamma, beta, k, lam, int(n)))
            for n in at
        ]

    theory_gap = theory["gamma"] * k * lam**k
    return {
        "config": config.name,
        "activation": instance.activation,
        "schedule": schedule,
        "k": k,
        "lam": lam,
        "alpha": alpha,
        "num_steps": num_steps,
        "steps": at.tolist(),
        "distance": _curve(run.distance, at),
        "stepwise_log10": _curve(
            recurrence_bound_log10(steps, run.smoothness, run.gradient_gap), at
        ),
        "empirical_log10": _curve(recurrence_bound_log10(steps, beta_hat, gap_hat), at),
        "theory_log10": _curve(recurrence_bound_log10(steps, theory["beta"], theory_gap), at),
        "prop2_empirical_log10": prop2(gamma_hat, beta_hat),
        "prop2_theory_log10": prop2(theory["gamma"], theory["beta"]),
        "beta_hat": beta_hat,
        "gamma_hat": gamma_hat,
        "gradient_gap_max": gap_hat,
        "lemma2_bound": theory_gap,
        "theory": theory,
        "final_distance": float(run.distance[-1]),
        "max_distance": float(run.distance.max()),
        "train_loss_recurrent": _curve(np.append(recurrent.losses, np.nan), at - 1),
        "train_loss_truncated": _curve(np.append(run.losses, np.nan), at - 1),
        "theorem1": _theorem1(instance, k, recurrent.weights[-1], run),
    }


def unit_path(
    out_dir: Path, config: Figure1Config, activation: str, schedule: str, seed: int, k: int
) -> Path:
    """Where one unit's JSON lives: ``out/<config>/runs/<act>-<schedule>-seed<s>-k<k>.json``."""
    name = f"{activation}-{schedule}-seed{seed}-k{k}.json"
    return Path(out_dir) / config.name / "runs" / name


def _load_finished(path: Path, config: Figure1Config) -> dict[str, Any] | None:
    """A unit written with the same configuration, else None."""
    try:
        unit = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return unit if unit.get("config_values") == _config_values(config) else None


def _config_values(config: Figure1Config) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(config)))


def run_group(
    config: Figure1Config,
    activation: str,
    schedule: str,
    seed: int,
    ks: Sequence[int],
    *,
    lam: float | None = None,
    on_unit: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Both runs for one instance and schedule, for every ``k``."""
    instance = make_instance(config, activation, seed, lam)
    steps = step_sizes(schedule, config.alpha, config.num_steps)
    started = time.perf_counter()
    recurrent = recurrent_trajectory(instance, steps)
    shared_time = time.perf_counter() - started
    units = []
    for k in ks:
        started = time.perf_counter()
        run = truncated_run(instance, k, steps, recurrent)
        with single_thread():
            unit = summarize_unit(config, instance, schedule, k, steps, recurrent, run)
        unit.update(
            seed=seed,
            compute_time_s=time.perf_counter() - started + shared_time / len(ks),
            config_values=_config_values(config),
            provenance=provenance(),
        )
        units.append(unit)
        if on_unit is not None:
            on_unit(unit)
    return units


def run_figure1(
    config: Figure1Config | str,
    out_dir: str | Path | None = None,
    *,
    resume: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Run or resume a configuration: ``{"summary": ..., "units": [...]}``.  With ``out_dir``,
    each unit is written atomically, then ``summary.json`` and ``figure1.csv``; ``resume`` loads
    the units written with the same configuration."""
    config = get_config(config) if isinstance(config, str) else config
    started = time.perf_counter()
    groups = [
        (a, sc, s) for a in config.activations for s in config.seeds for sc in config.schedules
    ]
    units: list[dict[str, Any]] = []
    computed = 0
    bar = tqdm(
        total=len(groups) * len(config.ks),
        desc=f"figure1 {config.name}",
        unit="run",
        disable=not progress,
    )
    for activation, schedule, seed in groups:
        pending = []
        for k in config.ks:
            finished = None
            if out_dir is not None and resume:
                path = unit_path(Path(out_dir), config, activation, schedule, seed, k)
                finished = _load_finished(path, config)
            if finished is None:
                pending.append(k)
            else:
                units.append(finished)
                bar.update()

        def save(unit: dict[str, Any]) -> None:
            if out_dir is not None:
                path = unit_path(
                    Path(out_dir),
                    config,
                    unit["activation"],
                    unit["schedule"],
                    unit["seed"],
                    unit["k"],
                )
                atomic_write_json(path, unit)
            bar.set_postfix(act=unit["activation"], sched=unit["schedule"], k=unit["k"])
            bar.update()

        if pending:
            units.extend(run_group(config, activation, schedule, seed, pending, on_unit=save))
            computed += len(pending)
    bar.close()
    summary = {
        "config": _config_values(config),
        "provenance": provenance(),
        "wall_time_s": time.perf_counter() - started,
        "compute_time_s": sum(unit["compute_time_s"] for unit in units),
        "units_computed": computed,
        "units_resumed": len(units) - computed,
        "table": summary_table(units),
    }
    results = {"summary": summary, "units": units}
    if out_dir is not None:
        folder = Path(out_dir) / config.name
        atomic_write_json(folder / "summary.json", summary)
        atomic_write_text(folder / "figure1.csv", table_csv(summary["table"]))
    return results


def load_results(out_dir: str | Path, config_name: str = "full") -> dict[str, Any]:
    """A finished run of :func:`run_figure1`: ``summary.json`` and the units."""
    folder = Path(out_dir) / config_name
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        raise FileNotFoundError(
            f"no Figure 1 results at {summary_path}; run "
            f"`python -m stablernn_lib figure1 --config {config_name} --out {out_dir}`"
        )
    summary = json.loads(summary_path.read_text())
    units = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]
    return {"summary": summary, "units": units}


def full_results(mode: str) -> dict[str, Any] | None:
    """``"smoke"``: the committed full run (``None``, with a message, where absent);
    ``"full"``: the run recomputed, resumably, into ``data/runs/figure1``."""
    check_mode(mode)
    if mode == "full":
        return run_figure1("full", RERUN_RESULTS)
    try:
        return load_results(COMMITTED_RESULTS, "full")
    except FileNotFoundError as error:
        print(error)
        return None


TABLE_FIELDS = (
    "activation",
    "schedule",
    "seed",
    "k",
    "final_distance",
    "stepwise_final",
    "empirical_final",
    "prop2_empirical_final",
    "theory_final_log10",
    "beta_hat",
    "gamma_hat",
    "gamma_theory",
    "beta_theory",
    "prediction_gap_max",
    "theorem1_bound",
)


def summary_table(units: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per unit with the final distance and every bound after ``N`` steps."""

    def power(value: float | None) -> float:
        return math.inf if value is None else 10.0**value if value < 308 else math.inf

    rows = []
    for unit in sorted(units, key=lambda u: (u["activation"], u["schedule"], u["seed"], u["k"])):
        rows.append(
            {
                "activation": unit["activation"],
                "schedule": unit["schedule"],
                "seed": unit["seed"],
                "k": unit["k"],
                "final_distance": unit["final_distance"],
                "stepwise_final": power(unit["stepwise_log10"][-1]),
                "empirical_final": power(unit["empirical_log10"][-1]),
                "prop2_empirical_final": power(unit["prop2_empirical_log10"][-1]),
                "theory_final_log10": unit["theory_log10"][-1],
                "beta_hat": unit["beta_hat"],
                "gamma_hat": unit["gamma_hat"],
                "gamma_theory": unit["theory"]["gamma"],
                "beta_theory": unit["theory"]["beta"],
                "prediction_gap_max": unit["theorem1"]["prediction_gap_max"],
                "theorem1_bound": unit["theorem1"]["bound_from_measured_distance"],
            }
        )
    return json.loads(json.dumps(rows).replace("Infinity", "null"))


def table_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The summary table as CSV text."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=TABLE_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _ratio(distance: float | None, log10_bound: float | None) -> float:
    """``distance / 10^log10_bound`` computed in log space (``nan`` without a distance)."""
    if not distance:
        return math.nan
    if log10_bound is None:
        return 0.0
    return 10.0 ** min(math.log10(distance) - log10_bound, 300.0)


def _max_ratio(distances: Sequence[Any], log10_bounds: Sequence[Any]) -> float:
    """Largest ratio after ``n >= 2`` steps (after one step the recurrence is an equality)."""
    pairs = list(zip(distances, log10_bounds, strict=True))[1:]
    ratios = [_ratio(d, b) for d, b in pairs]
    return max((r for r in ratios if not math.isnan(r)), default=math.nan)


def _worst(runs: dict[int, dict], bounds: dict[int, dict], key: str) -> float:
    """Largest distance / bound ratio over the seeds both dictionaries hold."""
    seeds = runs.keys() & bounds.keys()
    return max(_max_ratio(runs[s]["distance"], bounds[s][key]) for s in seeds)


# Column titles of the two tables of :func:`bound_tables` (Chapter 7 refers to them).
BOUND_TABLE_HEADERS = {
    "activation": "model",
    "k": "$k$",
    "decay_final": "distance at $N$",
    "decay_vs_stepwise": "÷ stepwise bound",
    "decay_vs_prop2_empirical": "÷ Prop. 2, measured constants",
    "decay_prop2_theory_log10": "$\\log_{10}$ Prop. 2, proved constants",
    "constant_final": "distance at $N$",
    "constant_vs_recurrence": "÷ own recurrence",
    "constant_recurrence_log10": "$\\log_{10}$ own recurrence",
    "constant_vs_decay_stepwise": "÷ $\\alpha/t$ stepwise bound",
    "constant_vs_decay_prop2_empirical": "÷ $\\alpha/t$ Prop. 2",
}


def bound_tables(report: Sequence[dict[str, Any]]) -> str:
    """:func:`bound_report` as two Markdown tables (steps ``alpha/t``, then constant steps);
    a "÷" column is distance / bound."""
    from stablernn_lib.core.tables import markdown_table

    def part(prefix: str) -> list[dict[str, Any]]:
        return [
            {
                key: value
                for key, value in row.items()
                if key in ("activation", "k") or key.startswith(prefix)
            }
            for row in report
        ]

    return (
        "**Steps $\\alpha/t$**, measured distance and its ratio to each bound:\n\n"
        + markdown_table(part("decay_"), BOUND_TABLE_HEADERS)
        + "\n\n**Constant step**, measured distance and its ratio to each bound:\n\n"
        + markdown_table(part("constant_"), BOUND_TABLE_HEADERS)
    )


def bound_report(units: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per activation and ``k`` with a positive distance, seeds run with both schedules:
    ratios distance / bound (``<= 1``: it holds), maximised over seeds and steps ``n >= 2``.
    ``decay_*``: ``alpha/t`` runs against their bounds; ``constant_vs_recurrence``: constant
    steps against their own recurrence; ``constant_vs_decay_*``: against the ``alpha/t`` bounds."""
    rows = []
    for activation, k in sorted({(u["activation"], u["k"]) for u in units}):
        decay = {
            u["seed"]: u for u in select_units(units, activation=activation, k=k, schedule="decay")
        }
        constant = {
            u["seed"]: u
            for u in select_units(units, activation=activation, k=k, schedule="constant")
        }
        seeds = sorted(decay.keys() & constant.keys())  # a seed counts with both schedules
        if not seeds or all(decay[s]["final_distance"] == 0 for s in seeds):
            continue
        decay, constant = ({s: runs[s] for s in seeds} for runs in (decay, constant))

        rows.append(
            {
                "activation": activation,
                "k": k,
                "decay_final": float(np.mean([decay[s]["final_distance"] for s in seeds])),
                "decay_vs_stepwise": _worst(decay, decay, "stepwise_log10"),
                "decay_vs_prop2_empirical": _worst(decay, decay, "prop2_empirical_log10"),
                "decay_prop2_theory_log10": max(decay[s]["prop2_theory_log10"][-1] for s in seeds),
                "constant_final": float(np.mean([constant[s]["final_distance"] for s in seeds])),
                "constant_vs_recurrence": _worst(constant, constant, "stepwise_log10"),
                "constant_recurrence_log10": max(constant[s]["empirical_log10"][-1] for s in seeds),
                "constant_vs_decay_stepwise": _worst(constant, decay, "stepwise_log10"),
                "constant_vs_decay_prop2_empirical": _worst(
                    constant, decay, "prop2_empirical_log10"
                ),
            }
        )
    return rows


# Column titles of :func:`theorem1_table`.
THEOREM1_TABLE_HEADERS = {
    "activation": "model",
    "schedule": "steps",
    "k": "$k$",
    "gap_max": "largest gap $\\|y_T - y^k_T\\|$",
    "weights_part": "its weights part",
    "truncation_part": "its truncation part",
    "bound_min": "Theorem 1 bound",
    "loss_recurrent": "test loss, recurrent",
    "loss_truncated": "test loss, truncated",
}


def theorem1_table(units: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per activation, schedule and ``k``: the largest gap ``||y_T - y^k_T||``, its weights and
    truncation parts, Theorem 1's bound at the smallest measured distance, mean test losses."""
    rows = []
    keys = sorted({(u["activation"], u["schedule"], u["k"]) for u in units})
    for activation, schedule, k in keys:
        chosen = select_units(units, activation=activation, schedule=schedule, k=k)
        results = [u["theorem1"] for u in chosen]
        rows.append(
            {
                "activation": activation,
                "schedule": schedule,
                "k": k,
                "gap_max": max(r["prediction_gap_max"] for r in results),
                "weights_part": max(r["weights_part_max"] for r in results),
                "truncation_part": max(r["truncation_part_max"] for r in results),
                "bound_min": min(r["bound_from_measured_distance"] for r in results),
                "loss_recurrent": float(np.mean([r["test_loss_recurrent"] for r in results])),
                "loss_truncated": float(np.mean([r["test_loss_truncated"] for r in results])),
            }
        )
    return rows


def select_units(units: Sequence[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    """The units whose fields equal ``fields`` (e.g. ``activation="tanh", k=4``)."""
    return [u for u in units if all(u[name] == value for name, value in fields.items())]


def widget_grid(
    lams: Sequence[float] = (0.5, 0.7, 0.9),
    ks: Sequence[int] = (1, 2, 4, 8),
    config: Figure1Config | str = "smoke",
    seed: int = 0,
) -> dict[tuple[float, str], list[dict[str, Any]]]:
    """Smoke-size runs for every ``lambda`` and schedule."""
    config = get_config(config) if isinstance(config, str) else config
    activation = config.activations[0]
    return {
        (lam, schedule): run_group(config, activation, schedule, seed, ks, lam=lam)
        for lam in lams
        for schedule in config.schedules
    }
