"""The committed JSB Chorales results: complete, written by the code as it is now, and the
numbers Chapter 9 and its companion page glue from them (``tasks/jsb/results.py``).

Chapter 9 draws its table and figures from ``data/results/jsb``: the four variants and the
authors' non-recurrent LSTM at the authors' scale (config ``full``), the four variants of
the Adam diagnostic (config ``adam``) and the measurements of the full-scale models. A
result of an older config would be shown as this one's, so every file must match
``CONFIGS``; a missing file fails with the command that makes it.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import statistics
from dataclasses import asdict
from pathlib import Path

import pytest

from stablernn_lib.core.io import same_config
from stablernn_lib.tasks.jsb import measurements as ma
from stablernn_lib.tasks.jsb import results as mr
from stablernn_lib.tasks.jsb.data import JSB_SPLIT_SIZES
from stablernn_lib.tasks.jsb.measurements import ANALYSIS
from stablernn_lib.tasks.jsb.results import ALL_VARIANTS, TABLE_VARIANTS
from stablernn_lib.tasks.jsb.train import (
    CONFIGS,
    PUBLISHED_RESULTS,
    RESULTS_DIR,
    result_file_name,
)
from stablernn_lib.tasks.training import published_config

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "09_polyphonic_music.ipynb"
# The result files of the seeded configs (authors' model, no input layer) committed so far.
SEEDED = sorted(
    path.relative_to(RESULTS_DIR).as_posix()
    for folder, _ in PUBLISHED_RESULTS.values()
    if folder
    for path in [
        *(RESULTS_DIR / folder).glob("*.json"),
        *(RESULTS_DIR / folder).glob("seed*/*.json"),
    ]
    if path.name not in ("analysis.json", "reruns.json")
)

RUNS = [(cell, variant, "full") for cell, variant in ALL_VARIANTS] + [
    (cell, variant, "adam") for cell, variant in TABLE_VARIANTS
]
BASELINE = 11.09  # the no-memory baseline (tests/test_music_baseline.py checks it)


def _load(name: str) -> dict:
    path = RESULTS_DIR / name
    if not path.is_file():
        pytest.fail(f"{path} is missing; make it with the command in data/results/jsb/README.md")
    with open(path, encoding="utf8") as handle:
        return json.load(handle)


@pytest.mark.parametrize(("cell", "variant", "config"), RUNS)
def test_result_is_complete_and_matches_the_code(cell: str, variant: str, config: str) -> None:
    result = _load(result_file_name(cell, variant, config))
    assert same_config(result["config"], CONFIGS[config])
    assert (result["task"], result["model"], result["variant"]) == ("jsb", cell, variant)
    assert result["status"] == "completed"
    assert {"git_commit", "device", "torch", "created_utc"} <= set(result["provenance"])
    assert {split: tuple(size) for split, size in result["data_sizes"].items()} == JSB_SPLIT_SIZES
    epochs = [epoch["epoch"] for epoch in result["epochs"]]
    assert epochs == list(range(1, len(epochs) + 1))
    assert len(epochs) == CONFIGS[config].epochs or "stopped_early" in result
    best = min(epoch["val_nll"] for epoch in result["epochs"])
    assert math.isclose(result["best_val_nll"], best, rel_tol=1e-12)
    assert result["epochs"][result["best_epoch"] - 1]["val_nll"] == result["best_val_nll"]
    # a per-step NLL of 88 keys lies between 0 and the 88 ln 2 of a fair coin per key
    assert 0 < result["test_nll"] < 88 * math.log(2)
    assert result["wall_seconds"] > 0


def test_analysis_of_the_full_models_is_complete_and_matches_the_code() -> None:
    analysis = _load("analysis.json")
    assert analysis["missing"] == []
    assert analysis["config"] == json.loads(json.dumps(asdict(ANALYSIS)))
    assert same_config(analysis["music_config"], CONFIGS["full"])
    for cell, variant in ALL_VARIANTS:
        entry = analysis[f"{cell}-{variant}"]
        parts = {"figure2", "truncated_eval", "piano_roll"}
        if variant != "authors-bug":  # a model without recurrence has no state Jacobian
            parts.add("jacobian_norms")
        assert parts <= set(entry), f"{cell}-{variant}: missing {parts - set(entry)}"
        curve = entry["truncated_eval"]
        assert curve["k"] == list(ANALYSIS.ks)
        assert all(math.isfinite(loss) for loss in curve["loss"] + [curve["recurrent_loss"]])


def test_committed_runs_are_the_encoder_variant_and_most_ran_every_epoch() -> None:
    for cell, variant, config in RUNS:
        result = _load(result_file_name(cell, variant, config))
        # written before the field existed: read with its default, the input layer
        assert "input_encoder" not in result["config"] and CONFIGS[config].input_encoder
    full = mr.load_results()
    ran_all = [name for name, r in full.items() if len(r["epochs"]) == r["config"]["epochs"]]
    assert sorted(set(full) - set(ran_all)) == ["lstm-unconstrained"]  # --stop-below-lr ended it
    stopped = [r for r in mr.early_stop_table(full).splitlines() if "(ran every epoch)" not in r]
    assert len(stopped) == 2 + 1 and stopped[2].startswith("| LSTM | 299 of 500 | 1e-06 |")


def test_chapter9_tables_are_computed_from_the_committed_files() -> None:
    full, adam = mr.load_results(), mr.load_results(config="adam")
    assert set(full) == {f"{c}-{v}" for c, v in ALL_VARIANTS}
    assert set(adam) == {f"{c}-{v}" for c, v in TABLE_VARIANTS}
    table = mr.results_table(full, BASELINE).splitlines()
    diagnostic = mr.optimizer_diagnostic_table(full, adam, BASELINE).splitlines()
    for name, result in full.items():
        row = next(line for line in table if line.startswith(f"| {mr.LABELS[name]} |"))
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        assert cells[1] == f"{result['test_nll']:.2f}"
        gap = 100 * (result["test_nll"] - BASELINE) / BASELINE
        assert cells[2].startswith(f"{gap:+.1f}%")
        assert cells[3:5] == [str(len(result["epochs"])), str(result["best_epoch"])]
    for name, result in adam.items():
        row = next(line for line in diagnostic if line.startswith(f"| {mr.LABELS[name]} |"))
        assert f"| {result['test_nll']:.2f} ({result['best_epoch']}) |" in row
        assert f"| {full[name]['test_nll']:.2f} ({len(full[name]['epochs'])}) |" in row
    for lines in (table, diagnostic):
        assert lines[-1].startswith(f"| {mr.BASELINE_LABEL} | {BASELINE:.2f} |")


@pytest.mark.parametrize("name", SEEDED)
def test_seeded_result_is_complete_and_matches_its_config(name: str) -> None:
    result = _load(name)
    config = published_config(result["config"]["name"], CONFIGS, PUBLISHED_RESULTS)
    assert config is not None and same_config(result["config"], config)
    cell, variant = result["model"], result["variant"]
    assert result_file_name(cell, variant, config.name) == name
    assert result["seed"] == config.seed and not config.input_encoder
    assert result["status"] == "completed" and 0 < result["test_nll"] < 88 * math.log(2)
    assert {"git_commit", "criteria_commit", "device", "created_utc"} <= set(result["provenance"])
    assert len(result["epochs"]) == config.epochs or "stopped_early" in result


def test_reruns_table_rows_are_computed_from_the_committed_files() -> None:
    """Every rerun of ``adam-tcn/reruns.json`` whose result file was written by a later
    commit shows that file's test NLL and the change from the earlier run."""
    reruns = mr.load_reruns("adam-tcn")
    assert reruns is not None and "svd_reproduces" in reruns["why"]
    runs = mr.load_seed_results("adam-tcn")
    rows = mr.reruns_table("adam-tcn").splitlines()[2:]
    assert len(rows) == len(reruns["runs"])
    for entry, row in zip(reruns["runs"], rows, strict=True):
        current = runs.get(entry["model"], {}).get(entry["seed"])
        if current is None or current["provenance"]["git_commit"] == entry["earlier"]["git_commit"]:
            assert "not yet rerun" in row
            continue
        assert f"{current['test_nll']:.3f}" in row
        if "test_nll" in entry["earlier"]:
            change = current["test_nll"] - entry["earlier"]["test_nll"]
            assert f"| {change:+.3f} |" in row
        split = entry["earlier"].get("validation_split", "absent")
        if split is None:
            assert row.endswith("| never |")
        elif split != "absent":
            assert row.endswith(f"| epoch {split['epoch']} (lr {split['lr']:.0e}) |")


