"""The state Jacobian ``d(c', h') / d(c, h)`` of the one-unit LSTM by sympy, in the gate values
(Chapter 1), checked against autograd: ``c' = i z + f c``, ``h' = o tanh(c')``."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
import torch

from stablernn_lib.core.contraction import state_jacobians
from stablernn_lib.core.models import LSTMMap

GATES = ("i", "f", "z", "o")  # PyTorch order along the first axis of the LSTM weights


class sigmoid(sp.Function):  # noqa: N801 (sympy functions are lower case)
    """The logistic function, with ``sigma' = sigma (1 - sigma)`` so results read in gate terms."""

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return self * (1 - self)

    def _eval_rewrite_as_exp(self, arg: sp.Expr, **kwargs) -> sp.Expr:
        return 1 / (1 + sp.exp(-arg))


@dataclass(frozen=True)
class ScalarLSTM:
    """The symbols and update of a one-unit LSTM (state ``(c, h)``, input ``x``)."""

    c: sp.Symbol
    h: sp.Symbol
    x: sp.Symbol
    recurrent: dict[str, sp.Symbol]  # w_i, w_f, w_z, w_o
    input: dict[str, sp.Symbol]  # u_i, ...
    bias: dict[str, sp.Symbol]  # b_i, ...
    preactivation: dict[str, sp.Expr]  # a_g = w_g h + u_g x + b_g
    c_next: sp.Expr
    h_next: sp.Expr

    @property
    def gate_values(self) -> dict[str, sp.Expr]:
        """Each gate as an expression of the state, input and weights."""
        return _gates(self.preactivation)

    @property
    def gate_symbols(self) -> dict[str, sp.Symbol]:
        """Plain symbols ``i, f, z, o`` that stand for the gate values in displayed results."""
        return {name: sp.Symbol(name) for name in GATES}


def _gates(a: dict[str, sp.Expr]) -> dict[str, sp.Expr]:
    """``sigma(a_g)`` for the gates ``i, f, o`` and ``tanh(a_z)``."""
    return {g: sp.tanh(a[g]) if g == "z" else sigmoid(a[g]) for g in GATES}


def scalar_lstm() -> ScalarLSTM:
    """Build the one-unit LSTM update symbolically."""
    c, h, x = sp.symbols("c h x", real=True)
    w = {g: sp.Symbol(f"w_{g}", real=True) for g in GATES}
    u = {g: sp.Symbol(f"u_{g}", real=True) for g in GATES}
    b = {g: sp.Symbol(f"b_{g}", real=True) for g in GATES}
    a = {g: w[g] * h + u[g] * x + b[g] for g in GATES}
    gate = _gates(a)
    c_next = gate["i"] * gate["z"] + gate["f"] * c
    return ScalarLSTM(c, h, x, w, u, b, a, c_next, gate["o"] * sp.tanh(c_next))


def state_jacobian(lstm: ScalarLSTM) -> sp.Matrix:
    """``d(c', h') / d(c, h)`` as a 2 x 2 sympy matrix (rows: c', h'; columns: c, h)."""
    return sp.Matrix([lstm.c_next, lstm.h_next]).jacobian([lstm.c, lstm.h])


def in_gate_terms(lstm: ScalarLSTM, expression: sp.Expr | sp.Matrix) -> sp.Expr | sp.Matrix:
    """Rewrite ``expression`` with the gate symbols ``i, f, z, o`` and ``T = tanh(c')``."""
    gates = lstm.gate_symbols
    tanh_c_next = sp.Symbol("T")
    replacements = {lstm.gate_values[g]: gates[g] for g in GATES}
    return expression.xreplace({sp.tanh(lstm.c_next): tanh_c_next}).xreplace(replacements)


def jacobian_function(lstm: ScalarLSTM):
    """A numerical function ``J(c, h, x, w, u, b) -> 2 x 2 array`` of the symbolic Jacobian."""
    arguments = [lstm.c, lstm.h, lstm.x]
    for table in (lstm.recurrent, lstm.input, lstm.bias):
        arguments += [table[g] for g in GATES]
    exp_form = state_jacobian(lstm).applyfunc(lambda entry: entry.rewrite(sp.exp))
    return sp.lambdify(arguments, exp_form.tolist(), modules="math")


def max_jacobian_gap(model: LSTMMap, states: torch.Tensor, inputs: torch.Tensor) -> float:
    """Largest entry-wise gap between the sympy Jacobian and autograd for a one-unit LSTM
    (``input_size = hidden_size = 1``) at ``states`` ``(N, 2)`` (``[c, h]``), inputs ``(N, 1)``."""
    if model.hidden_size != 1 or model.input_size != 1:
        raise ValueError(
            "the symbolic LSTM has one unit and one input; build LSTMMap(1, 1) to compare"
        )
    numeric = state_jacobians(model, states, inputs).detach()
    function = jacobian_function(scalar_lstm())
    weights = [model.weight_hh[:, 0], model.weight_ih[:, 0]]
    weights.append(model.bias if model.bias is not None else torch.zeros(4, dtype=states.dtype))
    flat_weights = [float(value) for tensor in weights for value in tensor.detach()]
    gap = 0.0
    for (c, h), (x,), jacobian in zip(states.tolist(), inputs.tolist(), numeric, strict=True):
        symbolic = torch.tensor(function(c, h, x, *flat_weights), dtype=numeric.dtype)
        gap = max(gap, float((symbolic - jacobian).abs().max()))
    return gap


def jacobian_equations(matrix: sp.Matrix) -> list[sp.Eq]:
    """The four entries of a state Jacobian as equations ``d c'/d c = ...`` for display."""
    names = (("c'", "c"), ("c'", "h"), ("h'", "c"), ("h'", "h"))
    return [
        sp.Eq(sp.Symbol(rf"\frac{{\partial {out}}}{{\partial {arg}}}"), entry)
        for (out, arg), entry in zip(names, matrix, strict=True)
    ]
