"""Word-level language model: shapes, stable projections, truncated evaluation."""

from __future__ import annotations

import math

import pytest
import torch

from stablernn_lib.core.contraction import project_spectral_ball
from stablernn_lib.core.norms import spectral_norm
from stablernn_lib.tasks.wikitext2.data import batchify
from stablernn_lib.tasks.wikitext2.measurements import layer_map
from stablernn_lib.tasks.wikitext2.model import (
    WordLanguageModel,
    detach_state,
    evaluate_loss,
    project_spectral_balls_,
    project_stable_,
    spectral_norm_upper_bounds,
    truncated_loss,
    truncated_outputs,
)
from stablernn_lib.theory.lstm_certificate import lstm_contraction_bound


def tiny(cell: str, layers: int = 2, stable: bool = False) -> WordLanguageModel:
    torch.manual_seed(0)
    return WordLanguageModel(cell, 30, 6, 8, layers, dropout=0.0, stable=stable).eval()


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_forward_shapes_and_state(cell: str) -> None:
    model = tiny(cell)
    tokens = torch.randint(30, (7, 3))
    logits, state = model(tokens)
    assert logits.shape == (7, 3, 30)
    # carrying the state equals one longer run
    first, state_a = model(tokens[:4])
    second, _ = model(tokens[4:], state_a)
    torch.testing.assert_close(torch.cat([first, second]), logits)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_detached_state_keeps_the_values_and_drops_the_graph(cell: str) -> None:
    """Between BPTT windows: the state (a tensor, or the LSTM's (h, c)) keeps its values and
    leaves the graph; no state stays None."""
    model = tiny(cell).train()
    _, state = model.recur(model.embed(torch.randint(0, 30, (4, 3))), None)
    parts = (state,) if isinstance(state, torch.Tensor) else state
    assert all(part.requires_grad for part in parts)
    detached = detach_state(state)
    assert type(detached) is type(state)
    kept = (detached,) if isinstance(detached, torch.Tensor) else detached
    assert len(kept) == len(parts)
    for old, new in zip(parts, kept, strict=True):
        assert not new.requires_grad and torch.equal(old.detach(), new)
    assert detach_state(None) is None


def test_unknown_cell_is_rejected() -> None:
    with pytest.raises(ValueError, match="use 'rnn'"):
        WordLanguageModel("gru", 10, 4, 4)


def test_stable_rnn_projection_bounds_every_layer() -> None:
    model = tiny("rnn", layers=3)
    with torch.no_grad():
        for n in range(3):
            getattr(model.rnn, f"weight_hh_l{n}").mul_(10)
    assert spectral_norm(model.rnn.weight_hh_l2) > 1.5
    project_stable_(model)
    for n in range(3):
        assert spectral_norm(getattr(model.rnn, f"weight_hh_l{n}")) <= 1 + 1e-5


def test_spectral_norm_upper_bound_is_a_true_and_tight_bound() -> None:
    generator = torch.Generator().manual_seed(3)
    matrices = [torch.randn(3, 40, 40, generator=generator) * s for s in (1e-3, 1.0, 1e3)]
    rank_one = torch.randn(40, 1, generator=generator) @ torch.randn(1, 40, generator=generator)
    q, _ = torch.linalg.qr(torch.randn(40, 40, generator=generator, dtype=torch.float64))
    flat = q * torch.linspace(0.999, 1.0, 40, dtype=torch.float64)  # a cluster at the top
    matrices += [rank_one[None], flat[None].float(), torch.randn(2, 30, 50, generator=generator)]
    for batch in matrices:
        bounds = spectral_norm_upper_bounds(batch)
        exact = torch.linalg.matrix_norm(batch.double(), ord=2)
        assert (bounds >= exact).all()
        assert (bounds <= exact * batch.shape[-1] ** (1 / 256) * (1 + 1e-5)).all()
    assert spectral_norm_upper_bounds(torch.zeros(1, 5, 5)).item() == 0.0


