"""Full-scale runs that stopped before their last epoch (a GPU lease ended).

``paper-run`` writes a result file only for a finished model. When the machine is given
back first, what survives is each job's ``metrics.jsonl`` (one line per finished epoch:
training and validation perplexity, learning rate, seconds) and the run's ``plan.json``
(every job's config and the provenance of the start). Those files are committed in
``data/results/wikitext2/gpu-partial/`` as ``<job>.metrics.jsonl`` beside ``plan.json``.

They carry no test perplexity, so the criteria judge nothing with them: the chapter
shows validation perplexity epoch by epoch and compares the stable and unconstrained
model of a cell at the last epoch both reached, labelled as one seed, unfinished.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from stablernn_lib.core.plot_helpers import finish_axis
from stablernn_lib.core.style import model_color
from stablernn_lib.tasks.wikitext2.train import RESULTS_DIR
from stablernn_lib.tasks.wikitext2.variants import MODEL_LABELS, MODEL_VARIANTS, variant_name

PARTIAL_DIR = RESULTS_DIR / "gpu-partial"


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl`` (one per finished epoch), checked to be the
    epochs 1, 2, ... in order."""
    epochs = [json.loads(line) for line in path.read_text(encoding="utf8").splitlines()
              if line.strip()]  # fmt: skip
    if [row["epoch"] for row in epochs] != list(range(1, len(epochs) + 1)):
        raise ValueError(
            f"{path}: the epochs are not 1, 2, ... in order; the file is damaged (copy the "
            "run's metrics.jsonl again)"
        )
    return epochs


def load_partial_runs(folder: str | Path = PARTIAL_DIR) -> dict[str, dict[str, Any]]:
    """The committed unfinished runs, by variant name ("lstm-stable", ...).

    Each: ``job`` (the paper-run job name), ``config`` (its every field), ``epochs`` (the
    rows of its ``metrics.jsonl``, in order) and ``provenance`` (of the run's start). Only
    the jobs of ``plan.json`` with a metrics file count; an empty dict without a plan.
    """
    folder = Path(folder)
    plan_path = folder / "plan.json"
    if not plan_path.exists():
        return {}
    plan = json.loads(plan_path.read_text())
    runs: dict[str, dict[str, Any]] = {}
    for job in plan["jobs"]:
        metrics = folder / f"{job['name']}.metrics.jsonl"
        if not metrics.exists():
            continue
        epochs = read_metrics(metrics)
        name = variant_name(job["cell"], job["stable"])
        if name in runs:
            raise ValueError(f"{folder}: two unfinished runs of {name}; keep one per model")
        runs[name] = {
            "job": job["name"],
            "config": job["config"],
            "epochs": epochs,
            "provenance": plan["provenance"],
        }
    return runs


def partial_runs_table(runs: dict[str, dict[str, Any]]) -> str:
    """Markdown table: per unfinished run, its config, epochs reached and its best validation
    perplexity (with the epoch that reached it)."""
    lines = [
        "| model (full scale, unfinished) | config | epochs run | best validation perplexity "
        "(epoch) |",
        "| --- | --- | ---: | ---: |",
    ]
    for cell, stable in MODEL_VARIANTS:
        run = runs.get(variant_name(cell, stable))
        if run is None:
            continue
        config, epochs = run["config"], run["epochs"]
        label = f"{MODEL_LABELS[cell]}, {'stable' if stable else 'unconstrained'}"
        at, best = min(enumerate(epochs, 1), key=lambda item: item[1]["val_ppl"])
        lines.append(
            f"| {label} | `{config['name']}` (lr {config['lr']:g}) | "
            f"{len(epochs)} of {config['epochs']} | {best['val_ppl']:.1f} ({at}) |"
        )
    return "\n".join(lines)


def _gap_at(free: dict[str, Any], stable: dict[str, Any], epoch: int) -> dict[str, float]:
    free_ppl = free["epochs"][epoch - 1]["val_ppl"]
    stable_ppl = stable["epochs"][epoch - 1]["val_ppl"]
    return {
        "epoch": epoch,
        "unconstrained": free_ppl,
        "stable": stable_ppl,
        "gap": (stable_ppl - free_ppl) / free_ppl,
        "unconstrained_lr": free["epochs"][epoch - 1]["lr"],
        "stable_lr": stable["epochs"][epoch - 1]["lr"],
    }


def equal_epoch_gaps(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per cell with both runs, two comparisons of validation perplexity at equal epochs:
    ``"last"``, at the last epoch both reached, and ``"uncut"``, at the last epoch before the
    schedule cut either model's learning rate (absent when a rate was cut after epoch 1
    already). Each: the epoch, the perplexity and learning rate of each model there, and
    the stable model's relative gap ``(stable - unconstrained) / unconstrained``."""
    gaps = {}
    for cell in MODEL_LABELS:
        free, stable = (runs.get(variant_name(cell, s)) for s in (False, True))
        if free is None or stable is None:
            continue
        last = min(len(free["epochs"]), len(stable["epochs"]))
        start_lr = free["config"]["lr"]
        uncut = 0
        while uncut < last and all(
            run["epochs"][uncut]["lr"] == start_lr for run in (free, stable)
        ):
            uncut += 1
        gaps[cell] = {"last": _gap_at(free, stable, last)}
        if uncut:
            gaps[cell]["uncut"] = _gap_at(free, stable, uncut)
    return gaps


def plot_partial_runs(runs: dict[str, dict[str, Any]], title: str = "") -> Figure:
    """Validation perplexity against epoch for each unfinished run (log scale)."""
    figure, axis = plt.subplots(figsize=(6, 3.6))
    for cell, stable in MODEL_VARIANTS:
        name = variant_name(cell, stable)
        run = runs.get(name)
        if run is None:
            continue
        epochs = run["epochs"]
        axis.semilogy(
            [row["epoch"] for row in epochs],
            [row["val_ppl"] for row in epochs],
            "s--" if stable else "o-",
            ms=3,
            color=model_color(name),
            label=f"{MODEL_LABELS[cell]}{', stable' if stable else ''}, lr {run['config']['lr']:g}",
        )
    return finish_axis(figure, axis, "epoch", "validation perplexity", title, None)
