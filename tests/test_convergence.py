"""The reading of the LSTM pair trained until the decay is used up (``cpu-converged``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from chapter8_text import chapter8_numbers, chapter8_prose

from stablernn_lib.tasks.wikitext2 import results
from stablernn_lib.tasks.wikitext2.results import PAIR, load_seed_results


def _run(val_ppl: list[float], rates: list[float], test_ppl: float, stop: float | None = None):
    """A result file's fields for a run with these validation perplexities and rates."""
    epochs = [
        {"epoch": i + 1, "val_ppl": p, "val_loss": math.log(p), "lr": lr}
        for i, (p, lr) in enumerate(zip(val_ppl, rates, strict=True))
    ]
    early = None
    if stop is not None:
        early = {"after_epoch": len(epochs), "lr": rates[-1] / 4, "stop_below_lr": stop}
    return {
        "config": {"epochs": 40, "lr": 5.0},
        "epochs": epochs,
        "best_val_ppl": min(val_ppl),
        "test_ppl": test_ppl,
        "stopped_early": early,
    }


FREE = _run([300, 200, 150, 149, 151, 148, 150], [5, 5, 5, 5, 5, 1.25, 1.25], 140.0, stop=0.5)
STABLE = _run([330, 260, 240, 230, 231, 225], [5, 5, 5, 5, 5, 1.25], 210.0)


def test_cuts_count_the_rate_changes_between_trained_epochs() -> None:
    assert results.learning_rate_cuts(FREE) == 1
    assert results.learning_rate_cuts(_run([3, 2], [1, 1], 1.0)) == 0


def test_gaps_at_equal_epochs_before_a_cut_and_at_the_last_common_epoch() -> None:
    runs = {"lstm-unconstrained": FREE, "lstm-stable": STABLE}
    # epoch 5 is the last before either cut; epoch 6 the last both ran (stable's last)
    equal = results.equal_epoch_gaps(runs)["lstm"]
    assert equal["uncut"]["epoch"] == 5 and equal["uncut"]["gap"] == pytest.approx(231 / 151 - 1)
    assert equal["last"]["epoch"] == 6 and equal["last"]["gap"] == pytest.approx(225 / 148 - 1)
    assert results.equal_epoch_gaps({"lstm-stable": STABLE}) == {}


def test_first_epochs_agreement_is_the_largest_relative_difference() -> None:
    six = load_seed_results("cpu")["lstm-stable"][1111]["epochs"]
    moved = [{**row, "val_ppl": row["val_ppl"] * (1.002 if row["epoch"] == 3 else 1.0)}
             for row in six]  # fmt: skip
    run = {"epochs": [*moved, {"epoch": 7, "val_ppl": 1.0}]}  # epoch 7 has no 6-epoch twin
    assert results.first_epochs_agreement("lstm-stable", run) == pytest.approx(0.002)


def test_the_figure_draws_both_curves_the_gap_and_the_six_epoch_mark() -> None:
    from stablernn_lib.figures.wikitext2 import plot_convergence

    figure = plot_convergence({"lstm-unconstrained": FREE, "lstm-stable": STABLE})
    curves, gaps = figure.axes
    assert [len(line.get_xdata()) for line in curves.lines[:2]] == [7, 6]
    pairs = zip([330, 260, 240, 230, 231, 225], [300, 200, 150, 149, 151, 148], strict=True)
    assert list(gaps.lines[0].get_ydata()) == pytest.approx([100 * (s / f - 1) for s, f in pairs])
    assert all(6 in line.get_xdata() for line in (curves.lines[-1], gaps.lines[-1]))


def test_the_six_epoch_lstms_were_still_improving() -> None:
    """Why the converged pair was trained: every 6-epoch LSTM run still improved at epoch 6."""
    drops = [
        100 * (1 - run["epochs"][5]["val_ppl"] / run["epochs"][4]["val_ppl"])
        for name in PAIR
        for run in load_seed_results("cpu")[name].values()
    ]
    assert len(drops) == 6 and min(drops) > 0
    assert "Six epochs stop both LSTMs while they are still improving" in chapter8_prose()


def test_converged_table_sets_each_converged_model_beside_its_six_epoch_run(tmp_path, monkeypatch):
    from stablernn_lib.tasks.wikitext2.train import results_folder

    for name, run in (("lstm-unconstrained", FREE), ("lstm-stable", STABLE)):
        (tmp_path / f"{name}.json").write_text(json.dumps({**run, "seed": 1111}))
    curve = {"k": [1, 5, 10], "ppl": [300.0, 151.0, 150.5], "recurrent_ppl": 150.0}
    analysis = {"lstm-stable": {"truncated_eval": curve, "jacobian_norms": [[0.5, 0.7, 0.9]] * 2}}
    (tmp_path / "analysis.json").write_text(json.dumps(analysis))
    real = results_folder
    monkeypatch.setattr(
        results, "results_folder", lambda c: tmp_path if c == results.CONVERGED else real(c)
    )
    rows = results.converged_table().splitlines()
    six = load_seed_results("cpu")
    free6, stable6 = (six[name][1111]["test_ppl"] for name in PAIR)
    assert rows[2].startswith(f"| unconstrained, 6 epochs | {free6:.1f} | — |")  # the reference
    assert rows[3].startswith(
        f"| stable, 6 epochs | {stable6:.1f} | {100 * (stable6 / free6 - 1):+.1f}% |"
    )
    assert rows[4] == (
        "| unconstrained, until the decay is used up (7 epochs) | 140.0 | — "
        "| not measured | not measured |"
    )
    assert rows[5] == (
        "| stable, until the decay is used up (6 epochs) | 210.0 | +50.0% | 5 | 0.70 / 0.70 |"
    )


