"""Experiments behind Lemmas 1-3: measured gaps and Lipschitz ratios of random instances
next to the proved bounds, each returned as a dataclass of arrays.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from stablernn_lib.core import bounds
from stablernn_lib.core.contraction import contraction_constant, project_spectral_ball
from stablernn_lib.core.models import RecurrentMap, VanillaRNN, random_vanilla_rnn
from stablernn_lib.core.norms import activation_lipschitz, spectral_norm
from stablernn_lib.core.truncation import truncated_states
from stablernn_lib.theory.lstm_certificate import (
    LSTMCertificate,
    lstm_certificate,
    random_stable_lstm,
    weighted_state_norm,
)


def single_threaded(function: Callable) -> Callable:
    """Run ``function`` on one torch thread: on tensors this small extra threads only wait."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return function(*args, **kwargs)
        finally:
            torch.set_num_threads(previous)

    return wrapper


def _check_contexts(ks: Sequence[int]) -> list[int]:
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"the contexts ks must be a non-empty list of ints >= 1, got {ks}")
    return ks


def sphere_inputs(
    seq_len: int,
    batch: int,
    input_size: int,
    input_bound: float,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Gaussian directions scaled to ``||x_t|| = B_x``, the largest allowed: ``(T, B, D)``."""
    if input_bound < 0:
        raise ValueError(f"input_bound must be non-negative, got {input_bound}")
    x = torch.randn(seq_len, batch, input_size, generator=generator, dtype=dtype)
    return input_bound * x / x.norm(dim=-1, keepdim=True)


FAMILIES = ("gaussian", "aligned")


def random_rnn_with_inputs(
    lam: float,
    *,
    family: str = "gaussian",
    input_size: int = 4,
    hidden_size: int = 8,
    seq_len: int = 60,
    batch: int = 1,
    activation: str = "tanh",
    input_bound: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[VanillaRNN, Tensor]:
    """A vanilla RNN with ``L_rho ||W||_2 = lam`` and inputs ``(T, B, D)`` of norm ``B_x``:
    ``"gaussian"`` (Gaussian ``W`` rescaled, Gaussian ``U``, inputs on the sphere) or
    ``"aligned"`` (``W = (lam / L_rho) I``, every ``x_t = B_x v``, ``v`` the top right singular
    vector of ``U``: the slowest forgetting a ``lam``-contraction allows)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; use one of {FAMILIES}")
    model = random_vanilla_rnn(input_size, hidden_size, lam, activation, generator=generator)
    inputs = sphere_inputs(seq_len, batch, input_size, input_bound, generator)
    if family == "aligned":
        with torch.no_grad():
            model.weight_hh.copy_(
                lam / activation_lipschitz(activation) * torch.eye(hidden_size, dtype=torch.float64)
            )
            top = torch.linalg.svd(model.weight_ih).Vh[0]
            inputs = input_bound * top.expand(seq_len, batch, input_size).clone()
    return model, inputs


# A difference of states of size <= B_h is off by about T eps B_h in float64: checks allow
# ROUNDOFF_SLACK * scale over a bound; ratios are reported where the bound exceeds
# RATIO_FLOOR * scale (scale: B_h, or gamma for gradients), so rounding moves them < 1e-8.
ROUNDOFF_SLACK = 1e-12
RATIO_FLOOR = 1e-6

MODELS = ("tanh", "identity", "lstm")


def _rowwise_nanmax(values: np.ndarray) -> np.ndarray:
    """The largest finite entry of each ``values[i]`` (NaN when there is none)."""
    rows = values.reshape(len(values), -1)
    return np.array(
        [row[np.isfinite(row)].max() if np.isfinite(row).any() else np.nan for row in rows]
    )


@dataclass
class TruncationResult:
    """Lemma 1 on random instances: ``measured[i, j, m] = max_{t, b} ||h_t - h^k_t||`` (``lams[i]``,
    instance ``j``, ``ks[m]``); ``certified[i, j]``, ``state_bounds[i, j]`` (NaN where
    ``lam >= 1``); ``bound = certified^k state_bounds``; ``norm`` names the state norm."""

    lams: np.ndarray
    ks: np.ndarray
    measured: np.ndarray
    certified: np.ndarray
    state_bounds: np.ndarray
    model: str
    family: str
    input_bound: float
    norm: str

    @property
    def bound(self) -> np.ndarray:
        """``lambda^k B_h`` with shape ``(lams, instances, ks)``."""
        return self.certified[..., None] ** self.ks * self.state_bounds[..., None]

    def holds(self) -> bool:
        """Whether ``measured <= bound`` wherever a bound is proved (up to rounding)."""
        slack = ROUNDOFF_SLACK * self.state_bounds[..., None]
        stable = np.isfinite(self.bound)
        return bool(np.all(self.measured[stable] <= (self.bound + slack)[stable]))

    def ratios(self) -> np.ndarray:
        """``measured / bound``; NaN where there is no bound or it is below the rounding floor."""
        bound = self.bound
        usable = np.isfinite(bound) & (bound > RATIO_FLOOR * self.state_bounds[..., None])
        return np.where(usable, self.measured / np.where(usable, bound, 1.0), np.nan)

    def tightness(self) -> np.ndarray:
        """The largest ``measured / bound`` for each ``lam`` (NaN without a bound)."""
        return _rowwise_nanmax(self.ratios())

    def smallest_context(self, eps: float) -> np.ndarray:
        """Per ``lam``: the smallest ``k`` with every gap ``<= eps`` (NaN when none)."""
        if not eps > 0:
            raise ValueError(f"eps must be positive, got {eps}")
        enough = self.measured.max(axis=1) <= eps  # (lams, ks)
        return np.array([self.ks[row].min() if row.any() else np.nan for row in enough])

    def summary(self) -> str:
        """One line per ``lam``: whether the bound holds and how tight it is."""
        lines = []
        for i, lam in enumerate(self.lams):
            worst = self.measured[i].max(axis=0)
            if np.isfinite(self.bound[i]).all():
                ratio = self.tightness()[i]
                holds = bool(
                    np.all(
                        self.measured[i]
                        <= self.bound[i] + ROUNDOFF_SLACK * self.state_bounds[i][:, None]
                    )
                )
                lines.append(
                    f"lambda = {lam:<5g} bound holds in every run: {holds}; largest "
                    f"measured/bound = {ratio:.3g}; gap at k = {self.ks[-1]}: {worst[-1]:.1e}"
                )
            else:
                lines.append(
                    f"lambda = {lam:<5g} no bound (lambda >= 1); largest gap at k = "
                    f"{self.ks[0]}: {worst[0]:.2e}, at k = {self.ks[-1]}: {worst[-1]:.2e}"
                )
        return "\n".join(lines)


def truncation_gaps(
    model: RecurrentMap,
    inputs: Tensor,
    ks: Sequence[int],
    norm: Callable[[Tensor], Tensor] | None = None,
) -> np.ndarray:
    """``max_{t, b} ||h_t - h^k_t||`` for each ``k``: ``(len(ks),)``; ``norm`` maps
    ``(N, S) -> (N,)`` (default Euclidean)."""
    ks = _check_contexts(ks)
    with torch.no_grad():
        full = model.run(inputs)
        gaps = []
        for k in ks:
            diff = (full - truncated_states(model, inputs, k)).reshape(-1, model.state_size)
            values = diff.norm(dim=-1) if norm is None else norm(diff)
            gaps.append(float(values.max()))
    return np.array(gaps)


def lstm_state_bound(certificate: LSTMCertificate) -> float:
    """A bound on ``||s_t||_v`` from ``s_0 = 0``: the smaller of the box ``D`` and
    ``B_0 / (1 - lambda)``, ``B_0 >= ||phi(0, x)||_v`` as ``|i z| <= ibar zbar`` and
    ``|o tanh(i z)| <= obar tanh(ibar zbar)``."""
    v_c, v_h = certificate.weights
    cell = certificate.input_max * certificate.candidate_max
    p = certificate.p
    box = max(
        float(torch.linalg.vector_norm(certificate.cell_bound, ord=p)) / v_c,
        float(torch.linalg.vector_norm(torch.ones_like(cell), ord=p)) / v_h,
    )
    push = max(
        float(torch.linalg.vector_norm(cell, ord=p)) / v_c,
        float(torch.linalg.vector_norm(certificate.output_max * torch.tanh(cell), ord=p)) / v_h,
    )
    return min(box, bounds.state_norm_bound(certificate.lam, push, 1.0))


def cube_inputs(
    seq_len: int,
    batch: int,
    input_size: int,
    input_bound: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Uniform inputs in the cube ``||x_t||_inf <= B`` (the LSTM certificate's input set)."""
    u = torch.rand(seq_len, batch, input_size, generator=generator, dtype=torch.float64)
    return input_bound * (2 * u - 1)


def _truncation_case(
    lam: float,
    ks: list[int],
    model_kind: str,
    family: str,
    sizes: dict,
    input_bound: float,
    generator: torch.Generator,
) -> tuple[np.ndarray, float, float]:
    """``(gaps, proved lambda, proved state bound)`` for one random instance."""
    if model_kind == "lstm":
        model = random_stable_lstm(
            sizes["input_size"], sizes["hidden_size"], lam, input_bound, generator=generator
        )
        inputs = cube_inputs(
            sizes["seq_len"], sizes["batch"], sizes["input_size"], input_bound, generator
        )
        certificate = lstm_certificate(model, input_bound)

        def norm(diff: Tensor) -> Tensor:
            return weighted_state_norm(diff, model.hidden_size, certificate.weights, certificate.p)

        gaps = truncation_gaps(model, inputs, ks, norm)
        return gaps, certificate.lam, lstm_state_bound(certificate)
    model, inputs = random_rnn_with_inputs(
        lam,
        family=family,
        activation=model_kind,
        input_bound=input_bound,
        generator=generator,
        **sizes,
    )
    gaps = truncation_gaps(model, inputs, ks)
    certified = contraction_constant(model)
    if certified >= 1:
        return gaps, math.nan, math.nan
    lx = activation_lipschitz(model_kind) * spectral_norm(model.weight_ih)
    return gaps, certified, bounds.state_norm_bound(certified, lx, input_bound)


@single_threaded
def truncation_experiment(
    lams: Sequence[float],
    ks: Sequence[int],
    *,
    model: str = "tanh",
    family: str = "gaussian",
    num_instances: int = 3,
    input_size: int = 4,
    hidden_size: int = 8,
    seq_len: int = 80,
    batch: int = 4,
    input_bound: float = 1.0,
    seed: int = 0,
    progress: bool = True,
) -> TruncationResult:
    """Lemma 1: ``max_t ||h_t - h^k_t||`` versus ``k`` against ``lambda^k B_h``.  ``"tanh"``,
    ``"identity"``: a vanilla RNN, ``L_rho ||W||_2 = lam``, ``B_h = L_x B_x / (1 - lambda)``;
    ``"lstm"``: :func:`random_stable_lstm` at certificate ``lam``, ``||x||_inf <= B``, measured
    in the certificate's norm, ``B_h`` by :func:`lstm_state_bound`."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; use one of {MODELS}")
    if model == "lstm" and not all(0 < lam < 1 for lam in lams):
        raise ValueError(f"stable LSTMs need 0 < lam < 1, got {list(lams)}")
    ks = _check_contexts(ks)
    generator = torch.Generator().manual_seed(seed)
    sizes = {
        "input_size": input_size,
        "hidden_size": hidden_size,
        "seq_len": seq_len,
        "batch": batch,
    }
    measured = np.zeros((len(lams), num_instances, len(ks)))
    certified = np.zeros((len(lams), num_instances))
    state_bounds = np.zeros_like(certified)
    cases = [(i, j) for i in range(len(lams)) for j in range(num_instances)]
    for i, j in tqdm(cases, desc="Lemma 1 instances", disable=not progress):
        measured[i, j], certified[i, j], state_bounds[i, j] = _truncation_case(
            lams[i], ks, model, family, sizes, input_bound, generator
        )
    norm = "certificate norm max(|c|_inf / v_c, |h|_inf / v_h)" if model == "lstm" else "Euclidean"
    return TruncationResult(
        np.asarray(lams, dtype=float),
        np.asarray(ks),
        measured,
        certified,
        state_bounds,
        model,
        "cube" if model == "lstm" else family,
        input_bound,
        norm,
    )


@dataclass
class RegressionInstance:
    """A vanilla RNN, inputs ``(T, 1, D)``, target ``(H,)``, loss ``||h_T - y||^2 / 2``; constants
    ``lam = L_rho ||W||_2``, ``lx = L_rho ||U||_2``, ``bx = max_t ||x_t||``, ``(L_p, S_p)``."""

    model: VanillaRNN
    inputs: Tensor
    target: Tensor
    family: str = "gaussian"

    @property
    def lam(self) -> float:
        return activation_lipschitz(self.model.activation) * spectral_norm(self.model.weight_hh)

    @property
    def lx(self) -> float:
        return activation_lipschitz(self.model.activation) * spectral_norm(self.model.weight_ih)

    @property
    def bx(self) -> float:
        return float(self.inputs.norm(dim=-1).max())

    def constants(self) -> bounds.GradientConstants:
        """The constants of :func:`bounds.lemma2_gamma` and :func:`bounds.lemma3_beta`."""
        lam, lx, bx = self.lam, self.lx, self.bx
        lp, sp = bounds.squared_loss_constants(
            bounds.state_norm_bound(lam, lx, bx), float(self.target.norm())
        )
        l2_rho = bounds.activation_smoothness(self.model.activation)
        l_rho = activation_lipschitz(self.model.activation)
        return bounds.GradientConstants(lam, lx, bx, lp, sp, l_rho, l2_rho)


def random_regression_instance(
    lam: float,
    *,
    family: str = "gaussian",
    input_size: int = 4,
    hidden_size: int = 8,
    seq_len: int = 60,
    activation: str = "tanh",
    input_bound: float = 1.0,
    target_norm: float = 1.0,
    generator: torch.Generator | None = None,
) -> RegressionInstance:
    """:func:`random_rnn_with_inputs` (one sequence) and a Gaussian target of norm
    ``target_norm``, float64."""
    model, inputs = random_rnn_with_inputs(
        lam,
        family=family,
        input_size=input_size,
        hidden_size=hidden_size,
        seq_len=seq_len,
        activation=activation,
        input_bound=input_bound,
        generator=generator,
    )
    y = torch.randn(hidden_size, generator=generator, dtype=torch.float64)
    return RegressionInstance(model, inputs, target_norm * y / y.norm(), family)


def _check_regression_model(model: VanillaRNN) -> None:
    if not isinstance(model, VanillaRNN):
        raise TypeError(f"Lemmas 2 and 3 are about a VanillaRNN, got {type(model).__name__}")
    if model.bias is not None:
        raise ValueError(
            "Lemmas 2 and 3 are proved for w = (W, U) without a bias; build the RNN with bias=False"
        )


def regression_loss(
    model: VanillaRNN, inputs: Tensor, target: Tensor, k: int | None = None
) -> Tensor:
    """``p_T = ||h_T - y||^2 / 2`` (batch mean), or ``p^k_T`` from ``x_{T-k+1..T}``: inputs
    ``(T, B, D)``, target ``(H,)`` or ``(B, H)``."""
    _check_regression_model(model)
    if k is not None and k < 1:
        raise ValueError(f"the context k must be at least 1 (or None for the full model), got {k}")
    window = inputs if k is None else inputs[-k:]
    last = model.output(model.run(window)[-1])
    return 0.5 * ((last - target) ** 2).sum(dim=-1).mean()


def parameter_gradient(
    model: VanillaRNN, inputs: Tensor, target: Tensor, k: int | None = None
) -> Tensor:
    """``grad_w p_T`` (or ``grad_w p^k_T``) flattened ``(H*H + H*D,)``, ``(W, U)`` row-major."""
    params = (model.weight_hh, model.weight_ih)
    loss = regression_loss(model, inputs, target, k)
    grads = torch.autograd.grad(loss, params)
    return torch.cat([g.reshape(-1) for g in grads])


def finite_difference_gradient(
    instance: RegressionInstance, k: int | None = None, step: float = 1e-6
) -> Tensor:
    """``(p(w + s e_i) - p(w - s e_i)) / 2s`` for every coordinate, in
    :func:`parameter_gradient`'s order, float64."""
    if not step > 0:
        raise ValueError(f"the step must be positive, got {step}")
    model, inputs, target = instance.model, instance.inputs, instance.target
    values = []
    with torch.no_grad():
        for param in (model.weight_hh, model.weight_ih):
            flat = param.view(-1)
            for index in range(flat.numel()):
                original = float(flat[index])
                flat[index] = original + step
                plus = float(regression_loss(model, inputs, target, k))
                flat[index] = original - step
                minus = float(regression_loss(model, inputs, target, k))
                flat[index] = original
                values.append((plus - minus) / (2 * step))
    return torch.tensor(values, dtype=torch.float64)


def gradient_gaps(instance: RegressionInstance, ks: Sequence[int]) -> np.ndarray:
    """``||grad_w p_T - grad_w p^k_T||`` for each ``k`` in ``ks``: shape ``(len(ks),)``."""
    ks = _check_contexts(ks)
    model, inputs, target = instance.model, instance.inputs, instance.target
    full = parameter_gradient(model, inputs, target)
    gaps = [(full - parameter_gradient(model, inputs, target, k)).norm() for k in ks]
    return np.array([float(gap) for gap in gaps])


@dataclass
class GradientGapResult:
    """Lemma 2 on random instances: ``measured[i, j, m]`` (``lams[i]``, instance ``j``,
    ``ks[m]``), ``gammas[i, j]``, ``bound[i, j, m] = gamma k lambda^k``."""

    lams: np.ndarray
    ks: np.ndarray
    measured: np.ndarray
    gammas: np.ndarray
    bound: np.ndarray
    activation: str
    family: str
    hidden_size: int
    input_size: int
    seq_len: int

    def holds(self) -> bool:
        """Whether ``measured <= gamma k lambda^k`` everywhere (up to rounding)."""
        return bool(np.all(self.measured <= self.bound + ROUNDOFF_SLACK * self.gammas[..., None]))

    def ratios(self) -> np.ndarray:
        """``measured / bound``; NaN where the bound is below the rounding floor."""
        usable = self.bound > RATIO_FLOOR * self.gammas[..., None]
        return np.where(usable, self.measured / np.where(usable, self.bound, 1.0), np.nan)

    def tightness(self) -> np.ndarray:
        """The largest ``measured / bound`` for each ``lambda``."""
        return _rowwise_nanmax(self.ratios())

    def summary(self) -> str:
        """One line per ``lambda``: gamma, whether the bound holds, how tight it is."""
        lines = []
        for i, lam in enumerate(self.lams):
            holds = bool(
                np.all(self.measured[i] <= self.bound[i] + ROUNDOFF_SLACK * self.gammas[i, :, None])
            )
            lines.append(
                f"lambda = {lam:<5g} gamma = {self.gammas[i].max():9.3g}; bound holds in every "
                f"run: {holds}; largest measured/bound = {self.tightness()[i]:.3g}"
            )
        return "\n".join(lines)


def _regression_instances(
    lams: Sequence[float],
    num_instances: int,
    seed: int,
    progress: bool,
    description: str,
    instance_options: dict,
) -> Iterator[tuple[int, int, RegressionInstance, torch.Generator]]:
    """``(i, j, instance, generator)`` for instance ``j`` at ``lams[i]``, all from one generator
    (yielded so that the caller's draws continue its stream)."""
    if len(lams) == 0 or num_instances < 1:
        raise ValueError(
            f"need at least one lambda and num_instances >= 1, got lams = {list(lams)} and "
            f"num_instances = {num_instances}"
        )
    generator = torch.Generator().manual_seed(seed)
    cases = [(i, j) for i in range(len(lams)) for j in range(num_instances)]
    for i, j in tqdm(cases, desc=description, disable=not progress):
        instance = random_regression_instance(lams[i], generator=generator, **instance_options)
        yield i, j, instance, generator


@single_threaded
def gradient_gap_experiment(
    lams: Sequence[float],
    ks: Sequence[int],
    *,
    num_instances: int = 3,
    seed: int = 0,
    progress: bool = True,
    **instance_options,
) -> GradientGapResult:
    """Lemma 2 (Figure 1a): gradient gaps versus ``k`` against ``gamma k lambda^k``;
    ``instance_options`` go to :func:`random_regression_instance`."""
    ks = _check_contexts(ks)
    shape = (len(lams), num_instances)
    measured = np.zeros((*shape, len(ks)))
    bound = np.zeros_like(measured)
    gammas = np.zeros(shape)
    instances = _regression_instances(
        lams, num_instances, seed, progress, "Lemma 2 instances", instance_options
    )
    for i, j, instance, _ in instances:
        constants = instance.constants()
        gammas[i, j] = bounds.lemma2_gamma(constants)
        measured[i, j] = gradient_gaps(instance, ks)
        bound[i, j] = [bounds.lemma2_gradient_bound(gammas[i, j], k, constants.lam) for k in ks]
    model = instance.model
    return GradientGapResult(
        np.asarray(lams, dtype=float),
        np.asarray(ks),
        measured,
        gammas,
        bound,
        model.activation,
        instance.family,
        model.hidden_size,
        model.input_size,
        instance.inputs.shape[0],
    )


def flat_parameters(model: VanillaRNN) -> Tensor:
    """``w = (W, U)`` flattened in the order of :func:`parameter_gradient`."""
    return torch.cat([model.weight_hh.detach().reshape(-1), model.weight_ih.detach().reshape(-1)])


@torch.no_grad()
def project_parameters_(model: VanillaRNN, lam: float, lx: float) -> VanillaRNN:
    """Project in place onto ``Omega = {L_rho ||W||_2 <= lam, L_rho ||U||_2 <= lx}``."""
    l_rho = activation_lipschitz(model.activation)
    model.weight_hh.copy_(project_spectral_ball(model.weight_hh, lam / l_rho))
    model.weight_ih.copy_(project_spectral_ball(model.weight_ih, lx / l_rho))
    return model


def _hessian_vector_product(flat_grad: Tensor, params: tuple[Tensor, ...], v: Tensor) -> Tensor:
    parts = torch.autograd.grad(flat_grad, params, grad_outputs=v, retain_graph=True)
    return torch.cat([p.reshape(-1) for p in parts])


def hessian_top_direction(
    instance: RegressionInstance, iterations: int = 30, generator: torch.Generator | None = None
) -> tuple[float, Tensor]:
    """``(||grad^2_w p_T||_2, unit top eigenvector)``: power iteration, Hessian-vector products."""
    model = instance.model
    params = (model.weight_hh, model.weight_ih)
    loss = regression_loss(model, instance.inputs, instance.target)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    flat_grad = torch.cat([g.reshape(-1) for g in grads])
    v = torch.randn(flat_grad.shape, generator=generator, dtype=flat_grad.dtype)
    v /= v.norm()
    norm = 0.0
    for _ in range(iterations):
        hv = _hessian_vector_product(flat_grad, params, v)
        norm = float(hv.norm())
        if norm == 0.0:
            break
        v = hv / norm
    return norm, v


def lipschitz_ratio(instance: RegressionInstance, direction: Tensor, radius: float) -> float:
    """``||grad p_T(w) - grad p_T(w')|| / ||w - w'||``, ``w' = Proj(w + radius d)`` in the
    instance's set."""
    if not radius > 0:
        raise ValueError(f"the radius must be positive, got {radius}")
    model = instance.model
    lam, lx = instance.lam, instance.lx
    other = copy.deepcopy(model)
    step = radius * direction / direction.norm()
    size = model.weight_hh.numel()
    with torch.no_grad():
        other.weight_hh.add_(step[:size].reshape(model.weight_hh.shape))
        other.weight_ih.add_(step[size:].reshape(model.weight_ih.shape))
    project_parameters_(other, lam, lx)
    distance = float((flat_parameters(model) - flat_parameters(other)).norm())
    gap = parameter_gradient(model, instance.inputs, instance.target) - parameter_gradient(
        other, instance.inputs, instance.target
    )
    return float(gap.norm()) / distance


@dataclass
class SmoothnessResult:
    """Lemma 3 on random instances: ``ratios[i, j]`` (the largest found), ``hessian_norms[i, j]``,
    ``betas[i, j]``."""

    lams: np.ndarray
    ratios: np.ndarray
    hessian_norms: np.ndarray
    betas: np.ndarray
    activation: str
    family: str

    def holds(self) -> bool:
        """Whether every measured ratio is at most ``beta`` (Lemma 3)."""
        return bool(np.all(self.ratios <= self.betas))

    def tightness(self) -> np.ndarray:
        """The largest ``ratio / beta`` for each ``lambda``."""
        return (self.ratios / self.betas).max(axis=1)

    def summary(self) -> str:
        """One line per ``lambda``, then the fitted growth exponents of ratios and ``beta``."""
        lines = [
            f"lambda = {lam:<5g} largest ratio = {self.ratios[i].max():9.3g}; beta = "
            f"{self.betas[i].max():9.3g}; largest ratio/beta = {self.tightness()[i]:.3g}"
            for i, lam in enumerate(self.lams)
        ]
        lines.append(
            f"growth in 1/(1 - lambda): measured exponent {self.growth_exponent():.2f}, "
            f"beta's exponent {self.growth_exponent(self.betas):.2f}; bound holds: {self.holds()}"
        )
        return "\n".join(lines)

    def growth_exponent(self, values: np.ndarray | None = None) -> float:
        """Least-squares slope of ``log(mean values)`` against ``log(1 / (1 - lambda))``
        (default: the ratios)."""
        values = self.ratios if values is None else values
        slope, _ = np.polyfit(np.log(1 / (1 - self.lams)), np.log(values.mean(axis=1)), 1)
        return float(slope)


@single_threaded
def smoothness_experiment(
    lams: Sequence[float],
    *,
    num_instances: int = 3,
    num_random_directions: int = 2,
    radii: Sequence[float] = (1e-3, 1e-1),
    seed: int = 0,
    progress: bool = True,
    **instance_options,
) -> SmoothnessResult:
    """Lemma 3: Lipschitz ratios of ``grad_w p_T`` versus ``lambda`` against ``beta``."""
    shape = (len(lams), num_instances)
    ratios, hessian_norms, betas = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    instances = _regression_instances(
        lams, num_instances, seed, progress, "Lemma 3 instances", instance_options
    )
    for i, j, instance, generator in instances:
        betas[i, j] = bounds.lemma3_beta(instance.constants())
        hessian_norms[i, j], top = hessian_top_direction(instance, generator=generator)
        directions = [top, -top] + [
            torch.randn(top.shape, generator=generator, dtype=top.dtype)
            for _ in range(num_random_directions)
        ]
        ratios[i, j] = max(lipschitz_ratio(instance, d, r) for d in directions for r in radii)
    return SmoothnessResult(
        np.asarray(lams, dtype=float),
        ratios,
        hessian_norms,
        betas,
        instance.model.activation,
        instance.family,
    )
