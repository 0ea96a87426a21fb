"""Homework 1 (Chapter 1, recurrent models): run an RNN, truncate it, one LSTM step."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close
from stablernn_lib.homework.questions.common import (
    fixed_instance,
    rnn_instance,
    tanh_rnn_states,
    truncated_states_match,
)
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)


def _states_match(function, ctx: CheckContext, T: int, B: int, D: int, H: int) -> str:
    W, U, inputs = rnn_instance(ctx, T, B, D, H, ctx.uniform(0.5, 1.5))
    given = f"T = {T}, B = {B}, D = {D}, H = {H}"
    got = ctx.call(function, W, U, inputs.clone(), given=given)
    return expect_close(got, tanh_rnn_states(W, U, inputs), "states h_1..h_T", given)


def states_against_torch(function, ctx: CheckContext) -> str:
    T, B, D, H = ctx.integer(2, 9), ctx.integer(1, 4), ctx.integer(1, 5), ctx.integer(1, 6)
    rnn = torch.nn.RNN(D, H, bias=False, dtype=torch.float64)
    with torch.no_grad():
        rnn.weight_hh_l0.copy_(ctx.randn(H, H))
        rnn.weight_ih_l0.copy_(ctx.randn(H, D))
    inputs = ctx.randn(T, B, D)
    expected, _ = rnn(inputs)
    given = f"a random torch.nn.RNN's weights, T = {T}, B = {B}, D = {D}, H = {H}"
    got = ctx.call(function, rnn.weight_hh_l0.detach(), rnn.weight_ih_l0.detach(), inputs)
    return expect_close(got, expected.detach(), "states", given)


def states_edge_sizes(function, ctx: CheckContext) -> str:
    _states_match(function, ctx, 1, 1, 1, 1)
    return _states_match(function, ctx, 1, 3, 2, 4)


def truncated_random(function, ctx: CheckContext) -> str:
    T = ctx.integer(3, 12)
    return truncated_states_match(function, ctx, T, ctx.integer(2, T - 1), B=ctx.integer(1, 3))


def truncated_edges(function, ctx: CheckContext) -> str:
    truncated_states_match(function, ctx, 5, 1)
    truncated_states_match(function, ctx, 4, 4)
    return truncated_states_match(function, ctx, 3, 7)


def _lstm_match(function, ctx: CheckContext, B: int, D: int, H: int) -> str:
    cell = torch.nn.LSTMCell(D, H, dtype=torch.float64)
    with torch.no_grad():
        for parameter in cell.parameters():
            parameter.copy_(ctx.randn(*parameter.shape))
    bias = (cell.bias_ih + cell.bias_hh).detach()
    c, h, x = ctx.randn(B, H), ctx.randn(B, H), ctx.randn(B, D)
    expected_h, expected_c = cell(x, (h, c))
    given = f"a random LSTM, B = {B}, D = {D}, H = {H}"
    got = ctx.call(
        function, cell.weight_hh.detach(), cell.weight_ih.detach(), bias, c, h, x, given=given
    )
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailedError(f"expected a pair (c', h'), got {type(got).__name__} for {given}")
    expect_close(got[0], expected_c.detach(), "new cell state c'", given)
    return expect_close(got[1], expected_h.detach(), "new hidden state h'", given)


def lstm_random(function, ctx: CheckContext) -> str:
    return _lstm_match(function, ctx, ctx.integer(1, 4), ctx.integer(1, 5), ctx.integer(1, 6))


HOMEWORK = Homework(
    id="hw01",
    chapter="01_recurrent_models",
    title="Recurrent models",
    minutes=45,
    questions=(
        Question(
            id="hw01.q1",
            title="Run a vanilla RNN",
            points=2,
            function="rnn_states",
            task=(
                "rnn_states(W, U, inputs) returns the states h_1..h_T, shape (T, B, H), of "
                "h_t = tanh(W h_{t-1} + U x_t) with h_0 = 0, for inputs of shape (T, B, D)."
            ),
            tests=r"the recurrence $h_t = \phi_w(h_{t-1}, x_t)$, time-first batched shapes",
            forbidden=("RNN", "VanillaRNN", "from_torch"),
            checks=(
                Check("a (4, 2, 3) input", fixed_instance(_states_match, 4, 2, 3, 3)),
                Check("same as torch.nn.RNN", states_against_torch, hidden=True),
                Check("T = 1, one unit", states_edge_sizes, hidden=True),
            ),
        ),
        Question(
            id="hw01.q2",
            title="The truncated model",
            points=3,
            function="truncated_rnn_states",
            task=(
                "truncated_rnn_states(W, U, inputs, k) returns h^k_t for every t, shape (T, B, H): "
                "the tanh RNN run on the last k inputs x_{t-k+1..t} only, from the zero state "
                "(all the inputs seen so far when t < k)."
            ),
            tests=r"the definition of $h^k_t$; $k \ge t$ gives the full model",
            forbidden=("truncated_states", "truncated_states_reference"),
            checks=(
                Check("T = 6, k = 2", fixed_instance(truncated_states_match, 6, 2)),
                Check("random T and k", truncated_random, hidden=True),
                Check("k = 1, k = T, k > T", truncated_edges, hidden=True),
            ),
        ),
        Question(
            id="hw01.q3",
            title="One LSTM step",
            points=3,
            function="lstm_step",
            task=(
                "lstm_step(weight_hh, weight_ih, bias, c, h, x) returns the pair (c', h') of one "
                "LSTM step with PyTorch's gate order (i, f, g, o) in the rows of weight_hh "
                "(4H, H), weight_ih (4H, D) and bias (4H,); c, h are (B, H) and x is (B, D)."
            ),
            tests="the LSTM equations and PyTorch's gate layout",
            forbidden=("LSTMCell", "LSTM", "LSTMMap"),
            checks=(
                Check("B = 2, D = 3, H = 2", fixed_instance(_lstm_match, 2, 3, 2)),
                Check("same as torch.nn.LSTMCell, random sizes", lstm_random, hidden=True),
            ),
        ),
        Question(
            id="hw01.q4",
            title="Proof: when truncation changes nothing",
            points=3,
            kind="proof",
            task=(
                "Prove that h^k_t depends only on x_{t-k+1}, ..., x_t, and that h^k_t = h_t "
                "whenever k >= t."
            ),
            tests="reasoning with the recursion and $h_0 = 0$",
        ),
    ),
)