@pytest.mark.parametrize(
    ("seed", "epoch", "lr", "worse"), [(1, 47, 1e-11, 0.05), (2, 45, 1e-8, 0.2), (4, 50, 1e-7, 0.2)]
)
def test_chapter9_reading_of_the_damaged_reruns_holds(
    seed: int, epoch: int, lr: float, worse: float
) -> None:
    """Chapter 9: the earlier stable RNN seeds 1 and 2 part from their reruns at a learning
    rate where no optimizer step can move a model, after their best epoch, and end worse;
    seed 1111 never parts from its rerun."""
    reruns = mr.load_reruns("adam-tcn")
    assert reruns is not None
    (entry,) = [r for r in reruns["runs"] if (r["model"], r["seed"]) == ("rnn-stable", seed)]
    split = entry["earlier"]["validation_split"]
    assert split["epoch"] == epoch and split["lr"] == pytest.approx(lr)
    assert split["epoch"] > split["best_epoch_earlier"]
    assert split["final_val_nll_earlier"] > split["final_val_nll_rerun"] + worse
    assert mr.load_seed_results("adam-tcn")["rnn-stable"][seed]["test_nll"] == pytest.approx(
        entry["earlier"]["test_nll"], abs=1e-6
    )
    (clean,) = [r for r in reruns["runs"] if (r["model"], r["seed"]) == ("rnn-stable", 1111)]
    assert clean["earlier"]["validation_split"] is None


