"""The reading of the LSTM pair trained until the decay is used up (``cpu-converged``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stablernn_lib.tasks.wikitext2 import convergence
from stablernn_lib.tasks.wikitext2.findings import load_seed_results


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


def test_best_epoch_is_the_first_lowest_validation_loss() -> None:
    assert convergence.best_epoch(FREE) == 6
    assert convergence.best_epoch(_run([3, 2, 2, 5], [1, 1, 1, 1], 1.0)) == 2


def test_cuts_count_the_rate_changes_between_trained_epochs() -> None:
    assert convergence.learning_rate_cuts(FREE) == 1
    assert convergence.learning_rate_cuts(_run([3, 2], [1, 1], 1.0)) == 0


def test_extent_says_why_a_run_ended_and_counts_the_cut_before_an_early_stop() -> None:
    text = convergence.extent_sentence("lstm-unconstrained", FREE)
    assert text.startswith("LSTM, unconstrained: 7 of at most 40 epochs;")
    assert "stopped at the start of epoch 8" in text and "twice, to 0.3125, below 0.5" in text
    assert "best validation perplexity 148.0 at epoch 6; test perplexity 140.0." in text
    text = convergence.extent_sentence("lstm-stable", STABLE)
    assert "it ran every epoch, its learning rate cut once (to 1.25)" in text


def test_gaps_at_convergence_after_six_epochs_and_at_equal_epochs() -> None:
    short = load_seed_results("cpu")
    free6, stable6 = (short[name] for name in convergence.PAIR)
    gap_same = stable6[1111]["test_ppl"] / free6[1111]["test_ppl"] - 1
    mean = [sum(r["test_ppl"] for r in runs.values()) / len(runs) for runs in (free6, stable6)]
    first, equal = convergence.gap_sentences({"lstm-unconstrained": FREE, "lstm-stable": STABLE})
    assert first.startswith("The course constraint costs +50.0% in test perplexity")
    assert f"{gap_same:+.1%} after 6 epochs with the same seed" in first
    assert f"{mean[1] / mean[0] - 1:+.1%} over the 6-epoch seeds" in first
    assert "not a verdict" in first
    # epoch 5 is the last before either cut; epoch 6 the last both ran (stable's last)
    assert f"{231 / 151 - 1:+.1%} after epoch 5, the last before" in equal
    assert f"{225 / 148 - 1:+.1%} after epoch 6, the last both ran" in equal
    assert convergence.gap_sentences({"lstm-stable": STABLE}) == [
        "The pair has not finished yet: no gap at convergence."
    ]


@pytest.mark.parametrize("name", convergence.PAIR)
def test_a_converged_model_is_read_against_the_six_epoch_seeds(name: str) -> None:
    six = load_seed_results("cpu")[name]
    values = [run["test_ppl"] for run in six.values()]
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    far = convergence.against_short_sentence(name, {**FREE, "test_ppl": mean - 5 * sd - 0.5})
    assert f"beyond 5 sd of those seeds ({5 * sd:.1f}): readable from one seed" in far
    assert f"against {six[1111]['test_ppl']:.1f} with the same seed" in far
    near = convergence.against_short_sentence(name, {**FREE, "test_ppl": mean + 5 * sd - 0.5})
    assert "within 5 sd" in near and "not readable from one seed" in near


def test_first_epochs_agreement_is_the_largest_relative_difference() -> None:
    six = load_seed_results("cpu")["lstm-stable"][1111]["epochs"]
    moved = [{**row, "val_ppl": row["val_ppl"] * (1.002 if row["epoch"] == 3 else 1.0)}
             for row in six]  # fmt: skip
    run = {"epochs": [*moved, {"epoch": 7, "val_ppl": 1.0}]}  # epoch 7 has no 6-epoch twin
    assert convergence.first_epochs_agreement("lstm-stable", run) == pytest.approx(0.002)


def test_the_figure_draws_both_curves_the_gap_and_the_six_epoch_mark() -> None:
    figure = convergence.plot_convergence({"lstm-unconstrained": FREE, "lstm-stable": STABLE})
    curves, gaps = figure.axes
    assert [len(line.get_xdata()) for line in curves.lines[:2]] == [7, 6]
    pairs = zip([330, 260, 240, 230, 231, 225], [300, 200, 150, 149, 151, 148], strict=True)
    assert list(gaps.lines[0].get_ydata()) == pytest.approx([100 * (s / f - 1) for s, f in pairs])
    assert all(6 in line.get_xdata() for line in (curves.lines[-1], gaps.lines[-1]))


def _chapter8_prose() -> str:
    path = Path(__file__).resolve().parents[1] / "chapters" / "08_wikitext2_experiments.ipynb"
    cells = json.loads(path.read_text(encoding="utf8"))["cells"]
    return " ".join(
        " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown").split()
    )


def test_chapter8_says_how_much_the_six_epoch_lstms_still_improved() -> None:
    drops = [
        100 * (1 - run["epochs"][5]["val_ppl"] / run["epochs"][4]["val_ppl"])
        for name in convergence.PAIR
        for run in load_seed_results("cpu")[name].values()
    ]
    assert len(drops) == 6 and min(drops) > 0  # every run still improving at epoch 6
    assert f"fell, by {min(drops):.1f} to {max(drops):.1f}% (three seeds of each model)" in (
        _chapter8_prose()
    )


def test_models_table_sets_each_converged_model_beside_its_six_epoch_run(tmp_path, monkeypatch):
    from stablernn_lib.tasks.wikitext2.train import results_folder

    for name, run in (("lstm-unconstrained", FREE), ("lstm-stable", STABLE)):
        (tmp_path / f"{name}.json").write_text(json.dumps({**run, "seed": 1111}))
    curve = {"k": [1, 5, 10], "ppl": [300.0, 151.0, 150.5], "recurrent_ppl": 150.0}
    analysis = {"lstm-stable": {"truncated_eval": curve, "jacobian_norms": [[0.5, 0.7, 0.9]] * 2}}
    (tmp_path / "analysis.json").write_text(json.dumps(analysis))
    real = results_folder
    monkeypatch.setattr(
        convergence, "results_folder", lambda c: tmp_path if c == convergence.CONFIG else real(c)
    )
    rows = convergence.models_table().splitlines()
    six = load_seed_results("cpu")
    free6, stable6 = (six[name][1111]["test_ppl"] for name in convergence.PAIR)
    assert rows[2].startswith(f"| unconstrained, 6 epochs | {free6:.1f} | +0.0% |")
    assert rows[3].startswith(
        f"| stable, 6 epochs | {stable6:.1f} | {100 * (stable6 / free6 - 1):+.1f}% |"
    )
    assert rows[4] == (
        "| unconstrained, until the decay is used up (7 epochs) | 140.0 | +0.0% "
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
    from stablernn_lib.tasks.wikitext2 import findings

    real = findings.results_folder
    for module in (findings, convergence):
        monkeypatch.setattr(
            module, "results_folder", lambda c: tmp_path if c == convergence.CONFIG else real(c)
        )
    return tmp_path


def test_an_unfinished_run_is_read_from_its_committed_metrics_and_never_judged(
    converged_folder,
) -> None:
    (converged_folder / "lstm-unconstrained.json").write_text(
        json.dumps({**FREE, "seed": 1111, "status": "completed"})
    )
    _commit_unfinished(converged_folder, "lstm-stable", STABLE)
    runs = convergence.load_converged()
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
    assert convergence.extent_sentence("lstm-stable", stable) == (
        "LSTM, stable: unfinished, 6 of at most 40 epochs so far, its learning rate cut once "
        "(now 1.25); best validation perplexity 225.0 at epoch 6; no test perplexity before "
        "it ends."
    )
    assert "not yet read" in convergence.against_short_sentence("lstm-stable", stable)
    first, distance, equal = convergence.gap_sentences(runs)
    assert first.startswith("Not finished yet (LSTM, stable): no gap in test perplexity")
    # 5% above the unconstrained best 148 is 155.4, 30.9% below the stable best 225; the
    # unconstrained best before its cut (epochs 1-5 at lr 5) was 149, after it 148
    assert f"to fall to 155.4, {1 - 155.4 / 225:.1%} below its best so far" in distance
    assert f"lowered its own best by {1 - 148 / 149:.1%} (from 149.0," in distance
    assert "after 5 epochs" in distance
    # the unconstrained model is final (148), the stable best so far 225 can only fall
    assert f"will be at most {225 / 148 - 1:+.1%}" in first
    assert f"{225 / 148 - 1:+.1%} after epoch 6, the last both ran" in equal
    table = convergence.models_table().splitlines()
    assert (
        table[5] == "| stable, until the decay is used up (unfinished, 6 epochs so far) "
        "| no result yet | | | |"
    )


def test_no_bound_is_claimed_while_the_unconstrained_run_is_unfinished(converged_folder):
    for name, run in (("lstm-unconstrained", FREE), ("lstm-stable", STABLE)):
        _commit_unfinished(converged_folder, name, run)
    first, _ = convergence.gap_sentences(convergence.load_converged())
    assert "(LSTM, unconstrained and LSTM, stable)" in first and "at most" not in first


def test_the_ablation_table_says_how_far_an_unfinished_row_got(converged_folder) -> None:
    from stablernn_lib.tasks.wikitext2 import findings

    _commit_unfinished(converged_folder, "lstm-stable", STABLE)
    table, _ = findings.ablation_table()
    row = next(line for line in table.splitlines() if "every layer, until the decay" in line)
    assert "| unfinished (6 of at most 40 epochs so far) |" in row
    assert any(
        s.endswith(
            "unfinished (6 of at most 40 epochs so far) (python -m stablernn_lib train "
            "--model lstm --stable --config cpu-converged --resume)."
        )
        for s in findings.ablation_findings()
    )


def test_metrics_out_of_epoch_order_are_refused(tmp_path) -> None:
    from stablernn_lib.tasks.wikitext2.partial_runs import read_metrics

    path = tmp_path / "m.jsonl"
    path.write_text('{"epoch": 1}\n{"epoch": 3}\n')
    with pytest.raises(ValueError, match="not 1, 2, ... in order"):
        read_metrics(path)


def test_chapter8_reads_the_epochs_the_converged_pair_trained_at_the_same_rate() -> None:
    runs = convergence.load_converged()  # finished result files, or the committed metrics
    free, stable = (runs[name]["epochs"] for name in convergence.PAIR)

    def gap(epoch: int) -> str:
        return f"{100 * (stable[epoch - 1]['val_ppl'] / free[epoch - 1]['val_ppl'] - 1):.1f}%"

    both = range(1, min(len(free), len(stable)) + 1)
    same_rate = [e for e in both if free[e - 1]["lr"] == stable[e - 1]["lr"] == 5.0]
    assert same_rate == list(range(1, 13))  # the unconstrained rate was cut after epoch 12
    assert max(same_rate, key=lambda e: stable[e - 1]["val_ppl"] / free[e - 1]["val_ppl"]) == 10
    prose = _chapter8_prose()
    assert (
        f"{gap(6)} above the unconstrained one's after epoch 6, {gap(10)} after epoch 10 (the "
        f"largest gap of those epochs) and {gap(12)} after epoch 12" in prose
    )
    rose = f"rose for the first time ({free[10]['val_ppl']:.1f} to {free[11]['val_ppl']:.1f})"
    fell = 100 * (1 - free[12]["val_ppl"] / free[11]["val_ppl"])
    assert rose in prose and f"in the next epoch it fell by {fell:.1f}%." in prose
    assert all(free[e]["val_ppl"] < free[e - 1]["val_ppl"] for e in range(1, 11))
    assert free[12]["lr"] == 1.25 and stable[12]["lr"] == 5.0
    # the stable model: falling at lr 5 through epoch 17, rose in 18, then cut
    assert all(stable[e]["val_ppl"] < stable[e - 1]["val_ppl"] for e in range(12, 17))
    assert stable[17]["val_ppl"] > stable[16]["val_ppl"] and stable[17]["lr"] == 5.0
    assert stable[18]["lr"] == 1.25
    assert "five more epochs; its rate was cut only after it rose in epoch 18" in prose


def test_chapter8_states_how_far_the_converged_runs_drift_from_the_six_epoch_runs() -> None:
    runs = convergence.load_converged()
    short = load_seed_results("cpu")
    free, stable = (runs[name] for name in convergence.PAIR)
    first = free["epochs"][0]["val_ppl"] / short[convergence.PAIR[0]][1111]["epochs"][0]["val_ppl"]
    worst = convergence.first_epochs_agreement(convergence.PAIR[0], free)
    values = [run["test_ppl"] for run in short[convergence.PAIR[0]].values()]
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    prose = _chapter8_prose()
    same = convergence.first_epochs_agreement(convergence.PAIR[1], stable)
    assert (
        f"by {abs(first - 1):.2%} after the first epoch and by at most {worst:.2%}, while the "
        f"stable run's agree to {same:.2%}"
    ) in prose
    assert f"(test perplexity sd {sd:.1f}, {sd / mean:.1%} of its mean)" in prose
    assert worst < 2 * sd / mean  # about the seed spread, as the prose says


def test_chapter8_reads_the_finished_unconstrained_converged_lstm() -> None:
    import torch

    from stablernn_lib.tasks.wikitext2.findings import load_full_results, smallest_k_within
    from stablernn_lib.tasks.wikitext2.train import results_folder

    free = convergence.load_converged()[convergence.PAIR[0]]
    assert "unfinished" not in free and free["stopped_early"]["after_epoch"] == 26
    assert convergence.learning_rate_cuts(free) + 1 == 4  # the stop follows the fourth cut
    six = [run["test_ppl"] for run in load_seed_results("cpu")[convergence.PAIR[0]].values()]
    mean = sum(six) / len(six)
    sd = math.sqrt(sum((v - mean) ** 2 for v in six) / (len(six) - 1))
    drop = 1 - free["test_ppl"] / mean
    analysis = {
        config: load_full_results(results_folder(config))["analysis"][convergence.PAIR[0]]
        for config in ("cpu", convergence.CONFIG)
    }
    curve = analysis[convergence.CONFIG]["truncated_eval"]
    assert smallest_k_within(curve) is None and curve["k"][-1] == 100
    at_100 = curve["ppl"][-1] / curve["recurrent_ppl"] - 1
    medians = {c: [float(torch.tensor(n).median()) for n in a["jacobian_norms"]]
               for c, a in analysis.items()}  # fmt: skip
    prose = _chapter8_prose()
    assert (
        f"test perplexity {free['test_ppl']:.1f}: {drop:.1%} below the {mean:.1f} of its "
        f"6-epoch seeds, a change far beyond the single-seed rule's 5 sd ({5 * sd:.1f})"
    ) in prose
    assert f"(with 100 words it is {at_100:.1%} above)" in prose
    (a, b), (c, d) = medians["cpu"], medians[convergence.CONFIG]
    assert f"rose from {a:.2f} and {b:.2f} to {c:.2f} and {d:.2f} in its two layers" in prose
    assert c > a and d > b


def test_chapter8_reads_the_finished_converged_pair() -> None:
    runs = convergence.load_converged()
    free, stable = (runs[name] for name in convergence.PAIR)
    assert not free.get("unfinished") and not stable.get("unfinished")
    assert stable["stopped_early"]["after_epoch"] == 29
    short = load_seed_results("cpu")
    six_free, six_stable = (short[name] for name in convergence.PAIR)
    gap = stable["test_ppl"] / free["test_ppl"] - 1
    same = six_stable[1111]["test_ppl"] / six_free[1111]["test_ppl"] - 1
    seed_gaps = [six_stable[s]["test_ppl"] / six_free[s]["test_ppl"] - 1 for s in six_free]
    stable_mean = sum(r["test_ppl"] for r in six_stable.values()) / len(six_stable)
    drops = [1 - run["test_ppl"] / (sum(r["test_ppl"] for r in six.values()) / len(six))
             for run, six in ((free, six_free), (stable, six_stable))]  # fmt: skip
    assert all(0.2 < d < 0.3 for d in drops)  # "about a quarter"
    assert gap > max(seed_gaps)  # outside the 6-epoch seeds' spread, as the prose says
    prose = _chapter8_prose()
    assert (
        f"perplexity {free['test_ppl']:.1f} ({len(free['epochs'])} epochs) and the "
        f"course-constrained one {stable['test_ppl']:.1f} ({len(stable['epochs'])} epochs), "
        f"{gap:+.1%}, against {same:+.1%} for the same seed after 6 epochs"
    ) in prose
    assert (
        f"the stable LSTM ends at {stable['test_ppl']:.1f} after {len(stable['epochs'])} "
        f"epochs, {drops[1]:.1%} below the {stable_mean:.1f} of its 6-epoch seeds, and "
        f"{gap:.1%} above the unconstrained LSTM's {free['test_ppl']:.1f}. After 6 epochs the "
        f"gap was {same:.1%} with the same seed and between {min(seed_gaps):.1%} and "
        f"{max(seed_gaps):.1%} over the three seeds"
    ) in prose
    assert prose.count(f"{gap:+.1%}") >= 4 and prose.count(f"ends {gap:.1%} apart") == 1


def test_chapter8_reads_the_finished_stable_converged_lstm() -> None:
    import torch

    from stablernn_lib.tasks.wikitext2.findings import load_full_results, smallest_k_within
    from stablernn_lib.tasks.wikitext2.train import results_folder

    name = convergence.PAIR[1]
    analysis = {
        config: load_full_results(results_folder(config))["analysis"][name]
        for config in ("cpu", convergence.CONFIG)
    }
    k = {config: smallest_k_within(a["truncated_eval"]) for config, a in analysis.items()}
    norms = analysis[convergence.CONFIG]["jacobian_norms"]
    largest = max(max(layer) for layer in norms)
    medians = {c: [float(torch.tensor(n).median()) for n in a["jacobian_norms"]]
               for c, a in analysis.items()}  # fmt: skip
    (a, b), (c, d) = medians[convergence.CONFIG], medians["cpu"]
    assert largest < 1  # the certificate holds where measured
    prose = _chapter8_prose()
    assert (
        f"with {k[convergence.CONFIG]} words of context it comes within 1% of its recurrent "
        f"perplexity ({k['cpu']} words after 6 epochs)"
    ) in prose
    assert f"(largest {largest:.2f}; medians {a:.2f} and {b:.2f}, against {c:.2f} and {d:.2f}" in (
        prose
    )