def test_spectral_projection_skips_only_matrices_already_inside() -> None:
    generator = torch.Generator().manual_seed(4)
    inside = torch.randn(50, 50, generator=generator)
    inside *= 0.95 / spectral_norm(inside)
    outside = torch.randn(50, 50, generator=generator)
    outside *= 1.2 / spectral_norm(outside)
    weights = [inside.clone(), outside.clone()]
    project_spectral_balls_(weights, check_first=True)
    assert torch.equal(weights[0], inside)  # proved inside: left exactly as it was
    assert torch.equal(weights[1], project_spectral_ball(outside, 1.0))
    # the previous code projected every layer; both agree up to the SVD's rounding
    torch.testing.assert_close(weights[0], project_spectral_ball(inside, 1.0))
    # without the check (the default on a CPU) every matrix goes through the SVD
    weights = [inside.clone(), outside.clone()]
    project_spectral_balls_(weights)
    for got, original in zip(weights, (inside, outside), strict=True):
        assert torch.equal(got, project_spectral_ball(original, 1.0))


def test_stable_lstm_projection_certifies_every_layer() -> None:
    model = tiny("lstm", layers=2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(20)
    assert lstm_contraction_bound(layer_map(model, 0), 1.0) > 1
    project_stable_(model)
    assert model.encoder.weight.abs().max() <= 1.0
    for n in range(2):
        assert lstm_contraction_bound(layer_map(model, n), 1.0) < 1


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_projecting_the_first_layer_only_leaves_the_others_untouched(cell: str) -> None:
    """The authors' code projected layer 0 only; ``projected_layers=1`` does the same."""
    torch.manual_seed(3)
    model = WordLanguageModel(cell, 25, 5, 7, 2, dropout=0.0, stable=True, projected_layers=1)
    with torch.no_grad():
        for parameter in model.rnn.parameters():
            parameter.mul_(20)
    free = {name: value.clone() for name, value in model.rnn.named_parameters() if "_l1" in name}
    project_stable_(model)
    for name, value in model.rnn.named_parameters():
        if "_l1" in name:
            assert torch.equal(value, free[name]), f"{name} was changed"
    if cell == "rnn":
        assert spectral_norm(model.rnn.weight_hh_l0) <= 1 + 1e-5
        assert spectral_norm(model.rnn.weight_hh_l1) > 1.5
    else:
        assert lstm_contraction_bound(layer_map(model, 0), 1.0) < 1
        assert lstm_contraction_bound(layer_map(model, 1), 1.0) > 1
    with pytest.raises(ValueError, match="projected_layers must be between 1 and num_layers"):
        WordLanguageModel(cell, 25, 5, 7, 2, projected_layers=3)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_truncated_outputs_match_a_per_position_loop(cell: str) -> None:
    model = tiny(cell)
    source = torch.randint(30, (12, 2))
    k = 4
    fast = truncated_outputs(model, source, 1, 10, k, max_window_tokens=9)  # several chunks
    for t in range(1, 11):
        window = source[max(0, t - k + 1) : t + 1]
        outputs, _ = model.recur(model.embed(window))
        torch.testing.assert_close(fast[t - 1], outputs[-1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_truncated_loss_with_long_context_is_the_recurrent_loss(cell: str) -> None:
    model = tiny(cell)
    source = batchify(torch.randint(30, (200,)), 4)  # 50 rows
    recurrent = evaluate_loss(model, source, bptt=7)
    assert truncated_loss(model, source, k=60, rows_per_block=13) == pytest.approx(
        recurrent, rel=1e-5
    )
    assert abs(truncated_loss(model, source, k=1) - recurrent) > 1e-5
    assert math.isfinite(truncated_loss(model, source, k=3))


def test_lstm_constraint_choices_and_their_sets() -> None:
    from stablernn_lib.theory.lstm_certificate import (
        AUTHORS_RECURRENT_SCALES,
        COURSE_BIAS_BOUND,
        course_lstm_constraint,
        free_forget_constraint,
        gate_blocks,
    )

    with pytest.raises(ValueError, match="unknown lstm_constraint 'tight'"):
        WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="tight")
    lifted, course = free_forget_constraint(), course_lstm_constraint()
    assert lifted.bias_max["f"] == COURSE_BIAS_BOUND and course.bias_max["f"] == 0.0
    assert lifted.input_radius["f"] == lifted.input_radius["i"] > course.input_radius["f"]
    assert lifted.recurrent_radius == course.recurrent_radius
    torch.manual_seed(0)
    model = WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="free-forget")
    with torch.no_grad():
        for layer in range(2):
            getattr(model.rnn, f"bias_ih_l{layer}").add_(3.0)  # forget bias far above 0
            getattr(model.rnn, f"weight_ih_l{layer}").mul_(50.0)
    project_stable_(model)
    forget = gate_blocks(model.rnn.bias_ih_l0 + model.rnn.bias_hh_l0)["f"]
    assert forget.max() > 1.0  # the lifted cap lets the forget bias stay positive
    # lifted above the first layer only: layer 1 keeps the cap, layer 2 does not
    torch.manual_seed(0)
    model = WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="free-forget-upper")
    with torch.no_grad():
        for layer in range(2):
            getattr(model.rnn, f"bias_ih_l{layer}").add_(3.0)
    project_stable_(model)
    first, second = (
        gate_blocks(getattr(model.rnn, f"bias_ih_l{n}") + getattr(model.rnn, f"bias_hh_l{n}"))["f"]
        for n in range(2)
    )
    assert first.max() <= course.bias_max["f"] + 1e-6 < 1.0 < second.max()
    # the authors' rule: every column of every recurrent block sums to its constant
    model = WordLanguageModel("lstm", 30, 6, 5, 2, stable=True, lstm_constraint="authors")
    project_stable_(model)
    for layer in range(2):
        blocks = gate_blocks(getattr(model.rnn, f"weight_hh_l{layer}").detach())
        for gate, c in AUTHORS_RECURRENT_SCALES.items():
            sums = blocks[gate].abs().sum(dim=0)
            assert torch.allclose(sums, torch.full_like(sums, c), rtol=1e-5), (layer, gate)
    assert model.encoder.weight.abs().max() <= 1.0