def test_analysis_of_the_authors_models_is_complete_and_matches_the_code() -> None:
    """jsb-analysis --config authors: the four table models of seed 1111 (the non-recurrent
    LSTM is not trained at this config), with both truncation curves."""
    analysis = mr.load_full_analysis(config="authors")
    assert analysis is not None
    assert analysis["missing"] == ["lstm-authors-bug"]
    assert analysis["config"] == json.loads(json.dumps(asdict(ANALYSIS)))
    assert same_config(analysis["music_config"], CONFIGS["authors"])
    assert analysis["provenance"]["criteria_commit"].startswith("edf3b22")
    for cell, variant in TABLE_VARIANTS:
        entry = analysis[f"{cell}-{variant}"]
        assert set(ma.measurements_of(recurrent=True)) <= set(entry)
        after = entry["truncated_eval_after"]
        assert after["k"] == list(ANALYSIS.ks) and after["scored_from"] == ANALYSIS.frames
        chorales, frames = JSB_SPLIT_SIZES["test"]
        # each scored chorale has its first frames + 1 frames unscored
        assert 0 < after["chorales"] <= chorales
        assert after["positions"] + (ANALYSIS.frames + 1) * after["chorales"] <= frames
        assert all(math.isfinite(x) for x in after["loss"] + [after["recurrent_loss"]])


@pytest.mark.parametrize("name", [f"{cell}-{variant}" for cell, variant in TABLE_VARIANTS])
def test_the_measured_authors_models_are_the_committed_runs_trained_again(name: str) -> None:
    """The measured weights are not committed: each seed-1111 model was trained again with
    the same config and seed (authors/retrained/), and its every epoch, its best epoch and
    its test NLL agree with the committed run's, so the measurements describe the models of
    the table. Three retrainings repeat their run exactly; the stable LSTM's differs by float
    rounding (validation NLL by at most 2e-6 nats at any epoch), hence the tolerance."""
    committed = json.loads((RESULTS_DIR / "authors" / f"{name}.json").read_text())
    again = json.loads((RESULTS_DIR / "authors" / "retrained" / f"{name}.json").read_text())
    assert again["status"] == "completed" and again["seed"] == committed["seed"] == 1111
    assert same_config(again["config"], CONFIGS["authors"])
    assert again["provenance"]["git_commit"] != committed["provenance"]["git_commit"]
    assert len(again["epochs"]) == len(committed["epochs"])
    for a, b in zip(again["epochs"], committed["epochs"], strict=True):
        assert math.isclose(a["train_nll"], b["train_nll"], rel_tol=1e-6), a["epoch"]
        assert math.isclose(a["val_nll"], b["val_nll"], rel_tol=1e-6), a["epoch"]
        assert a["lr"] == b["lr"], a["epoch"]  # the schedule cut at the same epochs
    assert again["best_epoch"] == committed["best_epoch"]
    assert math.isclose(again["test_nll"], committed["test_nll"], rel_tol=1e-6)


