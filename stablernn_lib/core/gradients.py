"""BPTT for ``h_t = rho(a_t)``, ``a_t = W h_{t-1} + U x_t + b``: the Jacobians
``J_t = diag(rho'(a_t)) W``, their products ``d h_T / d h_s = J_T ... J_{s+1}`` (norm at most
``(gamma ||W||_2)^(T-s)`` when ``|rho'| <= gamma``), clipping."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn
from torch.func import jacrev, vmap

from stablernn_lib.core.models import VanillaRNN
from stablernn_lib.core.norms import activation_lipschitz

MATRIX_KINDS = ("gaussian", "orthogonal", "low_rank")


def activation_derivative(name: str, preactivation: Tensor) -> Tensor:
    """``rho'(a)`` elementwise for the activations of :class:`VanillaRNN`."""
    if name == "tanh":
        return 1.0 - torch.tanh(preactivation) ** 2
    if name == "sigmoid":
        s = torch.sigmoid(preactivation)
        return s * (1.0 - s)
    if name == "relu":
        return (preactivation > 0).to(preactivation.dtype)
    if name == "identity":
        return torch.ones_like(preactivation)
    raise ValueError(f"unknown activation {name!r}: use 'tanh', 'sigmoid', 'relu' or 'identity'")


def _check_vanilla(model: VanillaRNN) -> None:
    if not isinstance(model, VanillaRNN):
        raise TypeError(
            f"the Jacobian formula diag(rho'(a)) W is for a VanillaRNN or LinearRNN, got "
            f"{type(model).__name__}; use state_jacobians_autograd for other models"
        )


def state_jacobians(model: VanillaRNN, inputs: Tensor) -> Tensor:
    """``J_t = diag(rho'(a_t)) W`` for ``t = 1..T``: inputs ``(T, B, D)`` -> ``(T, B, H, H)``."""
    _check_vanilla(model)
    with torch.no_grad():
        states = model.run(inputs)
        previous = torch.cat([model.zero_state(inputs.shape[1]).unsqueeze(0), states[:-1]])
        slopes = activation_derivative(model.activation, model.preactivation(previous, inputs))
        return slopes.unsqueeze(-1) * model.weight_hh


def state_jacobians_autograd(model: nn.Module, inputs: Tensor) -> Tensor:
    """:func:`state_jacobians` by autograd, any ``RecurrentMap``: ``(T, B, D) -> (T, B, S, S)``."""
    with torch.no_grad():
        states = model.run(inputs)
    previous = torch.cat([model.zero_state(inputs.shape[1]).unsqueeze(0), states[:-1]])

    def single(state: Tensor, x: Tensor) -> Tensor:
        return model.step(state.unsqueeze(0), x.unsqueeze(0)).squeeze(0)

    T, B, _ = inputs.shape
    flat = vmap(jacrev(single))(previous.reshape(T * B, -1), inputs.reshape(T * B, -1))
    return flat.reshape(T, B, model.state_size, model.state_size).detach()


def bptt_gradients(model: VanillaRNN, inputs: Tensor, state_grads: Tensor) -> dict[str, Tensor]:
    """BPTT written out for direct gradients ``dL/dh_t = state_grads[t]`` ``(T, B, H)``:
    ``delta_t = state_grads[t] + J_{t+1}^T delta_{t+1}``, ``g_t = rho'(a_t) * delta_t``, and
    ``dL/dW = sum g_t h_{t-1}^T``, ``dL/dU = sum g_t x_t^T``, ``dL/db = sum g_t`` (over ``t``
    and the batch), as ``{"weight_hh", "weight_ih", "bias"}``."""
    _check_vanilla(model)
    if state_grads.shape != (*inputs.shape[:2], model.hidden_size):
        raise ValueError(
            f"state_grads must have shape (T, B, H) = {(*inputs.shape[:2], model.hidden_size)}, "
            f"got {tuple(state_grads.shape)}"
        )
    with torch.no_grad():
        states = model.run(inputs)
        previous = torch.cat([model.zero_state(inputs.shape[1]).unsqueeze(0), states[:-1]])
        slopes = activation_derivative(model.activation, model.preactivation(previous, inputs))
        delta = torch.zeros_like(state_grads[0])
        grads = {
            "weight_hh": torch.zeros_like(model.weight_hh),
            "weight_ih": torch.zeros_like(model.weight_ih),
            "bias": torch.zeros_like(model.weight_hh[0]),
        }
        for t in reversed(range(inputs.shape[0])):
            delta = delta + state_grads[t]
            g = slopes[t] * delta  # dL/da_t, (B, H)
            grads["weight_hh"] += g.T @ previous[t]
            grads["weight_ih"] += g.T @ inputs[t]
            grads["bias"] += g.sum(0)
            delta = g @ model.weight_hh  # J_t^T delta as rows: dL/dh_{t-1} from the future
    return grads


