"""Chapter 8's measurements on the JSB Chorales models (Chapter 9), and the chapter's views.

The measurements are the functions of :mod:`stablernn_lib.tasks.wikitext2.analysis`, which take any
model with ``embed`` / ``recur`` / ``token_nll`` and a held-out *source* ``(N, B, ...)``
whose rows are time steps.  Here the source is the first ``frames`` frames of every
test chorale (all 77 have at least 32), a tensor ``(frames, 77, 88)``.

``python -m stablernn_lib jsb-analysis --config full|adam-tcn|authors|smoke`` measures every
trained model of that config (seed 1111) found in ``data/runs/jsb`` and writes
``data/results/jsb/analysis.json`` (full), ``data/results/jsb/<config>/analysis.json``
(adam-tcn, authors) or ``analysis-<config>.json`` in the runs folder (the others); a rerun
computes only what is missing.
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
from matplotlib.ticker import ScalarFormatter
from torch import Tensor

from stablernn_lib.core import criteria, paper_claims
from stablernn_lib.core.io import atomic_write_json, provenance, same_config
from stablernn_lib.core.plot_helpers import finish_axis, plot_truncated_curves
from stablernn_lib.core.style import finish, model_color
from stablernn_lib.tasks import training
from stablernn_lib.tasks.jsb.data import PianoRolls, load_jsb
from stablernn_lib.tasks.jsb.train import (
    CONFIGS,
    PUBLISHED_RESULTS,
    RESULTS_DIR,
    RUNS_DIR,
    MusicModel,
    load_music_model,
    music_run_name,
    result_file_name,
)
from stablernn_lib.tasks.wikitext2 import analysis as lma
from stablernn_lib.tasks.wikitext2.model import truncated_outputs

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
# A measurement reads one trained model (the config's own seed), not the seeds the criteria
# ask of a comparison: its verdict is indicative.
ONE_MODEL = "one model, seed 1111: indicative"
BASELINE_LABEL = "no memory: each key on at its training frequency"
# The configs whose setting is the authors' (their architecture, without the input layer, and
# their SGD schedule, with the departures listed in Chapter 9): their tables carry the paper's
# numbers.
PAPER_SETTING_CONFIGS: tuple[str, ...] = ("authors",)
# The configs trained with several seeds (the config's own, then 1, 2, ...), and the flags
# beyond the config that the committed runs of a config used (data/results/jsb/README.md).
SEEDED_CONFIGS: tuple[str, ...] = ("authors", "adam-tcn")
# The cells whose model is not the one the authors' code trains, so that its number in the
# paper's table is not ours to reproduce (Chapter 9's departures), with the reason.
NOT_THE_AUTHORS_MODEL: dict[str, str] = {
    "lstm": "our LSTM is recurrent, the LSTM of the authors' code is not (departure 1)"
}
RUN_FLAGS: dict[str, str] = {"full": "--stop-below-lr 1e-5"}
# The verdict of ``reproduces_paper`` against a number the course has not checked in the
# paper (marked †): none, as the course's page on the paper's numbers says.
UNVERIFIED_PAPER = "no verdict: the paper's number is unverified"


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
# What :func:`analyze_model` measures on a model, by the key of its entry.
MEASUREMENTS = ("truncated_eval", "truncated_eval_after", "figure2", "jacobian_norms", "piano_roll")


def measurements_of(recurrent: bool) -> tuple[str, ...]:
    """The measurements of a model: all of them, less the state Jacobians of a model without
    recurrence (the authors' bug), which has no state map."""
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


@torch.no_grad()
def truncated_eval_after(
    model: MusicModel, chorales: list[Tensor], ks: tuple[int, ...], start: int
) -> dict[str, Any]:
    """NLL per frame of the context-``k`` models and of the recurrent model, scored only where
    every ``k`` truncates: the prediction of frame ``t + 1`` from frames ``0 .. t`` (0-based)
    for every ``t >= start`` of every chorale ``(T, 88)`` with ``T >= start + 2`` frames; with
    ``start = 32``, each chorale's frames from the 34th on.

    On a chorale's first frames a context-``k`` model with ``k > t`` sees the whole prefix and
    equals the recurrent model; scoring those rows (as :func:`truncated_eval_curve` on the
    first ``frames`` frames does) adds zero gaps and makes every ``k >= frames - 1`` exact.
    Here, with ``max(ks) <= start``, the window ``t-k+1 .. t`` of every scored row starts
    after frame 0, so every scored prediction of every ``k`` is a truncated one.
    """
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
    """Every measurement of one trained model (except those named in ``done``), with the
    wall time of each."""
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
        if name in done:
            continue
        compute = measurements[name]
        clock = time.perf_counter()
        entry[name] = compute()
        entry["seconds"][name] = time.perf_counter() - clock
    return entry


def _results_root(results_dir: str | Path | None) -> Path:
    """The folder of committed results: ``results_dir`` when given, else ``RESULTS_DIR``."""
    return Path(results_dir) if results_dir is not None else RESULTS_DIR


def analysis_path(config: str, runs_dir: str | Path | None = None) -> Path:
    """Where the measurements of a config's models go: committed for ``full`` and for the
    published configs with their own folder, else in the runs folder."""
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
    """Measure every trained model of a config (those not trained yet are listed as missing).

    Reads ``<runs_dir>/<model>-<variant>-<config>/model.pt``; writes the result (after
    every model, atomically) to ``results_path`` (default: :func:`analysis_path`).  A rerun
    keeps the models already measured with the same settings.
    """
    music_config = CONFIGS[config]
    runs = Path(runs_dir) if runs_dir is not None else RUNS_DIR
    results_path = Path(results_path) if results_path is not None else analysis_path(config, runs)
    rolls = rolls if rolls is not None else load_jsb(data_dir)
    result: dict[str, Any] = json.loads(
        json.dumps({"config": asdict(ANALYSIS), "music_config": asdict(music_config)})
    )
    if results_path.is_file():
        previous = json.loads(results_path.read_text(encoding="utf8"))
        saved = previous.get("music_config")
        if (
            previous.get("config") == result["config"]
            and saved
            and same_config(saved, music_config)
        ):
            result = previous  # same settings (fields added to MusicConfig take defaults)
    result["provenance"] = provenance("cpu")
    result["missing"] = []
    for cell, variant in ALL_VARIANTS:
        name = f"{cell}-{variant}"
        run_dir = runs / music_run_name(cell, variant, music_config)
        wanted = measurements_of(recurrent=variant != "authors-bug")
        done = tuple(part for part in wanted if part in result.get(name, {}))
        if done == wanted:
            continue
        if not (run_dir / "model.pt").is_file():
            if name not in result:
                result["missing"].append(name)
            continue
        if progress:
            print(f"measuring {name} ({run_dir})", flush=True)
        measured = analyze_model(load_music_model(run_dir), rolls, ANALYSIS, done)
        previous_entry = result.get(name, {"seconds": {}})
        seconds = previous_entry["seconds"] | measured.pop("seconds")
        result[name] = previous_entry | measured | {"seconds": seconds}
        atomic_write_json(results_path, result)
    atomic_write_json(results_path, result)
    return result


# ---------------------------------------------------------------------------
# The chapter's table and figures
# ---------------------------------------------------------------------------


def load_full_analysis(
    results_dir: str | Path | None = None, config: str = "full"
) -> dict[str, Any] | None:
    """The committed measurements of a config's models (``full``: the authors' scale with the
    input layer; ``adam-tcn``, ``authors``), or None when not yet run."""
    folder = PUBLISHED_RESULTS[config][0]
    path = _results_root(results_dir) / folder / "analysis.json"
    return json.loads(path.read_text(encoding="utf8")) if path.is_file() else None


def load_results(
    results_dir: str | Path | None = None, config: str = "full"
) -> dict[str, dict[str, Any]]:
    """The committed result files of a published config (``"full"``, or the ``"adam"``
    diagnostic), by ``<model>-<variant>`` (missing ones absent)."""
    folder = _results_root(results_dir)
    found = {}
    for cell, variant in ALL_VARIANTS:
        path = folder / result_file_name(cell, variant, config)
        if path.is_file():
            found[f"{cell}-{variant}"] = json.loads(path.read_text(encoding="utf8"))
    return found


def load_seed_results(
    config: str, results_dir: str | Path | None = None
) -> dict[str, dict[int, dict[str, Any]]]:
    """Every committed completed run of a published config, by ``<model>-<variant>`` and seed:
    the config's own seed (:func:`result_file_name`) and every ``seed<N>/`` beside it."""
    root = _results_root(results_dir)
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for cell, variant in ALL_VARIANTS:
        own = Path(result_file_name(cell, variant, config))
        for path in [root / own, *sorted((root / own.parent).glob(f"seed*/{own.name}"))]:
            if not path.is_file():
                continue
            run = json.loads(path.read_text(encoding="utf8"))
            if run.get("status") == "completed" and "test_nll" in run:
                found.setdefault(f"{cell}-{variant}", {})[int(run["seed"])] = run
    return found


def seed_summary(runs: dict[int, dict[str, Any]]) -> criteria.SeedSummary:
    """Test NLL over the seeds of one model (``load_seed_results(...)[name]``)."""
    return criteria.summarize({seed: run["test_nll"] for seed, run in runs.items()})


def by_seed(results: dict[str, dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """``{name: result}`` (one run each, as :func:`load_results` gives) as ``{name: {seed:
    result}}``, the form the verdicts read."""
    return {name: {int(run["seed"]): run} for name, run in results.items() if "test_nll" in run}


def baseline_comparison(summary: criteria.SeedSummary, baseline: float) -> str:
    """The model's gap to the no-memory baseline and, with the seeds the criteria require,
    the verdict of ``beats_baseline`` in ``criteria.json``."""
    gap = f"{100 * criteria.relative_gap(summary.mean, baseline):+.1f}%"
    if not criteria.enough_seeds("jsb", summary):
        return f"{gap} ({criteria.seeds_label(summary.n)}: no verdict)"
    beats = criteria.beats_baseline(summary, baseline)
    return f"{gap}: {'beats it' if beats else 'no better than the baseline'}"


def uses_memory(summary: criteria.SeedSummary, baseline: float) -> bool:
    """Whether the mean NLL is below the baseline by the margin of ``beats_baseline`` (the
    measured fact, whatever the number of seeds)."""
    return criteria.beats_baseline(summary, baseline)


def _baseline_row(baseline: float, header: str) -> str:
    """A table row for the baseline under ``header`` (a markdown table's first line): its
    NLL in the first column after the label, the other columns empty."""
    columns = header.count("|") - 1
    return f"| {BASELINE_LABEL} | {baseline:.2f} |" + " |" * (columns - 2)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def results_table(
    results: dict[str, dict[str, Any]], baseline: float, smoke: dict[str, dict] | None = None
) -> str:
    """Markdown table: test NLL per time step of the ``full`` runs (the authors' scale and
    schedule, with the input layer their forward never calls: the ablation), their gap to the
    no-memory ``baseline``, the smoke runs if given, and the paper's number."""
    header = (
        "| model | ours, with input layer | vs baseline | epochs run | best epoch | wall time |"
    )
    rule = "| --- | --- | --- | --- | --- | --- |"
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
            versus = baseline_comparison(seed_summary(by_seed({name: result})[name]), baseline)
            ran = str(len(result["epochs"]))
            best = str(result["best_epoch"])
            wall = _minutes(result["wall_seconds"])
        else:
            ours, versus, ran, best, wall = "not yet run", "", "", "", ""
        row = f"| {LABELS[name]} | {ours} | {versus} | {ran} | {best} | {wall} |"
        if smoke is not None:
            entry = smoke.get(name)
            row += f" {entry['test_nll']:.2f} |" if entry and "test_nll" in entry else " |"
        key = PAPER_KEYS.get((cell, variant))
        row += f" {paper_claims.marked(key)} |" if key else " (not a row of the paper) |"
        lines.append(row)
    lines.append(_baseline_row(baseline, header))
    return "\n".join(lines)


def optimizer_diagnostic_table(
    sgd: dict[str, dict[str, Any]], adam: dict[str, dict[str, Any]], baseline: float
) -> str:
    """Markdown table: test NLL of each ``full`` model (input layer included) trained by the
    authors' SGD schedule and by the ``adam`` diagnostic (same model, data, seed and clip 1),
    the no-memory ``baseline``, and the paper's number."""
    clip = CONFIGS["adam"].clip
    lines = [
        "| model | SGD, authors' schedule (epochs) | Adam lr 1e-3, clip "
        f"{clip:g}, diagnostic (best epoch of {CONFIGS['adam'].epochs}) | reported by the paper |",
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
    lines.append(_baseline_row(baseline, lines[0]))
    return "\n".join(lines)


def rerun_command(config: str, cell: str, variant: str, seed: int | str | None = None) -> str:
    """The one command that trains (or resumes, or returns when done) one run of a published
    config, with the flags its committed runs used (:data:`RUN_FLAGS`) and one thread.  The
    config's own seed (1111) takes no ``--seed``: the CLI trains the config itself then.  A
    string ``seed`` (e.g. ``"<N>"``) is written as given, for a command pattern."""
    command = f"python -m stablernn_lib train-music --model {cell} --variant {variant}"
    command += f" --config {config}"
    if seed is not None and seed != CONFIGS[config].seed:
        command += f" --seed {seed}"
    flags = RUN_FLAGS.get(config, "")
    return command + " --resume" + (f" {flags}" if flags else "") + " --threads 1"


def planned_seeds(config: str) -> tuple[int, ...]:
    """The seeds a published config is meant to have: for a seeded config, its own seed and
    1, 2, ... up to the number ``criteria.json`` asks for on JSB; else its own seed only."""
    own = CONFIGS[config].seed
    if config not in SEEDED_CONFIGS:
        return (own,)
    return training.planned_seeds(own, criteria.load_criteria()["seeds"]["jsb"], first_extra=1)


def planned_variants(config: str) -> tuple[tuple[str, str], ...]:
    """The (model, variant) pairs of a published config's table: the four of the paper, and
    the authors' non-recurrent LSTM for ``full``."""
    return ALL_VARIANTS if config == "full" else TABLE_VARIANTS


def missing_runs(config: str, results_dir: str | Path | None = None) -> list[tuple[str, str, int]]:
    """The planned runs of a published config (model, variant, seed) with no completed result
    file, in the order of the table and then of :func:`planned_seeds`."""
    done = load_seed_results(config, results_dir)
    return [
        (cell, variant, seed)
        for cell, variant in planned_variants(config)
        for seed in planned_seeds(config)
        if seed not in done.get(f"{cell}-{variant}", {})
    ]


def run_commands(config: str, results_dir: str | Path | None = None) -> str:
    """Markdown to print under a config's table: the command pattern that reruns any of its
    rows, and one command for each planned run without a result file (:func:`missing_runs`),
    each command in its own code block."""
    seeds = planned_seeds(config)
    pattern = rerun_command(config, "<model>", "<variant>", "<N>" if len(seeds) > 1 else None)
    variants = "unconstrained or stable"
    if config == "full":
        variants += " (authors-bug: the authors' non-recurrent LSTM, with `--model lstm`)"
    lines = [
        f"Any row, with `<model>` rnn or lstm and `<variant>` {variants}"
        + (
            f"; `<N>` is a seed of the table ({seeds[0]}, the config's own seed, is the "
            "command without `--seed`)"
            if len(seeds) > 1
            else ""
        )
        + ":",
        *_code_block(pattern),
    ]
    missing = missing_runs(config, results_dir)
    if missing:
        planned = len(seeds) * len(planned_variants(config))
        lines.append(f"\nNot yet run ({len(missing)} of {planned}):")
        for c, v, seed in missing:
            lines += _code_block(rerun_command(config, c, v, seed))
    return "\n".join(lines)


def _code_block(command: str, width: int = 34) -> list[str]:
    """The lines of a Markdown code block holding one shell command, continued with ``\\``
    at flag boundaries so that lines stay short on a phone: flags join a line while it
    stays within ``width`` characters (the command's head or a single flag may be longer)."""
    words = command.split(" --")
    lines = [words[0]]
    for flag in words[1:]:
        if len(lines[-1]) + len(flag) + 3 <= width:
            lines[-1] += f" --{flag}"
        else:
            lines.append(f"  --{flag}")
    return ["", "```bash", " \\\n".join(lines), "```"]


def seeds_table(config: str, baseline: float, results_dir: str | Path | None = None) -> str:
    """Markdown table of a seeded config (``adam-tcn``, ``authors``): every model's test NLL
    over its seeds (mean ± sd, each seed), its gap to the no-memory ``baseline``, and the
    stable model's gap to its unconstrained twin with the verdict of ``criteria.json``; for a
    config whose setting is the authors' (:data:`PAPER_SETTING_CONFIGS`), the paper's number
    with its mark."""
    runs = load_seed_results(config, results_dir)
    paper = config in PAPER_SETTING_CONFIGS
    lines = [
        f"| model (config `{config}`) | test NLL over seeds | vs baseline "
        "| stable vs unconstrained | stability costs little? (criteria.json) |"
        + (" reported by the paper |" if paper else ""),
        "| --- | --- | --- | ---: | --- |" + (" --- |" if paper else ""),
    ]
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        reported = f" {paper_claims.marked(PAPER_KEYS[(cell, variant)])} |" if paper else ""
        if name not in runs:
            lines.append(f"| {LABELS[name]} | not yet run: `{rerun_command(config, cell, variant)}`"
                         " | | | |" + reported)  # fmt: skip
            continue
        summary = seed_summary(runs[name])
        gap = verdict = ""
        free = runs.get(f"{cell}-unconstrained")
        if variant == "stable" and free:
            reference = seed_summary(free)
            gap = f"{100 * criteria.relative_gap(summary.mean, reference.mean):+.1f}%"
            verdict = criteria.stability_cost_verdict("jsb", reference, summary)
        versus = baseline_comparison(summary, baseline)
        lines.append(
            f"| {LABELS[name]} | {summary.describe(2)} | {versus} | {gap} | {verdict} |" + reported
        )
    lines.append(_baseline_row(baseline, lines[0]))
    return "\n".join(lines)


def load_reruns(config: str, results_dir: str | Path | None = None) -> dict[str, Any] | None:
    """``<config>/reruns.json``: committed runs that were trained again, with what the
    earlier run gave (``earlier``) and why it was rerun; None when there is none."""
    root = _results_root(results_dir)
    path = root / config / "reruns.json"
    return json.loads(path.read_text(encoding="utf8")) if path.is_file() else None


def validation_split(
    earlier: dict[str, Any], rerun: dict[str, Any], threshold: float = 0.01
) -> dict[str, Any] | None:
    """Where two runs of one config and seed part: the first epoch whose validation NLL
    differs by more than ``threshold``, its learning rate and both values, the earlier run's
    best epoch and both runs' final validation NLL (``earlier.validation_split`` of
    ``reruns.json``); None when they never differ by that much."""
    for old, new in zip(earlier["epochs"], rerun["epochs"], strict=False):
        if abs(old["val_nll"] - new["val_nll"]) > threshold:
            return {
                "epoch": old["epoch"], "lr": old["lr"],
                "val_nll_earlier": old["val_nll"], "val_nll_rerun": new["val_nll"],
                "best_epoch_earlier": earlier["best_epoch"],
                "final_val_nll_earlier": earlier["epochs"][-1]["val_nll"],
                "final_val_nll_rerun": rerun["epochs"][-1]["val_nll"],
            }  # fmt: skip
    return None


def reruns_table(config: str, results_dir: str | Path | None = None) -> str:
    """Markdown table of ``<config>/reruns.json``: each run trained twice, the first run's
    outcome beside the test NLL of the run in the seeds table (read from its result file),
    the change, and the first epoch whose validation NLL differs by more than 0.01 between
    the two (``earlier.validation_split``, with its learning rate)."""
    reruns = load_reruns(config, results_dir)
    if reruns is None:
        return f"no reruns recorded for config `{config}`"
    runs = load_seed_results(config, results_dir)
    lines = [
        "| model | seed | first run | run of the table | change | validation NLL parts (> 0.01) |",
        "| --- | ---: | --- | --- | ---: | --- |",
    ]
    for entry in reruns["runs"]:
        earlier = entry["earlier"]
        before = f"{earlier['test_nll']:.3f}" if "test_nll" in earlier else earlier["outcome"]
        current = runs.get(entry["model"], {}).get(entry["seed"])
        split = ""
        if current is None or current["provenance"]["git_commit"] == earlier["git_commit"]:
            now, change = "not yet rerun", ""
        else:
            if "validation_split" in earlier:
                where = earlier["validation_split"]
                split = f"epoch {where['epoch']} (lr {where['lr']:.0e})" if where else "never"
            now = f"{current['test_nll']:.3f}"
            change = (
                f"{current['test_nll'] - earlier['test_nll']:+.3f}" if "test_nll" in earlier else ""
            )
        lines.append(
            f"| {LABELS[entry['model']]} | {entry['seed']} | {before} | {now} | {change} "
            f"| {split} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class PaperComparison:
    """Our test NLL of one model over its seeds against the paper's number: ``difference`` =
    ours - paper (nats per step), ``relative`` = that over the paper's, and the verdict of
    ``reproduces_paper`` ("reproduced", "not reproduced", "not comparable" for a cell of
    :data:`NOT_THE_AUTHORS_MODEL`, :data:`UNVERIFIED_PAPER` against a recalled number,
    "no verdict" with too few seeds, "not yet run")."""

    ours: criteria.SeedSummary | None
    paper: float
    difference: float | None
    relative: float | None
    verdict: str


def paper_comparisons(
    config: str = "authors", results_dir: str | Path | None = None
) -> dict[str, PaperComparison]:
    """:class:`PaperComparison` of every model of a config whose setting is the authors'
    (:data:`PAPER_SETTING_CONFIGS`), by ``<model>-<variant>``."""
    if config not in PAPER_SETTING_CONFIGS:
        raise ValueError(f"config {config!r} is not the authors' setting; "
                         f"{list(PAPER_SETTING_CONFIGS)} are")  # fmt: skip
    runs = load_seed_results(config, results_dir)
    found = {}
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        paper = float(paper_claims.value(PAPER_KEYS[(cell, variant)]))
        if name not in runs:
            found[name] = PaperComparison(None, paper, None, None, "not yet run")
            continue
        summary = seed_summary(runs[name])
        if cell in NOT_THE_AUTHORS_MODEL:
            verdict = "not comparable"
        elif paper_claims.claim(PAPER_KEYS[(cell, variant)]).status == paper_claims.RECALLED:
            verdict = UNVERIFIED_PAPER
        elif criteria.enough_seeds("jsb", summary):
            verdict = criteria.reproduces_paper(summary, paper, config, True)
        else:
            verdict = "no verdict"
        found[name] = PaperComparison(
            summary, paper, summary.mean - paper, criteria.relative_gap(summary.mean, paper),
            verdict,
        )  # fmt: skip
    return found


@dataclass(frozen=True)
class StabilityCost:
    """A stable model against its unconstrained twin over their seeds: ``relative`` =
    (stable - unconstrained) / unconstrained, and the verdict of ``stability_cost``."""

    free: criteria.SeedSummary
    stable: criteria.SeedSummary
    relative: float
    verdict: str


def stability_costs(runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, StabilityCost]:
    """:class:`StabilityCost` of the RNN and of the LSTM (``"rnn"``, ``"lstm"``) from
    ``load_seed_results`` or :func:`by_seed`; a pair with a missing run is left out."""
    found = {}
    for cell in ("rnn", "lstm"):
        free, stable = runs.get(f"{cell}-unconstrained"), runs.get(f"{cell}-stable")
        if free and stable:
            a, b = seed_summary(free), seed_summary(stable)
            found[cell] = StabilityCost(
                a, b, criteria.relative_gap(b.mean, a.mean),
                criteria.stability_cost_verdict("jsb", a, b),
            )  # fmt: skip
    return found


def stability_cost_table(runs_by_label: dict[str, dict[str, dict[int, dict[str, Any]]]]) -> str:
    """Markdown table: for each labelled set of runs (``{label: load_seed_results(...)}``)
    and each cell, the stable and unconstrained test NLL, the gap and the verdict of
    ``stability_cost`` in ``criteria.json``."""
    lines = [
        "| runs | model | unconstrained | stable | stable vs unconstrained "
        "| stability costs little? |",
        "| --- | --- | --- | --- | ---: | --- |",
    ]
    for label, runs in runs_by_label.items():
        for cell, cost in stability_costs(runs).items():
            lines.append(
                f"| {label} | {LABELS[f'{cell}-unconstrained']} | {cost.free.describe(2)} "
                f"| {cost.stable.describe(2)} | {100 * cost.relative:+.1f}% | {cost.verdict} |"
            )
    return "\n".join(lines)


def main_table(baseline: float, results_dir: str | Path | None = None) -> str:
    """Markdown table of the chapter's main result (config ``authors``): each model's test
    NLL over its seeds (mean ± sample sd), the paper's number with its mark and our
    difference from it (a number, never a verdict: the paper's numbers are unverified), the
    gap to the no-memory ``baseline``, and the stable model's gap to its twin with the
    verdict of ``stability_cost``."""
    runs = load_seed_results("authors", results_dir)
    compared = paper_comparisons("authors", results_dir)
    costs = stability_costs(runs)
    lines = [
        "| model | ours | the paper | ours − paper | vs no-memory baseline "
        "| stable vs unconstrained |",
        "| --- | --- | --- | ---: | --- | --- |",
    ]
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        marked = paper_claims.marked(PAPER_KEYS[(cell, variant)])
        found = compared[name]
        if found.ours is None:
            lines.append(f"| {LABELS[name]} | not yet run | {marked} | | | |")
            continue
        cost = costs.get(cell)
        versus = (
            f"{100 * cost.relative:+.1f}%: {cost.verdict}" if variant == "stable" and cost else ""
        )
        difference = f"{found.difference:+.2f} ({100 * found.relative:+.1f}%)"
        if cell in NOT_THE_AUTHORS_MODEL:
            difference += ", another model"
        lines.append(
            f"| {LABELS[name]} | {found.ours.mean:.2f} ± {found.ours.sd:.2f} | {marked} "
            f"| {difference} | {baseline_comparison(found.ours, baseline)} | {versus} |"
        )
    lines.append(_baseline_row(baseline, lines[0]))
    return "\n".join(lines)


def training_extent_table(runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    """Markdown table: for every model and seed of a seeded config, the best validation epoch
    (the weights the test NLL is measured on) against the epochs run, and the final learning
    rate. A best epoch near the last says the epochs ran out while the model still improved;
    an early one with a tiny final rate says the schedule's cuts froze it."""
    lines = [
        "| model | seed | best epoch | epochs run | final lr |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, each in runs.items():
        for seed, run in sorted(each.items()):
            lines.append(
                f"| {LABELS[name]} | {seed} | {run['best_epoch']} | {len(run['epochs'])} "
                f"| {run['epochs'][-1]['lr']:.0e} |"
            )
    return "\n".join(lines)


def early_stop_table(results: dict[str, dict[str, Any]]) -> str:
    """Markdown table: each run of ``results`` (one per model), the epochs it ran of its
    config's, and for a run ended by ``--stop-below-lr`` its learning rate then and the
    bound on how far the skipped epochs could have moved its weights."""
    lines = [
        "| model | epochs run | stopped early at lr "
        "| skipped epochs could move the weights by at most |",
        "| --- | --- | --- | --- |",
    ]
    for name, result in results.items():
        early = result.get("stopped_early") or {}
        ran = f"{len(result['epochs'])} of {result['config']['epochs']}"
        lr = f"{early['lr']:.0e}" if early else "(ran every epoch)"
        bound = f"{early['max_weight_change']:.3f} in norm" if early else ""
        lines.append(f"| {LABELS[name]} | {ran} | {lr} | {bound} |")
    return "\n".join(lines)


def input_layer_table(
    results: dict[str, dict[str, Any]], reference: dict[str, dict[int, dict[str, Any]]]
) -> str:
    """Markdown table: the ``single_seed_ablation`` rule of ``criteria.json`` on each one-seed
    row of the input-layer ablation (``results``, config ``full``) against the same model
    without the layer over its seeds (``reference``, config ``authors``): the row may be read
    on one seed only when its effect exceeds ``sd_multiple`` seed sds of the reference."""
    k = criteria.criterion("single_seed_ablation")["sd_multiple"]
    lines = [
        "| model | with input layer (one seed) | without (config `authors`) | effect "
        f"| {k:g} sd | read on one seed? |",
        "| --- | ---: | --- | ---: | ---: | --- |",
    ]
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        if name not in results or name not in reference or "test_nll" not in results[name]:
            continue
        row, summary = results[name]["test_nll"], seed_summary(reference[name])
        readable = "yes" if criteria.single_seed_readable(row, summary) else "no: needs seeds"
        lines.append(
            f"| {LABELS[name]} | {row:.2f} | {summary.mean:.2f} ± {summary.sd:.2f} "
            f"| {row - summary.mean:+.2f} | {k * summary.sd:.2f} | {readable} |"
        )
    return "\n".join(lines)


def plot_learning_curves(results: dict[str, dict[str, Any]], title: str = "") -> Figure:
    """Validation NLL per epoch of every run (log epochs), with the epochs where lr dropped."""
    figure, axis = plt.subplots(figsize=(6.5, 3.6))
    for name, result in results.items():
        epochs = [m["epoch"] for m in result["epochs"]]
        axis.semilogx(
            epochs, [m["val_nll"] for m in result["epochs"]], color=model_color(name),
            label=LABELS[name],
        )  # fmt: skip
    return finish_axis(figure, axis, "epoch", "validation NLL per step", title)


def plot_truncated_nll(
    analysis: dict[str, Any], title: str = "", curve_key: str = "truncated_eval"
) -> Figure:
    """Test NLL of the context-``k`` model against ``k``, both axes logarithmic; dashed: the
    recurrent model. ``curve_key``: ``"truncated_eval"`` (the first frames of each chorale) or
    ``"truncated_eval_after"`` (the frames after them, :func:`truncated_eval_after`)."""
    figure = plot_truncated_curves(
        analysis,
        "loss",
        lambda name: LABELS[name],
        "context k (frames)",
        "test NLL per step (log axis)",
        title,
        6.5,
        curve_key,
    )
    axis = figure.axes[0]
    axis.set_yscale("log")  # a 1% band has the same height at every NLL
    axis.yaxis.set_major_formatter(ScalarFormatter())
    axis.yaxis.set_minor_formatter(ScalarFormatter())
    return finish(figure)


def context_used(curve: dict[str, Any], tolerance: float | None = None) -> int | None:
    """The smallest ``k`` whose NLL is within ``tolerance`` (relative; default the
    ``truncation`` rule of ``criteria.json``) of the recurrent one."""
    if tolerance is None:
        tolerance = criteria.criterion("truncation")["relative_tolerance"]
    for k, loss in zip(curve["k"], curve["loss"], strict=True):
        if loss <= curve["recurrent_loss"] * (1 + tolerance):
            return k
    return None


def truncation_verdict(k: int | None, measured_up_to: int, exact_from: int | None) -> str:
    """The ``truncation`` rule of ``criteria.json`` for a curve whose smallest context within
    the tolerance is ``k`` (None: none), measured up to ``measured_up_to``; from
    ``exact_from`` on (None: never) a context covers every scored frame, so a ``k`` there is
    equal by construction and decides nothing."""
    max_k = criteria.criterion("truncation")["max_k"]
    if k is not None and exact_from is not None and k >= exact_from:
        return f"no verdict (from k = {exact_from} the context covers every scored frame)"
    if k is not None:
        return "supported" if k <= max_k else "not supported"
    if measured_up_to >= max_k:
        return "not supported"
    return f"no verdict (measured up to k = {measured_up_to}, the rule's max_k is {max_k})"


@dataclass(frozen=True)
class JacobianStats:
    """The sampled state-Jacobian spectral norms of one model: range, median, the share
    below 1 (states where the step contracts locally) and how many were sampled."""

    smallest: float
    median: float
    largest: float
    below_one: float
    count: int


def jacobian_stats(entry: dict[str, Any]) -> JacobianStats | None:
    """:class:`JacobianStats` of one model's analysis entry (None without Jacobians)."""
    if not entry.get("jacobian_norms"):
        return None
    norms = np.array([x for layer in entry["jacobian_norms"] for x in layer])
    return JacobianStats(
        float(norms.min()), float(np.median(norms)), float(norms.max()),
        float(np.mean(norms < 1)), int(norms.size),
    )  # fmt: skip


def gradient_ratio(entry: dict[str, Any], distance: int | None = None) -> float | None:
    """Mean gradient norm at ``distance`` (default: the ``gradient_vanishes`` rule's) over the
    one at distance 0, from one model's analysis entry (None when not measured)."""
    if "figure2" not in entry:
        return None
    distance = criteria.criterion("gradient_vanishes")["distance"] if distance is None else distance
    norms = dict(zip(entry["figure2"]["distance"], entry["figure2"]["mean_norm"], strict=True))
    if distance not in norms or not norms[0]:
        return None
    return norms[distance] / norms[0]


def memory_reading(name: str, results: dict[str, dict[str, Any]], baseline: float) -> str:
    """Whether a model (one run per model, :func:`load_results`, or its seeds) has memory to
    measure, in the words of ``beats_baseline``: "beats it", "not below it by the margin
    (one seed: indicative)" with fewer seeds than the criteria require, or "no better than
    the baseline"."""
    run = results.get(name)
    if run is None or "test_nll" not in run:
        return ""
    summary = seed_summary(by_seed({name: run})[name])
    if uses_memory(summary, baseline):
        return "beats it"
    if not criteria.enough_seeds("jsb", summary):
        return f"not below it by the margin ({criteria.seeds_label(summary.n)}: indicative)"
    return "no better than the baseline"


@dataclass(frozen=True)
class Measured:
    """One model's measurements of memory: the truncation curve (recurrent NLL, NLL at the
    smallest context, the smallest context within the ``truncation`` tolerance and its
    verdict), the gradient ratio at the rule's distance and the ``gradient_vanishes``
    verdict, the sampled Jacobian norms, and the :func:`memory_reading` ("" unread)."""

    recurrent_nll: float | None
    first_nll: float | None
    context: int | None
    truncation: str
    gradient_ratio: float | None
    vanishes: str
    jacobians: JacobianStats | None
    memory: str


def measured(
    analysis: dict[str, Any],
    results: dict[str, dict[str, Any]] | None = None,
    baseline: float | None = None,
    curve_key: str = "truncated_eval",
) -> dict[str, Measured]:
    """:class:`Measured` of every model of ``analysis``. On ``truncated_eval`` (the first
    ``frames`` frames of each chorale) a context ``k >= frames - 1`` sees every scored frame,
    so the truncation verdict gives none there."""
    frames = analysis.get("config", {}).get("frames")
    exact_from = frames - 1 if curve_key == "truncated_eval" and frames else None
    ratio_needed = criteria.criterion("gradient_vanishes")["ratio"]
    found = {}
    for name in LABELS:
        entry = analysis.get(name)
        if not isinstance(entry, dict):
            continue
        curve = entry.get(curve_key)
        k = context_used(curve) if curve else None
        ratio = gradient_ratio(entry)
        found[name] = Measured(
            recurrent_nll=curve["recurrent_loss"] if curve else None,
            first_nll=curve["loss"][0] if curve else None,
            context=k,
            truncation=truncation_verdict(k, curve["k"][-1], exact_from) if curve else "",
            gradient_ratio=ratio,
            vanishes=(
                "" if ratio is None else "supported" if ratio < ratio_needed else "not supported"
            ),  # fmt: skip
            jacobians=jacobian_stats(entry),
            memory=memory_reading(name, results, baseline) if results and baseline else "",
        )
    return found


def measurements_table(
    analysis: dict[str, Any],
    results: dict[str, dict[str, Any]] | None = None,
    baseline: float | None = None,
    curve_key: str = "truncated_eval",
) -> str:
    """Markdown table of :func:`measured`: one row per model, with the verdicts of the
    ``truncation`` and ``gradient_vanishes`` rules (read on one model: indicative) beside the
    smallest context within the tolerance and the gradient ratio, and the sampled Jacobian
    norms as ``min–max (median); share below 1``."""
    distance = criteria.criterion("gradient_vanishes")["distance"]
    reading = results is not None and baseline is not None
    lines = [
        "| model | recurrent NLL | NLL at k = 1 | smallest k within 1%: short context? "
        f"| gradient at {distance} / at 0: vanishes? | Jacobian norms: min–max (median); "
        "below 1 |" + (" vs no-memory baseline |" if reading else ""),
        "| --- | ---: | ---: | --- | --- | --- |" + (" --- |" if reading else ""),
    ]
    for name, m in measured(analysis, results, baseline, curve_key).items():
        nll = f"{m.recurrent_nll:.2f}" if m.recurrent_nll is not None else ""
        first = f"{m.first_nll:.2f}" if m.first_nll is not None else ""
        k = m.context if m.context is not None else "none"
        short = f"{k}: {m.truncation}" if m.truncation else ""
        ratio = (
            f"{100 * m.gradient_ratio:.2g}%: {m.vanishes}" if m.gradient_ratio is not None else ""
        )
        jac = m.jacobians
        norms = (
            f"{jac.smallest:.3f}–{jac.largest:.3f} ({jac.median:.3f}); "
            f"{100 * jac.below_one:.0f}% of {jac.count}"
            if jac
            else "(no state map)"
        )
        row = f"| {LABELS[name]} | {nll} | {first} | {short} | {ratio} | {norms} |"
        lines.append(row + (f" {m.memory} |" if reading else ""))
    return "\n".join(lines)


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
    axes[1].scatter(  # outlined, so the probability under each note stays visible
        frames + 2, keys + low, s=14, marker="s", facecolors="none", edgecolors="cyan", lw=0.8
    )
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