def _commit_unfinished(folder: Path, name: str, run: dict) -> None:
    """Write ``run``'s epochs as the committed metrics of an unfinished run."""
    (folder / "unfinished").mkdir(exist_ok=True)
    lines = [json.dumps(row) for row in run["epochs"]]
    (folder / "unfinished" / f"{name}.metrics.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def converged_folder(tmp_path, monkeypatch) -> Path:
    """An empty results folder standing in for ``cpu-converged``'s."""
    real = results.results_folder
    monkeypatch.setattr(
        results, "results_folder", lambda c: tmp_path if c == results.CONVERGED else real(c)
    )
    return tmp_path


def test_an_unfinished_run_is_read_from_its_committed_metrics_and_never_judged(
    converged_folder,
) -> None:
    (converged_folder / "lstm-unconstrained.json").write_text(
        json.dumps({**FREE, "seed": 1111, "status": "completed"})
    )
    _commit_unfinished(converged_folder, "lstm-stable", STABLE)
    runs = results.load_converged()
    assert "unfinished" not in runs["lstm-unconstrained"]
    stable = runs["lstm-stable"]
    assert stable["unfinished"] and [r["val_ppl"] for r in stable["epochs"]] == [
        330,
        260,
        240,
        230,
        231,
        225,
    ]
    assert "test_ppl" not in stable and results.learning_rate_cuts(stable) == 1
    table = results.converged_table().splitlines()
    assert (
        table[5] == "| stable, until the decay is used up (unfinished, 6 epochs so far) "
        "| no result yet |  |  |  |"
    )


def test_no_gap_is_read_while_both_runs_are_unfinished(converged_folder):
    for name, run in (("lstm-unconstrained", FREE), ("lstm-stable", STABLE)):
        _commit_unfinished(converged_folder, name, run)
    runs = results.load_converged()
    assert all(run["unfinished"] for run in runs.values()) and len(runs) == 2
    assert all("test_ppl" not in run for run in runs.values())


def test_the_ablation_table_says_how_far_an_unfinished_row_got(converged_folder) -> None:
    _commit_unfinished(converged_folder, "lstm-stable", STABLE)
    table, _ = results.ablation_table()
    row = next(line for line in table.splitlines() if "every layer, until the decay" in line)
    assert "| unfinished (6 of at most 40 epochs so far) |" in row
    readings = results.ablation_readings()  # an unfinished row is not read
    assert readings and all(r.config != results.CONVERGED for r in readings)


def test_metrics_out_of_epoch_order_are_refused(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"epoch": 1}\n{"epoch": 3}\n')
    with pytest.raises(ValueError, match="not 1, 2, ... in order"):
        results.read_metrics(path)


def test_chapter8_reads_the_epochs_the_converged_pair_trained_at_the_same_rate() -> None:
    runs = results.load_converged()  # finished result files, or the committed metrics
    free, stable = (runs[name]["epochs"] for name in PAIR)
    both = range(1, min(len(free), len(stable)) + 1)
    same_rate = [e for e in both if free[e - 1]["lr"] == stable[e - 1]["lr"] == 5.0]
    assert same_rate == list(range(1, 13))  # the unconstrained rate was cut after epoch 12
    numbers = chapter8_numbers()
    assert numbers["conv_uncut_epoch"] == 12
    gap = 100 * (stable[11]["val_ppl"] / free[11]["val_ppl"] - 1)
    assert numbers["conv_uncut_gap"] == pytest.approx(gap)
    prose = chapter8_prose()
    assert "{glue:text}`conv_uncut_gap:+.1f`% after epoch {glue:text}`conv_uncut_epoch`" in prose


def test_chapter8_states_how_far_the_converged_runs_drift_from_the_six_epoch_runs() -> None:
    runs = results.load_converged()
    short = load_seed_results("cpu")
    values = [run["test_ppl"] for run in short[PAIR[0]].values()]
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    numbers = chapter8_numbers()
    for key, name in (("conv_free", PAIR[0]), ("conv_stable", PAIR[1])):
        ran, six = runs[name]["epochs"], short[name][1111]["epochs"]
        worst = max(abs(a["val_ppl"] / b["val_ppl"] - 1) for a, b in zip(ran, six, strict=False))
        assert numbers[f"{key}_drift"] == pytest.approx(100 * worst)
        assert f"{{glue:text}}`{key}_drift:.2f`%" in chapter8_prose()
    assert numbers["conv_free_drift"] / 100 < 2 * sd / mean  # about the seed spread


def test_chapter8_reads_the_finished_unconstrained_converged_lstm() -> None:
    import torch

    from stablernn_lib.tasks.wikitext2.results import load_full_results, smallest_k_within
    from stablernn_lib.tasks.wikitext2.train import results_folder

    free = results.load_converged()[PAIR[0]]
    assert "unfinished" not in free and free["stopped_early"]["after_epoch"] == 26
    assert results.learning_rate_cuts(free) + 1 == 4  # the stop follows the fourth cut
    six = [run["test_ppl"] for run in load_seed_results("cpu")[PAIR[0]].values()]
    mean = sum(six) / len(six)
    sd = math.sqrt(sum((v - mean) ** 2 for v in six) / (len(six) - 1))
    analysis = {
        config: load_full_results(results_folder(config))["analysis"][PAIR[0]]
        for config in ("cpu", results.CONVERGED)
    }
    curve = analysis[results.CONVERGED]["truncated_eval"]
    assert smallest_k_within(curve) is None and curve["k"][-1] == 100
    medians = {c: [float(torch.tensor(n).median()) for n in a["jacobian_norms"]]
               for c, a in analysis.items()}  # fmt: skip
    numbers = chapter8_numbers()
    assert numbers["conv_free_epochs"] == 26 and numbers["conv_free_cuts"] == 4
    assert numbers["conv_free_ppl"] == pytest.approx(free["test_ppl"])
    assert numbers["conv_free_change"] == pytest.approx(100 * (free["test_ppl"] / mean - 1))
    assert numbers["conv_free_limit"] == pytest.approx(5 * sd)
    assert abs(free["test_ppl"] - mean) > 5 * sd  # "far beyond the single-seed rule's 5 sd"
    assert numbers["conv_free_k"] == "none up to 100"
    at_100 = 100 * (curve["ppl"][-1] / curve["recurrent_ppl"] - 1)
    assert numbers["conv_free_k100_excess"] == pytest.approx(at_100)
    (a, b), (c, d) = medians["cpu"], medians[results.CONVERGED]
    assert [numbers[f"conv_free_short_jac_l{i}"] for i in (1, 2)] == pytest.approx([a, b])
    assert [numbers[f"conv_free_jac_l{i}"] for i in (1, 2)] == pytest.approx([c, d])
    assert c > a and d > b  # "rose": further from contraction
    prose = chapter8_prose()
    for key in ("conv_free_change:.1f", "conv_free_k100_excess:.1f", "conv_free_jac_l1:.2f"):
        assert f"{{glue:text}}`{key}`" in prose


def test_chapter8_reads_the_finished_converged_pair() -> None:
    runs = results.load_converged()
    free, stable = (runs[name] for name in PAIR)
    assert not free.get("unfinished") and not stable.get("unfinished")
    assert stable["stopped_early"]["after_epoch"] == 29
    short = load_seed_results("cpu")
    six_free, six_stable = (short[name] for name in PAIR)
    gap = stable["test_ppl"] / free["test_ppl"] - 1
    same = six_stable[1111]["test_ppl"] / six_free[1111]["test_ppl"] - 1
    seed_gaps = [six_stable[s]["test_ppl"] / six_free[s]["test_ppl"] - 1 for s in six_free]
    assert gap > max(seed_gaps)  # not smaller than after 6 epochs: "does not close the gap"
    numbers = chapter8_numbers()
    assert numbers["conv_gap"] == pytest.approx(100 * gap)
    assert numbers["conv_gap_same_seed_short"] == pytest.approx(100 * same)
    assert numbers["conv_stable_ppl"] == pytest.approx(stable["test_ppl"])
    assert numbers["conv_stable_epochs"] == len(stable["epochs"]) == 29
    prose = chapter8_prose()
    assert prose.count("{glue:text}`conv_gap:+.1f`%") >= 2  # the lesson and the evidence page


def test_chapter8_reads_the_finished_stable_converged_lstm() -> None:
    from stablernn_lib.tasks.wikitext2.results import load_full_results, smallest_k_within
    from stablernn_lib.tasks.wikitext2.train import results_folder

    name = PAIR[1]
    analysis = load_full_results(results_folder(results.CONVERGED))["analysis"][name]
    largest = max(max(layer) for layer in analysis["jacobian_norms"])
    assert largest < 1  # the certificate holds where measured
    numbers = chapter8_numbers()
    assert numbers["conv_stable_k"] == smallest_k_within(analysis["truncated_eval"]) == 13
    assert numbers["conv_stable_worst_jac"] == pytest.approx(largest)
    prose = chapter8_prose()
    assert (
        "{glue:text}`conv_stable_k`" in prose and "{glue:text}`conv_stable_worst_jac:.2f`" in prose
    )
