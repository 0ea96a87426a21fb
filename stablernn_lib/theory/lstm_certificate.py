"""The LSTM contraction certificate of Chapter 4 and the projection that enforces it.

On the box ``D = {|h_j| <= 1, |c_j| <= C_j}``, ``C_j = ibar_j zbar_j / (1 - fbar_j)``, which
the map sends into itself when ``||x||_inf <= B``, two states obey entrywise
``|c' - c~'| <= fbar |c - c~| + A |h - h~|``, ``|h' - h~'| <= obar fbar |c - c~| + G |h - h~|``
(``A, G >= 0`` of shape ``(H, H)``).  The certificate is ``lambda = rho(M)``,
``M = [[max fbar, ||A||_p], [max obar fbar, ||G||_p]]``: the map is ``lambda``-contractive in
``max(||c||_p / v_c, ||h||_p / v_h)``, ``v`` the Perron vector of ``M``.  Gates are stacked
``(i, f, z, o)`` as in PyTorch: ``weight_hh (4H, H)``, ``weight_ih (4H, D)``, ``bias (4H,)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

import torch
from torch import Tensor

from stablernn_lib.core.models import LSTMMap

GATES = ("i", "f", "z", "o")

# The constants of the authors' experiment code: one per recurrent block W_g, one for U_f.
AUTHORS_RECURRENT_SCALES = {"i": 0.395, "f": 0.155, "z": 0.099, "o": 0.395}
AUTHORS_INPUT_FORGET_SCALE = 0.25

# Generous bounds (not binding in training) on the rows of U_i, U_z, U_o and on the biases:
# they make course_lstm_constraint's set compact, so Lemmas 2 and 3 have finite constants.
COURSE_INPUT_RADIUS = 100.0
COURSE_BIAS_BOUND = 20.0

# Entries of M are raised to this floor: M and its Perron vector positive, still a bound.
_POSITIVE_FLOOR = 1e-12


def _check_input_bound(input_bound: float) -> float:
    if not isinstance(input_bound, (int, float)) or isinstance(input_bound, bool):
        raise TypeError(f"input_bound must be a number, got {type(input_bound).__name__}")
    if not (0 <= input_bound < math.inf):
        raise ValueError(
            f"input_bound must be finite and >= 0 (it bounds ||x_t||_inf), got {input_bound}; "
            "clamp the inputs, e.g. the embedding to [-1, 1], and pass that bound"
        )
    return float(input_bound)


def _check_p(p: float) -> float:
    if p not in (1, 2, math.inf):
        raise ValueError(f"p must be 1, 2 or math.inf (the norm on c and h), got {p}")
    return p


def _check_gate_matrix(name: str, matrix: Tensor, hidden_size: int | None = None) -> int:
    """Validate a stacked gate matrix ``(4H, n)``; returns ``H``."""
    if not isinstance(matrix, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(matrix).__name__}")
    if not matrix.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {matrix.dtype}; use .double()")
    if matrix.dim() != 2 or matrix.shape[0] % 4 != 0:
        raise ValueError(
            f"{name} must have shape (4H, n) with the gates (i, f, z, o) stacked along "
            f"the first axis, as in torch.nn.LSTM; got {tuple(matrix.shape)}"
        )
    hidden = matrix.shape[0] // 4
    if hidden_size is not None and hidden != hidden_size:
        raise ValueError(
            f"{name} has {matrix.shape[0]} rows, but the recurrent matrix says "
            f"4H = {4 * hidden_size}; pass the matrices of the same layer"
        )
    return hidden


def gate_blocks(stacked: Tensor) -> dict[str, Tensor]:
    """Views ``{"i", "f", "z", "o"} -> (H, ...)`` of a stacked ``(4H, ...)`` tensor."""
    return dict(zip(GATES, stacked.chunk(4, dim=0), strict=True))


def induced_norm(matrix: Tensor, p: float) -> float:
    """``||A||_p``: max row sum (inf), max column sum (1) or largest singular value (2)."""
    p = _check_p(p)
    a = matrix.detach()
    if p == math.inf:
        return float(a.abs().sum(dim=1).max())
    if p == 1:
        return float(a.abs().sum(dim=0).max())
    return float(torch.linalg.matrix_norm(a, ord=2))


def project_l1_ball(vectors: Tensor, radius: float | Tensor) -> Tensor:
    """Euclidean projection of each row of ``vectors (..., n)`` onto ``{||w||_1 <= radius}``:
    ``w = sign(v) max(|v| - theta, 0)``, ``theta = (S_k* - radius) / k*`` with ``u = |v|``
    sorted decreasingly, ``S_k = u_1 + ... + u_k``, ``k*`` the largest ``k`` with
    ``u_k > (S_k - radius) / k``."""
    if not isinstance(vectors, Tensor) or not vectors.is_floating_point():
        raise TypeError("vectors must be a floating torch.Tensor of shape (..., n)")
    if vectors.dim() < 1 or vectors.shape[-1] == 0:
        raise ValueError(
            f"vectors must have shape (..., n) with n >= 1, got {tuple(vectors.shape)}"
        )
    radius_t = torch.as_tensor(radius, dtype=vectors.dtype, device=vectors.device)
    if bool((radius_t < 0).any()) or not bool(torch.isfinite(radius_t).all()):
        raise ValueError(f"the l1 radius must be finite and >= 0, got {radius}")
    return _project_rows_l1(vectors, radius_t.expand(vectors.shape[:-1]).unsqueeze(-1))


def _project_rows_l1(vectors: Tensor, radius: Tensor) -> Tensor:
    """:func:`project_l1_ball` unchecked, without host synchronization: rows ``(..., n)``,
    radii ``(..., 1)`` (``inf`` leaves a row unchanged)."""
    magnitudes = vectors.abs()
    inside = magnitudes.sum(dim=-1, keepdim=True) <= radius
    sorted_desc = magnitudes.sort(dim=-1, descending=True).values
    cumulative = sorted_desc.cumsum(dim=-1)
    ranks = torch.arange(1, vectors.shape[-1] + 1, device=vectors.device)
    active = sorted_desc > (cumulative - radius) / ranks.to(vectors.dtype)
    k_star = active.to(torch.int64).mul(ranks).max(dim=-1, keepdim=True).values.clamp(min=1)
    theta = (cumulative.gather(-1, k_star - 1) - radius) / k_star.to(vectors.dtype)
    projected = vectors.sign() * (magnitudes - theta).clamp(min=0)
    return torch.where(inside, vectors, projected)


def project_rows_l1_(matrix: Tensor, radius: float) -> Tensor:
    """In place: rows onto l1 balls of ``radius``, the projection onto ``{||W||_inf <= radius}``."""
    if radius == math.inf:
        return matrix
    with torch.no_grad():
        matrix.copy_(project_l1_ball(matrix, radius))
    return matrix


def project_bias_sum_(biases: Sequence[Tensor], upper: float, lower: float = -math.inf) -> None:
    """In place: Euclidean projection of ``(b_1, ..., b_K)`` onto ``{lower <= sum_k b_k <= upper}``
    (coordinate-wise); the excess of the sum leaves every ``b_k`` in equal shares ``excess / K``."""
    if not biases:
        return
    if lower > upper:
        raise ValueError(f"empty interval: lower = {lower} > upper = {upper}")
    with torch.no_grad():
        total = sum(b.detach() for b in biases)
        excess = (total - total.clamp(min=lower, max=upper)) / len(biases)
        for b in biases:
            b.sub_(excess)


def _sigmoid_slope(distance_to_zero: Tensor) -> Tensor:
    s = torch.sigmoid(distance_to_zero)
    return s * (1 - s)


def _distance_to_zero(center: Tensor, radius: Tensor) -> Tensor:
    """Distance from 0 to ``[center - radius, center + radius]``."""
    return (center.abs() - radius).clamp(min=0)


def _perron(matrix: Tensor) -> tuple[float, tuple[float, float]]:
    """Perron root and vector ``(v_c, v_h)`` (max entry 1) of a positive ``2 x 2`` matrix."""
    m11, m12 = float(matrix[0, 0]), float(matrix[0, 1])
    m21, m22 = float(matrix[1, 0]), float(matrix[1, 1])
    if not all(math.isfinite(m) for m in (m11, m12, m21, m22)):
        return math.inf, (1.0, 1.0)
    root = 0.5 * (m11 + m22 + math.sqrt((m11 - m22) ** 2 + 4 * m12 * m21))
    v_c, v_h = m12, root - m11
    top = max(v_c, v_h)
    return root, (v_c / top, v_h / top)


@dataclass(frozen=True)
class LSTMCertificate:
    """One layer's certificate: ``matrix`` ``M (2, 2)``, ``lam = rho(M)``, ``weights = (v_c, v_h)``,
    ``cell_bound`` ``C (H,)``, ``*_max`` the gate bounds on ``D`` ``(H,)``, and ``cell_coupling``,
    ``hidden_coupling`` the ``A``, ``G (H, H)``."""

    p: float
    input_bound: float
    input_max: Tensor
    forget_max: Tensor
    candidate_max: Tensor
    output_max: Tensor
    cell_bound: Tensor
    cell_coupling: Tensor
    hidden_coupling: Tensor
    matrix: Tensor
    lam: float
    weights: tuple[float, float]

    @property
    def unweighted_lam(self) -> float:
        """The constant in ``max(||c||_p, ||h||_p)``: max row sum of ``M``."""
        return float(self.matrix.sum(dim=1).max())


def lstm_certificate_from_tensors(
    weight_hh: Tensor,
    weight_ih: Tensor,
    bias: Tensor | None,
    input_bound: float,
    p: float = math.inf,
) -> LSTMCertificate:
    """The certificate of one LSTM layer, in float64: ``weight_hh (4H, H)``, ``weight_ih (4H, D)``,
    ``bias (4H,)`` (the sum of the layer's biases) or ``None``, ``||x||_inf <= input_bound``."""
    hidden = _check_gate_matrix("weight_hh", weight_hh)
    _check_gate_matrix("weight_ih", weight_ih, hidden)
    if weight_hh.shape[1] != hidden:
        raise ValueError(f"weight_hh must be (4H, H), got {tuple(weight_hh.shape)}")
    input_bound = _check_input_bound(input_bound)
    p = _check_p(p)
    W = gate_blocks(weight_hh.detach().double().abs())
    U = gate_blocks(weight_ih.detach().double().abs())
    if bias is None:
        b = {g: torch.zeros(hidden, dtype=torch.float64) for g in GATES}
    else:
        if bias.shape != (4 * hidden,):
            raise ValueError(
                f"bias must have shape (4H,) = ({4 * hidden},), got {tuple(bias.shape)}"
            )
        b = gate_blocks(bias.detach().double().cpu())
    W = {g: w.cpu() for g, w in W.items()}
    U = {g: u.cpu() for g, u in U.items()}
    # radius of each gate pre-activation around its bias, for |h| <= 1, |x| <= B
    r = {g: W[g].sum(dim=1) + input_bound * U[g].sum(dim=1) for g in GATES}
    input_max = torch.sigmoid(b["i"] + r["i"])
    forget_max = torch.sigmoid(b["f"] + r["f"])
    output_max = torch.sigmoid(b["o"] + r["o"])
    candidate_max = torch.tanh(b["z"].abs() + r["z"])
    slope = {g: _sigmoid_slope(_distance_to_zero(b[g], r[g])) for g in ("i", "f", "o")}
    slope["z"] = 1 - torch.tanh(_distance_to_zero(b["z"], r["z"])) ** 2
    cell_bound = input_max * candidate_max / (1 - forget_max)
    A = (
        (slope["i"] * candidate_max)[:, None] * W["i"]
        + (input_max * slope["z"])[:, None] * W["z"]
        + (slope["f"] * cell_bound)[:, None] * W["f"]
    )
    G = output_max[:, None] * A + (slope["o"] * torch.tanh(cell_bound))[:, None] * W["o"]
    # 0 * inf = nan where a saturated forget gate meets a zero weight: the bound fails.
    if not bool(torch.isfinite(cell_bound).all()):
        matrix = torch.full((2, 2), math.inf, dtype=torch.float64)
    else:
        matrix = torch.tensor(
            [
                [float(forget_max.max()), induced_norm(A, p)],
                [float((output_max * forget_max).max()), induced_norm(G, p)],
            ],
            dtype=torch.float64,
        ).clamp(min=_POSITIVE_FLOOR)
    lam, weights = _perron(matrix)
    return LSTMCertificate(
        p=p,
        input_bound=input_bound,
        input_max=input_max,
        forget_max=forget_max,
        candidate_max=candidate_max,
        output_max=output_max,
        cell_bound=cell_bound,
        cell_coupling=A,
        hidden_coupling=G,
        matrix=matrix,
        lam=lam,
        weights=weights,
    )


def _check_model(model: LSTMMap) -> None:
    if not isinstance(model, LSTMMap):
        raise TypeError(
            f"expected an LSTMMap, got {type(model).__name__}; "
            "convert a torch.nn.LSTM with LSTMMap.from_torch(module)"
        )


def lstm_certificate(model: LSTMMap, input_bound: float, p: float = math.inf) -> LSTMCertificate:
    """The certificate for an :class:`LSTMMap` and inputs with ``||x||_inf <= input_bound``."""
    _check_model(model)
    return lstm_certificate_from_tensors(
        model.weight_hh, model.weight_ih, model.bias, input_bound, p
    )


def lstm_contraction_bound(model: LSTMMap, input_bound: float, p: float = math.inf) -> float:
    """``lambda = rho(M)`` (``math.inf`` when no bound exists); stable on ``D`` when ``< 1``."""
    return lstm_certificate(model, input_bound, p).lam


def weighted_state_norm(
    state: Tensor, hidden_size: int, weights: tuple[float, float], p: float
) -> Tensor:
    """``max(||c||_p / v_c, ||h||_p / v_h)`` for states ``(..., 2H) -> (...)``."""
    c, h = state[..., :hidden_size], state[..., hidden_size:]
    v_c, v_h = weights
    return torch.maximum(
        torch.linalg.vector_norm(c, ord=p, dim=-1) / v_c,
        torch.linalg.vector_norm(h, ord=p, dim=-1) / v_h,
    )


def state_norm(
    model: LSTMMap, state: Tensor, input_bound: float = 1.0, p: float = math.inf
) -> Tensor:
    """``max(||c||_p / v_c, ||h||_p / v_h)`` of states ``(B, 2H) -> (B,)``, ``v`` the Perron
    vector (max entry 1) of the model's ``M`` for ``input_bound``."""
    certificate = lstm_certificate(model, input_bound, p)
    if state.shape[-1] != model.state_size:
        raise ValueError(
            f"state must have shape (B, 2H) = (B, {model.state_size}) as [c, h], "
            f"got {tuple(state.shape)}"
        )
    return weighted_state_norm(state, model.hidden_size, certificate.weights, p)


@dataclass(frozen=True)
class UniformCertificate:
    """One ``lambda``, norm ``max(||c||_inf / v_c, ||h||_inf / v_h)`` (``weights = (v_c, v_h)``)
    and invariant box ``{|c_j| <= cell_bound, |h_j| <= 1}`` for every LSTM of a set."""

    lam: float
    weights: tuple[float, float]
    cell_bound: float

    @property
    def state_bound(self) -> float:
        """``sup`` of the norm over the box: ``max(cell_bound / v_c, 1 / v_h)``."""
        v_c, v_h = self.weights
        return max(self.cell_bound / v_c, 1 / v_h)


@dataclass(frozen=True)
class LSTMConstraint:
    """A convex set of LSTM layers with certificate ``<= contraction_bound``: per gate ``g``,
    rows of ``W_g`` in the l1 ball of ``recurrent_radius[g]`` (``||W_g||_inf <= r``), rows of
    ``U_g`` in that of ``input_radius[g]``, ``bias_min[g] <= b_g <= bias_max[g]``; without
    ``bias_min`` the lower bounds are ``-inf`` for i, f, o and ``-bias_max["z"]`` for z.
    ``math.inf`` leaves a part free.  A product of l1 balls, half-spaces and slabs: its
    Euclidean projection is exact and separates."""

    recurrent_radius: dict[str, float]
    input_radius: dict[str, float]
    bias_max: dict[str, float]
    bias_min: dict[str, float] | None = field(default=None)

    def lower_bias(self) -> dict[str, float]:
        """The lower bias bound of every gate."""
        if self.bias_min is not None:
            return dict(self.bias_min)
        return {g: -self.bias_max["z"] if g == "z" else -math.inf for g in GATES}

    @property
    def is_compact(self) -> bool:
        """Whether every radius and both bias bounds of every gate are finite."""
        values = [
            *self.recurrent_radius.values(),
            *self.input_radius.values(),
            *self.bias_max.values(),
            *self.lower_bias().values(),
        ]
        return all(math.isfinite(v) for v in values)

    def __post_init__(self) -> None:
        for name in ("recurrent_radius", "input_radius", "bias_max"):
            values = getattr(self, name)
            if set(values) != set(GATES):
                raise ValueError(
                    f"{name} needs one value per gate {GATES}, got keys {sorted(values)}"
                )
            for gate, value in values.items():
                if math.isnan(value) or (name != "bias_max" and value < 0):
                    raise ValueError(f"{name}[{gate!r}] must be >= 0 (or math.inf), got {value}")
        if self.bias_min is None:
            if self.bias_max["z"] < 0:
                raise ValueError("bias_max['z'] bounds |b_z| and must be >= 0")
        else:
            if set(self.bias_min) != set(GATES):
                raise ValueError(
                    f"bias_min needs one value per gate {GATES}, got keys {sorted(self.bias_min)}"
                )
            for gate, low in self.bias_min.items():
                if math.isnan(low) or low > self.bias_max[gate]:
                    raise ValueError(
                        f"bias_min[{gate!r}] = {low} must be <= bias_max[{gate!r}] = "
                        f"{self.bias_max[gate]} (an empty bias interval)"
                    )

    def matrix(self, input_bound: float) -> Tensor:
        """The worst-case ``M (2, 2)`` over the set (slopes 1/4 and 1, gates at their bounds)."""
        input_bound = _check_input_bound(input_bound)
        r = {
            g: self.recurrent_radius[g]
            + (input_bound * self.input_radius[g] if input_bound else 0.0)
            for g in GATES
        }
        top = {
            g: torch.sigmoid(torch.tensor(self.bias_max[g] + r[g], dtype=torch.float64))
            for g in "ifo"
        }
        candidate_bias = max(abs(self.bias_max["z"]), abs(self.lower_bias()["z"]))
        candidate = math.tanh(candidate_bias + r["z"])
        forget = float(top["f"])
        if forget >= 1.0:
            return torch.full((2, 2), math.inf, dtype=torch.float64)
        cell = float(top["i"]) * candidate / (1 - forget)
        a = (
            0.25 * candidate * self.recurrent_radius["i"]
            + float(top["i"]) * self.recurrent_radius["z"]
            + 0.25 * cell * self.recurrent_radius["f"]
        )
        g = float(top["o"]) * a + 0.25 * math.tanh(cell) * self.recurrent_radius["o"]
        return torch.tensor(
            [[forget, a], [float(top["o"]) * forget, g]], dtype=torch.float64
        ).clamp(min=_POSITIVE_FLOOR)

    def contraction_bound(self, input_bound: float) -> float:
        """``sup`` of the certificate over the set: ``rho`` of :meth:`matrix`."""
        return _perron(self.matrix(input_bound))[0]

    def uniform_certificate(self, input_bound: float) -> UniformCertificate:
        """``rho(M)`` and Perron vector of :meth:`matrix`, ``cell_bound = ibar zbar / (1 - F)``."""
        matrix = self.matrix(input_bound)
        lam, weights = _perron(matrix)
        if not math.isfinite(lam):  # the forget gate can reach 1: no box, no norm
            return UniformCertificate(lam=math.inf, weights=weights, cell_bound=math.inf)
        r = {
            g: self.recurrent_radius[g]
            + (input_bound * self.input_radius[g] if input_bound else 0.0)
            for g in GATES
        }
        top_input = 1 / (1 + math.exp(-min(self.bias_max["i"] + r["i"], 700.0)))
        candidate_bias = max(abs(self.bias_max["z"]), abs(self.lower_bias()["z"]))
        forget = float(matrix[0, 0])
        cell = top_input * math.tanh(candidate_bias + r["z"]) / (1 - forget)
        return UniformCertificate(lam=lam, weights=weights, cell_bound=cell)

    def scaled(self, factor: float) -> LSTMConstraint:
        """The same set with every recurrent radius multiplied by ``factor``."""
        return replace(
            self, recurrent_radius={g: factor * r for g, r in self.recurrent_radius.items()}
        )


def authors_constants_constraint(forget_bias_max: float = 0.0) -> LSTMConstraint:
    """The authors' constants as row sums ``||W_g||_inf <= c_g``, ``||U_f||_inf <= 0.25``,
    forget bias ``<= forget_bias_max``, all other parts free."""
    return LSTMConstraint(
        recurrent_radius=dict(AUTHORS_RECURRENT_SCALES),
        input_radius={"i": math.inf, "f": AUTHORS_INPUT_FORGET_SCALE, "z": math.inf, "o": math.inf},
        bias_max={"i": math.inf, "f": forget_bias_max, "z": math.inf, "o": math.inf},
    )


def course_lstm_constraint(
    input_radius: float = COURSE_INPUT_RADIUS,
    bias_bound: float = COURSE_BIAS_BOUND,
    forget_bias_max: float = 0.0,
) -> LSTMConstraint:
    """:func:`authors_constants_constraint` plus rows of ``U_i, U_z, U_o`` in the l1 ball of
    ``input_radius`` and every bias in ``[-bias_bound, bias_bound]`` (forget bias
    ``<= forget_bias_max``): compact, the default of :func:`project_lstm_weights_`."""
    if not (0 <= input_radius < math.inf and 0 <= bias_bound < math.inf):
        raise ValueError(
            f"input_radius and bias_bound must be finite and >= 0 (they make the set compact), "
            f"got {input_radius}, {bias_bound}"
        )
    if not -bias_bound <= forget_bias_max <= bias_bound:
        raise ValueError(
            f"forget_bias_max = {forget_bias_max} must lie in [-bias_bound, bias_bound]"
        )
    base = authors_constants_constraint(forget_bias_max)
    return LSTMConstraint(
        recurrent_radius=dict(base.recurrent_radius),
        input_radius={
            g: AUTHORS_INPUT_FORGET_SCALE if g == "f" else float(input_radius) for g in GATES
        },
        bias_max={g: forget_bias_max if g == "f" else float(bias_bound) for g in GATES},
        bias_min={g: -float(bias_bound) for g in GATES},
    )


def free_forget_constraint(
    input_radius: float = COURSE_INPUT_RADIUS, bias_bound: float = COURSE_BIAS_BOUND
) -> LSTMConstraint:
    """:func:`course_lstm_constraint` with the forget bias in ``[-bias_bound, bias_bound]`` and
    rows of ``U_f`` in the l1 ball of ``input_radius``: NOT certified contractive."""
    course = course_lstm_constraint(input_radius, bias_bound, forget_bias_max=bias_bound)
    return replace(course, input_radius={g: float(input_radius) for g in GATES})


def _solve_scale(bound_of_scale, lam: float, what: str) -> float:
    """Largest ``t >= 0`` with ``bound_of_scale(t) <= lam`` for an increasing, continuous bound."""
    if bound_of_scale(0.0) >= lam:
        raise ValueError(
            f"no {what} reaches lambda = {lam}: even with zero recurrent weights the bound is "
            f"{bound_of_scale(0.0):.4f} (the forget gate alone); lower the forget bias "
            "(forget_bias_max) or the input radius, or ask for a larger lambda"
        )
    low, high = 0.0, 1.0
    while bound_of_scale(high) <= lam:
        low, high = high, 2 * high
        if high > 1e12:
            return low
    for _ in range(100):
        mid = 0.5 * (low + high)
        if bound_of_scale(mid) <= lam:
            low = mid
        else:
            high = mid
    return low


def stable_lstm_constraint(
    lam: float, input_bound: float = 1.0, forget_bias_max: float = 0.0
) -> LSTMConstraint:
    """:func:`authors_constants_constraint`, radii scaled to a bound ``lam`` at ``input_bound``."""
    _check_lam(lam)
    base = authors_constants_constraint(forget_bias_max)
    scale = _solve_scale(
        lambda t: base.scaled(t).contraction_bound(input_bound), lam, "constraint of this shape"
    )
    return base.scaled(scale)


def _check_lam(lam: float) -> None:
    if not isinstance(lam, (int, float)) or not 0 < lam < 1:
        raise ValueError(f"lam must be a number in (0, 1) (a contraction constant), got {lam!r}")


@dataclass(frozen=True)
class _ProjectionPlan:
    """Per-gate radii and bias bounds ``(i, f, z, o)`` of a set, and its certified lambda."""

    certified: float
    recurrent_radius: tuple[float, ...]
    input_radius: tuple[float, ...]
    bias_upper: tuple[float, ...]
    bias_lower: tuple[float, ...]


@lru_cache(maxsize=64)
def _plan_from_key(key: tuple, input_bound: float) -> _ProjectionPlan:
    """The plan of a set given by ``("lam", lam)`` or by its radii and bias bounds."""
    if key[0] == "lam":
        constraint = stable_lstm_constraint(key[1], input_bound)
    else:
        recurrent, inputs, bias_max, bias_min = (
            dict(zip(GATES, values, strict=True)) for values in key[1:]
        )
        constraint = LSTMConstraint(recurrent, inputs, bias_max, bias_min)
    lower = constraint.lower_bias()
    return _ProjectionPlan(
        certified=constraint.contraction_bound(input_bound),
        recurrent_radius=tuple(constraint.recurrent_radius[g] for g in GATES),
        input_radius=tuple(constraint.input_radius[g] for g in GATES),
        bias_upper=tuple(constraint.bias_max[g] for g in GATES),
        bias_lower=tuple(lower[g] for g in GATES),
    )


def _projection_plan(
    constraint: LSTMConstraint | None, lam: float | None, input_bound: float
) -> _ProjectionPlan:
    if constraint is not None and lam is not None:
        raise ValueError("pass either lam or constraint, not both")
    if constraint is None and lam is not None:
        _check_lam(lam)
        return _plan_from_key(("lam", float(lam)), input_bound)
    constraint = constraint if constraint is not None else course_lstm_constraint()
    parts = (
        constraint.recurrent_radius,
        constraint.input_radius,
        constraint.bias_max,
        constraint.lower_bias(),
    )
    key = ("set",) + tuple(tuple(float(part[g]) for g in GATES) for part in parts)
    return _plan_from_key(key, input_bound)


@lru_cache(maxsize=64)
def _row_bounds(
    per_gate: tuple[float, ...], hidden: int, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """A per-gate bound repeated over the gate's rows: ``(4H, 1)``.  Cached, so that no
    host-to-device copy is left after the first step (a CUDA graph can capture it)."""
    return torch.tensor(per_gate, dtype=dtype).repeat_interleave(hidden)[:, None].to(device)


@lru_cache(maxsize=64)
def _stacked_layout(
    plan: _ProjectionPlan, hidden: int, dtype: torch.dtype, device: torch.device
) -> tuple[tuple[tuple[int, int, int], ...], Tensor]:
    """``((matrix index, first row, end row), ...)`` of the constrained rows of
    ``(weight_hh, weight_ih)`` and their radii ``(rows, 1)`` stacked."""
    spans, bounds = [], []
    for index, radius in enumerate((plan.recurrent_radius, plan.input_radius)):
        gates = [n for n, r in enumerate(radius) if r != math.inf]
        if gates:
            first, end = gates[0] * hidden, (gates[-1] + 1) * hidden
            spans.append((index, first, end))
            bounds.append(_row_bounds(radius, hidden, dtype, device)[first:end])
    stacked = torch.cat(bounds) if bounds else torch.empty(0, 1, dtype=dtype, device=device)
    return tuple(spans), stacked


def _project_rows_of_layer_(
    weight_hh: Tensor, weight_ih: Tensor, plan: _ProjectionPlan, hidden: int
) -> None:
    """Every constrained row of both matrices onto its l1 ball, in place, in one batched
    projection (shorter rows padded with zeros, which the soft-threshold keeps at zero)."""
    matrices = (weight_hh, weight_ih)
    if weight_hh.dtype != weight_ih.dtype or weight_hh.device != weight_ih.device:
        for matrix, radius in zip(
            matrices, (plan.recurrent_radius, plan.input_radius), strict=True
        ):
            if any(r != math.inf for r in radius):  # cannot stack: one call per matrix
                bounds = _row_bounds(radius, hidden, matrix.dtype, matrix.device)
                matrix.copy_(_project_rows_l1(matrix, bounds))
        return
    spans, bounds = _stacked_layout(plan, hidden, weight_hh.dtype, weight_hh.device)
    if not spans:
        return
    width = max(matrices[index].shape[1] for index, _, _ in spans)
    rows = torch.cat(
        [
            torch.nn.functional.pad(m, (0, width - m.shape[1])) if m.shape[1] < width else m
            for m in (matrices[index][first:end] for index, first, end in spans)
        ]
    )
    projected = _project_rows_l1(rows, bounds)
    offset = 0
    for index, first, end in spans:
        matrix = matrices[index]
        matrix[first:end].copy_(projected[offset : offset + end - first, : matrix.shape[1]])
        offset += end - first


def _project_bias_sums_(biases: Sequence[Tensor], plan: _ProjectionPlan, hidden: int) -> None:
    """:func:`project_bias_sum_` for every gate at once, with per-row bounds ``(4H,)``."""
    if not biases or all(
        b == math.inf and a == -math.inf
        for a, b in zip(plan.bias_lower, plan.bias_upper, strict=True)
    ):
        return
    first = biases[0]
    upper = _row_bounds(plan.bias_upper, hidden, first.dtype, first.device)[:, 0]
    lower = _row_bounds(plan.bias_lower, hidden, first.dtype, first.device)[:, 0]
    total = sum(b.detach() for b in biases)
    excess = (total - total.clamp(min=lower, max=upper)) / len(biases)
    for b in biases:
        b.sub_(excess)


@torch.no_grad()
def project_lstm_weights_(
    weight_hh: Tensor,
    weight_ih: Tensor,
    *,
    input_bound: float = 1.0,
    lam: float | None = None,
    constraint: LSTMConstraint | None = None,
    biases: Sequence[Tensor] | None = None,
) -> float:
    """Project one LSTM layer in place onto an :class:`LSTMConstraint`; returns its lambda.

    ``weight_hh (4H, H)``, ``weight_ih (4H, D)``; ``biases``: the layer's ``(4H,)`` bias vectors
    whose sum is the gate bias (``()`` without bias).  The set is ``constraint``, else
    :func:`stable_lstm_constraint` ``(lam, input_bound)``, else :func:`course_lstm_constraint`.
    Rows go onto l1 balls, bias sums onto half-spaces or slabs (exact); the plan is cached and
    nothing synchronizes with the device.  Above the first layer ``input_bound = 1``."""
    hidden = _check_gate_matrix("weight_hh", weight_hh)
    _check_gate_matrix("weight_ih", weight_ih, hidden)
    input_bound = _check_input_bound(input_bound)
    if biases is None:
        raise ValueError(
            "the certificate needs the forget-gate bias bounded: pass "
            "biases=[lstm.bias_ih_l0, lstm.bias_hh_l0] (or biases=() for a layer without bias)"
        )
    if isinstance(biases, Tensor):
        biases = (biases,)
    for b in biases:
        if not isinstance(b, Tensor) or b.shape != (4 * hidden,):
            raise ValueError(f"each bias must be a tensor of shape (4H,) = ({4 * hidden},)")
    plan = _projection_plan(constraint, lam, input_bound)
    _project_rows_of_layer_(weight_hh, weight_ih, plan, hidden)
    _project_bias_sums_(biases, plan, hidden)
    return plan.certified


def project_lstm_(model: LSTMMap, **kwargs) -> float:
    """:func:`project_lstm_weights_` on an :class:`LSTMMap` (with its bias); returns lambda."""
    _check_model(model)
    biases = () if model.bias is None else (model.bias,)
    return project_lstm_weights_(model.weight_hh, model.weight_ih, biases=biases, **kwargs)


def random_stable_lstm(
    input_size: int,
    hidden_size: int,
    lam: float,
    input_bound: float = 1.0,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> LSTMMap:
    """A Gaussian LSTM with ``lstm_contraction_bound = lam``: ``W, U ~ N(0, 1/H)``, biases
    ``~ N(0, 0.1^2)``, the forget bias lowered to ``sigmoid(b_f) <= lam / 2``, then ``W, U``
    scaled by the ``t`` with ``lambda(t) = lam`` (bisection)."""
    _check_lam(lam)
    input_bound = _check_input_bound(input_bound)
    H, D = hidden_size, input_size
    std = 1.0 / math.sqrt(H)
    weight_hh = torch.randn(4 * H, H, generator=generator, dtype=torch.float64) * std
    weight_ih = torch.randn(4 * H, D, generator=generator, dtype=torch.float64) * std
    bias = torch.randn(4 * H, generator=generator, dtype=torch.float64) * 0.1
    forget = gate_blocks(bias)["f"]
    ceiling = math.log(lam / 2) - math.log(1 - lam / 2)  # logit(lam / 2)
    forget -= (forget.max() - ceiling).clamp(min=0)

    def bound(t: float) -> float:
        return lstm_certificate_from_tensors(t * weight_hh, t * weight_ih, bias, input_bound).lam

    scale = _solve_scale(bound, lam, "random LSTM")
    model = LSTMMap(D, H, bias=True, dtype=dtype)
    with torch.no_grad():
        model.weight_hh.copy_(scale * weight_hh)
        model.weight_ih.copy_(scale * weight_ih)
        model.bias.copy_(bias)
    return model


@lru_cache(maxsize=16)
def _authors_scales(dtype: torch.dtype, device: torch.device) -> Tensor:
    """The authors' recurrent constants, ``(4, 1, 1)``."""
    scales = [AUTHORS_RECURRENT_SCALES[g] for g in GATES]
    return torch.tensor(scales, dtype=dtype).view(4, 1, 1).to(device)


@torch.no_grad()
def authors_lstm_rescaling_(
    weight_hh: Tensor,
    weight_ih: Tensor,
    embedding: Tensor | None = None,
    check_zero_columns: bool | None = None,
) -> None:
    """The authors' LSTM rescaling, in place (of columns; not a projection):
    ``W_g <- c_g W_g / sum(|W_g|, dim=0)``, ``c = 0.395 (i), 0.155 (f), 0.099 (z), 0.395 (o)``;
    ``U_f <- 0.25 U_f / sum(|U_f|, dim=0)``; the embedding clamped to ``[-1, 1]``.  A zero column
    raises ``ValueError`` when ``check_zero_columns`` (default: on CPU); on a GPU it becomes NaN,
    so that no step synchronizes."""
    hidden = _check_gate_matrix("weight_hh", weight_hh)
    _check_gate_matrix("weight_ih", weight_ih, hidden)
    if not weight_hh.is_contiguous():
        raise ValueError(
            "weight_hh must be contiguous (rescaled through a view); pass the parameter"
        )
    recurrent = weight_hh.view(4, hidden, hidden)
    forget_input = gate_blocks(weight_ih)["f"]
    recurrent_sums = recurrent.abs().sum(dim=1, keepdim=True)
    forget_sums = forget_input.abs().sum(dim=0)
    if check_zero_columns is None:
        check_zero_columns = not weight_hh.is_cuda
    if check_zero_columns:
        for sums, name in ((recurrent_sums, "a recurrent block W_g"), (forget_sums, "U_f")):
            if bool((sums == 0).any()):
                raise ValueError(
                    f"{name} has a zero column: the authors' rule divides by the column "
                    "sum; perturb the weights (e.g. add small noise) before rescaling"
                )
    recurrent.mul_(_authors_scales(weight_hh.dtype, weight_hh.device)).div_(recurrent_sums)
    forget_input.mul_(AUTHORS_INPUT_FORGET_SCALE).div_(forget_sums)
    if embedding is not None:
        embedding.clamp_(-1.0, 1.0)


def authors_rescaled_lstm(
    input_size: int,
    hidden_size: int,
    bias_std: float = 0.0,
    forget_bias: float = 0.0,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> LSTMMap:
    """A Gaussian LSTM, biases ``N(0, bias_std^2)`` + ``forget_bias`` on f, after the rescaling."""
    model = LSTMMap(input_size, hidden_size, bias=True, dtype=dtype)
    with torch.no_grad():
        for param in (model.weight_hh, model.weight_ih):
            param.copy_(torch.randn(param.shape, generator=generator, dtype=dtype))
        model.bias.copy_(torch.randn(4 * hidden_size, generator=generator, dtype=dtype) * bias_std)
        gate_blocks(model.bias)["f"].add_(forget_bias)
        authors_lstm_rescaling_(model.weight_hh, model.weight_ih)
    return model


def concentrated_authors_lstm(
    input_size: int,
    hidden_size: int,
    open_gates_bias: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> LSTMMap:
    """An LSTM meeting the authors' constraint exactly, not contractive in one step: every
    recurrent column puts its mass ``c_g`` on unit 0 (row sum ``c_g H``), ``U_f`` has column
    sums 0.25, the i, f, o biases are ``open_gates_bias``; a fixed point of the rescaling."""
    model = LSTMMap(input_size, hidden_size, bias=True, dtype=dtype)
    with torch.no_grad():
        model.weight_hh.zero_()
        model.weight_ih.zero_()
        model.bias.zero_()
        W = gate_blocks(model.weight_hh)
        for g, c in AUTHORS_RECURRENT_SCALES.items():
            W[g][0, :] = c
        gate_blocks(model.weight_ih)["f"].fill_(AUTHORS_INPUT_FORGET_SCALE / hidden_size)
        b = gate_blocks(model.bias)
        for g in "ifo":
            b[g].fill_(open_gates_bias)
    return model


def sample_box_states(
    model: LSTMMap,
    input_bound: float,
    num_states: int,
    generator: torch.Generator | None = None,
    horizon: float = 50.0,
) -> tuple[Tensor, Tensor]:
    """States of ``D`` and inputs with ``||x||_inf <= input_bound``: ``(N, 2H), (N, D)``; thirds
    uniform in ``|c_j| <= min(C_j, horizon), |h_j| <= 1``, on its corners, and on trajectories
    from 0; inputs uniform in ``[-B, B]^D`` or on its corners."""
    certificate = lstm_certificate(model, input_bound)
    dtype = model.weight_hh.dtype
    H = model.hidden_size
    cell = certificate.cell_bound.nan_to_num(nan=horizon, posinf=horizon).clamp(max=horizon)
    cell = cell.to(dtype)
    third = max(1, num_states // 3)

    def uniform(shape: tuple[int, ...]) -> Tensor:
        return 2 * torch.rand(shape, generator=generator, dtype=dtype) - 1

    def signs(shape: tuple[int, ...]) -> Tensor:
        return torch.randint(0, 2, shape, generator=generator).to(dtype) * 2 - 1

    box = torch.cat([uniform((third, H)) * cell, uniform((third, H))], dim=-1)
    corners = torch.cat([signs((third, H)) * cell, signs((third, H))], dim=-1)
    steps = int(max(1, min(horizon, 30)))
    inputs_run = input_bound * uniform((steps, third, model.input_size))
    with torch.no_grad():
        trajectory = model.run(inputs_run)
    picks = torch.randint(0, steps, (third,), generator=generator)
    reached = trajectory[picks, torch.arange(third)]
    states = torch.cat([box, corners, reached])
    n = states.shape[0]
    x = input_bound * torch.cat(
        [uniform((n - n // 2, model.input_size)), signs((n // 2, model.input_size))]
    )
    return states, x


@torch.no_grad()
def pair_lipschitz(
    model: LSTMMap,
    input_bound: float,
    num_pairs: int = 2000,
    generator: torch.Generator | None = None,
    norm: str = "certificate",
    relative_step: float = 1e-3,
    p: float = math.inf,
) -> float:
    """Largest ``||phi(s, x) - phi(s~, x)|| / ||s - s~||`` over pairs in ``D`` (half independent,
    half ``s~ = s + relative_step * noise``), a lower bound on the Lipschitz constant; ``norm``:
    ``"certificate"`` (:func:`state_norm`) or ``"euclidean"``."""
    if norm not in ("certificate", "euclidean"):
        raise ValueError(f"norm must be 'certificate' or 'euclidean', got {norm!r}")
    certificate = lstm_certificate(model, input_bound, p)
    states, x = sample_box_states(model, input_bound, num_pairs, generator)
    others, _ = sample_box_states(model, input_bound, num_pairs, generator)
    n = min(states.shape[0], others.shape[0])
    states, x, others = states[:n], x[:n], others[:n]
    half = n // 2
    cell = certificate.cell_bound.to(states.dtype).clamp(max=50.0)
    limit = torch.cat([cell, torch.ones_like(cell)])
    nudged = states[half:] + relative_step * limit * (
        2 * torch.rand(states[half:].shape, generator=generator, dtype=states.dtype) - 1
    )
    others[half:] = torch.maximum(torch.minimum(nudged, limit), -limit)
    if norm == "euclidean":

        def measure(s: Tensor) -> Tensor:
            return s.norm(dim=-1)
    else:

        def measure(s: Tensor) -> Tensor:
            return weighted_state_norm(s, model.hidden_size, certificate.weights, p)

    denominator = measure(states - others)
    keep = denominator > 0
    ratio = measure(model.step(states, x) - model.step(others, x))[keep] / denominator[keep]
    return float(ratio.max())


def lstm_state_jacobians(model: LSTMMap, states: Tensor, inputs: Tensor) -> Tensor:
    """Jacobians ``d(c', h') / d(c, h)`` at ``N`` points, ``(N, 2H, 2H)``: those of
    :func:`stablernn_lib.core.contraction.state_jacobians` (autograd) with ``s_g = g (1 - g)``,
    ``t = tanh(c')``::

        dc'/dc = diag(f),  dc'/dh = diag(z s_i) W_i + diag(i (1 - z^2)) W_z + diag(c s_f) W_f,
        dh'/dc = diag(o (1 - t^2)) dc'/dc,  dh'/dh = diag(t s_o) W_o + diag(o (1 - t^2)) dc'/dh.
    """
    _check_model(model)
    c, _ = model.split_state(states)
    with torch.no_grad():
        i, f, z, o = model.gates(states, inputs)
        t = torch.tanh(i * z + f * c)
        W = gate_blocks(model.weight_hh.detach())
        dc_dh = (
            (z * i * (1 - i))[:, :, None] * W["i"]
            + (i * (1 - z**2))[:, :, None] * W["z"]
            + (c * f * (1 - f))[:, :, None] * W["f"]
        )
        dc_dc = torch.diag_embed(f)
        through_cell = (o * (1 - t**2))[:, :, None]
        dh_dh = (t * o * (1 - o))[:, :, None] * W["o"] + through_cell * dc_dh
        top = torch.cat([dc_dc, dc_dh], dim=-1)
        bottom = torch.cat([through_cell * dc_dc, dh_dh], dim=-1)
        return torch.cat([top, bottom], dim=-2)


def jacobian_certificate_norms(
    model: LSTMMap, states: Tensor, inputs: Tensor, input_bound: float
) -> Tensor:
    """Induced norms ``max_a sum_b |J_ab| w_b / w_a`` of the Jacobians in the certificate's
    norm (``p = inf``, ``w = (v_c, v_h)``): ``(N,)``."""
    certificate = lstm_certificate(model, input_bound)
    H = model.hidden_size
    v_c, v_h = certificate.weights
    w = torch.cat(
        [torch.full((H,), v_c, dtype=states.dtype), torch.full((H,), v_h, dtype=states.dtype)]
    )
    J = lstm_state_jacobians(model, states, inputs)
    return ((J.abs() * w[None, None, :]).sum(dim=-1) / w[None, :]).max(dim=-1).values


def iterated_jacobian_norms(model: LSTMMap, states: Tensor, inputs: Tensor) -> Tensor:
    """Spectral norms of the Jacobians of ``s -> phi^r(s; x_1..x_r)``: ``states (N, 2H)``,
    ``inputs (r, N, D)`` -> ``(N,)``."""
    if inputs.dim() != 3 or inputs.shape[1] != states.shape[0]:
        raise ValueError(
            f"inputs must have shape (r, N, D) with N = {states.shape[0]}, "
            f"got {tuple(inputs.shape)}"
        )

    product = torch.eye(model.state_size, dtype=states.dtype).expand(len(states), -1, -1)
    state = states.detach()
    with torch.no_grad():
        for x in inputs:
            product = lstm_state_jacobians(model, state, x) @ product
            state = model.step(state, x)
    return torch.linalg.matrix_norm(product, ord=2)


def forget_gate_threshold(column_or_row_sums: dict[str, float]) -> float:
    """Largest forget-gate bound ``F`` with ``rho(M(F)) < 1``, other gates bounded by 1:
    ``M(F) = [[F, a], [F, a + ||W_o|| tanh(C) / 4]]``, ``C = 1 / (1 - F)``,
    ``a = ||W_i|| / 4 + ||W_z|| + C ||W_f|| / 4``."""

    def lam(forget: float) -> float:
        cell = 1 / (1 - forget)
        a = (
            column_or_row_sums["i"] / 4
            + column_or_row_sums["z"]
            + cell * column_or_row_sums["f"] / 4
        )
        g = a + column_or_row_sums["o"] * math.tanh(cell) / 4
        return _perron(torch.tensor([[forget, a], [forget, g]]).clamp(min=_POSITIVE_FLOOR))[0]

    low, high = 0.0, 1.0 - 1e-12
    if lam(low) >= 1:
        return 0.0
    for _ in range(100):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if lam(mid) < 1 else (low, mid)
    return low


def measured_contraction(
    model: LSTMMap,
    input_bound: float,
    num_states: int = 600,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """``certificate`` (p = inf), ``certificate_l1`` (p = 1), and the maxima over sampled states
    of ``D``: ``jacobian_certificate_norm``, ``pairs_certificate_norm`` (certificate's norm),
    ``jacobian_euclidean``, ``pairs_euclidean``."""
    states, x = sample_box_states(model, input_bound, num_states, generator)
    jacobians = lstm_state_jacobians(model, states, x)
    return {
        "certificate": lstm_contraction_bound(model, input_bound),
        "certificate_l1": lstm_contraction_bound(model, input_bound, p=1),
        "jacobian_certificate_norm": float(
            jacobian_certificate_norms(model, states, x, input_bound).max().detach()
        ),
        "pairs_certificate_norm": pair_lipschitz(model, input_bound, num_states, generator),
        "jacobian_euclidean": float(torch.linalg.matrix_norm(jacobians, ord=2).max()),
        "pairs_euclidean": pair_lipschitz(
            model, input_bound, num_states, generator, norm="euclidean"
        ),
    }


def format_certificate(certificate: LSTMCertificate) -> str:
    """``M``, ``lambda``, the norm's weights and the gate bounds, one per line."""
    m = certificate.matrix.tolist()
    return "\n".join(
        [
            f"M = [[{m[0][0]:.4f}, {m[0][1]:.4f}], [{m[1][0]:.4f}, {m[1][1]:.4f}]]",
            f"lambda = rho(M) = {certificate.lam:.4f}   (plain max-norm: "
            f"{certificate.unweighted_lam:.4f})",
            f"norm weights (v_c, v_h) = ({certificate.weights[0]:.4f}, "
            f"{certificate.weights[1]:.4f})",
            f"max forget gate fbar = {float(certificate.forget_max.max()):.4f}, "
            f"max cell bound C = {float(certificate.cell_bound.max()):.4f}",
        ]
    )


def gate_norm_table(model: LSTMMap) -> str:
    """Markdown table of max column and row sums of each block."""
    _check_model(model)
    lines = ["| block | max column sum | max row sum |", "| --- | ---: | ---: |"]
    blocks = [(f"W_{g}", w) for g, w in gate_blocks(model.weight_hh).items()]
    blocks.append(("U_f", gate_blocks(model.weight_ih)["f"]))
    for name, block in blocks:
        lines.append(
            f"| `{name}` | {induced_norm(block, 1):.4f} | {induced_norm(block, math.inf):.4f} |"
        )
    if model.bias is not None:
        forget = gate_blocks(model.bias.detach())["f"]
        lines.append(f"\nForget bias in [{float(forget.min()):.3f}, {float(forget.max()):.3f}].")
    return "\n".join(lines)


def contraction_verdicts(rows: Sequence[dict[str, object]]) -> str:
    """One line per measured model: certified, and measured contractive?"""
    lines = []
    for row in rows:
        proved = float(row["certificate"])
        measured = max(
            float(row["jacobian_certificate_norm"]), float(row["pairs_certificate_norm"])
        )
        euclidean = max(float(row["jacobian_euclidean"]), float(row["pairs_euclidean"]))
        lines.append(
            f"{row['model']}: certified {'yes' if proved < 1 else 'no'} ({proved:.3g}); "
            f"measured < 1 in the certificate's norm: {'yes' if measured < 1 else 'no'} "
            f"({measured:.3g}); in the Euclidean norm: {'yes' if euclidean < 1 else 'no'} "
            f"({euclidean:.3g})"
        )
    return "\n".join(lines)