# --- Chapter 9 and its companion page: the glued numbers and what the prose says of them ----

COMPANION = ROOT / "chapters" / "09b_polyphonic_music_evidence.ipynb"
GLUE_ROLE = re.compile(r"\{glue:text\}`(?P<key>[\w-]+)(?::(?P<spec>[^`]*))?`")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf8"))["cells"]


def _text(cell: dict) -> str:
    return "".join(cell["source"])


def _prose(path: Path) -> str:
    return " ".join(
        " ".join(_text(c) for c in _cells(path) if c["cell_type"] == "markdown").split()
    )


@functools.cache
def _values() -> dict:
    return mr.chapter_values(BASELINE)


def _seeds(config: str, name: str) -> list[float]:
    """Every committed seed's test NLL, read with the standard library (not the course's)."""
    root = RESULTS_DIR / config
    paths = [root / f"{name}.json", *sorted(root.glob(f"seed*/{name}.json"))]
    return [json.loads(p.read_text())["test_nll"] for p in paths if p.exists()]


def _glued(path: Path, rendered: dict) -> str:
    """The prose of a notebook with every ``{glue:text}`` role replaced by its value as
    MyST-NB formats it (``rendered``: key -> value)."""
    from myst_nb.core.variables import format_plain_text

    def paste(match: re.Match) -> str:
        return format_plain_text(repr(rendered[match["key"]]), match["spec"] or "")

    return GLUE_ROLE.sub(paste, _prose(path))


def test_every_glued_key_of_chapter9_is_computed_from_the_results() -> None:
    """Both pages glue ``results.chapter_values`` (and the baseline, from the data) and
    quote nothing else through glue; each role's format applies to its value."""
    computed = set(_values()) | {"baseline", "busiest"}
    for path in (CHAPTER, COMPANION):
        code = "\n".join(_text(c) for c in _cells(path) if c["cell_type"] == "code")
        assert "results.chapter_values(baseline)" in code and "glue(key, value" in code
        assert "baseline = independent_keys_nll(rolls.train, rolls.test)" in code
        keys = [m["key"] for m in GLUE_ROLE.finditer(_prose(path))]
        assert len(keys) >= 20, path.name
        assert set(keys) <= computed, sorted(set(keys) - computed)
        assert _glued(path, _values() | {"baseline": BASELINE, "busiest": 4})


