"""Homework 8 (Chapter 8, WikiText-2): batching, perplexity, the stable projection of nn.RNN,
and two readings of the chapter's results: the cost of stability over seeds, and what a
truncated perplexity within 1% of the recurrent one says about the context a model uses."""

from __future__ import annotations

import math

import torch

from stablernn_lib.core import criteria
from stablernn_lib.homework.expect import expect_close, expect_number, expect_raises
from stablernn_lib.homework.questions.common import fixed_instance, svd_clip
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


def projection_random(function, ctx: CheckContext) -> str:
    _projection_match(function, ctx, 1, ctx.integer(1, 6))
    return _projection_match(function, ctx, 3, ctx.integer(2, 6))


# Chapter 8's test perplexities, cpu scale, seeds 2, 3 and 1111 (data/results/wikitext2/cpu*)
CHAPTER8_SEEDS = {
    "RNN": ((280.6, 274.3, 279.6), (224.0, 271.5, 286.7)),
    "LSTM": ((208.8, 210.4, 211.1), (164.7, 167.1, 165.7)),
}


def _cost_match(function, ctx: CheckContext, stable: list[float], free: list[float]) -> str:
    a, b = criteria.summarize(dict(enumerate(free))), criteria.summarize(dict(enumerate(stable)))
    gap = 100 * criteria.relative_gap(b.mean, a.mean)
    verdict = criteria.stability_cost_verdict("wikitext2", a, b)  # criteria.json's rule
    given = f"stable {stable}, unconstrained {free}"
    got = ctx.call(function, list(stable), list(free), given=given)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailedError(f"expected a pair (gap in %, verdict), got {got!r} for {given}")
    expect_number(got[0], gap, "gap in percent", given, rel=1e-6)
    if not isinstance(got[1], str) or got[1].strip().lower() != verdict:
        raise CheckFailedError(f"verdict: expected {verdict!r}, got {got[1]!r} for {given}")
    return f"gap {gap:+.1f}%, {verdict!r} for {given}"


def cost_visible(function, ctx: CheckContext) -> str:
    return "; ".join(_cost_match(function, ctx, *pair) for pair in CHAPTER8_SEEDS.values())


def _seeds(ctx: CheckContext, mean: float, sd: float, n: int) -> list[float]:
    return [round(mean + sd * float(z), 2) for z in ctx.randn(n)]


def cost_random(function, ctx: CheckContext) -> str:
    n = ctx.integer(3, 6)
    free = _seeds(ctx, ctx.uniform(100, 300), 1.0, n)
    mean = sum(free) / n
    _cost_match(function, ctx, _seeds(ctx, mean * 1.02, 1.0, n), free)  # within the tolerance
    _cost_match(function, ctx, _seeds(ctx, mean * 0.9, 1.0, n), free)  # the stable one better
    _cost_match(function, ctx, _seeds(ctx, mean * 1.3, 1.0, n), free)  # far beyond the noise
    noisy = _seeds(ctx, mean, 0.3 * mean, n)
    _cost_match(function, ctx, _seeds(ctx, mean * 1.08, 0.3 * mean, n), noisy)  # noise wins
    return expect_raises(
        function, ValueError, "two seeds", "2 seeds per model", [1.0, 2.0], [1.0, 2.0]
    )


HOMEWORK = Homework(
    id="hw08",
    chapter="08_wikitext2_experiments",
    title="The WikiText-2 experiments",
    minutes=70,
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
                Check("26 tokens, batch 4", fixed_instance(_batchify_match, 26, 4)),
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
                Check("T = 4, B = 2, V = 5", fixed_instance(_perplexity_match, 4, 2, 5)),
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
                Check("2 layers of 4 units", fixed_instance(_projection_match, 2, 4)),
                Check("1 and 3 layers", projection_random, hidden=True),
            ),
        ),
        Question(
            id="hw08.q4",
            title="Does stability cost little? A gap against seed noise",
            points=3,
            function="stability_cost",
            task=(
                "stability_cost(stable, free) takes the test perplexities of the stable and the "
                "unconstrained model, one per seed (at least 3 each, else ValueError), and "
                "returns (gap, verdict): gap = 100 (mean(stable) - mean(free)) / mean(free) and "
                "verdict 'supported' when gap <= 5, else 'not supported' when |mean(stable) - "
                "mean(free)| > 2 sqrt((sd_stable^2 + sd_free^2) / 2) (sample sd, n - 1), else "
                "'inconclusive'."
            ),
            tests="reading a cost of stability against the seed noise, as the course's criteria do",
            forbidden=("stability_cost_verdict", "relative_gap", "beyond_noise", "pooled_sd"),
            checks=(
                Check("Chapter 8's RNN and LSTM seeds", cost_visible),
                Check(
                    "within, below, far beyond the tolerance; noise; 2 seeds",
                    cost_random,
                    hidden=True,
                ),
            ),
        ),
        Question(
            id="hw08.q5",
            title="Judgement: what a 1% perplexity tolerance rules out",
            points=3,
            kind="proof",
            task=(
                "The unconstrained RNN of Chapter 8 comes within 1% of its recurrent perplexity "
                "with about a dozen words of context, and the chapter reads it as a model of "
                "short context. Decide whether that rules out that the model uses much older "
                "words at some positions; justify with one inequality between the 1% and the "
                "log-loss changes at single positions, propose a measurement that would find "
                "such positions, and say which result would show long context there."
            ),
            tests="what an average at a tolerance can and cannot show, position by position",
        ),
    ),
)
