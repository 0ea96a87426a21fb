"""The Chapter 9 views: measurements of trained JSB models, the table, the piano roll."""

from __future__ import annotations

import json
from dataclasses import replace

import matplotlib
import pytest
from jsb_support import write_synthetic_jsb

from stablernn_lib.core import paper_claims
from stablernn_lib.figures.jsb import draw_piano_roll
from stablernn_lib.tasks.jsb import measurements as ma
from stablernn_lib.tasks.jsb import results as mr
from stablernn_lib.tasks.jsb.data import read_piano_rolls
from stablernn_lib.tasks.jsb.train import (
    CONFIGS,
    build_music_model,
    music_run_name,
    train_music_model,
)

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def rolls(tmp_path_factory):
    path = tmp_path_factory.mktemp("jsb") / "JSB_Chorales.mat"
    return read_piano_rolls(write_synthetic_jsb(path, sequences=(8, 4, 6), length=(34, 50)))


def test_analysis_of_trained_models(rolls, tmp_path, monkeypatch):
    config = replace(CONFIGS["smoke"], hidden_size=8, epochs=1)
    monkeypatch.setitem(CONFIGS, "smoke", config)
    for cell, variant in (("rnn", "stable"), ("lstm", "authors-bug")):
        out = tmp_path / music_run_name(cell, variant, config)
        train_music_model(cell, variant, config, rolls=rolls, out_dir=out, progress=False)
    analysis = ma.run_music_analysis("smoke", rolls=rolls, runs_dir=tmp_path, progress=False)
    assert set(analysis["missing"]) == {"rnn-unconstrained", "lstm-unconstrained", "lstm-stable"}
    bug = analysis["lstm-authors-bug"]["truncated_eval"]
    # no recurrence: every context gives the recurrent model's NLL
    assert max(bug["loss"]) == pytest.approx(min(bug["loss"]), rel=1e-5)
    assert mr.context_used(bug) == 1
    stable = analysis["rnn-stable"]
    assert len(stable["jacobian_norms"][0]) == 6 * (32 - ma.ANALYSIS.burn_in)  # all there are
    assert max(stable["jacobian_norms"][0]) <= 1 + 1e-4  # ||W||_2 <= 1 and tanh' <= 1
    roll = stable["piano_roll"]
    assert set(roll["probs"]) == {str(k) for k in ma.ANALYSIS.roll_ks}
    figure = draw_piano_roll(roll, ma.ANALYSIS.roll_ks[0], "rnn-stable")
    assert len(figure.axes) == 3
    again = ma.run_music_analysis("smoke", rolls=rolls, runs_dir=tmp_path, progress=False)
    assert again["rnn-stable"]["seconds"] == stable["seconds"]  # kept, not recomputed
    # a file written before a measurement existed gets only that one on a rerun
    path = ma.analysis_path("smoke", tmp_path)
    older = json.loads(path.read_text())
    del older["rnn-stable"]["truncated_eval_after"]
    path.write_text(json.dumps(older))
    third = ma.run_music_analysis("smoke", rolls=rolls, runs_dir=tmp_path, progress=False)
    assert third["rnn-stable"]["truncated_eval_after"] == stable["truncated_eval_after"]
    kept = set(ma.MEASUREMENTS) - {"truncated_eval_after"}
    assert all(third["rnn-stable"]["seconds"][m] == stable["seconds"][m] for m in kept)
    assert "jacobian_norms" not in third["lstm-authors-bug"]


