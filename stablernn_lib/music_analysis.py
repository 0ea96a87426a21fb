"""Chapter 8's measurements on the JSB Chorales models (Chapter 9), and the chapter's views.

The measurements are the functions of :mod:`stablernn_lib.lm_analysis`, which take any
model with ``embed`` / ``recur`` / ``token_nll`` and a held-out *source* ``(N, B, ...)``
whose rows are time steps.  Here the source is the first ``frames`` frames of every
test chorale (all 77 have at least 32), a tensor ``(frames, 77, 88)``.

``python -m stablernn_lib jsb-analysis --config full|smoke`` measures every trained
model found in ``data/runs/jsb`` and writes ``data/results/jsb/analysis.json`` (full) or
``analysis-smoke.json`` in the runs folder; a rerun computes only what is missing.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from stablernn_lib import lm_analysis as lma
from stablernn_lib import paper_claims
from stablernn_lib.io import atomic_write_json, provenance
from stablernn_lib.language_model import truncated_outputs
from stablernn_lib.music import (
    CONFIGS,
    RESULTS_DIR,
    RUNS_DIR,
    MusicModel,
    load_music_model,
    music_run_name,
    result_file_name,
)
from stablernn_lib.music_data import PianoRolls, load_jsb
from stablernn_lib.style import finish, model_color

# The variants of the chapter's table, in order (model, variant).
TABLE_VARIANTS: tuple[tuple[str, str], ...] = (
    ("rnn", "unconstrained"),
    ("rnn", "stable"),
    ("lstm", "unconstrained"),
    ("lstm", "stable"),
)
ALL_VARIANTS = (*TABLE_VARIANTS, ("lstm", "authors-bug"))
PAPER_KEYS = {(cell, variant): f"jsb-{cell}-{variant}-nll" for cell, variant in TABLE_VARIANTS}
LABELS = {
    "rnn-unconstrained": "RNN",
    "rnn-stable": "RNN, stable",
    "lstm-unconstrained": "LSTM",
    "lstm-stable": "LSTM, stable",
    "lstm-authors-bug": "LSTM, authors' bug (no recurrence)",
}


@dataclass(frozen=True)
class MusicAnalysisConfig:
    """What the measurements read: the first ``frames`` frames of every test chorale;
    gradients up to ``max_distance``; contexts ``ks``; ``jacobian_positions`` states after
    ``burn_in`` steps; the piano-roll view shows test chorale ``roll_chorale``, its first
    ``roll_frames`` frames, keys ``roll_keys``, for contexts ``roll_ks``."""

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
    """The model's probability of every key at every step, as a context-``k`` model.

    ``probs[k][t][j]`` is the predicted probability that key ``keys[0] + j`` sounds at
    frame ``t + 1`` given frames ``max(0, t-k+1) .. t``; ``roll`` is ``(T, 88)``.
    """
    model.eval()
    source = roll[:, None]  # (T, 1, 88)
    low, high = keys
    probs = {}
    for k in ks:
        outputs = truncated_outputs(model, source, 0, source.shape[0] - 1, k)
        p = torch.sigmoid(model.decode(outputs))[:, 0, low:high]
        probs[str(k)] = p.round(decimals=3).tolist()
    return {"keys": list(keys), "roll": roll[:, low:high].int().tolist(), "probs": probs}


def analyze_model(model: MusicModel, rolls: PianoRolls, config: MusicAnalysisConfig) -> dict:
    """Every measurement of one trained model, with the wall time of each."""
    source = chorale_source(rolls.test, config.frames)
    measurements = {
        "truncated_eval": lambda: lma.truncated_eval_curve(model, source, list(config.ks)),
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
    if model.authors_bug:  # no recurrence: no state map, and gradients reach distance 0 only
        measurements.pop("jacobian_norms")
    entry: dict[str, Any] = {"seconds": {}}
    for name, compute in measurements.items():
        clock = time.perf_counter()
        entry[name] = compute()
        entry["seconds"][name] = time.perf_counter() - clock
    return entry


def run_music_analysis(
    config: str = "smoke",
    *,
    rolls: PianoRolls | None = None,
    data_dir: str | Path | None = None,
    runs_dir: str | Path | None = None,
    results_path: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Measure every trained model of a config (those not trained yet are listed as missing).

    Reads ``<runs_dir>/<model>-<variant>-<config>/model.pt``; writes the result (after
    every model, atomically) to ``results_path`` (default: ``data/results/jsb/analysis.json``
    for full, ``analysis-<config>.json`` in the runs folder otherwise).  A rerun keeps the
    models already measured with the same settings.
    """
    music_config = CONFIGS[config]
    runs = Path(runs_dir) if runs_dir is not None else RUNS_DIR
    if results_path is None:
        results_path = (
            RESULTS_DIR / "analysis.json"
            if config == "full"
            else (runs / f"analysis-{config}.json")
        )
    results_path = Path(results_path)
    rolls = rolls if rolls is not None else load_jsb(data_dir)
    result: dict[str, Any] = json.loads(
        json.dumps({"config": asdict(ANALYSIS), "music_config": asdict(music_config)})
    )
    if results_path.is_file():
        previous = json.loads(results_path.read_text(encoding="utf8"))
        if (previous.get("config"), previous.get("music_config")) == (
            result["config"],
            result["music_config"],
        ):
            result = previous
    result["provenance"] = provenance("cpu")
    result["missing"] = []
    for cell, variant in ALL_VARIANTS:
        name = f"{cell}-{variant}"
        run_dir = runs / music_run_name(cell, variant, music_config)
        if name in result:
            continue
        if not (run_dir / "model.pt").is_file():
            result["missing"].append(name)
            continue
        if progress:
            print(f"measuring {name} ({run_dir})", flush=True)
        result[name] = analyze_model(load_music_model(run_dir), rolls, ANALYSIS)
        atomic_write_json(results_path, result)
    atomic_write_json(results_path, result)
    return result


