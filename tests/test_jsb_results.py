"""The committed JSB Chorales results: complete, and written by the code as it is now.

Chapter 9 draws its table and figures from ``data/results/jsb``: the four variants and the
authors' non-recurrent LSTM at the authors' scale (config ``full``), the four variants of
the Adam diagnostic (config ``adam``) and the measurements of the full-scale models. A
result of an older config would be shown as this one's, so every file must match
``CONFIGS``; a missing file fails with the command that makes it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest

from stablernn_lib.tasks.jsb.analysis import ALL_VARIANTS, ANALYSIS, TABLE_VARIANTS
from stablernn_lib.tasks.jsb.data import JSB_SPLIT_SIZES
from stablernn_lib.tasks.jsb.train import CONFIGS, RESULTS_DIR, result_file_name, same_config

RUNS = [(cell, variant, "full") for cell, variant in ALL_VARIANTS] + [
    (cell, variant, "adam") for cell, variant in TABLE_VARIANTS
]


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
