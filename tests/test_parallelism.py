"""Chapter 3: timing the truncated model, and the input-influence figure."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

from stablernn_lib.core.models import random_vanilla_rnn
from stablernn_lib.core.truncation import truncated_states
from stablernn_lib.figures import feedforward, parallelism

matplotlib.use("Agg")


def test_parallel_truncated_states_equal_the_sequential_run(generator):
    model = random_vanilla_rnn(3, 6, 0.9, generator=generator)
    inputs = torch.randn(20, 2, 3, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(truncated_states(model, inputs, 20), model.run(inputs))
    # with k < T, h^k_t is the last state of a run on the window of the k latest inputs
    k = 4
    parallel = truncated_states(model, inputs, k)
    for t in (0, 3, 4, 11, 19):
        window = inputs[max(0, t - k + 1) : t + 1]
        torch.testing.assert_close(parallel[t], model.run(window)[-1])


def test_timing_rows_are_sane():
    rows = parallelism.time_truncated_evaluation(
        [8, 32], 4, hidden_size=8, batch=2, repeats=1, per_window_max_length=8
    )
    assert [row["T"] for row in rows] == [8, 32]
    for row in rows:
        assert row["device"] == "cpu" and row["k"] == 4
        assert row["sequential_s"] > 0 and row["parallel_s"] > 0
        assert row["sequential_over_parallel"] == pytest.approx(
            row["sequential_s"] / row["parallel_s"]
        )
        assert row["fused_s"] > 0
        assert row["sequential_over_fused"] == pytest.approx(row["sequential_s"] / row["fused_s"])
    assert rows[0]["per_window_s"] > 0 and rows[0]["max_difference"] < 1e-5
    assert rows[1]["per_window_s"] is None and rows[1]["per_window_over_parallel"] is None
    table = parallelism.timings_table(rows)
    assert len(table.splitlines()) == 4 and "| seq/par |" in table and "| seq/fused |" in table
    assert table.splitlines()[3].count("| – |") == 2  # no per-window run at the longer T
    assert parallelism.timing_figure(rows).axes


def test_timing_rejects_bad_arguments():
    with pytest.raises(ValueError, match="positive"):
        parallelism.time_truncated_evaluation([0, 8], 4)
    with pytest.raises(ValueError, match="repeats"):
        parallelism.best_time(lambda: None, 0, torch.device("cpu"))


def test_best_time_measures_the_call():
    calls = []
    seconds = parallelism.best_time(lambda: calls.append(1), 3, torch.device("cpu"))
    # one warm-up call plus three timed ones; the time itself is a measurement, not a test
    assert len(calls) == 4 and 0 <= seconds < math.inf


def test_truncated_model_ignores_inputs_older_than_k():
    k = 5
    recurrent = feedforward.input_influence(0.9, None, steps=15)
    truncated = feedforward.input_influence(0.9, k, steps=15)
    assert recurrent.shape == truncated.shape == (15,)
    assert torch.all(truncated[k:] == 0) and torch.all(truncated[:k] > 0)
    assert torch.all(recurrent[k:] > 0)
    # the newest input enters both, through states that differ by at most lam^k-ish terms
    assert truncated[0] == pytest.approx(float(recurrent[0]), rel=0.1)


def test_influence_widget_renders():
    widget = feedforward.influence_widget(ks=(2, 5), lams=(0.5,))
    assert widget.num_frames in (0, 2)


def test_three_gradients_agree_without_truncation_and_split_with_it(generator):
    model = random_vanilla_rnn(2, 5, 0.8, generator=generator)
    inputs = torch.randn(15, 3, 2, generator=generator, dtype=torch.float64)
    target = torch.randn(3, 5, generator=generator, dtype=torch.float64)
    whole = feedforward.last_step_gradients(model, inputs, target, 15)
    for name in ("truncated_bptt", "truncated_model"):
        assert feedforward.gradient_gap(whole["full"], whole[name]) < 1e-12
    # against autograd on the full loss
    loss = 0.5 * ((model.run(inputs)[-1] - target) ** 2).sum()
    loss.backward()
    torch.testing.assert_close(whole["full"]["weight_hh"], model.weight_hh.grad)
    gaps = []
    for k in (3, 6, 12):
        g = feedforward.last_step_gradients(model, inputs, target, k)
        gaps.append(feedforward.gradient_gap(g["full"], g["truncated_model"]))
        assert feedforward.gradient_gap(g["truncated_bptt"], g["truncated_model"]) > 0
    assert gaps[0] > gaps[1] > gaps[2]  # a contraction forgets: gaps shrink with k
    with pytest.raises(ValueError, match="context k"):
        feedforward.last_step_gradients(model, inputs, target, 16)


def test_truncated_bptt_and_truncated_model_differ_by_the_carried_state(generator):
    model = random_vanilla_rnn(2, 4, 0.9, activation="identity", generator=generator)
    inputs = torch.randn(10, 1, 2, generator=generator, dtype=torch.float64)
    k = 4
    carried = model.run(inputs[:-k])[-1]
    full_last = model.run(inputs)[-1]
    truncated_last = truncated_states(model, inputs, k)[-1]
    W = model.weight_hh.detach()
    expected = carried @ torch.linalg.matrix_power(W, k).T  # W^k h_{T-k}
    torch.testing.assert_close(full_last - truncated_last, expected)


def test_receptive_fields():
    assert feedforward.dilated_receptive_field(2, [1, 2, 4, 8]) == 16
    assert feedforward.dilated_receptive_field(3, [1, 1, 1]) == 7
    K, L, field = feedforward.symbolic_doubling_receptive_field()
    for kernel in (2, 3, 5):
        for layers in (1, 4, 10):
            dilations = [2**i for i in range(layers)]
            assert field.subs({K: kernel, L: layers}) == feedforward.dilated_receptive_field(
                kernel, dilations
            )
    with pytest.raises(ValueError, match="positive"):
        feedforward.dilated_receptive_field(0, [1])


def test_summary_reports_measured_ratios():
    rows = [
        {
            "device": "cpu",
            "T": 8,
            "k": 4,
            "sequential_s": 0.002,
            "parallel_s": 0.001,
            "per_window_s": 0.01,
            "fused_s": 0.001,
            "sequential_over_parallel": 2.0,
            "sequential_over_fused": 2.0,
            "per_window_over_parallel": 10.0,
            "max_difference": 0.0,
        },
        {
            "device": "cpu",
            "T": 64,
            "k": 4,
            "sequential_s": 0.004,
            "parallel_s": 0.008,
            "per_window_s": None,
            "fused_s": 0.001,
            "sequential_over_parallel": 0.5,
            "sequential_over_fused": 4.0,
            "per_window_over_parallel": None,
            "max_difference": None,
        },
    ]
    summary = parallelism.summarize_timings(rows)
    assert "T = 64" in summary and "2.0 times slower" in summary
    assert "10 times as long" in summary
    assert "4.0 times the fused kernel" in summary


def test_dilated_tree_reaches_exactly_the_window():
    for k, length in ((4, 10), (8, 16), (16, 16)):
        dilations = [2**i for i in range(k.bit_length() - 1)]
        tree = feedforward._dilated_tree(length, dilations)
        assert len(tree) == len(dilations)
        assert {source for source, _ in tree[0]} == set(range(length - k, length))
        assert {target for _, target in tree[-1]} == {length - 1}
    assert feedforward.context_diagram_figure(k=4, length=8).axes
    with pytest.raises(ValueError, match="power of two"):
        feedforward.context_diagram_figure(k=6)