def test_chapter9_values_of_the_main_table_match_the_committed_files() -> None:
    """The seeded configurations' means, sds, gaps and verdicts, recomputed from the result
    files with the standard library."""
    values = _values()
    for config, prefix in (("authors", "sgd"), ("adam-tcn", "tcn")):
        for name, short in mr.SHORT.items():
            nlls = _seeds(config, name)
            if not nlls:
                continue
            assert len(nlls) == 5 == values["seeds_needed"]
            mean, sd = statistics.mean(nlls), statistics.stdev(nlls)
            assert values[f"{prefix}_{short}_mean"] == pytest.approx(mean)
            assert values[f"{prefix}_{short}_sd"] == pytest.approx(sd)
            assert values[f"{prefix}_{short}_vs_base"] == pytest.approx(100 * (1 - mean / BASELINE))
        for cell in ("rnn", "lstm"):
            free = statistics.mean(_seeds(config, f"{cell}-unconstrained"))
            stable = statistics.mean(_seeds(config, f"{cell}-stable"))
            below = values[f"{prefix}_{cell}_stable_below"]
            assert below == pytest.approx(100 * (1 - stable / free)) and below > 0
            # stable below its twin: "supported" whatever the seed noise
            assert values[f"{prefix}_{cell}_cost_verdict"] == "supported"
    # the prose: every model beats the baseline, the unconstrained LSTM the least
    gaps = {k: v for k, v in values.items() if k.startswith("sgd_") and k.endswith("_vs_base")}
    assert min(gaps.values()) == gaps["sgd_lstm_vs_base"] > values["baseline_margin"]
    # "there every model ends more than 20% below the baseline"
    assert all(v > 20 for k, v in values.items() if k.startswith("tcn_") and k.endswith("_vs_base"))
    # against the paper (recalled numbers): the stable RNN within 5%, the RNN not; the LSTM
    # rows not compared; the adam-tcn means all below the paper's numbers
    for name, short in list(mr.SHORT.items())[:4]:
        cell, variant = name.split("-", 1)
        paper = float(mr.paper_claims.value(f"jsb-{cell}-{variant}-nll"))
        mean = statistics.mean(_seeds("authors", name))
        assert values[f"paper_{short}_diff"] == pytest.approx(100 * (mean / paper - 1))
        tcn = statistics.mean(_seeds("adam-tcn", name))
        assert values[f"tcn_{short}_below_paper"] == pytest.approx(100 * (1 - tcn / paper))
        assert tcn < paper
    # the paper's JSB numbers are unverified (†): a difference, never a verdict
    assert values["paper_srnn_verdict"] == values["paper_rnn_verdict"] == mr.UNVERIFIED_PAPER
    assert values["paper_lstm_verdict"] == values["paper_slstm_verdict"] == "not comparable"
    below = [v for k, v in values.items() if k.endswith("_below_paper")]
    assert (values["tcn_below_paper_least"], values["tcn_below_paper_most"]) == (
        min(below),
        max(below),
    )


def test_chapter9_values_of_the_training_extents_match_the_committed_files() -> None:
    values = _values()
    runs = mr.load_seed_results("authors")
    stable_best = [run["best_epoch"] for run in runs["lstm-stable"].values()]
    assert values["sgd_slstm_best_first"] == min(stable_best) >= 490  # "still improving"
    early = sorted(
        (run["best_epoch"], run["epochs"][-1]["lr"])
        for run in runs["lstm-unconstrained"].values()
        if run["best_epoch"] < 400
    )
    assert values["sgd_lstm_early_count"] == len(early) == 3
    assert (values["sgd_lstm_early_first"], values["sgd_lstm_early_last"]) == (
        early[0][0],
        early[-1][0],
    )
    assert values["sgd_lstm_early_lr"] == max(lr for _, lr in early) <= 1.0001e-7
    tcn = mr.load_seed_results("adam-tcn")
    for name, short in list(mr.SHORT.items())[:4]:
        best = sorted(run["best_epoch"] for run in tcn[name].values())
        assert (values[f"tcn_{short}_best_first"], values[f"tcn_{short}_best_last"]) == (
            best[0],
            best[-1],
        )
    # "the unconstrained models peak early ... while the stable LSTMs improve to the end"
    assert values["tcn_lstm_best_last"] < 70 and values["tcn_slstm_best_first"] >= 99


def _norms(analysis: dict, name: str) -> list[float]:
    return sorted(x for layer in analysis[name]["jacobian_norms"] for x in layer)


def _ratio(analysis: dict, name: str, distance: int = 20) -> float:
    figure2 = analysis[name]["figure2"]
    return figure2["mean_norm"][figure2["distance"].index(distance)] / figure2["mean_norm"][0]