def test_defaults_and_dropout_between_layers() -> None:
    """The defaults the chapters and tasks rely on, and dropout only between layers."""
    torch.manual_seed(0)
    model = WordLanguageModel("rnn", 30, 6, 8)
    assert model.num_layers == 2 and model.projected_layers == 2
    assert model.stable is False and model.output == "softmax"
    assert model.input_bound == 1.0 and model.lstm_constraint == "course"
    assert model.drop.p == 0.2 and model.rnn.dropout == 0.2
    assert model.rnn.nonlinearity == "tanh"
    assert WordLanguageModel("rnn", 30, 6, 8, stable=True).stable is True
    for cell in ("rnn", "lstm"):
        torch.manual_seed(0)
        two = WordLanguageModel(cell, 30, 6, 8, 2, dropout=0.3)
        assert two.rnn.dropout == 0.3 and two.drop.p == 0.3
        one = WordLanguageModel(cell, 30, 6, 8, 1, dropout=0.3)
        assert one.rnn.dropout == 0.0 and one.drop.p == 0.3
        # every layer may be projected
        assert WordLanguageModel(cell, 30, 6, 8, 2, projected_layers=2).projected_layers == 2


def test_initial_weights_are_uniform_in_a_tenth() -> None:
    torch.manual_seed(0)
    model = WordLanguageModel("rnn", 200, 20, 20)
    for weight in (model.encoder.weight, model.decoder.weight):
        assert weight.min() >= -0.1 and weight.max() <= 0.1
        assert weight.min() < -0.09 and weight.max() > 0.09  # the whole interval is used
    assert torch.equal(model.decoder.bias, torch.zeros(200))


