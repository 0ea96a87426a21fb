"""Chapter 3: timing the truncated model, and the input-influence figure."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from stablernn_lib import figures_feedforward, parallelism
from stablernn_lib.models import random_vanilla_rnn
from stablernn_lib.truncation import truncated_states

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
    assert rows[0]["per_window_s"] > 0 and rows[0]["max_difference"] < 1e-5
    assert rows[1]["per_window_s"] is None and rows[1]["per_window_over_parallel"] is None
    table = parallelism.format_timings(rows)
    assert len(table.splitlines()) == 3 and "seq/par" in table
    assert parallelism.timing_figure(rows).axes


def test_timing_rejects_bad_arguments():
    with pytest.raises(ValueError, match="positive"):
        parallelism.time_truncated_evaluation([0, 8], 4)
    with pytest.raises(ValueError, match="repeats"):
        parallelism.best_time(lambda: None, 0, torch.device("cpu"))


def test_best_time_measures_the_call():
    calls = []
    seconds = parallelism.best_time(lambda: calls.append(1), 3, torch.device("cpu"))
    assert len(calls) == 4 and 0 <= seconds < 0.1  # one warm-up call plus three timed ones


def test_truncated_model_ignores_inputs_older_than_k():
    k = 5
    recurrent = figures_feedforward.input_influence(0.9, None, steps=15)
    truncated = figures_feedforward.input_influence(0.9, k, steps=15)
    assert recurrent.shape == truncated.shape == (15,)
    assert torch.all(truncated[k:] == 0) and torch.all(truncated[:k] > 0)
    assert torch.all(recurrent[k:] > 0)
    torch.testing.assert_close(truncated[0], recurrent[0])  # the newest input enters alike


def test_influence_widget_renders():
    widget = figures_feedforward.influence_widget(ks=(2, 5), lams=(0.5,))
    assert widget.num_frames in (0, 2)
