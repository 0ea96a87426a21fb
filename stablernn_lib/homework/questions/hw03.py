"""Homework 3 (Chapter 3, recurrent versus feed-forward): windows, parallel truncation, TCNs."""

from __future__ import annotations

import torch

from stablernn_lib.homework.expect import expect_close, expect_number, expect_raises
from stablernn_lib.homework.questions.common import fixed_instance, truncated_states_match
from stablernn_lib.homework.registry import Check, CheckContext, Homework, Question


def _windows_reference(inputs: torch.Tensor, k: int) -> torch.Tensor:
    T, B, D = inputs.shape
    padded = torch.cat([inputs.new_zeros(k - 1, B, D), inputs])
    return torch.stack([padded[t : t + k] for t in range(T)])


def _windows_match(function, ctx: CheckContext, T: int, B: int, D: int, k: int) -> str:
    inputs = ctx.randn(T, B, D)
    given = f"inputs (T, B, D) = ({T}, {B}, {D}), k = {k}"
    got = ctx.call(function, inputs.clone(), k, given=given)
    return expect_close(got, _windows_reference(inputs, k), "windows", given, atol=0, rtol=0)


def windows_random(function, ctx: CheckContext) -> str:
    T = ctx.integer(2, 9)
    _windows_match(function, ctx, T, ctx.integer(1, 3), ctx.integer(1, 4), ctx.integer(1, T))
    _windows_match(function, ctx, 4, 1, 2, 1)
    return _windows_match(function, ctx, 3, 2, 2, 6)


def parallel_random(function, ctx: CheckContext) -> str:
    T = ctx.integer(4, 20)
    truncated_states_match(function, ctx, T, ctx.integer(1, T), B=ctx.integer(1, 3))
    return truncated_states_match(function, ctx, 3, 5)


def _field(layers: int, kernel: int, base: int) -> int:
    return 1 + (kernel - 1) * sum(base**i for i in range(layers))


def field_visible(function, ctx: CheckContext) -> str:
    given = "10 layers, kernel size 2, dilations 1, 2, 4, ..., 512 (WaveNet)"
    return expect_number(ctx.call(function, 10, 2, 2, given=given), 1024, "context", given)


def field_random(function, ctx: CheckContext) -> str:
    for _ in range(3):
        layers, kernel, base = ctx.integer(1, 8), ctx.integer(2, 5), ctx.integer(1, 3)
        given = f"{layers} layers, kernel size {kernel}, dilation base {base}"
        got = ctx.call(function, layers, kernel, base, given=given)
        expect_number(got, _field(layers, kernel, base), "context", given)
    return "correct on random depths, kernel sizes and dilation bases (1 = no dilation)"


def field_bad_input(function, ctx: CheckContext) -> str:
    return expect_raises(function, ValueError, "no layers", "num_layers = 0", 0, 2, 2)


HOMEWORK = Homework(
    id="hw03",
    chapter="03_recurrent_vs_feedforward",
    title="Recurrent versus feed-forward models",
    minutes=50,
    questions=(
        Question(
            id="hw03.q1",
            title="Context windows",
            points=2,
            function="context_windows",
            task=(
                "context_windows(inputs, k) returns a tensor (T, k, B, D) whose window t holds "
                "x_{t-k+1}, ..., x_t in order, with zero vectors in place of inputs before the "
                "start of the sequence; inputs is (T, B, D)."
            ),
            tests="the input of a feed-forward model of context $k$; zero padding",
            checks=(
                Check("T = 5, k = 3", fixed_instance(_windows_match, 5, 2, 1, 3)),
                Check("random shapes, k = 1, k > T", windows_random, hidden=True),
            ),
        ),
        Question(
            id="hw03.q2",
            title="The truncated model in parallel",
            points=3,
            function="parallel_truncated_states",
            task=(
                "parallel_truncated_states(W, U, inputs, k) returns h^k_t for every t, shape "
                "(T, B, H), of the tanh RNN, using k sequential steps applied to all T windows "
                "at once (a batch of T * B sequences), not a loop over t."
            ),
            tests="why a truncated model is feed-forward: depth $k$, parallel over $t$",
            forbidden=("truncated_states", "truncated_states_reference"),
            checks=(
                Check("T = 7, k = 3", fixed_instance(truncated_states_match, 7, 3)),
                Check("random T and k, k > T", parallel_random, hidden=True),
            ),
        ),
        Question(
            id="hw03.q3",
            title="Context of a dilated convolution",
            points=2,
            function="tcn_receptive_field",
            task=(
                "tcn_receptive_field(num_layers, kernel_size, dilation_base) returns the number "
                "of inputs a causal convolutional stack sees when layer i (from 0) has dilation "
                "dilation_base ** i; raise ValueError when num_layers < 1."
            ),
            tests="autoregressive models (WaveNet, TCN) as models of finite context",
            checks=(
                Check("WaveNet-style stack", field_visible),
                Check("random stacks, no dilation", field_random, hidden=True),
                Check("refuses zero layers", field_bad_input, hidden=True),
            ),
        ),
        Question(
            id="hw03.q4",
            title="Proof: depth and work of the truncated model",
            points=3,
            kind="proof",
            task=(
                "Show that all of h^k_1, ..., h^k_T can be computed with k sequential steps "
                "and O(T k) applications of phi_w, while h_1, ..., h_T need T sequential steps. "
                "When is the truncated model cheaper in wall-clock time?"
            ),
            tests="parallel depth versus total work",
        ),
    ),
)
