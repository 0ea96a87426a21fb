"""Unfinished full-scale runs (a GPU lease ended): how they are read, and what Chapter 8 says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stablernn_lib.core.io import same_config
from stablernn_lib.tasks.wikitext2 import results
from stablernn_lib.tasks.wikitext2.train import CONFIGS

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"


def _write_run(folder: Path, jobs: list[tuple[str, bool, str, list[tuple[float, float]]]]) -> None:
    """A plan with one job per (cell, stable, config, [(val_ppl, lr) per epoch]) and its metrics."""
    plan_jobs = []
    for cell, stable, config, epochs in jobs:
        name = f"{cell}-{'stable' if stable else 'unconstrained'}-{config}-seed1111"
        fields = json.loads(json.dumps(CONFIGS[config].__dict__))
        plan_jobs.append({"name": name, "cell": cell, "stable": stable, "config": fields})
        rows = [
            {"epoch": i + 1, "val_ppl": ppl, "lr": lr, "train_ppl": ppl + 1}
            for i, (ppl, lr) in enumerate(epochs)
        ]
        (folder / f"{name}.metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    provenance = {"device": "Test GPU", "git_commit": "abc", "criteria_commit": "def"}
    (folder / "plan.json").write_text(json.dumps({"jobs": plan_jobs, "provenance": provenance}))


def test_a_folder_without_plan_has_no_runs(tmp_path: Path) -> None:
    assert results.load_partial_runs(tmp_path) == {}
    assert results.equal_epoch_gaps({}) == {}


def test_gaps_at_the_last_common_epoch_and_before_the_first_cut(tmp_path: Path) -> None:
    _write_run(
        tmp_path,
        [
            ("lstm", False, "full", [(300.0, 20), (200.0, 20), (150.0, 5), (140.0, 5)]),
            ("lstm", True, "full", [(330.0, 20), (260.0, 20), (240.0, 20)]),
        ],
    )
    runs = results.load_partial_runs(tmp_path)
    assert set(runs) == {"lstm-unconstrained", "lstm-stable"}
    gaps = results.equal_epoch_gaps(runs)["lstm"]
    # last common epoch: 3 (the stable run stopped there); rates differ there (5 vs 20)
    assert gaps["last"]["epoch"] == 3
    assert gaps["last"]["gap"] == pytest.approx(240 / 150 - 1)
    assert (gaps["last"]["unconstrained_lr"], gaps["last"]["stable_lr"]) == (5, 20)
    # before the first cut: epoch 2, both at the starting rate 20
    assert gaps["uncut"]["epoch"] == 2
    assert gaps["uncut"]["gap"] == pytest.approx(260 / 200 - 1)
    assert runs["lstm-stable"]["provenance"]["device"] == "Test GPU"
    table = results.partial_runs_table(runs)
    assert "| LSTM, unconstrained | `full` (lr 20) | 4 of 40 | 140.0 (4) |" in table
    assert "| LSTM, stable | `full` (lr 20) | 3 of 40 | 240.0 (3) |" in table


def test_equal_rates_need_no_second_comparison(tmp_path: Path) -> None:
    _write_run(
        tmp_path,
        [
            ("rnn", False, "full-rnn-lr2", [(400.0, 2), (300.0, 2)]),
            ("rnn", True, "full-rnn-lr2", [(390.0, 2), (294.0, 2)]),
        ],
    )
    gaps = results.equal_epoch_gaps(results.load_partial_runs(tmp_path))["rnn"]
    assert gaps["last"]["gap"] == pytest.approx(-0.02)
    assert gaps["uncut"] == gaps["last"]  # never cut: the two comparisons coincide


def test_a_run_cut_at_the_first_epoch_has_no_uncut_comparison(tmp_path: Path) -> None:
    _write_run(
        tmp_path,
        [
            ("rnn", False, "full-rnn-lr2", [(400.0, 0.5), (300.0, 0.5)]),
            ("rnn", True, "full-rnn-lr2", [(390.0, 2), (294.0, 2)]),
        ],
    )
    gaps = results.equal_epoch_gaps(results.load_partial_runs(tmp_path))["rnn"]
    assert "uncut" not in gaps and gaps["last"]["epoch"] == 2


def test_damaged_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    _write_run(tmp_path, [("lstm", False, "full", [(300.0, 20), (200.0, 20)])])
    metrics = tmp_path / "lstm-unconstrained-full-seed1111.metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(reversed(lines)) + "\n")
    with pytest.raises(ValueError, match="not 1, 2, ... in order"):
        results.load_partial_runs(tmp_path)


def test_two_unfinished_runs_of_one_model_are_refused(tmp_path: Path) -> None:
    _write_run(
        tmp_path,
        [
            ("lstm", False, "full", [(300.0, 20)]),
            ("lstm", False, "full-650", [(280.0, 20)]),
        ],
    )
    with pytest.raises(ValueError, match="two unfinished runs of lstm-unconstrained"):
        results.load_partial_runs(tmp_path)


# --- the committed files -----------------------------------------------------------------


def _committed_curves() -> dict[str, list[dict]]:
    """The committed metrics, read without the library: job name -> rows."""
    return {
        path.name.removesuffix(".metrics.jsonl"): [
            json.loads(line) for line in path.read_text().splitlines() if line.strip()
        ]
        for path in results.PARTIAL_DIR.glob("*.metrics.jsonl")
    }


def test_committed_unfinished_runs_match_the_code_and_say_where_they_ran() -> None:
    plan = json.loads((results.PARTIAL_DIR / "plan.json").read_text())
    jobs = {job["name"]: job for job in plan["jobs"]}
    curves = _committed_curves()
    assert set(curves) == {
        "lstm-unconstrained-full-seed1111",
        "lstm-stable-full-seed1111",
        "rnn-unconstrained-full-rnn-lr2-seed1111",
        "rnn-stable-full-rnn-lr2-seed1111",
    }
    for name, rows in curves.items():
        config = jobs[name]["config"]
        assert same_config(config, CONFIGS[config["name"]]), name
        assert 0 < len(rows) < config["epochs"], "a finished run belongs in a result file"
        assert [row["epoch"] for row in rows] == list(range(1, len(rows) + 1))
    assert plan["provenance"]["device"] == "NVIDIA H200"
    assert plan["provenance"]["criteria_commit"].startswith("edf3b22")


def test_table_rows_are_the_files_best_epochs() -> None:
    table = results.partial_runs_table(results.load_partial_runs())
    for name, rows in _committed_curves().items():
        best = min(row["val_ppl"] for row in rows)
        at = 1 + [row["val_ppl"] for row in rows].index(best)
        assert f"| {len(rows)} of 40 | {best:.1f} ({at}) |" in table, name


def _prose() -> str:
    """The Markdown of Chapter 8 and of its evidence page, whitespace collapsed."""
    text = []
    for name in ("08_wikitext2_experiments", "08b_wikitext2_evidence"):
        cells = json.loads((CHAPTERS / f"{name}.ipynb").read_text(encoding="utf8"))["cells"]
        text += ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return " ".join(" ".join(text).split())


def _gap(curves: dict[str, list[dict]], cell: str, config: str, epoch: int) -> float:
    free, stable = (
        curves[f"{cell}-{variant}-{config}-seed1111"][epoch - 1]["val_ppl"]
        for variant in ("unconstrained", "stable")
    )
    return 100 * (stable - free) / free


def test_chapter8_reading_of_the_unfinished_runs_holds() -> None:
    """The numbers of the reading, each recomputed from the metrics files."""
    from chapter8_text import chapter8_numbers

    curves = _committed_curves()
    numbers = chapter8_numbers()
    text = _prose()
    lstm_free = curves["lstm-unconstrained-full-seed1111"]
    lstm_stable = curves["lstm-stable-full-seed1111"]
    rnn_free = curves["rnn-unconstrained-full-rnn-lr2-seed1111"]
    rnn_stable = curves["rnn-stable-full-rnn-lr2-seed1111"]
    # the LSTMs: uncut through epoch 8; the gaps there and at 16
    assert len(lstm_free) == len(lstm_stable) == 16
    uncut = max(e for e in range(1, 17) if lstm_free[e - 1]["lr"] == lstm_stable[e - 1]["lr"] == 20)
    assert uncut == 8 and all(lstm_stable[e]["lr"] < 20 for e in range(8, 16))
    assert numbers["full_lstm_uncut_epoch"] == 8 and numbers["full_lstm_last_epoch"] == 16
    assert numbers["full_lstm_uncut_gap"] == pytest.approx(_gap(curves, "lstm", "full", 8))
    assert numbers["full_lstm_last_gap"] == pytest.approx(_gap(curves, "lstm", "full", 16))
    # the RNNs: stable better after epoch 12, the last before the unconstrained one's cut
    assert rnn_free[11]["lr"] == rnn_stable[11]["lr"] == 2 and rnn_free[12]["lr"] < 2
    assert numbers["full_rnn_uncut_epoch"] == 12 and numbers["full_rnn_uncut_gap"] < 0
    assert numbers["full_rnn_uncut_gap"] == pytest.approx(_gap(curves, "rnn", "full-rnn-lr2", 12))
    assert numbers["full_rnn_last_gap"] == pytest.approx(_gap(curves, "rnn", "full-rnn-lr2", 14))
    assert len(rnn_stable) == 14 and rnn_stable[13]["lr"] == 2
    # like with like after 6 epochs: seed 1111 here and at the cpu scale
    cpu = results.RESULTS_DIR / "cpu"
    cpu_free, cpu_stable = (
        json.loads((cpu / f"lstm-{v}.json").read_text())["epochs"][5]["val_ppl"]
        for v in ("unconstrained", "stable")
    )
    assert numbers["full_lstm_gap6"] == pytest.approx(_gap(curves, "lstm", "full", 6))
    assert numbers["cpu_lstm_val_gap6"] == pytest.approx(100 * (cpu_stable - cpu_free) / cpu_free)
    plan = json.loads((results.PARTIAL_DIR / "plan.json").read_text())
    full_lr = next(
        j["config"]["lr"] for j in plan["jobs"] if j["name"] == "lstm-stable-full-seed1111"
    )
    assert full_lr / json.loads((cpu / "lstm-stable.json").read_text())["config"]["lr"] == 4
    assert "four times the learning rate" in text
    epochs = sorted(len(rows) for rows in curves.values())
    assert (numbers["full_epochs_min"], numbers["full_epochs_max"]) == (epochs[0], epochs[-1])
    for key in ("full_lstm_uncut_gap:.1f", "full_rnn_uncut_gap:.1f", "full_lstm_gap6:+.1f",
                "cpu_lstm_val_gap6:+.1f", "full_epochs_max"):  # fmt: skip
        assert f"{{glue:text}}`{key}`" in text, key


def test_chapter8_quotes_no_number_of_runs_without_a_result_file() -> None:
    """The earlier full-scale runs whose result files were not kept are not quoted at all."""
    text = _prose()
    for number in ("146.5", "147.5", "190.9", "152.1", "150.5", "batch 157", "432, 210"):
        assert number not in text, number
    assert "were not kept" not in text