def jacobian_products(jacobians: Tensor) -> Tensor:
    """``P_s = J_T ... J_{s+1}`` for ``s = 0..T``: ``(T, B, S, S)`` -> ``(T + 1, B, S, S)``."""
    T, B, S, _ = jacobians.shape
    product = torch.eye(S, dtype=jacobians.dtype, device=jacobians.device).expand(B, S, S)
    products = [product]
    for t in reversed(range(T)):
        product = product @ jacobians[t]
        products.append(product)
    return torch.stack(products[::-1])


def jacobian_product_norms(model: VanillaRNN, inputs: Tensor) -> Tensor:
    """``||d h_T / d h_s||_2`` for ``s = 0..T``: inputs ``(T, B, D)`` -> ``(T + 1, B)``."""
    products = jacobian_products(state_jacobians(model, inputs))
    return torch.linalg.matrix_norm(products, ord=2)


def jacobian_product_bound(gamma: float, weight_norm: float, lags: Tensor) -> Tensor:
    """The bound ``(gamma ||W||_2)^lag`` on ``||d h_T / d h_{T - lag}||_2``."""
    if gamma < 0 or weight_norm < 0:
        raise ValueError("gamma and the weight norm must be non-negative")
    return (gamma * weight_norm) ** lags.to(torch.float64)


