"""What the committed WikiText-2 results say (Chapter 8): the paper's numbers beside ours,
the tables by scale and by seed, each claim's reading and verdict word from
``criteria.json`` (:class:`ClaimReading`), the ablation of the LSTM constraint
(:class:`AblationReading`), and the command that reruns every row.  Numbers, verdict words
and tables only: the chapter's sentences are written in its notebooks.

The measurements themselves (gradients, truncation, Jacobians) are
:mod:`stablernn_lib.tasks.wikitext2.analysis`; this module only reads result files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from stablernn_lib.core import criteria, paper_claims
from stablernn_lib.core.io import readable_device
from stablernn_lib.tasks import training
from stablernn_lib.tasks.wikitext2.data import WIKITEXT2_TOKENS
from stablernn_lib.tasks.wikitext2.partial_runs import read_metrics
from stablernn_lib.tasks.wikitext2.train import CONFIGS, RESULTS_DIR, results_folder
from stablernn_lib.tasks.wikitext2.variants import (
    MODEL_LABELS,
    MODEL_VARIANTS,
    VARIANTS_BY_NAME,
    variant_name,
)

# WikiText-2 test perplexities attributed to the paper: the registry
# stablernn_lib.core.paper_claims holds each value with its source (checked / recalled).
PAPER_TEST_PPL_KEYS: dict[str, str] = {
    name: f"wt2-{name}-ppl"
    for name in ("rnn-unconstrained", "rnn-stable", "lstm-unconstrained", "lstm-stable")
}
PAPER_TEST_PPL: dict[str, float] = {
    name: paper_claims.value(key) for name, key in PAPER_TEST_PPL_KEYS.items()
}


def load_full_results(results_dir: str | Path | None = None) -> dict[str, Any]:
    """The committed full-run results found in ``data/results/wikitext2`` (may be empty).

    Keys: ``"<cell>-<variant>"`` (training results), ``"analysis"``, ``"benchmark-<kind>"``.
    """
    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    found: dict[str, Any] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        with open(path, encoding="utf8") as handle:
            found[path.stem] = json.load(handle)
    return found


def runs_summary(results: dict[str, Any]) -> str:
    """Markdown table of where and how long each run ran (device, commit, epochs, time)."""
    lines = [
        "| run | device | git commit | epochs | wall time |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for cell, stable in MODEL_VARIANTS:
        entry = results.get(variant_name(cell, stable))
        if not entry:
            continue
        lines.append(
            f"| {variant_name(cell, stable)} | {readable_device(entry['provenance']['device'])} | "
            f"{entry['provenance']['git_commit'][:12]} | {len(entry['epochs'])} | "
            f"{entry['wall_seconds'] / 60:.1f} min |"
        )
    return "\n".join(lines)


def epochs_table(results: dict[str, dict[str, Any]], run_label: str = "run") -> str:
    """Markdown table of runs: validation perplexity per epoch, test perplexity, wall time."""
    lines = [
        f"| {run_label} | vocabulary | val ppl per epoch | test ppl | wall time |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for name, entry in results.items():
        epochs = ", ".join(f"{e['val_ppl']:.0f}" for e in entry["epochs"])
        seconds = entry["wall_seconds"]
        wall = f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds:.0f} s"
        lines.append(
            f"| {name} | {entry['vocab_size']:,} | {epochs} | {entry['test_ppl']:.1f} | {wall} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# The cpu scale: results by scale and what they say about the paper's claims
# ---------------------------------------------------------------------------


def projection_scope_table(cpu: dict[str, Any], first_layer: dict[str, Any]) -> str:
    """Markdown table: the cpu-scale LSTMs, unconstrained, stable in every layer and stable in
    the first layer only (the authors' choice), side by side (:func:`lstm_models_table`).

    ``cpu`` and ``first_layer``: the results of the ``cpu`` and ``cpu-first-layer``
    configs (:func:`load_full_results`).  The runs are one seed each (the configs' own,
    named in the header); :func:`seeds_table` gives the other seeds.
    """
    free = cpu.get("lstm-unconstrained", {}).get("test_ppl")
    rows = [
        ("unconstrained", cpu, "lstm-unconstrained", free),
        ("stable, every layer projected", cpu, "lstm-stable", free),
        ("stable, first layer projected", first_layer, "lstm-stable", free),
    ]
    seeds = sorted({str(r[n]["seed"]) for _, r, n, _ in rows if n in r and "seed" in r[n]})
    which = f", seed {' / '.join(seeds)}" if seeds else ""
    return lstm_models_table(rows, f"LSTM, cpu scale{which}")


def lstm_models_table(rows: list[tuple[str, dict[str, Any], str, float | None]], title: str) -> str:
    """Markdown table, one row per trained model: its test perplexity, its gap to a reference
    (an unconstrained model's test perplexity), the smallest context within 1% of its
    recurrent perplexity, and the median state-Jacobian norm of each layer.

    ``rows``: ``(label, results, name, reference)``, where ``results`` is a config's
    :func:`load_full_results` (its training results and ``analysis``), ``name`` the model's
    variant in it and ``reference`` None for no gap.
    """
    lines = [
        f"| {title} | test ppl | vs unconstrained | smallest k within 1% "
        "| median Jacobian norm, layer 1 / 2 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, results, name, reference in rows:
        run = results.get(name)
        if not run:
            lines.append(f"| {label} | no result yet | | | |")
            continue
        gap = f"{100 * (run['test_ppl'] / reference - 1):+.1f}%" if reference else "—"
        entry = results.get("analysis", {}).get(name, {})
        curve = entry.get("truncated_eval")
        reach = "not measured"
        if curve is not None:
            k = smallest_k_within(curve)
            reach = f"none up to {curve['k'][-1]}" if k is None else str(k)
        medians = " / ".join(
            f"{torch.tensor(norms).median():.2f}" for norms in entry.get("jacobian_norms", [])
        )
        lines.append(
            f"| {label} | {run['test_ppl']:.1f} | {gap} | {reach} | {medians or 'not measured'} |"
        )
    return "\n".join(lines)


def load_idle_timing(config_name: str) -> dict[str, Any] | None:
    """The analysis of a config run again on an idle machine for its timing
    (``data/results/wikitext2/timing/analysis-<config>-idle.json``), or ``None``."""
    path = RESULTS_DIR / "timing" / f"analysis-{config_name}-idle.json"
    if not path.is_file():
        return None
    with open(path, encoding="utf8") as handle:
        return json.load(handle)


def time_budget_table(
    runs: dict[str, Any], benchmark: dict[str, Any], idle_analysis: dict[str, Any]
) -> str:
    """Markdown table of a scale's time budget, two ways, in minutes.

    ``runs``: the scale's results (:func:`load_full_results`: the four training runs and
    ``"analysis"``, whose ``"seconds"`` were measured as they ran); ``benchmark``: a
    ``benchmark`` result of the same config (step times and evaluation speed);
    ``idle_analysis``: an analysis file of the same config run again on an idle machine
    (:func:`load_idle_timing`).  The second column estimates each training run as
    epochs x (steps per epoch x median step time) plus one validation pass per epoch and
    one test pass, at the benchmark's evaluation speed; the analyses in it are measured.
    """
    lines = [
        f"| part | minutes, as committed (measured) | minutes, idle machine "
        f"({readable_device(benchmark['provenance']['device'])}) |",
        "| --- | ---: | ---: |",
    ]
    for part, (measured, idle) in time_budget(runs, benchmark, idle_analysis).items():
        kind = "measured" if part == "every analysis" else "estimated"
        if part == "total":
            lines.append(f"| **total** | **{measured / 60:.0f}** | **{idle / 60:.0f}** |")
        else:
            lines.append(f"| {part} | {measured / 60:.0f} | {idle / 60:.0f} ({kind}) |")
    return "\n".join(lines)


def time_budget(
    runs: dict[str, Any], benchmark: dict[str, Any], idle_analysis: dict[str, Any]
) -> dict[str, tuple[float, float]]:
    """Seconds of each part of a scale's time budget, ``{part: (as committed, idle)}``.

    Parts ``"training <variant>"``, ``"every analysis"`` and ``"total"``; the arguments
    and the idle estimate are those of :func:`time_budget_table`."""
    evaluated = benchmark["epochs"] * WIKITEXT2_TOKENS["valid"] + WIKITEXT2_TOKENS["test"]
    parts: dict[str, tuple[float, float]] = {}
    for cell, stable in MODEL_VARIANTS:
        name = variant_name(cell, stable)
        if name not in runs:
            continue
        model = benchmark["models"][cell]
        epoch = model["epoch_seconds_stable" if stable else "epoch_seconds_unconstrained"]
        estimate = benchmark["epochs"] * epoch + evaluated / model["eval_tokens_per_second"]
        parts[f"training {name}"] = (runs[name]["wall_seconds"], estimate)
    parts["every analysis"] = (
        sum(runs.get("analysis", {}).get("seconds", {}).values()),
        sum(idle_analysis.get("seconds", {}).values()),
    )
    parts["total"] = (
        sum(measured for measured, _ in parts.values()),
        sum(idle for _, idle in parts.values()),
    )
    return parts


def table_by_scale(scales: dict[str, dict[str, Any]]) -> str:
    """Markdown table, one row per variant: the paper's test perplexity, then ours per scale.

    ``scales`` maps a column label (``"ours, cpu scale (...)"``) to the results loaded by
    :func:`load_full_results` for that scale; a missing run reads "not run yet".
    """
    header = "| model | variant | reported by the paper | " + " | ".join(scales) + " |"
    lines = [header, "| --- | --- | ---: |" + " ---: |" * len(scales)]
    for cell, stable in MODEL_VARIANTS:
        name = variant_name(cell, stable)
        ours = [
            f"{entry['test_ppl']:.1f}" if entry and "test_ppl" in entry else "not run yet"
            for entry in (results.get(name) for results in scales.values())
        ]
        paper = paper_claims.marked(PAPER_TEST_PPL_KEYS[name])
        variant = "stable" if stable else "unconstrained"
        lines.append(f"| {MODEL_LABELS[cell]} | {variant} | {paper} | " + " | ".join(ours) + " |")
    return "\n".join(lines)


def smallest_k_within(curve: dict[str, Any], tolerance: float = 0.01) -> int | None:
    """The smallest measured ``k`` whose perplexity is within ``tolerance`` of the recurrent one."""
    target = curve["recurrent_ppl"] * (1 + tolerance)
    close = [k for k, ppl in zip(curve["k"], curve["ppl"], strict=True) if ppl <= target]
    return close[0] if close else None


def _seed_runs_of(results: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """``{variant: {seed: run}}`` of the training results in ``results`` (one run each)."""
    return {
        name: {int(entry.get("seed", 0)): entry}
        for name, entry in results.items()
        if name in VARIANTS_BY_NAME and isinstance(entry, dict) and "test_ppl" in entry
    }


# ---------------------------------------------------------------------------
# Seeds and the LSTM ablation (cpu scale), judged by data/results/criteria.json
# ---------------------------------------------------------------------------


def load_seed_results(config: str = "cpu") -> dict[str, dict[int, dict[str, Any]]]:
    """Every committed completed run of a config, by variant and seed.

    Reads ``<config folder>/<variant>.json`` (the config's own seed) and
    ``<config folder>/seed<N>/<variant>.json`` (``--seed N``).
    """
    folder = results_folder(config)
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted([*folder.glob("*.json"), *folder.glob("seed*/*.json")]):
        if path.stem not in VARIANTS_BY_NAME:
            continue
        with open(path, encoding="utf8") as handle:
            run = json.load(handle)
        if run.get("status") == "completed" and "test_ppl" in run:
            found.setdefault(path.stem, {})[int(run["seed"])] = run
    return found


def seed_summary(runs: dict[int, dict[str, Any]]) -> criteria.SeedSummary:
    """Test perplexity over the seeds of one variant (``load_seed_results(...)[variant]``)."""
    return criteria.summarize({seed: run["test_ppl"] for seed, run in runs.items()})


def unfinished_epochs(config: str, variant: str) -> list[dict[str, Any]]:
    """The per-epoch metrics committed for a run of ``config`` that has not finished yet
    (``unfinished/<variant>.metrics.jsonl`` in its results folder, a copy of the run's
    ``metrics.jsonl``); empty when there is none.  No test perplexity: no verdict."""
    path = results_folder(config) / "unfinished" / f"{variant}.metrics.jsonl"
    return read_metrics(path) if path.is_file() else []


def missing_run(config: str, variant: str) -> str:
    """What a table says of a run with no result file: how far it got, or "not run yet"."""
    epochs = unfinished_epochs(config, variant)
    if not epochs:
        return "not run yet"
    return f"unfinished ({len(epochs)} of at most {CONFIGS[config].epochs} epochs so far)"


def rerun_command(config: str, cell: str, stable: bool, seed: int | None = None) -> str:
    """The one command that trains (or resumes) one committed run."""
    command = f"python -m stablernn_lib train --model {cell}{' --stable' if stable else ''}"
    command += f" --config {config} --resume"
    return command + (
        f" --seed {seed}" if seed is not None and seed != CONFIGS[config].seed else ""
    )


def seeds_commands(config: str = "cpu") -> str:
    """One command per model and seed of :func:`seeds_table`: the committed runs and the
    ones the criteria still ask for (the config's own seed, then 2, 3, ...), each marked."""
    needed = criteria.load_criteria()["seeds"]["wikitext2"]
    runs = load_seed_results(config)
    planned = training.planned_seeds(CONFIGS[config].seed, needed, first_extra=2)
    lines = []
    for cell, stable in MODEL_VARIANTS:
        found = runs.get(variant_name(cell, stable), {})
        for seed in dict.fromkeys([*planned, *sorted(found)]):
            state = "committed" if seed in found else "not run yet"
            lines.append(f"{rerun_command(config, cell, stable, seed)}  # {state}")
    return "\n".join(lines)


def seeds_table(config: str = "cpu") -> str:
    """Markdown table: each variant's test perplexity over seeds (mean ± sd; each seed's value
    is :func:`schedule_table`'s), and the verdict on "stability costs little" per cell, read
    from the criteria file."""
    runs = load_seed_results(config)
    lines = [
        f"| model ({config} scale) | test perplexity over seeds | stable vs unconstrained "
        "| verdict (criteria.json) |",
        "| --- | --- | ---: | --- |",
    ]
    for cell in ("rnn", "lstm"):
        free, stable = (runs.get(variant_name(cell, s), {}) for s in (False, True))
        for is_stable, found in ((False, free), (True, stable)):
            label = f"{MODEL_LABELS[cell]}, {'stable' if is_stable else 'unconstrained'}"
            if not found:
                lines.append(f"| {label} | not run yet | | |")
                continue
            summary = seed_summary(found)
            gap = verdict = ""
            if is_stable and free:
                reference = seed_summary(free)
                gap = f"{100 * criteria.relative_gap(summary.mean, reference.mean):+.1f}%"
                verdict = criteria.stability_cost_verdict("wikitext2", reference, summary)
            lines.append(f"| {label} | {summary.describe(each=False)} | {gap} | {verdict} |")
    return "\n".join(lines)


def schedule_table(config: str = "cpu") -> str:
    """Markdown table, one row per committed run of a config (model and seed): its test
    perplexity and the learning rate of each epoch, so that a run whose schedule cut the
    rate (a validation loss that did not improve) stands out among its seeds."""
    runs = load_seed_results(config)
    lines = [
        f"| model ({config} scale) | seed | test perplexity | learning rate, epoch by epoch |",
        "| --- | ---: | ---: | --- |",
    ]
    for cell, stable in MODEL_VARIANTS:
        label = f"{MODEL_LABELS[cell]}, {'stable' if stable else 'unconstrained'}"
        found = runs.get(variant_name(cell, stable), {})
        for seed in sorted(found, key=lambda seed: (seed != CONFIGS[config].seed, seed)):
            run = found[seed]
            rates = ", ".join(f"{epoch['lr']:g}" for epoch in run["epochs"])
            lines.append(f"| {label} | {seed} | {run['test_ppl']:.1f} | {rates} |")
    return "\n".join(lines)


# The rows of Chapter 8's LSTM ablation: label, config, stable, which layers the set certifies
# contractive, and the config whose unconstrained LSTM is the row's reference (same lr, epochs).
ABLATION_ROWS: tuple[tuple[str, str, bool, str, str], ...] = (
    ("unconstrained", "cpu", False, "none (no constraint)", "cpu"),
    ("course constraint, every layer", "cpu", True, "every layer", "cpu"),
    ("course constraint, first layer only", "cpu-first-layer", True, "layer 1 only", "cpu"),
    ("authors' rescaling, first layer only", "cpu-authors-first", True, "none", "cpu"),
    ("authors' rescaling, every layer", "cpu-authors-all", True, "none", "cpu"),
    ("course constraint, forget cap lifted", "cpu-free-forget", True, "none", "cpu"),
    (
        "course constraint, forget cap lifted above layer 1",
        "cpu-free-forget-upper",
        True,
        "layer 1 only",
        "cpu",
    ),
    ("unconstrained, lr 20", "cpu-lr20", False, "none (no constraint)", "cpu-lr20"),
    ("course constraint, every layer, lr 20", "cpu-lr20", True, "every layer", "cpu-lr20"),
    (
        "unconstrained, until the decay is used up",
        "cpu-converged",
        False,
        "none (no constraint)",
        "cpu-converged",
    ),
    (
        "course constraint, every layer, until the decay is used up",
        "cpu-converged",
        True,
        "every layer",
        "cpu-converged",
    ),
)


def _worst_jacobian(config: str, variant: str) -> float | None:
    """The largest one-step state-Jacobian norm measured on a config's model (any layer)."""
    path = results_folder(config) / "analysis.json"
    if not path.is_file():
        return None
    with open(path, encoding="utf8") as handle:
        norms = json.load(handle).get(variant, {}).get("jacobian_norms")
    return max(max(layer) for layer in norms) if norms else None


AblationRuns = dict[str, dict[str, dict[int, dict[str, Any]]]]


def _ablation_runs() -> AblationRuns:
    """:func:`load_seed_results` of every config the ablation reads, each read once."""
    return {
        config: load_seed_results(config) for config in dict.fromkeys(r[1] for r in ABLATION_ROWS)
    }


def ablation_table() -> tuple[str, str]:
    """Chapter 8's LSTM ablation, one factor at a time from ``cpu``: a markdown table and the
    commands that produce each row.

    Each stable row's gap is measured against the unconstrained LSTM of the same setting
    (``cpu`` for the constraint rows, its own config for lr 20 and convergence).  A row with
    fewer seeds than the criteria require is read only where its effect exceeds the
    How the criteria read each row is :func:`ablation_readings_table`'s; a row of ``cpu``
    gives mean ± sd without its seeds, which :func:`schedule_table` lists.
    """
    lines = [
        "| LSTM, cpu scale | certified contractive | test perplexity | vs unconstrained "
        "| worst one-step Jacobian norm |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    commands = []
    every = _ablation_runs()
    for label, config, stable, certified, reference in ABLATION_ROWS:
        variant = variant_name("lstm", stable)
        runs = every[config].get(variant, {})
        commands.append(rerun_command(config, "lstm", stable))
        if stable and config != "cpu":  # the worst-Jacobian column of the row
            commands.append(
                f"python -m stablernn_lib lm-analysis --config {config} --parts jacobians "
                "--variants lstm-stable"
            )
        if not runs:
            lines.append(f"| {label} | {certified} | {missing_run(config, variant)} | | |")
            continue
        summary = seed_summary(runs)
        free = every[reference].get("lstm-unconstrained")
        gap = ""
        if stable and free:
            gap = f"{100 * criteria.relative_gap(summary.mean, seed_summary(free).mean):+.1f}%"
        worst = _worst_jacobian(config, variant)
        shown = summary.describe(each=config != "cpu")
        lines.append(
            f"| {label} | {certified} | {shown} | {gap} "
            f"| {'not measured' if worst is None else f'{worst:.2f}'} |"
        )
    return "\n".join(lines), "\n".join(dict.fromkeys(commands))


def _row_gap(every: AblationRuns, config: str, stable: bool, reference: str) -> float | None:
    """Relative gap of a row's mean test perplexity to its reference unconstrained LSTM."""
    runs = every[config].get(variant_name("lstm", stable))
    free = every[reference].get("lstm-unconstrained")
    if not (runs and free):
        return None
    return criteria.relative_gap(seed_summary(runs).mean, seed_summary(free).mean)


def _share_closed(course: float, gap: float) -> float:
    """Percent of the course constraint's relative gap ``course`` that a row's ``gap`` closes."""
    return 100 * (course - gap) / course


@dataclass(frozen=True)
class ClaimReading:
    """What one scale's runs measure for one claim of the paper, and the verdict word of the
    rule of ``criteria.json`` that judges it.

    ``claim``: ``"stability_cost"`` (``value``: the stable model's relative gap in the seed
    means, in percent), ``"truncation"`` (``value``: the smallest measured context within the
    tolerance, None for none) or ``"gradient_vanishes"`` (``value``: the gradient at the
    criterion's distance over the one at distance 0).  ``seeds``: the seeds the value rests
    on.  ``verdict``: ``"supported"``, ``"not supported"``, ``"inconclusive"``, ``"no
    verdict (...)"`` or ``"not yet run"``; a measurement of one trained model is
    ``indicative``.
    """

    cell: str
    claim: str
    value: float | int | None
    seeds: tuple[int, ...]
    verdict: str
    indicative: bool


def claim_readings(
    results: dict[str, Any], seed_runs: dict[str, dict[int, dict[str, Any]]] | None = None
) -> list[ClaimReading]:
    """Each claim of the paper, per cell, as the runs of one scale measure it.

    ``results`` as loaded by :func:`load_full_results` (training results and
    ``"analysis"``); ``seed_runs`` (:func:`load_seed_results` of the same config) gives every
    committed seed, and defaults to the runs in ``results``.  The cost of stability compares
    the seed means (``criteria.stability_cost``); the truncated evaluation and Figure 2 are
    measured on one trained model of the unconstrained cell (``criteria.truncation``,
    ``criteria.gradient_vanishes``) and are indicative."""
    runs = _seed_runs_of(results) if seed_runs is None else seed_runs
    analysis = results.get("analysis", {})
    measured_seed = analysis.get("lm_config", {}).get("seed")
    measured = (measured_seed,) if measured_seed is not None else ()
    truncation, vanishes = criteria.criterion("truncation"), criteria.criterion("gradient_vanishes")
    readings = []
    for cell in ("rnn", "lstm"):
        free, stable = (runs.get(variant_name(cell, s)) for s in (False, True))
        if free and stable:
            free_summary, stable_summary = seed_summary(free), seed_summary(stable)
            gap = 100 * criteria.relative_gap(stable_summary.mean, free_summary.mean)
            verdict = criteria.stability_cost_verdict("wikitext2", free_summary, stable_summary)
            seeds = tuple(sorted(set(free_summary.seeds) & set(stable_summary.seeds)))
            readings.append(ClaimReading(cell, "stability_cost", gap, seeds, verdict, False))
        else:
            readings.append(ClaimReading(cell, "stability_cost", None, (), "not yet run", False))
        entry = analysis.get(variant_name(cell, False), {})
        curve = entry.get("truncated_eval")
        if curve:
            k = smallest_k_within(curve, truncation["relative_tolerance"])
            within = k is not None and k <= truncation["max_k"]
            verdict = "supported" if within else "not supported"
            readings.append(ClaimReading(cell, "truncation", k, measured, verdict, True))
        else:
            readings.append(ClaimReading(cell, "truncation", None, (), "not yet run", True))
        profile = entry.get("figure2")
        if profile and len(profile["mean_norm"]) > vanishes["distance"]:
            ratio = profile["mean_norm"][vanishes["distance"]] / profile["mean_norm"][0]
            verdict = "supported" if ratio < vanishes["ratio"] else "not supported"
            readings.append(ClaimReading(cell, "gradient_vanishes", ratio, measured, verdict, True))
        else:
            readings.append(ClaimReading(cell, "gradient_vanishes", None, (), "not yet run", True))
    return readings


_CLAIMS = {
    "stability_cost": ("stability costs little", "stable vs unconstrained, seed means"),
    "truncation": ("a model of short context", "smallest k within 1% (unconstrained)"),
    "gradient_vanishes": ("the gradient vanishes with distance", "gradient at 20 / at 0"),
}


def claims_table(readings: list[ClaimReading], scale: str) -> str:
    """Markdown table of :func:`claim_readings`: claim, measured value, seeds, verdict."""
    lines = [
        f"| model | the paper's claim | what we measure ({scale}) | value | seeds "
        "| verdict (criteria.json) |",
        "| --- | --- | --- | ---: | --- | --- |",
    ]
    for reading in readings:
        claim, measure = _CLAIMS[reading.claim]
        ran = reading.verdict != "not yet run"
        if not ran:
            value = ""
        elif reading.value is None:
            value = f"none up to {criteria.criterion('truncation')['max_k']}"
        elif reading.claim == "stability_cost":
            value = f"{reading.value:+.1f}%"
        elif reading.claim == "gradient_vanishes":
            value = f"{reading.value:.1e}"
        else:
            value = f"k = {reading.value}"
        seeds = ", ".join(map(str, reading.seeds))
        verdict = reading.verdict + (" (one trained model: indicative)" if reading.indicative
                                     and ran else "")  # fmt: skip
        lines.append(
            f"| {MODEL_LABELS[reading.cell]} | {claim} | {measure} | {value} | {seeds} "
            f"| {verdict} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class AblationReading:
    """One stable row of the LSTM ablation read against the unconstrained LSTM of its setting.

    ``gap``: the row's mean test perplexity above its reference, in percent; ``course_gap``:
    the course constraint's gap in the ``cpu`` setting; ``share_closed``: percent of
    ``course_gap`` the row closes (None for a setting row, whose reference is not ``cpu``).
    ``verdict``: the criteria's word on "stability costs little" with enough seeds, else
    None.  ``effects``: for a constraint row with fewer seeds, ``{reference: (|row - mean|,
    5 sd, readable)}`` against the course model and the unconstrained LSTM of ``cpu``
    (``criteria.single_seed_ablation``); empty for a setting row.
    """

    label: str
    config: str
    certified: str
    seeds: int
    mean: float
    gap: float
    course_gap: float
    share_closed: float | None
    worst_jacobian: float | None
    verdict: str | None
    effects: dict[str, tuple[float, float, bool]]


def ablation_readings() -> list[AblationReading]:
    """Every committed stable row of :data:`ABLATION_ROWS` other than the course model,
    read from the files (rows not run yet, or without their reference, are left out)."""
    every = _ablation_runs()
    course = _row_gap(every, "cpu", True, "cpu")
    if course is None:
        return []
    needed = criteria.load_criteria()["seeds"]["wikitext2"]
    k = criteria.criterion("single_seed_ablation")["sd_multiple"]
    readings = []
    for label, config, stable, certified, reference in ABLATION_ROWS:
        gap = _row_gap(every, config, stable, reference) if stable and config != "cpu" else None
        if gap is None:
            continue
        runs = every[config]["lstm-stable"]
        summary = seed_summary(runs)
        verdict, effects = None, {}
        if summary.n >= needed:
            free = seed_summary(every[reference]["lstm-unconstrained"])
            verdict = criteria.stability_cost_verdict("wikitext2", free, summary)
        elif reference == "cpu":
            for name, variant in (
                ("course", "lstm-stable"),
                ("unconstrained", "lstm-unconstrained"),
            ):
                found = every["cpu"].get(variant)
                if found:
                    ref = seed_summary(found)
                    effects[name] = (
                        abs(summary.mean - ref.mean),
                        k * ref.sd,
                        criteria.single_seed_readable(summary.mean, ref),
                    )
        readings.append(
            AblationReading(
                label=label,
                config=config,
                certified=certified,
                seeds=summary.n,
                mean=summary.mean,
                gap=100 * gap,
                course_gap=100 * course,
                share_closed=_share_closed(course, gap) if reference == "cpu" else None,
                worst_jacobian=_worst_jacobian(config, "lstm-stable"),
                verdict=verdict,
                effects=effects,
            )
        )
    return readings


def ablation_readings_table(readings: list[AblationReading]) -> str:
    """Markdown table of :func:`ablation_readings`, the constraint rows ranked by the share of
    the course constraint's gap they close, then the setting rows."""
    ranked = sorted(readings, key=lambda r: (r.share_closed is None, -(r.share_closed or 0)))
    lines = [
        "| change from the course model (LSTM, cpu scale) | seeds | gap | share of the course "
        "gap closed | how the criteria read it |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in ranked:
        if r.verdict is not None:
            read = f'"stability costs little": {r.verdict}'
        elif not r.effects:
            read = "a setting row, one seed each: a number, not a verdict"
        else:
            read = (
                "; ".join(
                    f"{'readable' if ok else 'not readable'} against the {name} model "
                    f"({effect:.1f} {'>' if ok else '≤'} 5 sd = {limit:.1f})"
                    for name, (effect, limit, ok) in r.effects.items()
                )
                + "; no verdict before 3 seeds"
            )
        share = "" if r.share_closed is None else f"{r.share_closed:.0f}%"
        lines.append(f"| {r.label} | {r.seeds} | {r.gap:+.1f}% | {share} | {read} |")
    return "\n".join(lines)
