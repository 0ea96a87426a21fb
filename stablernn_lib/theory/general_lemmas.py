"""Lemmas 2 and 3 for a general contractive map, with the constants derived by sympy.

States ``s_t = phi(s_{t-1}, x_t, w)`` lie in a convex invariant ``D`` containing 0 with
``||s|| <= B_s`` (loss gradients in the dual norm, weights Euclidean).  On ``D``, for all
inputs and ``w, w'`` in a convex ``Omega``:

* ``||d_s phi|| <= lambda < 1`` and ``||d_w phi|| <= L_w``;
* ``||d_s phi(s, x, w) - d_s phi(s', x, w')|| <= K_ss ||s - s'|| + K_sw ||w - w'||``;
* ``||d_w phi(s, x, w) - d_w phi(s', x, w')|| <= K_ws ||s - s'|| + K_ww ||w - w'||``;
* the loss ``l`` of the last state has ``||grad l|| <= L_p``, ``grad l`` ``S_p``-Lipschitz.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import sympy as sp

from stablernn_lib.symbolic.lemma_algebra import (
    Bh,
    Bx,
    Bz,
    L2_rho,
    L_rho,
    Lp,
    Lx,
    Sp,
    evaluate_sum,
    growth_exponent,
    lam,
)

B_s, L_w = sp.symbols("B_s L_w", positive=True)
K_ss, K_sw, K_ws, K_ww = sp.symbols("K_ss K_sw K_ws K_ww", nonnegative=True)
# steps back from the last time step, the context, and the weight distance Delta
n, k = sp.symbols("n k", integer=True, positive=True)
delta = sp.Symbol("Delta", positive=True)
_e = sp.Function("e")


def _solve(forcing: sp.Expr, initial: sp.Expr) -> sp.Expr:
    """``e(n + 1) = lambda e(n) + forcing(n)``, ``e(0) = initial``, solved by ``rsolve``."""
    m = sp.Symbol("m", integer=True, nonnegative=True)
    try:
        solution = sp.rsolve(_e(m + 1) - lam * _e(m) - forcing.subs(n, m), _e(m), {_e(0): initial})
    except AttributeError:  # sympy's hypergeometric solver fails on a resonant forcing
        solution = None
    if solution is None:
        # resonant forcing lambda^m: e(m) = lambda^m u(m), u(m+1) = u(m) + forcing(m) / lambda^(m+1)
        scaled = sp.powsimp(sp.expand(forcing.subs(n, m) / lam ** (m + 1)), force=True)
        u = sp.rsolve(_e(m + 1) - _e(m) - scaled, _e(m), {_e(0): initial})
        if u is None:
            raise ArithmeticError("rsolve found no solution")
        solution = lam**m * u
    solution = sp.simplify(solution.subs(m, n))
    residual = solution.subs(n, n + 1) - lam * solution - forcing
    if sp.simplify(sp.expand(sp.powsimp(residual, force=True))) != 0:
        raise ArithmeticError(f"rsolve's solution does not satisfy the recursion: {residual}")
    if sp.simplify(solution.subs(n, 0) - initial) != 0:
        raise ArithmeticError("rsolve's solution misses the initial condition")
    return solution


@lru_cache(maxsize=1)
def solved_recursions() -> dict[str, sp.Expr]:
    """The three recursions of the proofs and their ``rsolve`` solutions:

    * ``forward`` (Lemma 3): ``d(n+1) <= lambda d(n) + L_w Delta``, ``d(0) = 0``;
    * ``backward_lemma2``: ``e(n+1) <= lambda e(n) + K_ss B_s L_p lambda^(k-1)``,
      ``e(0) = S_p B_s lambda^k``;
    * ``backward_lemma3``: ``e(n+1) <= lambda e(n) + c Delta lambda^n``, ``e(0) = S_p sup d``,
      ``c = L_p (K_ss sup d / Delta + K_sw)``."""
    forward = _solve(L_w * delta, sp.Integer(0))
    sup_forward = L_w * delta / (1 - lam)
    backward2 = _solve(K_ss * B_s * Lp * lam ** (k - 1), Sp * B_s * lam**k)
    c = Lp * (K_ss * sup_forward / delta + K_sw)
    backward3 = _solve(c * delta * lam**n, Sp * sup_forward)
    return {
        "forward": forward,
        "forward_sup": sup_forward,
        "backward_lemma2": backward2,
        "backward_lemma3": backward3,
    }


def fixed_point_split(solution: sp.Expr, forcing: sp.Expr, initial: sp.Expr) -> sp.Expr:
    """``sup_n e(n) <= e(0) + e_inf``, ``e_inf = forcing / (1 - lambda)``, for
    ``e(n+1) = lambda e(n) + forcing``: ``solution = lambda^n e(0) + (1 - lambda^n) e_inf``."""
    fixed = forcing / (1 - lam)
    combination = lam**n * initial + (1 - lam**n) * fixed
    if sp.simplify(sp.powsimp(sp.expand(solution - combination), force=True)) != 0:
        raise ArithmeticError("the solution is not the convex combination")
    return initial + fixed


@lru_cache(maxsize=1)
def general_gamma() -> sp.Expr:
    """Lemma 2's ``gamma``: (tail ``L_w L_p sum_{i >= k} lambda^i`` + forward gap
    ``K_ws B_s L_p sum_{j=1}^k lambda^{j-1} lambda^{k-j}`` + backward gap ``L_w k sup_n e(n)``)
    divided by ``k lambda^k``."""
    i, j = sp.symbols("i j", integer=True, nonnegative=True)
    tail = L_w * Lp * evaluate_sum(sp.Sum(lam**i, (i, k, sp.oo)))
    forward_gap = (
        K_ws * B_s * Lp * sp.simplify(sp.Sum(lam ** (j - 1) * lam ** (k - j), (j, 1, k)).doit())
    )
    backward = fixed_point_split(
        solved_recursions()["backward_lemma2"],
        K_ss * B_s * Lp * lam ** (k - 1),
        Sp * B_s * lam**k,
    )
    per_k_lambda_k = (
        sp.powsimp(sp.expand(tail / lam**k), force=True)  # <= gamma-part times k
        + sp.powsimp(sp.expand(forward_gap / (k * lam**k)), force=True)
        + sp.powsimp(sp.expand(L_w * backward / lam**k), force=True)
    )
    return sp.simplify(per_k_lambda_k)


@lru_cache(maxsize=1)
def general_beta() -> sp.Expr:
    """Lemma 3's ``beta``: ``(L_w sum_n e(n) + L_p sum_t lambda^{T-t} (K_ws sup d + K_ww Delta))
    / Delta``."""
    solved = solved_recursions()
    i = sp.Symbol("i", integer=True, nonnegative=True)
    backward_sum = evaluate_sum(sp.Sum(solved["backward_lemma3"].subs(n, i), (i, 0, sp.oo)))
    weight_term = Lp * (K_ws * solved["forward_sup"] + K_ww * delta) / (1 - lam)
    return sp.simplify((L_w * backward_sum + weight_term) / delta)


def stated_gamma() -> sp.Expr:
    """``gamma`` as Chapter 6 prints it; equals :func:`general_gamma` (tested)."""
    return (
        L_w * Lp / (1 - lam)
        + K_ws * B_s * Lp / lam
        + L_w * B_s * (Sp + K_ss * Lp / (lam * (1 - lam)))
    )


def stated_beta() -> sp.Expr:
    """``beta`` as Chapter 6 prints it; equals :func:`general_beta` (tested)."""
    return (
        L_w**2 * Sp / (1 - lam) ** 2
        + L_w * Lp * (K_ss * L_w / (1 - lam) + K_sw) / (1 - lam) ** 2
        + Lp * (K_ws * L_w / (1 - lam) + K_ww) / (1 - lam)
    )


def growth_exponents(state_dependent_jacobian: bool = True) -> tuple[sp.Expr, sp.Expr]:
    """``(n_gamma, n_beta)``: ``gamma, beta ~ c (1 - lambda)^-n`` as ``lambda -> 1``, constants
    fixed, ``B_s = L_x B_x / (1 - lambda)``; ``state_dependent_jacobian=False``: ``K_ss = 0``."""
    growing = {B_s: Lx * Bx / (1 - lam)}
    if not state_dependent_jacobian:
        growing[K_ss] = 0
    return (
        growth_exponent(general_gamma().subs(growing)),
        growth_exponent(general_beta().subs(growing)),
    )


def rnn_constants() -> dict[sp.Symbol, sp.Expr]:
    """The constants for ``phi(h, x, (W, U)) = rho(W h + U x)`` on ``||h|| <= B_h``:
    ``L_w = L_rho B_z``; ``diag(rho'(a)) W`` changes by ``L2_rho (lambda / L_rho)^2`` per unit of
    ``h`` and by ``L_rho + L2_rho lambda B_z / L_rho`` per unit of ``w``; ``d_w phi`` by the same
    per unit of ``h`` and by ``L2_rho B_z^2`` per unit of ``w``."""
    mixed = L_rho + L2_rho * lam * Bz / L_rho
    return {
        B_s: Bh,
        L_w: L_rho * Bz,
        K_ss: L2_rho * lam**2 / L_rho**2,
        K_sw: mixed,
        K_ws: mixed,
        K_ww: L2_rho * Bz**2,
    }


def rnn_gamma_beta() -> tuple[sp.Expr, sp.Expr]:
    """The general ``gamma`` and ``beta`` with :func:`rnn_constants` substituted."""
    constants = rnn_constants()
    return (
        sp.simplify(general_gamma().subs(constants)),
        sp.simplify(general_beta().subs(constants)),
    )


def lstm_weight_lipschitz(
    cell_bound: float,
    weights: tuple[float, float],
    hidden_size: int,
    input_size: int,
    input_bound: float,
) -> float:
    """``L_w`` of one LSTM layer on ``|c| <= C, |h| <= 1``, ``||x||_inf <= B``: weights Euclidean,
    states in ``max(||c||_inf / v_c, ||h||_inf / v_h)``, ``B_zeta = sqrt(H + D B^2 + 1)``,
    ``|dc'_j| <= B_zeta sqrt(1/16 + 1 + C^2/16) ||dw||``,
    ``|dh'_j| <= B_zeta sqrt(tanh(C)^2/16 + 1/16 + 1 + C^2/16) ||dw||``."""
    if not (cell_bound >= 0 and hidden_size >= 1 and input_size >= 0 and input_bound >= 0):
        raise ValueError("need cell_bound >= 0, hidden_size >= 1, input_size, input_bound >= 0")
    v_c, v_h = weights
    b_zeta = math.sqrt(hidden_size + input_size * input_bound**2 + 1)
    cell = math.sqrt(1 / 16 + 1 + cell_bound**2 / 16)
    hidden = math.sqrt(math.tanh(cell_bound) ** 2 / 16 + 1 / 16 + 1 + cell_bound**2 / 16)
    return b_zeta * max(cell / v_c, hidden / v_h)


def general_constants_numeric(values: dict[str, float]) -> tuple[float, float]:
    """Evaluate ``(gamma, beta)`` at numbers given by symbol name (``lambda``, ``L_w``, ...)."""
    gamma, beta = general_gamma(), general_beta()
    symbols = {str(s): s for s in gamma.free_symbols | beta.free_symbols}
    missing = set(symbols) - set(values)
    if missing:
        raise ValueError(f"missing values for {sorted(missing)}")
    substitution = {symbols[name]: value for name, value in values.items() if name in symbols}
    return float(gamma.subs(substitution)), float(beta.subs(substitution))


# Largest |sigma''| and |tanh''| on the real line.
SIGMOID_SECOND = 1 / (6 * math.sqrt(3))
TANH_SECOND = 4 / (3 * math.sqrt(3))


def lstm_second_order_constants(
    recurrent_radius: dict[str, float],
    forget_max: float,
    cell_bound: float,
    weights: tuple[float, float],
    hidden_size: int,
    input_size: int,
    input_bound: float,
) -> dict[str, float]:
    """``K_ss, K_sw = K_ws, K_ww`` of one LSTM layer on ``D-bar x {|x| <= B} x Omega``.

    Per unit the map is ``Psi(u)`` of ``u = (c_j, a_i, a_f, a_z, a_o)`` (cell entry and
    pre-activations), ``c' = sigma(a_i) tanh(a_z) + sigma(a_f) c_j``,
    ``h' = sigma(a_o) tanh(c')``.  Entrywise bounds ``|H|`` on the Hessians of ``Psi`` in
    ``u`` (with ``|c_j| <= C``, ``sigma(a_f) <= F``) are contracted with the largest
    moves of ``u``: ``m = (v_c, r_g v_h)`` for a unit state step in
    ``max(||c||_inf / v_c, ||h||_inf / v_h)``, ``B_zeta ||row of dw||`` for a weight step
    (``B_zeta = sqrt(H + D B^2 + 1)``).  The mixed derivative also has the term
    ``dW_g[j, :] dh``, at most ``sqrt(H) ||row|| v_h``.  Rows are divided by their weight.
    """
    v_c, v_h = weights
    r = recurrent_radius
    C, F = cell_bound, forget_max
    b_zeta = math.sqrt(hidden_size + input_size * input_bound**2 + 1)
    order = ("c", "i", "f", "z", "o")
    # entrywise bounds on the Hessian of c' in u
    hc = {(p, q): 0.0 for p in order for q in order}

    def put(table, p, q, value):
        table[p, q] = table[q, p] = value

    put(hc, "c", "f", 0.25)
    put(hc, "i", "i", SIGMOID_SECOND)
    put(hc, "i", "z", 0.25)
    put(hc, "f", "f", SIGMOID_SECOND * C)
    put(hc, "z", "z", TANH_SECOND)
    grad_c = {"c": F, "i": 0.25, "f": C / 4, "z": 1.0, "o": 0.0}
    # h' = sigma(a_o) tanh(c'): Hessian bound from the chain rule
    hh = {}
    for p in order:
        for q in order:
            value = TANH_SECOND * grad_c[p] * grad_c[q] + hc[p, q]
            if p == "o":
                value += 0.25 * grad_c[q]
            if q == "o":
                value += 0.25 * grad_c[p]
            if p == q == "o":
                value += SIGMOID_SECOND
            hh[p, q] = value
    grad_h = {p: grad_c[p] + (0.25 if p == "o" else 0.0) for p in order}
    m = {"c": v_c, **{g: r[g] * v_h for g in "ifzo"}}
    gates = ("i", "f", "z", "o")

    def quadratic(table):
        return sum(table[p, q] * m[p] * m[q] for p in order for q in order)

    def mixed(table, grad):
        column = [
            b_zeta * sum(table[p, q] * m[p] for p in order) + math.sqrt(hidden_size) * v_h * grad[q]
            for q in gates
        ]
        return math.sqrt(sum(value**2 for value in column))

    def weight_weight(table):
        block = np.array([[table[p, q] for q in gates] for p in gates])
        return b_zeta**2 * float(np.linalg.norm(block, 2))

    k_ss = max(quadratic(hc) / v_c, quadratic(hh) / v_h)
    k_sw = max(mixed(hc, grad_c) / v_c, mixed(hh, grad_h) / v_h)
    k_ww = max(weight_weight(hc) / v_c, weight_weight(hh) / v_h)
    return {"K_ss": k_ss, "K_sw": k_sw, "K_ws": k_sw, "K_ww": k_ww}


def lstm_lemma_constants(
    constraint, input_bound: float, hidden_size: int, input_size: int, target_bound: float
) -> dict[str, float]:
    """Every constant of the general lemmas, and ``gamma, beta``, for one LSTM layer in
    ``constraint`` (an :class:`~stablernn_lib.theory.lstm_certificate.LSTMConstraint`); loss
    ``||h - y||^2 / 2``, ``||y||_inf <= target_bound``: ``||grad l||_* = v_h ||h - y||_1``,
    ``L_p = v_h H (1 + target_bound)``, ``S_p = v_h^2 H``."""
    uniform = constraint.uniform_certificate(input_bound)
    forget = float(constraint.matrix(input_bound)[0, 0])
    if not math.isfinite(uniform.lam):
        raise ValueError(
            "the general lemmas need rho(M-bar) < 1, but this set's forget gate can reach 1 "
            "(F = 1 in floating point), so rho(M-bar) is infinite: bound the forget bias "
            "(bias_max['f']) and the rows of U_f"
        )
    if not uniform.lam < 1:
        raise ValueError(
            f"the general lemmas need rho(M-bar) < 1, but this set has rho(M-bar) = "
            f"{uniform.lam:.6g} (with F = {forget:.4g} < 1): its recurrent radii are too "
            "large for its forget-gate bound; shrink them (constraint.scaled) or lower the "
            "forget bias bound"
        )
    v_c, v_h = uniform.weights
    values = {
        "lambda": uniform.lam,
        "B_s": uniform.state_bound,
        "L_w": lstm_weight_lipschitz(
            uniform.cell_bound, uniform.weights, hidden_size, input_size, input_bound
        ),
        "L_p": v_h * hidden_size * (1 + target_bound),
        "S_p": v_h**2 * hidden_size,
        **lstm_second_order_constants(
            constraint.recurrent_radius,
            forget,
            uniform.cell_bound,
            uniform.weights,
            hidden_size,
            input_size,
            input_bound,
        ),
    }
    values["gamma"], values["beta"] = general_constants_numeric(values)
    return values