def recurrent_matrix(
    kind: str,
    hidden_size: int,
    weight_norm: float,
    *,
    rank: int = 2,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """A matrix ``(H, H)`` of spectral norm ``weight_norm``: ``"gaussian"`` (i.i.d. entries),
    ``"orthogonal"`` (all singular values equal) or ``"low_rank"`` (an illustrative memory:
    ``sum_i 2^-i q_i q_i^T`` over ``rank`` orthonormal ``q_i``, plus noise of norm 0.1)."""
    if kind not in MATRIX_KINDS:
        raise ValueError(f"unknown matrix kind {kind!r}: use one of {MATRIX_KINDS}")
    if hidden_size < 1 or weight_norm <= 0:
        raise ValueError("hidden_size must be >= 1 and weight_norm > 0")
    gaussian = torch.randn(hidden_size, hidden_size, generator=generator, dtype=dtype)
    if kind == "orthogonal":
        q, r = torch.linalg.qr(gaussian)
        matrix = q * torch.sign(torch.diagonal(r))
    elif kind == "low_rank":
        rank = min(rank, hidden_size)
        directions, _ = torch.linalg.qr(gaussian[:, :rank])
        strengths = 0.5 ** torch.arange(rank, dtype=dtype)
        noise = torch.randn(hidden_size, hidden_size, generator=generator, dtype=dtype)
        memory = (directions * strengths) @ directions.T
        matrix = memory + 0.1 * noise / torch.linalg.matrix_norm(noise, ord=2)
    else:
        matrix = gaussian
    return matrix * (weight_norm / torch.linalg.matrix_norm(matrix, ord=2))


def vanilla_rnn_with_weight(
    weight_hh: Tensor,
    activation: str = "tanh",
    input_size: int | None = None,
    *,
    bias: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> VanillaRNN:
    """A :class:`VanillaRNN` with the given ``W`` and ``U`` = identity (``input_size=None``)
    or Gaussian ``N(0, 1/H)`` of shape ``(H, input_size)``; optional bias ``(H,)``."""
    if weight_hh.dim() != 2 or weight_hh.shape[0] != weight_hh.shape[1]:
        raise ValueError(
            f"weight_hh must be a square (H, H) matrix, got shape {tuple(weight_hh.shape)}"
        )
    hidden_size = weight_hh.shape[0]
    size = hidden_size if input_size is None else input_size
    model = VanillaRNN(size, hidden_size, activation, bias=bias is not None, dtype=weight_hh.dtype)
    with torch.no_grad():
        model.weight_hh.copy_(weight_hh)
        if input_size is None:
            model.weight_ih.copy_(torch.eye(hidden_size, dtype=weight_hh.dtype))
        else:
            shape = (hidden_size, input_size)
            gauss = torch.randn(shape, generator=generator, dtype=weight_hh.dtype)
            model.weight_ih.copy_(gauss / math.sqrt(hidden_size))
        if bias is not None:
            model.bias.copy_(bias)
    return model


def lag_norm_curve(
    kind: str,
    weight_norm: float,
    activation: str,
    *,
    hidden_size: int = 32,
    steps: int = 40,
    batch: int = 32,
    input_scale: float = 1.0,
    seed: int = 0,
) -> Tensor:
    """Batch median of ``||d h_T / d h_{T - lag}||_2``, ``lag = 0..steps`` ``(steps + 1,)``, for
    ``W = recurrent_matrix(kind, ...)``, Gaussian ``U`` and inputs of sd ``input_scale``."""
    generator = torch.Generator().manual_seed(seed)
    weight = recurrent_matrix(kind, hidden_size, weight_norm, generator=generator)
    model = vanilla_rnn_with_weight(weight, activation, hidden_size, generator=generator)
    inputs = input_scale * torch.randn(
        steps, batch, hidden_size, generator=generator, dtype=weight.dtype
    )
    norms = jacobian_product_norms(model, inputs)
    return norms.median(dim=1).values.flip(0)


def lag_bound(weight_norm: float, activation: str, steps: int) -> Tensor:
    """``(L_rho ||W||_2)^lag`` for ``lag = 0..steps``, shape ``(steps + 1,)``."""
    lags = torch.arange(steps + 1)
    return jacobian_product_bound(activation_lipschitz(activation), weight_norm, lags)


# --- eigenvalues are not enough: a nilpotent W ------------------------------------------

NILPOTENT_WEIGHT = ((8.0, 8.0), (-8.0, -8.0))
CHAOTIC_INPUT = (1.8, -2.2)


def nilpotent_weight(dtype: torch.dtype = torch.float64) -> Tensor:
    """``W = [[8, 8], [-8, -8]] = 8 u v^T`` with ``u = (1, -1)``, ``v = (1, 1)``:
    ``W^2 = 0``, both eigenvalues are 0, and ``||W||_2 = 16``."""
    return torch.tensor(NILPOTENT_WEIGHT, dtype=dtype)


def steering_inputs(model: VanillaRNN, steps: int, saturation: float = 10.0) -> Tensor:
    """Inputs ``(steps, 1, 2)`` holding unit 1 at preactivation 0 and unit 2 at ``saturation``
    (two units, ``U = I``): each factor ``8 |rho'(a_1) - rho'(a_2)|`` near its largest."""
    if model.hidden_size != 2 or model.input_size != 2:
        raise ValueError("steering_inputs is written for the two-unit RNN with U = I (2 x 2)")
    state = model.zero_state(1)
    inputs = []
    with torch.no_grad():
        for _ in range(steps):
            recurrent = state @ model.weight_hh.T
            x = torch.stack([-recurrent[:, 0], saturation - recurrent[:, 1]], dim=-1)
            state = model.step(state, x)
            inputs.append(x)
    return torch.stack(inputs)


def constant_input_growth(inputs: Tensor, steps: int = 600, burn_in: int = 100) -> Tensor:
    """Mean of ``log(8 |rho'(a_1) - rho'(a_2)|)`` after ``burn_in`` steps of the nilpotent tanh
    RNN under each constant input ``(N, 2)`` -> ``(N,)``: by ``W D W = 8 (d_1 - d_2) W``, the
    growth rate per step of ``||d h_T / d h_s||`` (a Lyapunov exponent)."""
    if inputs.dim() != 2 or inputs.shape[1] != 2:
        raise ValueError(f"inputs must have shape (N, 2), got {tuple(inputs.shape)}")
    if not 0 <= burn_in < steps:
        raise ValueError("need 0 <= burn_in < steps")
    weight = nilpotent_weight(inputs.dtype)
    state = torch.zeros_like(inputs)
    total = torch.zeros(inputs.shape[0], dtype=inputs.dtype)
    for t in range(steps):
        slopes = activation_derivative("tanh", state @ weight.T + inputs)
        if t >= burn_in:
            total += torch.log((8 * (slopes[:, 0] - slopes[:, 1]).abs()).clamp_min(1e-300))
        state = torch.tanh(state @ weight.T + inputs)
    return total / (steps - burn_in)


def _growth_rate(long: Tensor, short: Tensor, extra_steps: int) -> float:
    """Median of ``(long / short)^(1 / extra_steps)``, with ``0/0`` read as 0."""
    ratio = torch.where(short > 0, long / short.clamp_min(1e-300), torch.zeros_like(long))
    return float(ratio.median() ** (1.0 / extra_steps))


def nilpotent_check(steps: int = 60, batch: int = 256, seed: int = 0) -> dict[str, dict]:
    """Per input regime of the nilpotent tanh RNN ("zero", "gaussian", "constant" (chaotic),
    "steered input"): ``norms``, the median ``||d h_T/d h_{T-lag}||_2`` by lag ``(steps + 1,)``,
    and ``rate = (||d h_T / d h_0|| / ||d h_T / d h_{T/2}||)^(2/T)`` (0 for zero products)."""
    generator = torch.Generator().manual_seed(seed)
    model = vanilla_rnn_with_weight(nilpotent_weight(), "tanh")
    regimes = {
        "zero input": torch.zeros(steps, 1, 2, dtype=torch.float64),
        "gaussian input": torch.randn(steps, batch, 2, generator=generator, dtype=torch.float64),
        "constant input": torch.tensor(CHAOTIC_INPUT, dtype=torch.float64).expand(steps, 1, 2),
        "steered input": steering_inputs(model, steps),
    }
    results = {}
    for name, inputs in regimes.items():
        norms = jacobian_product_norms(model, inputs.contiguous())
        results[name] = {
            "norms": norms.median(dim=1).values.flip(0),
            "rate": _growth_rate(norms[0], norms[steps - steps // 2], steps // 2),
        }
    return results


# --- gradient clipping ----------------------------------------------------------------


def clip_gradient_norm_(parameters: Iterable[Tensor] | Tensor, threshold: float) -> float:
    """Pascanu et al.'s rule on the ``.grad``s, ``g``: if ``||g||_2 > threshold`` then
    ``g <- threshold * g / ||g||_2``.  Returns ``||g||_2`` before clipping."""
    if not threshold > 0:
        raise ValueError(f"the clipping threshold must be positive, got {threshold}")
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        raise ValueError("no parameter has a gradient: call loss.backward() before clipping")
    norm = float(torch.sqrt(sum((g.detach() ** 2).sum() for g in grads)))
    if norm > threshold:
        for g in grads:
            g.mul_(threshold / norm)
    return norm


def clipping_experiment(
    threshold: float | None,
    *,
    weight_norm: float = 3.0,
    learning_rate: float = 0.5,
    iterations: int = 25,
    steps: int = 20,
    hidden_size: int = 16,
    batch: int = 32,
    delay: int = 3,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Gradient descent on a tanh RNN + linear readout for ``y_t = x_{t - delay}`` (squared
    error), ``W`` orthogonal times ``weight_norm``, clipped at ``threshold`` (None: not).
    Returns ``loss`` and ``grad_norm`` (before clipping) per iteration, up to a non-finite loss."""
    generator = torch.Generator().manual_seed(seed)
    weight = recurrent_matrix("orthogonal", hidden_size, weight_norm, generator=generator)
    model = vanilla_rnn_with_weight(weight, "tanh", 1, generator=generator)
    readout = nn.Linear(hidden_size, 1, dtype=weight.dtype)
    with torch.no_grad():
        readout.weight.copy_(torch.randn(1, hidden_size, generator=generator, dtype=weight.dtype))
        readout.weight.div_(math.sqrt(hidden_size))
        readout.bias.zero_()
    params = [*model.parameters(), *readout.parameters()]
    inputs = torch.randn(steps, batch, 1, generator=generator, dtype=weight.dtype)
    targets = torch.cat([torch.zeros_like(inputs[:delay]), inputs[:-delay]])
    history: dict[str, list[float]] = {"loss": [], "grad_norm": []}
    for _ in range(iterations):
        loss = ((readout(model.run(inputs)) - targets) ** 2).mean()
        if not torch.isfinite(loss):
            break
        for p in params:
            p.grad = None
        loss.backward()
        norm = clip_gradient_norm_(params, threshold if threshold is not None else math.inf)
        with torch.no_grad():
            for p in params:
                p.sub_(learning_rate * p.grad)
        history["loss"].append(float(loss.detach()))
        history["grad_norm"].append(norm)
    return history
