"""Homework 8 (Chapter 8, WikiText-2): batching, perplexity, the stable projection of nn.RNN."""

from __future__ import annotations

import math

import torch

from stablernn_lib.homework.expect import expect_close, expect_number, expect_raises
from stablernn_lib.homework.questions.common import svd_clip
from stablernn_lib.homework.registry import (
    Check,
    CheckContext,
    CheckFailedError,
    Homework,
    Question,
)


def _batchify_match(function, ctx: CheckContext, length: int, batch: int) -> str:
    tokens = torch.randint(0, 50, (length,), generator=ctx.generator)
    columns = length // batch
    expected = tokens[: columns * batch].view(batch, columns).t().double()
    given = f"{length} tokens, batch size {batch}"
    got = ctx.call(function, tokens.clone(), batch, given=given)
    if not isinstance(got, torch.Tensor) or got.dtype != tokens.dtype:
        raise CheckFailedError(f"expected a tensor of token ids (int64) for {given}")
    return expect_close(got.double(), expected, "batched stream", given, atol=0, rtol=0)


def batchify_visible(function, ctx: CheckContext) -> str:
    return _batchify_match(function, ctx, 26, 4)


def batchify_random(function, ctx: CheckContext) -> str:
    _batchify_match(function, ctx, ctx.integer(20, 200), ctx.integer(1, 9))
    _batchify_match(function, ctx, 12, 12)
    tokens = torch.arange(5)
    return expect_raises(function, ValueError, "too few tokens", "5 tokens, batch 6", tokens, 6)


def _perplexity_match(function, ctx: CheckContext, T: int, B: int, V: int) -> str:
    logits = ctx.randn(T, B, V, scale=2.0)
    targets = torch.randint(0, V, (T, B), generator=ctx.generator)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    given = f"logits (T, B, V) = ({T}, {B}, {V})"
    got = ctx.call(function, logits, targets, given=given)
    return expect_number(got, math.exp(float(loss)), "perplexity", given, rel=1e-6)


def perplexity_visible(function, ctx: CheckContext) -> str:
    return _perplexity_match(function, ctx, 4, 2, 5)


def perplexity_random(function, ctx: CheckContext) -> str:
    _perplexity_match(function, ctx, ctx.integer(1, 8), ctx.integer(1, 4), ctx.integer(2, 30))
    V = 7
    logits = torch.zeros(3, 2, V, dtype=torch.float64)
    targets = torch.zeros(3, 2, dtype=torch.long)
    got = ctx.call(function, logits, targets, given="uniform logits over 7 words")
    return expect_number(got, 7.0, "perplexity of the uniform model", "V = 7", rel=1e-6)


def _projection_match(function, ctx: CheckContext, layers: int, hidden: int) -> str:
    rnn = torch.nn.RNN(3, hidden, num_layers=layers, dtype=torch.float64)
    with torch.no_grad():
        for parameter in rnn.parameters():
            parameter.copy_(ctx.randn(*parameter.shape))
    before = {name: p.detach().clone() for name, p in rnn.named_parameters()}
    tensors = {name: p for name, p in rnn.named_parameters()}
    radius = ctx.uniform(0.5, 1.0)
    given = f"an nn.RNN with {layers} layers of {hidden} units, radius {radius:.3g}"
    ctx.call(function, rnn, radius, given=given, inplace=True)
    for name, parameter in rnn.named_parameters():
        if parameter is not tensors[name]:
            raise CheckFailedError(f"{name} was replaced, not changed in place, for {given}")
        expected = svd_clip(before[name], radius) if "weight_hh" in name else before[name]
        expect_close(parameter.detach(), expected, name, given, atol=1e-8)
    return f"every weight_hh_l* projected in place, other parameters untouched, for {given}"


def projection_visible(function, ctx: CheckContext) -> str:
    return _projection_match(function, ctx, 2, 4)


def projection_random(function, ctx: CheckContext) -> str:
    _projection_match(function, ctx, 1, ctx.integer(1, 6))
    return _projection_match(function, ctx, 3, ctx.integer(2, 6))


HOMEWORK = Homework(
    id="hw08",
    chapter="08_wikitext2_experiments",
    title="The WikiText-2 experiments",
    minutes=45,
    questions=(
        Question(
            id="hw08.q1",
            title="Batching a token stream",
            points=2,
            function="batchify",
            task=(
                "batchify(tokens, batch_size) cuts the 1-D tensor of token ids into batch_size "
                "contiguous streams, dropping the remainder, and returns them as the columns of "
                "a tensor (len(tokens) // batch_size, batch_size); ValueError if a stream would "
                "be empty."
            ),
            tests="the data layout of word-level language modeling (time-first)",
            checks=(
                Check("26 tokens, batch 4", batchify_visible),
                Check("random lengths, one column, too few tokens", batchify_random, hidden=True),
            ),
        ),
        Question(
            id="hw08.q2",
            title="Perplexity",
            points=2,
            function="perplexity",
            task=(
                "perplexity(logits, targets) returns exp of the mean cross-entropy per token "
                "(a float) for logits (T, B, V) and target ids (T, B)."
            ),
            tests="the metric of the paper's table",
            checks=(
                Check("T = 4, B = 2, V = 5", perplexity_visible),
                Check("random sizes, uniform model", perplexity_random, hidden=True),
            ),
        ),
        Question(
            id="hw08.q3",
            title="Making torch.nn.RNN stable",
            points=3,
            function="project_rnn_",
            task=(
                "project_rnn_(rnn, radius) projects, in place and without tracking gradients, "
                "every recurrent matrix weight_hh_l0, weight_hh_l1, ... of a torch.nn.RNN onto "
                "{||W||_2 <= radius}, leaving every other parameter unchanged."
            ),
            tests="the stable training step used on every layer of the language models",
            forbidden=("project_spectral_ball", "project_to_stable_"),
            checks=(
                Check("2 layers of 4 units", projection_visible),
                Check("1 and 3 layers", projection_random, hidden=True),
            ),
        ),
    ),
)