def test_chapter9_truncation_gaps_in_nats_match_the_analysis_file() -> None:
    """g(k) = NLL(k) - NLL(recurrent) of the lesson's table, recomputed from the authors'
    analysis file (frames 34 on), the 1% tolerance in nats, and the readings of its prose:
    1% is coarser than the unconstrained LSTM's gap at k = 32, which is not zero."""
    values = _values()
    analysis = mr.load_full_analysis(config="authors")
    assert analysis is not None
    for name, short in mr.SHORT.items():
        if name not in analysis:
            continue
        curve = analysis[name]["truncated_eval_after"]
        for k in (1, 4, 8, 16, 32):
            loss = curve["loss"][curve["k"].index(k)]
            assert values[f"m_sgd_{short}_gap{k}"] == pytest.approx(loss - curve["recurrent_loss"])
        assert values[f"m_sgd_{short}_tolerance"] == pytest.approx(0.01 * curve["recurrent_loss"])
    assert 0.005 < values["m_sgd_lstm_gap32"] < values["m_sgd_lstm_tolerance"]
    assert values["m_sgd_slstm_gap16"] < values["m_sgd_slstm_gap8"] / 10
    assert values["m_sgd_rnn_gap32"] < 0.0005


def test_chapter9_values_of_the_measurements_match_the_analysis_files() -> None:
    """The gradient ratios, contexts and Jacobian norms the lesson quotes, recomputed from the
    analysis files, and the comparisons its prose makes between them."""
    values = _values()
    for config, prefix, key in (
        ("authors", "m_sgd", "truncated_eval_after"),
        ("adam-tcn", "m_tcn", "truncated_eval"),
        ("full", "m_full", "truncated_eval"),
    ):
        analysis = mr.load_full_analysis(config=config)
        assert analysis is not None
        for name, short in mr.SHORT.items():
            if name not in analysis:
                continue
            k = f"{prefix}_{short}"
            assert values[f"{k}_grad"] == pytest.approx(100 * _ratio(analysis, name))
            curve = analysis[name][key]
            within = [k for k, loss in zip(curve["k"], curve["loss"], strict=True)
                      if loss <= 1.01 * curve["recurrent_loss"]]  # fmt: skip
            assert values[f"{k}_k"] == within[0]
            if "jacobian_norms" in analysis[name]:
                norms = _norms(analysis, name)
                assert values[f"{k}_jac_min"] == norms[0] and values[f"{k}_jac_max"] == norms[-1]
                assert values[f"{k}_jac_median"] == pytest.approx(statistics.median(norms))
                below = 100 * sum(x < 1 for x in norms) / len(norms)
                assert values[f"{k}_jac_below"] == pytest.approx(below)
    # the lesson, configuration `authors`: the stable models contractive at every sampled
    # state, the unconstrained LSTM at none; the same contexts for all but the stable LSTM
    assert values["m_sgd_srnn_jac_below"] == values["m_sgd_slstm_jac_below"] == 100
    assert values["m_sgd_lstm_jac_below"] == 0 and values["m_sgd_lstm_jac_min"] > 1
    assert values["m_sgd_rnn_k"] == values["m_sgd_srnn_k"] == values["m_sgd_lstm_k"]
    assert values["m_sgd_slstm_k"] < values["m_sgd_rnn_k"] <= 8  # "a model of a few frames"
    assert values["m_sgd_lstm_short"] == "supported"
    assert values["m_sgd_rnn_grad"] < values["gradient_ratio"] < values["m_sgd_lstm_grad"]
    assert values["m_sgd_lstm_vanishes"] == "not supported"
    # "reads each pair, RNN and LSTM, as <one verdict>"
    assert values["sgd_rnn_cost_verdict"] == values["sgd_lstm_cost_verdict"]
    # the same contexts on the first 32 frames (the companion page says so)
    authors = mr.load_full_analysis(config="authors")
    for name in mr.SHORT:
        if name in authors:
            first = mr.context_used(authors[name]["truncated_eval"])
            assert first == mr.context_used(authors[name]["truncated_eval_after"])
    # `adam-tcn`: the unconstrained gradients reach further, no Jacobian below 1, the
    # smallest norm quoted is the smallest of both unconstrained models, contexts within 16
    assert values["m_tcn_srnn_grad"] < 0.2 and values["m_tcn_slstm_grad"] < 0.2
    assert min(values["m_tcn_rnn_grad"], values["m_tcn_lstm_grad"]) > values["gradient_ratio"]
    assert values["m_tcn_rnn_jac_below"] == values["m_tcn_lstm_jac_below"] == 0
    assert values["m_tcn_rnn_jac_min"] == min(
        values["m_tcn_rnn_jac_min"], values["m_tcn_lstm_jac_min"]
    )
    assert values["m_tcn_srnn_k"] < values["m_tcn_rnn_k"] <= values["m_tcn_lstm_k"] <= 16
    assert values["m_tcn_slstm_k"] < values["m_tcn_lstm_k"]
    # `full`: the non-recurrent LSTM is flat from k = 1; the unconstrained LSTM within the
    # baseline's margin though its gradient reaches far
    assert values["m_full_bug_k"] == 1
    assert values["full_lstm_vs_base"] < values["baseline_margin"] < values["m_full_lstm_grad"]


