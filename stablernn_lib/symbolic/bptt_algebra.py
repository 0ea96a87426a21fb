"""The algebra of Chapter 2 done by sympy: the vanilla RNN Jacobian, the rank-one
nilpotent matrix, and the folds of the one-unit system."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
import torch

from stablernn_lib.core.models import VanillaRNN


@dataclass(frozen=True)
class SymbolicRNN:
    """``h' = tanh(W h + U x + b)`` with symbolic ``W (n, n)``, ``U (n, d)``, ``b``, ``h``,
    ``x (d,)``; ``preactivation`` is ``a = W h + U x + b``, ``next_state`` is ``tanh(a)``."""

    W: sp.Matrix
    U: sp.Matrix
    b: sp.Matrix
    h: sp.Matrix
    x: sp.Matrix
    preactivation: sp.Matrix
    next_state: sp.Matrix


def symbolic_rnn(hidden_size: int = 2, input_size: int = 1) -> SymbolicRNN:
    """A tanh RNN with every weight a sympy symbol."""
    W = sp.Matrix(hidden_size, hidden_size, lambda i, j: sp.Symbol(f"W_{i + 1}{j + 1}"))
    U = sp.Matrix(hidden_size, input_size, lambda i, j: sp.Symbol(f"U_{i + 1}{j + 1}"))
    b = sp.Matrix(hidden_size, 1, lambda i, _: sp.Symbol(f"b_{i + 1}"))
    h = sp.Matrix(hidden_size, 1, lambda i, _: sp.Symbol(f"h_{i + 1}"))
    x = sp.Matrix(input_size, 1, lambda i, _: sp.Symbol(f"x_{i + 1}"))
    a = W * h + U * x + b
    return SymbolicRNN(W, U, b, h, x, a, a.applyfunc(sp.tanh))


def jacobian_minus_formula(rnn: SymbolicRNN) -> sp.Matrix:
    """``d h' / d h - diag(tanh'(a)) W`` simplified (the zero matrix when the formula holds)."""
    jacobian = rnn.next_state.jacobian(rnn.h)
    slopes = rnn.preactivation.applyfunc(lambda a: 1 - sp.tanh(a) ** 2)
    formula = sp.diag(*slopes) * rnn.W
    return sp.simplify(jacobian - formula)


def numeric_jacobian_gap(
    rnn: SymbolicRNN, model: VanillaRNN, state: torch.Tensor, x: torch.Tensor
) -> float:
    """Largest ``|sympy Jacobian - autograd Jacobian|`` at ``state`` ``(n,)``, ``x`` ``(d,)`` for a
    float64 tanh :class:`VanillaRNN` of the same sizes (its bias, if any, is ``b``)."""
    if model.activation != "tanh":
        raise ValueError("the symbolic RNN uses tanh; build the model with activation='tanh'")
    values = {}
    for symbols, tensor in (
        (rnn.W, model.weight_hh),
        (rnn.U, model.weight_ih),
        (rnn.h, state.reshape(-1, 1)),
        (rnn.x, x.reshape(-1, 1)),
    ):
        values.update(zip(symbols, tensor.detach().reshape(-1).tolist(), strict=True))
    bias = model.bias if model.bias is not None else torch.zeros(model.hidden_size)
    values.update(zip(rnn.b, bias.detach().tolist(), strict=True))
    exact = torch.tensor(
        sp.N(rnn.next_state.jacobian(rnn.h).subs(values)).tolist(), dtype=torch.float64
    )
    automatic = torch.autograd.functional.jacobian(
        lambda h: model.step(h.unsqueeze(0), x.unsqueeze(0)).squeeze(0), state
    )
    return float((exact - automatic).abs().max())


def nilpotent_sandwich() -> tuple[sp.Matrix, sp.Expr]:
    """For ``W = c u v^T`` with ``u = (1, -1)``, ``v = (1, 1)`` and ``D = diag(d_1, d_2)``:
    returns ``W D W - c (d_1 - d_2) W`` (zero) and ``W**2`` (zero) as a pair of matrices."""
    c, d1, d2 = sp.symbols("c d_1 d_2")
    W = c * sp.Matrix([[1, 1], [-1, -1]])
    sandwich = sp.simplify(W * sp.diag(d1, d2) * W - c * (d1 - d2) * W)
    return sandwich, W**2


def one_unit_folds() -> tuple[sp.Symbol, list[sp.Expr]]:
    """The symbol ``w`` and the ``x`` where ``w sigmoid'(x) = 1`` (sympy solves for
    ``s = sigmoid(x)`` in ``w s (1 - s) = 1``, then ``x = log(s / (1 - s))``)."""
    w, s = sp.symbols("w s", positive=True)
    roots = sp.solve(sp.Eq(w * s * (1 - s), 1), s)
    return w, [sp.simplify(sp.log(root / (1 - root))) for root in roots]
