"""Sympy steps of Lemmas 1-3 (geometric series, solving for ``k``, growth orders), mirroring
the float functions of :mod:`stablernn_lib.core.bounds` (the tests compare them)."""

from __future__ import annotations

import sympy as sp

lam, eps = sp.symbols("lambda epsilon", positive=True)
k, s, i, j = sp.symbols("k s i j", positive=True, integer=True)
Lx, Bx, Bh, Bz = sp.symbols("L_x B_x B_h B_z", positive=True)
L_rho, L2_rho, Lp, Sp = sp.symbols(r"L_rho L^{(2)}_{\rho} L_p S_p", nonnegative=True)


def evaluate_sum(expression: sp.Expr) -> sp.Expr:
    """``doit`` a sum and keep the branch of sympy's ``Piecewise`` answer that holds for
    ``0 < lambda < 1`` (the one whose condition is true at ``lambda = 1/2``)."""
    value = sp.piecewise_fold(expression.doit())
    if isinstance(value, sp.Piecewise):
        value = next(
            branch for branch, condition in value.args if condition.subs(lam, sp.Rational(1, 2))
        )
    return sp.simplify(value)


def state_norm_series() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """``(Sum, closed form, limit s -> oo)`` of ``||h_s|| <= sum_{j<s} lambda^j L_x B_x``."""
    series = sp.Sum(lam**j * Lx * Bx, (j, 0, s - 1))
    closed = Lx * Bx * (1 - lam**s) / (1 - lam)
    limit = Lx * Bx / (1 - lam)
    if sp.simplify(evaluate_sum(series) - closed) != 0:
        raise ArithmeticError("sympy's sum differs from the closed form")
    if sp.simplify(closed.subs(lam**s, 0) - limit) != 0:
        raise ArithmeticError("the limit of the closed form is not L_x B_x / (1 - lambda)")
    return series, closed, limit


def lemma1_context_solution() -> sp.Expr:
    """The ``k`` solving ``lambda^k L_x B_x / (1 - lambda) = epsilon`` (for ``0 < lambda < 1``)."""
    solutions = sp.solve(sp.Eq(lam**k * Lx * Bx / (1 - lam), eps), k)
    if len(solutions) != 1:
        raise ArithmeticError(f"expected one solution for k, got {solutions}")
    return solutions[0]


def lemma1_context_closed_form() -> sp.Expr:
    """The ``k`` of Lemma 1: ``log(L_x B_x / ((1 - lambda) eps)) / log(1 / lambda)``."""
    return sp.log(Lx * Bx / ((1 - lam) * eps)) / sp.log(1 / lam)


def same_expression(first: sp.Expr, second: sp.Expr) -> bool:
    """Whether two expressions in ``lambda`` agree for ``0 < lambda < 1`` (logs expanded)."""
    difference = sp.expand_log(first - second, force=True)
    return sp.simplify(difference) == 0


def geometric_identities() -> dict[str, tuple[sp.Expr, sp.Expr]]:
    """The sums the proofs of Lemmas 2 and 3 use, as ``name -> (sum, closed form)``."""
    return {
        "tail": (sp.Sum(lam ** (i), (i, k, sp.oo)), lam**k / (1 - lam)),
        "window": (sp.Sum(lam ** (j - 1) * lam ** (k - j), (j, 1, k)), k * lam ** (k - 1)),
        "weighted": (sp.Sum(i * lam ** (i - 1), (i, 1, sp.oo)), 1 / (1 - lam) ** 2),
    }


def lemma2_gamma_expression() -> sp.Expr:
    """Lemma 2's ``gamma`` in the symbols ``B_h, B_z`` (see :func:`bounds.lemma2_gamma`)."""
    return (
        Bz * (L2_rho * Lp * Bh / (L_rho * (1 - lam)) + L_rho * Sp * Bh + L_rho * Lp / (1 - lam))
        + L_rho * Lp * Bh / lam
    )


def lemma3_beta_expression() -> sp.Expr:
    """Lemma 3's ``beta`` in the symbol ``B_z`` (see :func:`bounds.lemma3_beta`)."""
    return (
        (L2_rho * Lp + L_rho**2 * Sp) * Bz**2 / (1 - lam) ** 2
        + lam * L2_rho * Lp * Bz**2 / (1 - lam) ** 3
        + 2 * L_rho**2 * Lp * Bz / (1 - lam) ** 2
    )


def unfold_state_bounds(expression: sp.Expr) -> sp.Expr:
    """Put in ``B_z = |(B_h, B_x)|`` and ``B_h = L_x B_x / (1 - lambda)`` (the vanilla RNN)."""
    expression = expression.subs(Bz, sp.sqrt(Bh**2 + Bx**2))
    return expression.subs(Bh, Lx * Bx / (1 - lam))


def growth_exponent(expression: sp.Expr, at_identity: bool = False) -> sp.Expr:
    """The ``n`` with ``expression ~ c (1 - lambda)^-n`` as ``lambda -> 1``, other symbols fixed
    and positive (``at_identity=True``: ``L2_rho = 0``, the linear RNN)."""
    if at_identity:
        expression = expression.subs(L2_rho, 0)
    return sp.limit(sp.log(expression) / sp.log(1 / (1 - lam)), lam, 1, "-")