def test_chapter9_companion_values_of_the_ablations_match_the_files() -> None:
    values = _values()
    full, adam = mr.load_results(), mr.load_results(config="adam")
    margin = values["baseline_margin"]
    gaps = {n: 100 * (1 - r["test_nll"] / BASELINE) for n, r in full.items()}
    for name, short in mr.SHORT.items():
        assert values[f"full_{short}_vs_base"] == pytest.approx(gaps[name])
    # "only the two RNNs end below the baseline by more than the margin"
    assert {n for n, g in gaps.items() if g > margin} == {"rnn-unconstrained", "rnn-stable"}
    # "several runs were still improving at their last epoch"
    assert sum(r["best_epoch"] == len(r["epochs"]) == 500 for r in full.values()) >= 3
    # the input-layer table: only the stable LSTM's row may be read, and it ends above
    rows = mr.input_layer_table(full, mr.load_seed_results("authors")).splitlines()[2:]
    readable = [r.split("|")[1].strip() for r in rows if r.endswith("| yes |")]
    assert readable == ["LSTM, stable"]
    assert full["lstm-stable"]["test_nll"] > max(_seeds("authors", "lstm-stable"))
    # the Adam diagnostic: the unconstrained LSTM goes from the worst to the best
    assert min(adam, key=lambda n: adam[n]["test_nll"]) == "lstm-unconstrained"
    assert values["adam_lstm_nll"] == adam["lstm-unconstrained"]["test_nll"]
    assert values["adam_srnn_nll"] == adam["rnn-stable"]["test_nll"]
    four = ("rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable")
    assert max(four, key=lambda n: full[n]["test_nll"]) == "lstm-unconstrained"
    # the stable RNNs of the ablation: no jump like the damaged run's (0.25 nats)
    rises = [b["train_nll"] - a["train_nll"] for runs in (full, adam)
             for a, b in itertools.pairwise(runs["rnn-stable"]["epochs"])]  # fmt: skip
    assert values["ablation_srnn_largest_rise"] == max(rises) < 0.01
    # the non-recurrent LSTM: "about two hours on one core", no row in the seeded configs
    bug = full["lstm-authors-bug"]
    assert 1.5 * 3600 < bug["wall_seconds"] < 2.5 * 3600 and bug["torch_threads"] == 1
    assert "lstm-authors-bug" not in mr.load_seed_results("authors")
    # every earlier adam-tcn run parts from its rerun after its best epoch, if at all
    for entry in mr.load_reruns("adam-tcn")["runs"]:
        split = entry["earlier"].get("validation_split")
        if split and entry["model"] == "rnn-stable":
            assert split["epoch"] > split["best_epoch_earlier"]
    # the criteria table of the companion page
    assert values["reproduce_tolerance"] == values["cost_tolerance"] == 5
    assert values["single_seed_sd"] == 5 and values["gradient_distance"] == 20


# --- the pages as lessons: structure, and nothing lost -----------------------------------


def _figures(path: Path) -> list[str]:
    return [c["metadata"]["mystnb"]["figure"]["name"] for c in _cells(path)
            if c["metadata"].get("mystnb", {}).get("figure", {}).get("name")]  # fmt: skip