# ---------------------------------------------------------------------------
# The chapter's table and figures
# ---------------------------------------------------------------------------


def load_full_analysis(results_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The committed measurements of the full-scale models, or None when not yet run."""
    path = (Path(results_dir) if results_dir is not None else RESULTS_DIR) / "analysis.json"
    return json.loads(path.read_text(encoding="utf8")) if path.is_file() else None


def load_results(
    results_dir: str | Path | None = None, config: str = "full"
) -> dict[str, dict[str, Any]]:
    """The committed result files of a published config (``"full"``, or the ``"adam"``
    diagnostic), by ``<model>-<variant>`` (missing ones absent)."""
    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    found = {}
    for cell, variant in ALL_VARIANTS:
        path = folder / result_file_name(cell, variant, config)
        if path.is_file():
            found[f"{cell}-{variant}"] = json.loads(path.read_text(encoding="utf8"))
    return found


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def results_table(results: dict[str, dict[str, Any]], smoke: dict[str, dict] | None = None) -> str:
    """Markdown table: test NLL per time step, ours (full scale, and smoke if given) and the
    paper's (with its source mark)."""
    header = "| model | ours, authors' scale | epochs run | best epoch | wall time |"
    rule = "| --- | --- | --- | --- | --- |"
    if smoke is not None:
        header += " ours, smoke |"
        rule += " --- |"
    header += " reported by the paper |"
    rule += " --- |"
    lines = [header, rule]
    for cell, variant in ALL_VARIANTS:
        name = f"{cell}-{variant}"
        result = results.get(name)
        if result is not None and "test_nll" in result:
            ours = f"{result['test_nll']:.2f}"
            ran = str(len(result["epochs"]))
            best = str(result["best_epoch"])
            wall = _minutes(result["wall_seconds"])
        else:
            ours, ran, best, wall = "not yet run", "", "", ""
        row = f"| {LABELS[name]} | {ours} | {ran} | {best} | {wall} |"
        if smoke is not None:
            entry = smoke.get(name)
            row += f" {entry['test_nll']:.2f} |" if entry and "test_nll" in entry else " |"
        key = PAPER_KEYS.get((cell, variant))
        row += f" {paper_claims.marked(key)} |" if key else " (not a row of the paper) |"
        lines.append(row)
    return "\n".join(lines)


def optimizer_diagnostic_table(
    sgd: dict[str, dict[str, Any]], adam: dict[str, dict[str, Any]]
) -> str:
    """Markdown table: test NLL of each variant trained by the authors' SGD schedule and by
    the Adam diagnostic (same model, data and seed), with the paper's number."""
    lines = [
        "| model | SGD, authors' schedule (epochs) | Adam lr 1e-3, diagnostic (best epoch of 50) "
        "| reported by the paper |",
        "| --- | --- | --- | --- |",
    ]
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        cells = []
        for results in (sgd, adam):
            result = results.get(name)
            if result is not None and "test_nll" in result:
                epochs = len(result["epochs"]) if results is sgd else result["best_epoch"]
                cells.append(f"{result['test_nll']:.2f} ({epochs})")
            else:
                cells.append("not yet run")
        marked = paper_claims.marked(PAPER_KEYS[(cell, variant)])
        lines.append(f"| {LABELS[name]} | {cells[0]} | {cells[1]} | {marked} |")
    return "\n".join(lines)


def describe_differences(results: dict[str, dict[str, Any]]) -> list[str]:
    """One sentence per finished variant: ours minus the paper's number."""
    sentences = []
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        if name in results and "test_nll" in results[name]:
            ours = results[name]["test_nll"]
            key = PAPER_KEYS[(cell, variant)]
            sentences.append(
                f"{LABELS[name]}: ours {ours:.2f}, the paper {paper_claims.marked(key)}: "
                f"{ours - paper_claims.value(key):+.2f} nats per time step"
            )
    return sentences


def stability_cost_sentences(
    results: dict[str, dict[str, Any]], label: str, tolerance: float = 0.02
) -> list[str]:
    """For the RNN and the LSTM: the stable model's test NLL against its unconstrained twin's.

    The paper's claim "stability costs little" is read as: the stable model's NLL is at
    most ``tolerance`` (relative) above the unconstrained one's.  A pair with a missing
    run gets a sentence that says so, never a verdict.
    """
    sentences = []
    for cell in ("rnn", "lstm"):
        free, stable = results.get(f"{cell}-unconstrained"), results.get(f"{cell}-stable")
        model = LABELS[f"{cell}-unconstrained"]
        if not (free and stable and "test_nll" in free and "test_nll" in stable):
            sentences.append(f"{model} ({label}): a run of the pair has not finished.")
            continue
        gap = stable["test_nll"] - free["test_nll"]
        relative = gap / free["test_nll"]
        verdict = "supports" if relative <= tolerance else "does not support"
        sentences.append(
            f"{model} ({label}): stable {stable['test_nll']:.2f} vs unconstrained "
            f"{free['test_nll']:.2f} ({gap:+.2f} nats, {100 * relative:+.1f}%); this {verdict} "
            f"the claim that stability costs little (criterion: at most "
            f"{100 * tolerance:.0f}% higher NLL)."
        )
    return sentences


def plot_learning_curves(results: dict[str, dict[str, Any]], title: str = "") -> Figure:
    """Validation NLL per epoch of every run (log epochs), with the epochs where lr dropped."""
    figure, axis = plt.subplots(figsize=(6.5, 3.6))
    for name, result in results.items():
        epochs = [m["epoch"] for m in result["epochs"]]
        axis.semilogx(
            epochs, [m["val_nll"] for m in result["epochs"]], color=model_color(name),
            label=LABELS[name],
        )  # fmt: skip
    axis.set_xlabel("epoch")
    axis.set_ylabel("validation NLL per step")
    axis.set_title(title)
    axis.legend()
    figure.tight_layout()
    return finish(figure)


def plot_truncated_nll(analysis: dict[str, Any], title: str = "") -> Figure:
    """Test NLL of the context-``k`` model against ``k``; dashed: the recurrent model."""
    figure, axis = plt.subplots(figsize=(6.5, 3.6))
    for name, entry in analysis.items():
        if not (isinstance(entry, dict) and "truncated_eval" in entry):
            continue
        curve, color = entry["truncated_eval"], model_color(name)
        axis.semilogx(curve["k"], curve["loss"], "o-", ms=3, color=color, label=LABELS[name])
        axis.axhline(curve["recurrent_loss"], ls="--", lw=0.8, color=color)
    axis.set_xlabel("context k (frames)")
    axis.set_ylabel("test NLL per step")
    axis.set_title(title)
    axis.legend()
    figure.tight_layout()
    return finish(figure)


def context_used(curve: dict[str, Any], tolerance: float = 0.01) -> int | None:
    """The smallest ``k`` whose NLL is within ``tolerance`` (relative) of the recurrent one."""
    for k, loss in zip(curve["k"], curve["loss"], strict=True):
        if loss <= curve["recurrent_loss"] * (1 + tolerance):
            return k
    return None


def describe_truncation(analysis: dict[str, Any], tolerance: float = 0.01) -> list[str]:
    """For every model: the NLL at k = 1 and the context that comes within ``tolerance``."""
    sentences = []
    for name, entry in analysis.items():
        if not (isinstance(entry, dict) and "truncated_eval" in entry):
            continue
        curve = entry["truncated_eval"]
        k = context_used(curve, tolerance)
        reach = (
            f"within {tolerance:.0%} of it from k = {k} frames on"
            if k is not None
            else f"never within {tolerance:.0%} of it up to k = {curve['k'][-1]}"
        )
        sentences.append(
            f"{LABELS[name]}: recurrent NLL {curve['recurrent_loss']:.2f}; context 1 gives "
            f"{curve['loss'][0]:.2f}; {reach}"
        )
    return sentences


def piano_roll_contexts(entry: dict[str, Any]) -> list[int]:
    """The contexts ``k`` of a piano-roll entry in increasing order (read back from JSON, its
    keys are strings, which sort as text: "1", "16", "2")."""
    return sorted(int(k) for k in entry["probs"])


def draw_piano_roll(entry: dict[str, Any], k: int, name: str = "") -> Figure:
    """The chorale (black: keys that sound) and the context-``k`` model's probabilities."""
    roll = np.array(entry["roll"], dtype=float)
    probs = np.array(entry["probs"][str(k)], dtype=float)
    low, high = entry["keys"]
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    extent = (0.5, roll.shape[0] + 0.5, low - 0.5, high - 0.5)
    axes[0].imshow(roll.T, origin="lower", aspect="auto", cmap="Greys", extent=extent)
    axes[0].set_title("the chorale")
    axes[0].set_ylabel("piano key")
    image = axes[1].imshow(
        probs.T, origin="lower", aspect="auto", cmap="magma", vmin=0, vmax=1,
        extent=(1.5, probs.shape[0] + 1.5, low - 0.5, high - 0.5),
    )  # fmt: skip
    frames, keys = roll[1:].nonzero()
    axes[1].scatter(frames + 2, keys + low, s=3, c="cyan", marker="s", lw=0)
    axes[1].set_title(f"{LABELS.get(name, name)}: predicted, context k = {k}", fontsize=9)
    for axis in axes:
        axis.set_xlabel("frame (time step of the score)")
    figure.colorbar(image, ax=axes[1], fraction=0.05, label="P(key sounds)")
    figure.tight_layout()
    return finish(figure)


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
