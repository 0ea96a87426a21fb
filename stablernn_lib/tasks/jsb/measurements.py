"""Chapter 8's measurements (:mod:`stablernn_lib.tasks.wikitext2.measurements`) on the JSB Chorales
models (Chapter 9), on the first ``frames`` frames of every test chorale: ``(frames, 77, 88)``.
``python -m stablernn_lib jsb-analysis --config full|adam-tcn|authors|smoke`` measures the
trained models of a config (seed 1111) and writes :func:`analysis_path`.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from stablernn_lib.core.io import atomic_write_json, provenance
from stablernn_lib.tasks.jsb.data import PianoRolls, load_jsb
from stablernn_lib.tasks.jsb.results import ALL_VARIANTS, LABELS
from stablernn_lib.tasks.jsb.train import (
    CONFIGS,
    PUBLISHED_RESULTS,
    RESULTS_DIR,
    RUNS_DIR,
    MusicModel,
    load_music_model,
    music_run_name,
)
from stablernn_lib.tasks.wikitext2 import measurements as lma
from stablernn_lib.tasks.wikitext2.model import truncated_outputs


@dataclass(frozen=True)
class MusicAnalysisConfig:
    """Sizes of the measurements; the piano roll of test chorale ``roll_chorale``."""

    frames: int = 32
    max_distance: int = 24
    ks: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
    jacobian_positions: int = 400
    burn_in: int = 8
    roll_chorale: int = 0
    roll_frames: int = 48
    roll_keys: tuple[int, int] = (36, 76)
    roll_ks: tuple[int, ...] = (1, 2, 4, 8, 16, 48)


ANALYSIS = MusicAnalysisConfig()
# What :func:`analyze_model` measures on a model, by the key of its entry.
MEASUREMENTS = ("truncated_eval", "truncated_eval_after", "figure2", "jacobian_norms", "piano_roll")


def measurements_of(recurrent: bool) -> tuple[str, ...]:
    """The measurements of a model (no state Jacobians without recurrence)."""
    return tuple(m for m in MEASUREMENTS if recurrent or m != "jacobian_norms")


def chorale_source(rolls: list[Tensor], frames: int) -> Tensor:
    """The first ``frames`` frames of every chorale that has that many: ``(frames, N, 88)``."""
    kept = [roll[:frames] for roll in rolls if roll.shape[0] >= frames]
    if not kept:
        raise ValueError(f"no chorale has {frames} frames; use a smaller `frames`")
    return torch.stack(kept, dim=1)


@torch.no_grad()
def piano_roll_probabilities(
    model: MusicModel, roll: Tensor, ks: tuple[int, ...], keys: tuple[int, int]
) -> dict[str, Any]:
    """``probs[k][t][j]``: the probability that key ``keys[0] + j`` sounds at frame ``t + 1``
    given frames ``max(0, t-k+1) .. t`` of ``roll (T, 88)``."""
    model.eval()
    source = roll[:, None]  # (T, 1, 88)
    low, high = keys
    probs = {}
    for k in ks:
        outputs = truncated_outputs(model, source, 0, source.shape[0] - 1, k)
        p = torch.sigmoid(model.decode(outputs))[:, 0, low:high]
        probs[str(k)] = p.round(decimals=3).tolist()
    return {"keys": list(keys), "roll": roll[:, low:high].int().tolist(), "probs": probs}


@torch.no_grad()
def truncated_eval_after(
    model: MusicModel, chorales: list[Tensor], ks: tuple[int, ...], start: int
) -> dict[str, Any]:
    """NLL per frame of the context-``k`` models and of the recurrent model on the predictions
    of frame ``t + 1`` for ``t >= start >= max(ks)`` only (where every ``k`` truncates; a row
    ``t < k`` would equal the recurrent model)."""
    if max(ks) > start:
        raise ValueError(
            f"context k = {max(ks)} exceeds the first scored row {start}: a row t < k is not "
            "truncated; score from a later row or drop the larger contexts"
        )
    model.eval()
    totals, recurrent, positions, used = [0.0] * len(ks), 0.0, 0, 0
    for roll in chorales:
        scored = roll.shape[0] - 1 - start  # rows start .. T-2 predict frames start+1 .. T-1
        if scored < 1:
            continue
        source, targets = roll[:, None], roll[start + 1 :, None]
        outputs, _ = model.recur(model.embed(source))
        recurrent += float(model.token_nll(outputs[start:-1], targets).sum())
        for i, k in enumerate(ks):
            truncated = truncated_outputs(model, source, start, scored, k)
            totals[i] += float(model.token_nll(truncated, targets).sum())
        positions, used = positions + scored, used + 1
    if not positions:
        raise ValueError(f"no chorale is longer than {start + 1} frames; score from an earlier row")
    return {
        "k": list(ks),
        "loss": [total / positions for total in totals],
        "recurrent_loss": recurrent / positions,
        "scored_from": start,
        "positions": positions,
        "chorales": used,
    }


def analyze_model(
    model: MusicModel, rolls: PianoRolls, config: MusicAnalysisConfig, done: tuple[str, ...] = ()
) -> dict:
    """Every measurement of one trained model not in ``done``, with its ``seconds``."""
    source = chorale_source(rolls.test, config.frames)
    measurements = {
        "truncated_eval": lambda: lma.truncated_eval_curve(model, source, list(config.ks)),
        "truncated_eval_after": lambda: truncated_eval_after(
            model, rolls.test, config.ks, config.frames
        ),
        "figure2": lambda: lma.gradient_by_distance(model, source, config.max_distance),
        "jacobian_norms": lambda: lma.state_jacobian_norms(
            model, source, config.jacobian_positions, config.burn_in
        ),
        "piano_roll": lambda: piano_roll_probabilities(
            model,
            rolls.test[config.roll_chorale][: config.roll_frames],
            config.roll_ks,
            config.roll_keys,
        ),
    }
    entry: dict[str, Any] = {"seconds": {}}
    for name in measurements_of(recurrent=not model.authors_bug):
        if name not in done:
            clock = time.perf_counter()
            entry[name] = measurements[name]()
            entry["seconds"][name] = time.perf_counter() - clock
    return entry


def analysis_path(config: str, runs_dir: str | Path | None = None) -> Path:
    """Where a config's measurements go: committed for ``full`` and published configs with a
    folder, else the runs folder."""
    folder = PUBLISHED_RESULTS.get(config, ("",))[0]
    if config == "full" or folder:
        return RESULTS_DIR / folder / "analysis.json"
    return (Path(runs_dir) if runs_dir is not None else RUNS_DIR) / f"analysis-{config}.json"


def run_music_analysis(
    config: str = "smoke",
    *,
    rolls: PianoRolls | None = None,
    data_dir: str | Path | None = None,
    runs_dir: str | Path | None = None,
    results_path: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Measure every trained model of a config (the others listed as ``missing``), written to
    ``results_path`` (:func:`analysis_path`) after each; a rerun keeps what is measured."""
    music_config = CONFIGS[config]
    runs = Path(runs_dir) if runs_dir is not None else RUNS_DIR
    results_path = Path(results_path) if results_path is not None else analysis_path(config, runs)
    rolls = rolls if rolls is not None else load_jsb(data_dir)
    fresh = {"config": asdict(ANALYSIS), "music_config": asdict(music_config)}
    result = lma.resumed(
        results_path, fresh | {"provenance": provenance("cpu")}, "music_config", music_config
    )
    result["missing"] = []
    for cell, variant in ALL_VARIANTS:
        name = f"{cell}-{variant}"
        run_dir = runs / music_run_name(cell, variant, music_config)
        entry = result.get(name, {"seconds": {}})
        wanted = measurements_of(recurrent=variant != "authors-bug")
        done = tuple(part for part in wanted if part in entry)
        if done == wanted:
            continue
        if not (run_dir / "model.pt").is_file():
            if name not in result:
                result["missing"].append(name)
            continue
        if progress:
            print(f"measuring {name} ({run_dir})", flush=True)
        measured = analyze_model(load_music_model(run_dir), rolls, ANALYSIS, done)
        seconds = entry["seconds"] | measured.pop("seconds")
        result[name] = entry | measured | {"seconds": seconds}
        atomic_write_json(results_path, result)
    atomic_write_json(results_path, result)
    return result


def _command(args: argparse.Namespace) -> int:
    result = run_music_analysis(args.config, data_dir=args.data)
    measured = [name for name in result if name in LABELS]
    print(f"measured: {measured}; missing (train them first): {result['missing']}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """``python -m stablernn_lib jsb-analysis --config smoke|full``."""
    parser = subparsers.add_parser(
        "jsb-analysis",
        help="gradient, truncation and Jacobian measurements on the JSB models (Chapter 9)",
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default="full")
    parser.add_argument("--data", default=None, help="folder of JSB_Chorales.mat")
    parser.set_defaults(func=_command)