def test_chapter9_is_a_lesson_and_the_evidence_is_on_its_companion_page() -> None:
    """Issue 36: the lesson's arc, the main configuration first, no sentence printed, no
    command, every figure once, and every table of the earlier chapter on one of the pages."""
    lesson, companion = _cells(CHAPTER), _cells(COMPANION)
    headings = [line for c in lesson if c["cell_type"] == "markdown"
                for line in _text(c).splitlines() if line.startswith("## ")]  # fmt: skip
    order = ["## The data", "## Model and loss", "## What is trained", "## The result",
             "## What this says about the theory", "## The measurements",
             "## Run it yourself", "## Exercises", "## Summary"]  # fmt: skip
    found = [next(i for i, h in enumerate(headings) if h.startswith(o)) for o in order]
    assert found == sorted(found), headings
    # the main configuration's figures open the measurements; the result figure comes first
    figures = _figures(CHAPTER)
    assert figures[:4] == ["fig-ch09-seeds", "fig-ch09-gradient-authors",
                           "fig-ch09-truncation-authors", "fig-ch09-jacobians-authors"]  # fmt: skip
    both = figures + _figures(COMPANION)
    assert len(both) == len(set(both))  # each figure once on the site
    assert not any("smoke" in name for name in both)  # smoke figures carry no caption
    for cells in (lesson, companion):
        for cell in cells:
            text = _text(cell)
            if cell["cell_type"] == "code":
                # only the run-it-yourself log (numbers, collapsed) and the Colab setup print
                tags = cell["metadata"].get("tags", [])
                printing = "print(" in text and "colab-setup" not in tags
                assert not printing or (cell["id"] == "h11-ch09-smoke" and "hide-output" in tags)
                assert "SMOKE" not in json.dumps(cell["metadata"])
    lesson_md = " ".join(_text(c) for c in lesson if c["cell_type"] == "markdown")
    assert "python -m" not in lesson_md and "LAPACK" not in lesson_md
    for phrase in ("lease", "session", "commit ", "tracker", "exact model"):
        assert phrase not in lesson_md, phrase
    assert "{doc}`every seed, run and verdict <09b_polyphonic_music_evidence>`" in lesson_md
    # the main table carries the paper's numbers; every earlier table is on a page
    code = "\n".join(_text(c) for c in lesson + companion if c["cell_type"] == "code")
    lesson_code = "\n".join(_text(c) for c in lesson if c["cell_type"] == "code")
    assert "results.main_table(baseline)" in lesson_code
    calls = [
        'seeds_table("authors", baseline)',
        'seeds_table("adam-tcn", baseline)',
        "results_table(full, baseline)",
        "optimizer_diagnostic_table(full, adam, baseline)",
        'reruns_table("adam-tcn")',
        "markdown_table(rows)",
        "training_extent_table(",
        "input_layer_table(",
        "early_stop_table(full)",
        "measurements_table(",
    ]
    calls += [
        f'results.run_commands("{config}")' for config in ("authors", "adam-tcn", "full", "adam")
    ]
    for call in calls:
        assert call in code, call
    toc = (ROOT / "_toc.yml").read_text(encoding="utf8")
    assert (
        toc.index("chapters/09_polyphonic_music")
        < toc.index("chapters/09b_polyphonic_music_evidence")
        < toc.index("chapters/homework/hw09_polyphonic_music")
    )


@pytest.mark.book
@pytest.mark.slow
def test_chapter9_glued_values_on_the_built_site_are_the_computed_ones() -> None:
    """The values the built book's executed pages glued are those of the result files."""
    from book_support import BUILD_DIR, build_book
    from stablernn_tools.colab_conversion import executed_glue

    assert build_book().returncode == 0
    for path in (CHAPTER, COMPANION):
        glued = executed_glue(BUILD_DIR / "jupyter_execute" / "chapters" / path.name)
        baseline = float(glued["baseline"]["text/plain"])
        assert baseline == pytest.approx(BASELINE, abs=0.005)
        for key, value in mr.chapter_values(baseline).items():
            shown = glued[key]["text/plain"]
            if isinstance(value, str):
                assert shown.strip("'\"") == value, key
            else:
                assert float(shown) == pytest.approx(value, rel=1e-9), key