def _naive_truncated_nll(model, chorales, k, start):
    """Per scored frame, a fresh run of the layer over the k frames before it."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for roll in chorales:
            for t in range(start, roll.shape[0] - 1):
                window = roll[t - k + 1 : t + 1, None]
                outputs, _ = model.recur(model.embed(window))
                total += float(model.token_nll(outputs[-1:], roll[t + 1 : t + 2, None]).sum())
                count += 1
    return total / count, count


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_truncated_eval_after_scores_only_truncated_frames(rolls, cell):
    """Against a frame-by-frame reference: a fresh run over the k frames before each scored
    frame; chorales too short to score are skipped; k above the first scored row is refused."""
    import torch

    torch.manual_seed(0)
    model = build_music_model(cell, "unconstrained", replace(CONFIGS["smoke"], hidden_size=8))
    chorales = [rolls.test[0][:40], rolls.test[1][:7], rolls.test[2][:36]]  # 7 < 6 + 2: skipped
    curve = ma.truncated_eval_after(model, chorales, (1, 3, 6), start=6)
    lengths = [chorale.shape[0] for chorale in chorales]
    assert lengths[1] == 7 and min(lengths[0], lengths[2]) > 30
    assert curve["positions"] == lengths[0] - 7 + lengths[2] - 7 and curve["chorales"] == 2
    for k, loss in zip(curve["k"], curve["loss"], strict=True):
        reference, count = _naive_truncated_nll(model, [chorales[0], chorales[2]], k, 6)
        assert count == curve["positions"]
        assert loss == pytest.approx(reference, rel=1e-5)
    full, _ = _naive_truncated_nll(
        model, [chorales[0], chorales[2]], 1, 6
    )  # k = 1 is not recurrent
    assert curve["recurrent_loss"] != pytest.approx(full, rel=1e-6)
    with pytest.raises(ValueError, match="exceeds the first scored row"):
        ma.truncated_eval_after(model, chorales, (1, 8), start=6)
    with pytest.raises(ValueError, match="no chorale is longer"):
        ma.truncated_eval_after(model, [chorales[1]], (1,), start=9)


def test_truncation_verdict_decides_only_what_was_measured():
    assert mr.truncation_verdict(4, 32, exact_from=31) == "supported"
    assert mr.truncation_verdict(31, 32, exact_from=31).startswith("no verdict (from k = 31")
    assert mr.truncation_verdict(None, 32, exact_from=None).startswith("no verdict (measured up")
    assert mr.truncation_verdict(None, 100, exact_from=None) == "not supported"
    assert mr.truncation_verdict(32, 32, exact_from=None) == "supported"
    # the first-frames curve: the context that reaches k = frames - 1 decides nothing
    analysis = {
        "config": {"frames": 4},
        "rnn-stable": {"truncated_eval": {"k": [1, 2, 3], "loss": [9.5, 9.2, 9.0],
                                          "recurrent_loss": 9.0}},
    }  # fmt: skip
    found = mr.measured(analysis)["rnn-stable"]
    assert found.context == 3 and found.first_nll == 9.5 and found.recurrent_nll == 9.0
    assert found.truncation == "no verdict (from k = 3 the context covers every scored frame)"


def test_table_marks_paper_numbers_and_pending_runs():
    results = {
        "rnn-unconstrained": {
            "seed": 1111,
            "test_nll": 9.5,
            "best_epoch": 12,
            "wall_seconds": 600.0,
            "epochs": [{}] * 20,
        }
    }
    table = mr.results_table(results, baseline=11.0)
    assert "9.50" in table and "not yet run" in table
    assert f"| {mr.BASELINE_LABEL} | 11.00 |" in table
    assert "-13.6% (1 seed: no verdict)" in table  # (9.5 - 11) / 11, one seed
    assert paper_claims.marked("jsb-rnn-unconstrained-nll") in table


def test_optimizer_diagnostic_table_reads_each_config_under_its_own_name(tmp_path):
    def result(nll: float, best: int, epochs: int) -> dict:
        return {"test_nll": nll, "best_epoch": best, "epochs": [{}] * epochs}

    (tmp_path / "rnn-stable.json").write_text(json.dumps(result(9.9, 400, 420)))
    (tmp_path / "rnn-stable-adam.json").write_text(json.dumps(result(8.8, 17, 50)))
    sgd, adam = mr.load_results(tmp_path), mr.load_results(tmp_path, config="adam")
    assert set(sgd) == set(adam) == {"rnn-stable"}
    table = mr.optimizer_diagnostic_table(sgd, adam, baseline=11.09)
    row = next(line for line in table.splitlines() if line.startswith("| RNN, stable |"))
    assert "9.90 (420)" in row and "8.80 (17)" in row
    assert paper_claims.marked("jsb-rnn-stable-nll") in row
    assert table.count("not yet run") == 6  # three other variants, two columns each
    assert "clip 1," in table.splitlines()[0]  # the diagnostic's clip, not the TCN default 0.2
    assert table.splitlines()[-1] == f"| {mr.BASELINE_LABEL} | 11.09 |  |  |"


def _runs(**values: list[float]) -> dict[str, dict[int, dict]]:
    """``{name: {seed: result}}`` with the given test NLLs for seeds 1, 2, ..."""
    return {
        name.replace("_", "-"): {
            seed: {"seed": seed, "test_nll": nll} for seed, nll in enumerate(nlls, 1)
        }
        for name, nlls in values.items()
    }


def test_stability_cost_verdicts_follow_the_criteria_file():
    # one seed each: numbers, no verdict (criteria.json asks for 5 seeds on JSB)
    one = _runs(rnn_unconstrained=[10.0], rnn_stable=[10.1], lstm_unconstrained=[8.0])
    costs = mr.stability_costs(one)
    assert set(costs) == {"rnn"}  # the LSTM pair has a missing run: no entry, no verdict
    assert costs["rnn"].relative == pytest.approx(0.01)
    assert costs["rnn"].verdict == "no verdict (fewer than 5 seeds)"
    five = _runs(
        rnn_unconstrained=[10.0, 10.1, 9.9, 10.0, 10.0],
        rnn_stable=[10.3, 10.4, 10.2, 10.3, 10.3],  # +3%: within the common 5% rule
        lstm_unconstrained=[8.0, 8.1, 7.9, 8.0, 8.0],
        lstm_stable=[8.8, 8.9, 8.7, 8.8, 8.8],  # +10%, far beyond 2 sd of seed noise
    )
    costs = mr.stability_costs(five)
    assert costs["rnn"].verdict == "supported" and costs["rnn"].relative == pytest.approx(0.03)
    assert costs["lstm"].verdict == "not supported"
    assert costs["lstm"].relative == pytest.approx(0.10)
    noisy = _runs(
        rnn_unconstrained=[10.0, 8.0, 12.0, 10.0, 10.0],
        rnn_stable=[10.6, 8.6, 12.6, 10.6, 10.6],  # +6%, within seed noise
    )
    assert mr.stability_costs(noisy)["rnn"].verdict == "inconclusive"
    table = mr.stability_cost_table({"five": five, "one": one}).splitlines()
    _assert_rectangular("\n".join(table))
    assert len(table) == 2 + 3 and table[2].endswith("| +3.0% | supported |")
    assert table[4].startswith("| one | RNN | 10.00 (one seed, 1)")


def test_baseline_comparison_needs_the_seeds_and_the_margin():
    one = mr.seed_summary(_runs(m=[10.0])["m"])
    assert mr.baseline_comparison(one, 11.0) == "-9.1% (1 seed: no verdict)"
    five = mr.seed_summary(_runs(m=[10.0] * 5)["m"])
    assert mr.baseline_comparison(five, 11.0) == "-9.1%: beats it"
    close = mr.seed_summary(_runs(m=[10.7] * 5)["m"])  # 2.7% below: within the 5% margin
    assert mr.baseline_comparison(close, 11.0).endswith("no better than the baseline")
    assert mr.memory_reading("m", {"m": {"seed": 1, "test_nll": 10.0}}, 11.0) == "beats it"


def test_seeds_table_reads_every_seed_folder(tmp_path):
    def write(relative: str, seed: int, nll: float) -> None:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"seed": seed, "test_nll": nll, "status": "completed"}))

    write("adam-tcn/rnn-unconstrained.json", 1111, 8.0)
    for seed, nll in ((1, 8.2), (2, 7.9), (3, 8.1), (4, 7.8)):
        write(f"adam-tcn/seed{seed}/rnn-unconstrained.json", seed, nll)
    write("adam-tcn/rnn-stable.json", 1111, 8.3)
    write("adam-tcn/seed2/rnn-stable.json", 2, 8.5)
    write("adam-tcn/seed9/rnn-stable.json", 9, float("nan"))  # not completed: ignored
    (tmp_path / "adam-tcn/seed9/rnn-stable.json").write_text('{"status": "interrupted"}')
    runs = mr.load_seed_results("adam-tcn", tmp_path)
    assert sorted(runs["rnn-unconstrained"]) == [1, 2, 3, 4, 1111]
    assert sorted(runs["rnn-stable"]) == [2, 1111]
    table = mr.seeds_table("adam-tcn", 11.09, tmp_path)
    rows = {line.split(" | ")[0]: line for line in table.splitlines()}
    assert (
        "8.00 ± 0.16 (n = 5; seed 1: 8.20, 2: 7.90, 3: 8.10, 4: 7.80, 1111: 8.00)" in rows["| RNN"]
    )
    assert "beats it" in rows["| RNN"]
    assert "no verdict (fewer than 5 seeds)" in rows["| RNN, stable"]
    assert "--config adam-tcn --resume" in rows["| LSTM"]
    assert table.splitlines()[-1].startswith(f"| {mr.BASELINE_LABEL} | 11.09 |")
    assert mr.rerun_command("adam-tcn", "lstm", "stable", 3).endswith(
        "--config adam-tcn --seed 3 --resume --threads 1"
    )
    _assert_rectangular(table)


def _assert_rectangular(table: str) -> None:
    """Every row of a markdown table has as many cells as its header (the "not yet run" rows
    hold a command with no pipe, so counting pipes counts cells)."""
    lines = table.splitlines()
    assert all(line.count("|") == lines[0].count("|") for line in lines), table


def test_every_jsb_table_is_rectangular():
    results = mr.load_results()
    _assert_rectangular(mr.results_table(results, 11.09))
    _assert_rectangular(
        mr.optimizer_diagnostic_table(results, mr.load_results(config="adam"), 11.09)
    )
    for config in ("adam-tcn", "authors"):
        _assert_rectangular(mr.seeds_table(config, 11.09))
    _assert_rectangular(mr.reruns_table("adam-tcn"))
    authors = mr.load_seed_results("authors")
    _assert_rectangular(mr.main_table(11.09))
    full = {name: {run["seed"]: run} for name, run in results.items()}
    _assert_rectangular(mr.stability_cost_table({"authors": authors, "full": full}))
    _assert_rectangular(mr.input_layer_table(results, authors))
    _assert_rectangular(mr.early_stop_table(results))
    _assert_rectangular(mr.training_extent_table(authors))
    for config in ("full", "authors", "adam-tcn"):
        analysis = mr.load_full_analysis(config=config)
        _assert_rectangular(mr.measurements_table(analysis, results, 11.09))


def test_reruns_table_sets_each_earlier_run_beside_the_committed_one(tmp_path):
    def write(relative: str, seed: int, nll: float, commit: str) -> None:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        run = {"seed": seed, "test_nll": nll, "status": "completed",
               "provenance": {"git_commit": commit}}  # fmt: skip
        path.write_text(json.dumps(run))

    write("adam-tcn/rnn-stable.json", 1111, 8.70, "b" * 40)  # rerun at a later commit
    write("adam-tcn/seed1/rnn-stable.json", 1, 8.66, "a" * 40)  # the earlier file, kept
    write("adam-tcn/seed3/rnn-stable.json", 3, 8.61, "b" * 40)
    runs = [
        {"model": "rnn-stable", "seed": 1111,
         "earlier": {"test_nll": 8.65, "git_commit": "a" * 40,
                     "validation_split": {"epoch": 47, "lr": 1e-11}}},
        {"model": "rnn-stable", "seed": 1, "earlier": {"test_nll": 8.66, "git_commit": "a" * 40}},
        {"model": "rnn-stable", "seed": 3,
         "earlier": {"outcome": "stopped: NaN", "git_commit": "c" * 40,
                     "validation_split": None}},
        {"model": "rnn-stable", "seed": 2, "earlier": {"test_nll": 8.6, "git_commit": "a" * 40}},
    ]  # fmt: skip
    assert mr.reruns_table("adam-tcn", tmp_path).startswith("no reruns recorded")
    (tmp_path / "adam-tcn/reruns.json").write_text(json.dumps({"runs": runs}))
    rows = mr.reruns_table("adam-tcn", tmp_path).splitlines()[2:]
    assert rows[0] == ("| RNN, stable | 1111 | 8.650 | 8.700 | +0.050 | epoch 47 (lr 1e-11) |")
    assert rows[1] == "| RNN, stable | 1 | 8.660 | not yet rerun |  |  |"
    assert rows[2] == ("| RNN, stable | 3 | stopped: NaN | 8.610 |  | never |")
    assert rows[3] == "| RNN, stable | 2 | 8.600 | not yet rerun |  |  |"
    assert len(rows) == 4  # the runs only: no baseline row


def test_early_stop_table_gives_the_epochs_run_and_the_bound_of_a_stopped_run():
    def run(epochs: int, stopped: dict | None) -> dict:
        return {"config": {"epochs": 500}, "epochs": [{}] * epochs, "stopped_early": stopped}

    early = {"lr": 1e-6, "stop_below_lr": 1e-5, "max_weight_change": 0.046}
    table = mr.early_stop_table(
        {"rnn-stable": run(500, None), "lstm-unconstrained": run(299, early)}
    )
    _assert_rectangular(table)
    stable, lstm = table.splitlines()[2:]
    assert stable == "| RNN, stable | 500 of 500 | (ran every epoch) |  |"
    assert lstm == "| LSTM | 299 of 500 | 1e-06 | 0.046 in norm |"


def test_piano_roll_contexts_are_in_increasing_order_after_a_json_round_trip():
    entry = {"probs": {k: [[0.5]] for k in (1, 2, 4, 8, 16, 48)}}
    assert mr.piano_roll_contexts(json.loads(json.dumps(entry))) == [1, 2, 4, 8, 16, 48]


def test_measured_reads_the_criteria_and_marks_models_near_the_baseline():
    distances = list(range(25))
    analysis = {
        "config": {},
        "rnn-stable": {
            "figure2": {"distance": distances, "mean_norm": [0.5**d for d in distances]},
            "truncated_eval": {"k": [1, 2, 4], "loss": [9.5, 9.08, 9.0], "recurrent_loss": 9.0},
        },
        "lstm-unconstrained": {
            "figure2": {"distance": distances, "mean_norm": [1.0] + [0.08] * 24},
            "truncated_eval": {"k": [1, 2, 4], "loss": [12.0, 11.5, 11.3], "recurrent_loss": 11.0},
        },
    }
    results = {
        "rnn-stable": {"seed": 1111, "test_nll": 9.0},  # 18.8% below the baseline
        "lstm-unconstrained": {"seed": 1111, "test_nll": 10.9},  # 1.7% below: within 5%
    }
    found = mr.measured(analysis, results, 11.09)
    stable, lstm = found["rnn-stable"], found["lstm-unconstrained"]
    assert stable.gradient_ratio == pytest.approx(0.5**20) and stable.vanishes == "supported"
    assert lstm.gradient_ratio == pytest.approx(0.08) and lstm.vanishes == "not supported"
    assert stable.context == 2 and stable.truncation == "supported"  # 9.08 <= 9.0 * 1.01
    # measured up to k = 4 only: the rule (max_k 100) is not decided
    assert lstm.context is None
    assert lstm.truncation == "no verdict (measured up to k = 4, the rule's max_k is 100)"
    # one seed: indicative, never the criteria's "no better than the baseline"
    assert stable.memory == "beats it"
    assert lstm.memory == "not below it by the margin (1 seed: indicative)"
    assert mr.measured(analysis)["lstm-unconstrained"].memory == ""  # no results: unread
    table = mr.measurements_table(analysis, results, 11.09)
    _assert_rectangular(table)
    row = next(r for r in table.splitlines() if r.startswith("| LSTM |"))
    assert "| none: no verdict (measured up to k = 4, the rule's max_k is 100) |" in row
    assert "| 8%: not supported |" in row and row.endswith("(1 seed: indicative) |")


def _write_run(root, relative: str, seed: int, nll: float) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"seed": seed, "test_nll": nll, "status": "completed"}))


def _parse_train_music(command: str):
    """The arguments the CLI reads from one printed ``train-music`` command."""
    import argparse

    from stablernn_lib.tasks.jsb import train

    parser = argparse.ArgumentParser()
    train.register(parser.add_subparsers())
    words = command.split()
    assert words[:4] == ["python", "-m", "stablernn_lib", "train-music"], command
    return parser.parse_args(words[3:])


def test_run_commands_list_each_missing_run_with_its_seed(tmp_path):
    from stablernn_lib.tasks import training

    _write_run(tmp_path, "authors/rnn-unconstrained.json", 1111, 9.5)
    _write_run(tmp_path, "authors/seed2/rnn-unconstrained.json", 2, 9.4)
    _write_run(tmp_path, "authors/seed1/lstm-stable.json", 1, 10.0)
    missing = mr.missing_runs("authors", tmp_path)
    assert len(missing) == 4 * 5 - 3
    assert ("rnn", "unconstrained", 2) not in missing and ("rnn", "unconstrained", 3) in missing
    assert ("lstm", "stable", 1111) in missing and ("lstm", "stable", 1) not in missing
    shown = mr.run_commands("authors", tmp_path)
    blocks = [block.split("```")[0] for block in shown.split("```bash\n")[1:]]
    text = " ".join(shown.replace("\\\n", " ").split())  # each command on one line
    assert "Not yet run (17 of 20)" in text
    commands = [" ".join(block.replace("\\\n", " ").split()) for block in blocks][1:]
    assert all(len(line) <= 40 for block in blocks for line in block.splitlines())
    assert len(commands) == 17
    assert "--model rnn --variant unconstrained --config authors --seed 3 --resume" in text
    assert "--model rnn --variant unconstrained --config authors --seed 2 " not in text
    for command in commands:
        args = _parse_train_music(command)
        assert args.config == "authors" and args.resume and args.threads == 1
        seed = args.seed if args.seed is not None else CONFIGS["authors"].seed
        assert (args.model, args.variant, seed) in missing
    # seed 1111 is the config's own: no --seed, and the CLI trains the config itself
    own = mr.rerun_command("authors", "lstm", "stable", 1111)
    assert "--seed" not in own and _parse_train_music(own).seed is None
    assert training.with_seed(CONFIGS["authors"], 1111) is CONFIGS["authors"]
    assert "--seed <N>" in blocks[0] and "1111, the config's own seed" in shown.splitlines()[0]
    # one-seed configs: no --seed; the full runs' own flag; nothing missing on the files
    full = " ".join(mr.run_commands("full").replace("\\\n", " ").split())
    assert "--config full --resume --stop-below-lr 1e-5 --threads 1" in full
    assert "--seed" not in full and "not yet run" not in full.lower()
    adam = " ".join(mr.run_commands("adam").replace("\\\n", " ").split())
    assert "--config adam --resume --threads 1" in adam
    args = _parse_train_music(mr.rerun_command("full", "lstm", "authors-bug"))
    assert args.stop_below_lr == 1e-5 and args.variant == "authors-bug"


def test_seeds_table_carries_the_paper_number_only_for_the_authors_setting(tmp_path):
    _write_run(tmp_path, "authors/rnn-stable.json", 1111, 9.2)
    _write_run(tmp_path, "adam-tcn/rnn-stable.json", 1111, 8.6)
    authors = mr.seeds_table("authors", 11.09, tmp_path)
    _assert_rectangular(authors)
    assert authors.splitlines()[0].endswith("| reported by the paper |")
    for (cell, variant), key in mr.PAPER_KEYS.items():
        row = next(
            r for r in authors.splitlines() if r.startswith(f"| {mr.LABELS[f'{cell}-{variant}']} |")
        )
        assert row.endswith(f"| {paper_claims.marked(key)} |"), row
    tcn = mr.seeds_table("adam-tcn", 11.09, tmp_path)
    assert "paper" not in tcn and "†" not in tcn


def test_paper_comparisons_give_a_verdict_only_with_the_seeds(tmp_path, monkeypatch):
    paper = float(paper_claims.value("jsb-rnn-unconstrained-nll"))
    _write_run(tmp_path, "authors/rnn-unconstrained.json", 1111, paper * 1.10)
    for seed in (1, 2, 3, 4):  # five seeds within 2% of the paper's number
        _write_run(tmp_path, f"authors/seed{seed}/rnn-stable.json", seed, paper * 1.02)
    _write_run(tmp_path, "authors/rnn-stable.json", 1111, paper * 1.02)
    found = mr.paper_comparisons("authors", tmp_path)
    rnn, stable, lstm = found["rnn-unconstrained"], found["rnn-stable"], found["lstm-unconstrained"]
    # the JSB numbers are recalled (†): no verdict against them, whatever the seeds
    assert found["rnn-stable"].verdict == mr.UNVERIFIED_PAPER
    recalled = paper_claims.claim  # the rule itself, as it would read checked numbers
    monkeypatch.setattr(
        mr.paper_claims, "claim", lambda key: replace(recalled(key), status="checked", source="a")
    )
    found = mr.paper_comparisons("authors", tmp_path)
    rnn, stable, lstm = found["rnn-unconstrained"], found["rnn-stable"], found["lstm-unconstrained"]
    assert rnn.relative == pytest.approx(0.10) and rnn.verdict == "no verdict"
    assert rnn.difference == pytest.approx(0.1 * paper)
    assert stable.relative == pytest.approx(0.02) and stable.verdict == "reproduced"
    assert lstm.ours is None and lstm.verdict == "not yet run"
    for seed in (1, 2, 3, 4):
        _write_run(tmp_path, f"authors/seed{seed}/rnn-unconstrained.json", seed, paper * 1.10)
    assert mr.paper_comparisons("authors", tmp_path)["rnn-unconstrained"].verdict == (
        "not reproduced"
    )
    # the LSTM of the authors' code has no recurrence: our recurrent LSTM is another model
    for seed in (1, 2, 3, 4, 1111):
        _write_run(tmp_path, f"authors/{'' if seed == 1111 else f'seed{seed}/'}lstm-stable.json",
                   seed, float(paper_claims.value("jsb-lstm-stable-nll")))  # fmt: skip
    lstm_stable = mr.paper_comparisons("authors", tmp_path)["lstm-stable"]
    assert lstm_stable.relative == pytest.approx(0.0) and lstm_stable.verdict == "not comparable"
    table = mr.main_table(11.09, tmp_path)
    _assert_rectangular(table)
    row = next(r for r in table.splitlines() if r.startswith("| LSTM, stable |"))
    assert paper_claims.marked("jsb-lstm-stable-nll") in row and "another model" in row
    assert "reproduced" not in table  # no verdict against the paper's unverified numbers
    assert "| not yet run |" in table  # the unconstrained LSTM
    with pytest.raises(ValueError):
        mr.paper_comparisons("adam-tcn", tmp_path)


def test_memory_reading_on_one_seed_is_indicative_not_a_verdict(monkeypatch):
    results = {"lstm-unconstrained": {"seed": 1111, "test_nll": 11.18},
               "rnn-stable": {"seed": 1111, "test_nll": 9.08}}  # fmt: skip
    reading = mr.memory_reading("lstm-unconstrained", results, 11.09)
    assert reading == "not below it by the margin (1 seed: indicative)"
    assert mr.memory_reading("rnn-stable", results, 11.09) == "beats it"
    assert mr.memory_reading("lstm-stable", results, 11.09) == ""  # not run: unread
    # with the seeds the criteria ask for, the reading is the criteria's verdict
    monkeypatch.setattr(mr.criteria, "enough_seeds", lambda task, *summaries: True)
    assert mr.memory_reading("lstm-unconstrained", results, 11.09) == (
        "no better than the baseline"
    )


def test_jacobian_stats_give_range_median_and_share_below_one():
    """Checked against numbers worked out by hand: norms 0.5, 0.9, 1.2, 3.0 over two layers."""
    analysis = {
        "rnn-stable": {"jacobian_norms": [[0.5, 0.9]]},
        "lstm-unconstrained": {"jacobian_norms": [[1.2, 0.9], [3.0, 0.5]]},
        "lstm-authors-bug": {"truncated_eval": {}},  # no recurrence: no Jacobians
        "missing": ["rnn-unconstrained"],
    }
    assert mr.jacobian_stats(analysis["rnn-stable"]) == mr.JacobianStats(0.5, 0.7, 0.9, 1.0, 2)
    assert mr.jacobian_stats(analysis["lstm-unconstrained"]) == mr.JacobianStats(
        0.5, 1.05, 3.0, 0.5, 4
    )
    assert mr.jacobian_stats(analysis["lstm-authors-bug"]) is None
    found = mr.measured(analysis)
    assert set(found) == {"rnn-stable", "lstm-unconstrained", "lstm-authors-bug"}
    assert found["lstm-authors-bug"].jacobians is None


def _seeded(values: dict[int, float], **extra) -> dict[int, dict]:
    return {seed: {"seed": seed, "test_nll": v, **extra} for seed, v in values.items()}


def test_training_extent_gives_each_seeds_best_epoch_and_final_rate():
    epochs = [{"epoch": e, "lr": 0.01 if e < 3 else 0.001} for e in (1, 2, 3, 4)]
    runs = {"rnn-stable": {1111: {"best_epoch": 4, "epochs": epochs},
                           2: {"best_epoch": 2, "epochs": epochs[:2]}}}  # fmt: skip
    rows = mr.training_extent_table(runs).splitlines()[2:]
    assert rows == ["| RNN, stable | 2 | 2 | 2 | 1e-02 |", "| RNN, stable | 1111 | 4 | 4 | 1e-03 |"]


def test_input_layer_rows_are_read_by_the_single_seed_rule():
    """5 sd of the reference: sd of (9.0, 9.1, 9.2, 9.3, 9.4) is 0.158, so 0.79."""
    reference = {name: _seeded({1: 9.0, 2: 9.1, 3: 9.2, 4: 9.3, 1111: 9.4})
                 for name in ("rnn-unconstrained", "lstm-unconstrained")}  # fmt: skip
    results = {"rnn-unconstrained": {"test_nll": 9.2 + 0.80},  # just beyond: readable
               "lstm-unconstrained": {"test_nll": 9.2 + 0.78},  # just within: not
               "rnn-stable": {"test_nll": 12.0}}  # no reference: no row  # fmt: skip
    rnn, lstm = mr.input_layer_table(results, reference).splitlines()[2:]
    assert rnn == "| RNN | 10.00 | 9.20 ± 0.16 | +0.80 | 0.79 | yes |"
    assert lstm == "| LSTM | 9.98 | 9.20 ± 0.16 | +0.78 | 0.79 | no: needs seeds |"
