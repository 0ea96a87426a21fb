"""Sympy derivations of Chapter 4: Lipschitz constants and the LSTM contraction algebra; each
identity is an expression that simplifies to zero (the tests check it)."""

from __future__ import annotations

import sympy as sp

u = sp.Symbol("u", real=True)

ACTIVATION_EXPRESSIONS: dict[str, sp.Expr] = {
    "tanh": sp.tanh(u),
    "sigmoid": 1 / (1 + sp.exp(-u)),
    "relu": sp.Piecewise((0, u < 0), (u, True)),
    "identity": u,
}


def activation_lipschitz_symbolic(name: str) -> tuple[sp.Expr, sp.Expr]:
    """``(rho'(u), sup_u |rho'(u)|)`` for a named activation, both by sympy (the Lipschitz
    constant of a piecewise differentiable scalar function, by the mean value theorem)."""
    if name not in ACTIVATION_EXPRESSIONS:
        raise ValueError(
            f"no symbolic form for activation {name!r}; use one of {sorted(ACTIVATION_EXPRESSIONS)}"
        )
    derivative = sp.simplify(sp.diff(ACTIVATION_EXPRESSIONS[name], u))
    if isinstance(derivative, sp.Piecewise):  # piecewise linear: the largest piece wins
        covered: sp.Set = sp.S.EmptySet
        pieces = []
        for expression, condition in derivative.args:
            where = condition.as_set() - covered
            covered = covered | where
            pieces.append(sp.calculus.util.maximum(sp.Abs(expression), u, where))
        supremum = sp.Max(*pieces)
    else:
        supremum = sp.calculus.util.maximum(sp.Abs(derivative), u, sp.S.Reals)
    return derivative, sp.nsimplify(sp.simplify(supremum))


def sigmoid_slope_facts() -> dict[str, sp.Expr]:
    """Gate-slope facts, each simplifying to 0: ``sigma' = sigma (1 - sigma)``, ``sigma'`` even,
    ``sigma'' = sigma' (1 - 2 sigma)`` (``sigma'`` decreases in ``|u|``), ``tanh' = 1 - tanh^2``."""
    sigma = ACTIVATION_EXPRESSIONS["sigmoid"]
    slope = sp.diff(sigma, u)
    return {
        "derivative_in_gate_terms": sp.simplify(slope - sigma * (1 - sigma)),
        "even": sp.simplify(slope.subs(u, -u) - slope),
        "second_derivative": sp.simplify(sp.diff(slope, u) - slope * (1 - 2 * sigma)),
        "tanh_derivative": sp.simplify(sp.diff(sp.tanh(u), u) - (1 - sp.tanh(u) ** 2)),
    }


def lstm_difference_identities() -> dict[str, sp.Expr]:
    """The LSTM proof's algebra, each expanding to 0 (``cell``: ``i z + f c - (i~ z~ + f~ c~)
    = (i - i~) z + i~ (z - z~) + (f - f~) c + f~ (c - c~)``; ``hidden``: ``o t - o~ t~ =
    (o - o~) t + o~ (t - t~)``; ``cell_bound``: ``C = ibar zbar / (1 - fbar)``, its fixed point)."""
    i, f, z, c, o, t = sp.symbols("i f z c o t", real=True)
    i2, f2, z2, c2, o2, t2 = sp.symbols("itilde ftilde ztilde ctilde otilde ttilde", real=True)
    cell = (i * z + f * c) - (i2 * z2 + f2 * c2)
    cell_split = (i - i2) * z + i2 * (z - z2) + (f - f2) * c + f2 * (c - c2)
    hidden = o * t - o2 * t2
    hidden_split = (o - o2) * t + o2 * (t - t2)
    ibar, zbar, fbar, C = sp.symbols("ibar zbar fbar C", positive=True)
    fixed_point = sp.solve(sp.Eq(C, ibar * zbar + fbar * C), C)[0]
    return {
        "cell": sp.expand(cell - cell_split),
        "hidden": sp.expand(hidden - hidden_split),
        "cell_bound": sp.simplify(fixed_point - ibar * zbar / (1 - fbar)),
    }


def perron_2x2() -> dict[str, sp.Expr]:
    """``matrix`` ``M > 0`` (2 x 2), its Perron ``root`` and ``vector``, ``eigen_residual``
    (zeros), ``char_poly_at_one = det(I - M)`` (root ``< 1`` iff ``> 0``, if ``m11, m22 < 1``)."""
    m11, m12, m21, m22 = sp.symbols("m11 m12 m21 m22", positive=True)
    M = sp.Matrix([[m11, m12], [m21, m22]])
    root = (m11 + m22 + sp.sqrt((m11 - m22) ** 2 + 4 * m12 * m21)) / 2
    vector = sp.Matrix([m12, root - m11])
    return {
        "matrix": M,
        "root": root,
        "vector": vector,
        "eigen_residual": sp.simplify(M * vector - root * vector),
        "char_poly_at_one": sp.factor((sp.eye(2) - M).det()),
    }