@pytest.mark.parametrize(
    ("sizes", "kwargs", "message"),
    [
        ((0, 6, 8, 2), {}, r"^vocab, embedding and hidden sizes and num_layers must be >= 1"),
        ((30, 0, 8, 2), {}, r"^vocab, embedding and hidden sizes and num_layers must be >= 1"),
        ((30, 6, 0, 2), {}, r"^vocab, embedding and hidden sizes and num_layers must be >= 1"),
        ((30, 6, 8, 0), {}, r"^vocab, embedding and hidden sizes and num_layers must be >= 1"),
        ((30, 6, 8, 2), {"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ((30, 6, 8, 2), {"dropout": 1.5}, r"dropout must be in \[0, 1\), got 1.5"),
        ((30, 6, 8, 2), {"output": "bogus"}, "unknown output 'bogus'"),
    ],
)
def test_bad_arguments_are_rejected(
    sizes: tuple[int, int, int, int], kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        WordLanguageModel("rnn", *sizes, **kwargs)


def test_unknown_lstm_constraint_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown lstm_constraint 'tight'") as error:
        WordLanguageModel("lstm", 30, 6, 5, lstm_constraint="tight")
    for choice in ("course", "free-forget", "free-forget-upper", "authors"):
        assert repr(choice) in str(error.value)


@pytest.mark.parametrize("cutoffs", [(0, 5), (5, 29), (5, 30), (5, 40)])
def test_adaptive_cutoffs_outside_the_vocabulary_are_rejected(cutoffs: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=rf"adaptive softmax cutoffs \({cutoffs[0]}, "):
        WordLanguageModel("rnn", 30, 6, 8, output="adaptive", cutoffs=cutoffs)
    # a plain softmax ignores the cutoffs
    assert WordLanguageModel("rnn", 30, 6, 8, cutoffs=cutoffs).output == "softmax"


def adaptive_log_probs(decoder: torch.nn.AdaptiveLogSoftmaxWithLoss, h: torch.Tensor):
    """log p(w | h) over the whole vocabulary by hand, in float64: head softmax over the
    shortlist and the cluster tokens, plus each cluster's tail softmax."""
    h = h.double()
    head = torch.log_softmax(h @ decoder.head.weight.double().T, dim=-1)
    shortlist = decoder.cutoffs[0]
    parts = [head[:, :shortlist]]
    for n, tail in enumerate(decoder.tail):
        logits = h @ tail[0].weight.double().T @ tail[1].weight.double().T
        parts.append(head[:, shortlist + n, None] + torch.log_softmax(logits, dim=-1))
    return torch.cat(parts, dim=-1)


def test_adaptive_decoder_is_built_from_the_arguments() -> None:
    torch.manual_seed(0)
    model = WordLanguageModel("rnn", 30, 6, 32, output="adaptive", cutoffs=(15, 5))
    decoder = model.decoder
    assert isinstance(decoder, torch.nn.AdaptiveLogSoftmaxWithLoss)
    assert decoder.in_features == 32 and decoder.n_classes == 30
    assert decoder.cutoffs == [5, 15, 30] and decoder.div_value == 4.0  # the default
    assert [tail[0].out_features for tail in decoder.tail] == [8, 2]  # 32 / 4, 32 / 16
    model = WordLanguageModel("rnn", 30, 6, 32, output="adaptive", cutoffs=(5, 15), div_value=2)
    assert model.decoder.div_value == 2 and model.decoder.tail[1][0].out_features == 8
    # the extreme cutoffs: 1, a single cutoff, vocabulary size - 2
    for cutoffs, expected in [((1, 5), [1, 5, 30]), ((5,), [5, 30]), ((5, 28), [5, 28, 30])]:
        model = WordLanguageModel("rnn", 30, 6, 32, output="adaptive", cutoffs=cutoffs)
        assert model.decoder.cutoffs == expected


def test_adaptive_decode_and_token_nll_are_the_exact_log_probabilities() -> None:
    torch.manual_seed(0)
    model = WordLanguageModel(
        "lstm", 30, 6, 12, 1, dropout=0.0, output="adaptive", cutoffs=(5, 15), div_value=2
    ).eval()
    outputs = torch.randn(3, 2, 12)  # T != B != H
    expected = adaptive_log_probs(model.decoder, outputs.reshape(6, 12)).view(3, 2, 30)
    with torch.no_grad():
        decoded = model.decode(outputs)
    assert decoded.shape == (3, 2, 30)
    torch.testing.assert_close(decoded.double(), expected, atol=1e-5, rtol=1e-5)
    targets = torch.tensor([[0, 7], [16, 29], [4, 14]])  # the head and both tails
    with torch.no_grad():
        nll = model.token_nll(outputs, targets)
    assert nll.shape == (3, 2)
    want = -expected.gather(-1, targets[..., None])[..., 0]
    torch.testing.assert_close(nll.double(), want, atol=1e-5, rtol=1e-5)
    assert (nll > 0).all()


def test_spectral_solver_sends_small_cuda_stacks_to_the_host() -> None:
    """The rule of :func:`spectral_solver`, read on stand-ins for CUDA tensors (only
    ``is_cuda``, ``shape`` and ``device`` are read), so it is checked on any machine."""
    from types import SimpleNamespace

    from stablernn_lib.tasks.wikitext2.model import SMALL_MATRIX, spectral_solver

    cuda = torch.device("cuda", 0)

    def solver(*shape: int) -> tuple[torch.device, str]:
        return spectral_solver(SimpleNamespace(is_cuda=True, shape=shape, device=cuda))

    assert SMALL_MATRIX == 1024
    assert solver(2, 200, 200) == (torch.device("cpu"), "eigh")
    assert solver(3000, 1024, 1024) == (torch.device("cpu"), "eigh")  # many layers: still small
    assert solver(2, 1025, 200) == (cuda, "svd")
    assert solver(2, 200, 1025) == (cuda, "svd")
    assert spectral_solver(torch.zeros(2, 3, 3)) == (torch.device("cpu"), "svd")


def test_truncated_outputs_rejects_rows_outside_the_source() -> None:
    model = tiny("rnn")
    source = torch.randint(30, (12, 3))
    with pytest.raises(ValueError, match="the context k must be >= 1, got 0"):
        truncated_outputs(model, source, 0, 5, 0)
    for start, length, rows in [
        (-1, 2, "-1..0"),
        (10, 5, "10..14"),
        (3, 0, "3..2"),
        (12, 1, "12..12"),
    ]:
        with pytest.raises(ValueError, match=rf"rows {rows} are outside a source of 12 rows"):
            truncated_outputs(model, source, start, length, 3)
    # the last row alone, and every row up to the end, are inside
    assert truncated_outputs(model, source, 11, 1, 3).shape == (1, 3, 8)
    assert truncated_outputs(model, source, 2, 10, 3).shape == (10, 3, 8)


def test_truncated_outputs_of_piano_roll_frames() -> None:
    """Sources with a feature axis ``(N, B, 88)`` (the music task) keep it in the windows."""
    from stablernn_lib.tasks.jsb.train import MusicModel

    torch.manual_seed(0)
    model = MusicModel("rnn", hidden_size=5).eval()
    source = (torch.rand(9, 2, 88) < 0.2).float()
    k = 3
    fast = truncated_outputs(model, source, 0, 9, k, max_window_tokens=4)
    assert fast.shape == (9, 2, 5)
    for t in range(9):
        outputs, _ = model.recur(model.embed(source[max(0, t - k + 1) : t + 1]))
        torch.testing.assert_close(fast[t], outputs[-1], atol=1e-6, rtol=1e-5)


def test_perplexity_is_exp_of_the_loss_and_inf_past_700() -> None:
    from stablernn_lib.tasks.wikitext2.model import perplexity

    assert perplexity(math.log(20.0)) == pytest.approx(20.0, rel=1e-12)
    assert perplexity(0.0) == 1.0
    assert perplexity(699.0) == pytest.approx(math.exp(699.0), rel=1e-12)
    for loss in (700.0, 700.5, 800.0, math.inf, math.nan):
        assert perplexity(loss) == math.inf


def test_truncated_outputs_runs_at_most_max_window_tokens_at_once() -> None:
    model = tiny("rnn")
    source = torch.randint(30, (12, 2))
    calls: list[tuple[int, ...]] = []
    run = model.recur

    def recording(inputs: torch.Tensor, state: object = None) -> tuple:
        calls.append(tuple(inputs.shape))
        return run(inputs, state)

    model.recur = recording  # type: ignore[method-assign]
    for cap, windows_per_call in [(5, 1), (4, 1), (9, 2), (1, 1)]:
        calls.clear()
        expected = truncated_outputs(tiny("rnn"), source, 4, 8, 4)
        got = truncated_outputs(model, source, 4, 8, 4, max_window_tokens=cap)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
        # 8 rows x 2 columns = 16 windows of k = 4 tokens, no prefix run (start >= k - 1)
        assert calls == [(4, windows_per_call, 6)] * (16 // windows_per_call)
