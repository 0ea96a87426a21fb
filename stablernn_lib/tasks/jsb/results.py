"""The committed JSB Chorales results (``data/results/jsb/``) as the numbers, Markdown tables
and figures Chapter 9 and its companion page show; :func:`chapter_values` is every number and
verdict the prose glues (percentages in percent, NLLs in nats per time step). The
measurements on trained models are :mod:`stablernn_lib.tasks.jsb.analysis`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stablernn_lib.core import criteria, paper_claims
from stablernn_lib.tasks import training
from stablernn_lib.tasks.jsb.train import CONFIGS, PUBLISHED_RESULTS, RESULTS_DIR, result_file_name

# The (model, variant) pairs of the chapter's table, in order.
TABLE_VARIANTS = tuple((cell, v) for cell in ("rnn", "lstm") for v in ("unconstrained", "stable"))
ALL_VARIANTS = (*TABLE_VARIANTS, ("lstm", "authors-bug"))
PAPER_KEYS = {(cell, variant): f"jsb-{cell}-{variant}-nll" for cell, variant in TABLE_VARIANTS}
LABELS = {
    "rnn-unconstrained": "RNN",
    "rnn-stable": "RNN, stable",
    "lstm-unconstrained": "LSTM",
    "lstm-stable": "LSTM, stable",
    "lstm-authors-bug": "LSTM, authors' bug (no recurrence)",
}
BASELINE_LABEL = "no memory: each key on at its training frequency"
PAPER_SETTING_CONFIGS = ("authors",)  # the authors' model and schedule: the paper's numbers apply
SEEDED_CONFIGS = ("authors", "adam-tcn")  # trained with seeds 1111, 1, 2, ...
# The cells whose model is not the authors' (Chapter 9's departures): no paper number to reproduce.
NOT_THE_AUTHORS_MODEL = {"lstm": "our LSTM is recurrent, the authors' is not (departure 1)"}
PLANNED_VARIANTS = {"full": ALL_VARIANTS}  # the runs a config plans, else TABLE_VARIANTS
RUN_FLAGS = {"full": "--stop-below-lr 1e-5"}  # the flags the committed runs used beyond the config
# The verdict against a paper number the course has not checked (marked †).
UNVERIFIED_PAPER = "no verdict: the paper's number is unverified"
Runs = dict[str, dict[str, Any]]  # {model: result}
SeedRuns = dict[str, dict[int, dict[str, Any]]]  # {model: {seed: result}}


def _root(results_dir: str | Path | None) -> Path:
    return Path(results_dir) if results_dir is not None else RESULTS_DIR


def _read(path: Path) -> Any:
    """The JSON file at ``path``, or None when there is none."""
    return json.loads(path.read_text(encoding="utf8")) if path.is_file() else None


def load_full_analysis(
    results_dir: str | Path | None = None, config: str = "full"
) -> dict[str, Any] | None:
    """The measurements of a config's models (``analysis.json``), or None when not yet run."""
    return _read(_root(results_dir) / PUBLISHED_RESULTS[config][0] / "analysis.json")


def load_results(results_dir: str | Path | None = None, config: str = "full") -> Runs:
    """The result files of a published config's own seed by ``<model>-<variant>``."""
    found = {
        f"{cell}-{variant}": _read(_root(results_dir) / result_file_name(cell, variant, config))
        for cell, variant in ALL_VARIANTS
    }
    return {name: run for name, run in found.items() if run is not None}


def load_seed_results(config: str, results_dir: str | Path | None = None) -> SeedRuns:
    """Every completed run of a published config by model and seed: the config's own seed
    (:func:`result_file_name`) and every ``seed<N>/`` beside it."""
    root, found = _root(results_dir), {}
    for cell, variant in ALL_VARIANTS:
        own = Path(result_file_name(cell, variant, config))
        for path in [root / own, *sorted((root / own.parent).glob(f"seed*/{own.name}"))]:
            run = _read(path)
            if run is not None and run.get("status") == "completed" and "test_nll" in run:
                found.setdefault(f"{cell}-{variant}", {})[int(run["seed"])] = run
    return found


def seed_summary(runs: dict[int, dict[str, Any]]) -> criteria.SeedSummary:
    """Test NLL over the seeds of one model."""
    return criteria.summarize({seed: run["test_nll"] for seed, run in runs.items()})


def baseline_comparison(summary: criteria.SeedSummary, baseline: float) -> str:
    """The gap to the no-memory baseline and, with enough seeds, the ``beats_baseline`` verdict."""
    gap = f"{100 * criteria.relative_gap(summary.mean, baseline):+.1f}%"
    if not criteria.enough_seeds("jsb", summary):
        return f"{gap} ({criteria.seeds_label(summary.n)}: no verdict)"
    beats = criteria.beats_baseline(summary, baseline)
    return f"{gap}: {'beats it' if beats else 'no better than the baseline'}"


def _baseline_row(baseline: float, header: str) -> str:
    """The baseline's row of the table whose first line is ``header``."""
    columns = header.count("|") - 1
    return f"| {BASELINE_LABEL} | {baseline:.2f} |" + " |" * (columns - 2)


def results_table(results: Runs, baseline: float, smoke: Runs | None = None) -> str:
    """Markdown table: test NLL of the ``full`` runs (the input-layer ablation), their gap to
    the no-memory ``baseline``, the smoke runs if given, and the paper's number."""
    columns = ["model", "ours, with input layer", "vs baseline", "epochs run", "best epoch"]
    columns += [
        "wall time",
        *(["ours, smoke"] if smoke is not None else []),
        "reported by the paper",
    ]
    header = "| " + " | ".join(columns) + " |"
    lines = [header, "|" + " --- |" * len(columns)]
    for cell, variant in ALL_VARIANTS:
        name = f"{cell}-{variant}"
        result = results.get(name)
        if result is not None and "test_nll" in result:
            ours = f"{result['test_nll']:.2f}"
            versus = baseline_comparison(seed_summary({int(result["seed"]): result}), baseline)
            ran = str(len(result["epochs"]))
            best = str(result["best_epoch"])
            wall = f"{result['wall_seconds'] / 60:.0f} min"
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


def optimizer_diagnostic_table(sgd: Runs, adam: Runs, baseline: float) -> str:
    """Markdown table: test NLL of each ``full`` model trained by the authors' SGD schedule and
    by the ``adam`` diagnostic, the no-memory ``baseline``, and the paper's number."""
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
    """The command that trains (or resumes) one run of a published config; the config's own
    seed takes no ``--seed``, a string ``seed`` (``"<N>"``) is written as given."""
    command = f"python -m stablernn_lib train-music --model {cell} --variant {variant}"
    command += f" --config {config}"
    if seed is not None and seed != CONFIGS[config].seed:
        command += f" --seed {seed}"
    flags = RUN_FLAGS.get(config, "")
    return command + " --resume" + (f" {flags}" if flags else "") + " --threads 1"


def planned_seeds(config: str) -> tuple[int, ...]:
    """A config's own seed, then for a seeded config 1, 2, ... up to the criteria's count."""
    own = CONFIGS[config].seed
    if config not in SEEDED_CONFIGS:
        return (own,)
    return training.planned_seeds(own, criteria.load_criteria()["seeds"]["jsb"], first_extra=1)


def missing_runs(config: str, results_dir: str | Path | None = None) -> list[tuple[str, str, int]]:
    """The planned (model, variant, seed) of a config without a completed result file."""
    done = load_seed_results(config, results_dir)
    return [
        (cell, variant, seed)
        for cell, variant in PLANNED_VARIANTS.get(config, TABLE_VARIANTS)
        for seed in planned_seeds(config)
        if seed not in done.get(f"{cell}-{variant}", {})
    ]


def run_commands(config: str, results_dir: str | Path | None = None) -> str:
    """Markdown: the command pattern that reruns any row of a config's table, and a command
    for each of its :func:`missing_runs`, each in a code block."""
    seeds = planned_seeds(config)
    pattern = rerun_command(config, "<model>", "<variant>", "<N>" if len(seeds) > 1 else None)
    variants = "unconstrained or stable"
    if config == "full":
        variants += " (authors-bug: the authors' non-recurrent LSTM, with `--model lstm`)"
    if len(seeds) > 1:
        variants += f"; `<N>` is a seed of the table ({seeds[0]}, the config's own seed, is the "
        variants += "command without `--seed`)"
    lines = [
        f"Any row, with `<model>` rnn or lstm and `<variant>` {variants}:",
        *_code_block(pattern),
    ]
    missing = missing_runs(config, results_dir)
    if missing:
        planned = len(seeds) * len(PLANNED_VARIANTS.get(config, TABLE_VARIANTS))
        lines.append(f"\nNot yet run ({len(missing)} of {planned}):")
        for c, v, seed in missing:
            lines += _code_block(rerun_command(config, c, v, seed))
    return "\n".join(lines)


def _code_block(command: str, width: int = 34) -> list[str]:
    """A Markdown code block of one command, broken with ``\\`` before a flag that would take
    a line past ``width`` characters (short lines on a phone)."""
    words = command.split(" --")
    lines = [words[0]]
    for flag in words[1:]:
        if len(lines[-1]) + len(flag) + 3 <= width:
            lines[-1] += f" --{flag}"
        else:
            lines.append(f"  --{flag}")
    return ["", "```bash", " \\\n".join(lines), "```"]


def seeds_table(config: str, baseline: float, results_dir: str | Path | None = None) -> str:
    """Markdown table of a seeded config: each model's test NLL over its seeds, its gap to the
    ``baseline``, the stable model's gap and ``stability_cost`` verdict, and at the authors'
    setting the paper's number."""
    runs = load_seed_results(config, results_dir)
    paper, costs = config in PAPER_SETTING_CONFIGS, stability_costs(runs)
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
        summary, cost = seed_summary(runs[name]), costs.get(cell)
        gap = verdict = ""
        if variant == "stable" and cost:
            gap, verdict = f"{100 * cost.relative:+.1f}%", cost.verdict
        versus = baseline_comparison(summary, baseline)
        lines.append(
            f"| {LABELS[name]} | {summary.describe(2)} | {versus} | {gap} | {verdict} |" + reported
        )
    lines.append(_baseline_row(baseline, lines[0]))
    return "\n".join(lines)


def load_reruns(config: str, results_dir: str | Path | None = None) -> dict[str, Any] | None:
    """``<config>/reruns.json`` (runs trained again, with what the earlier run gave), or None."""
    return _read(_root(results_dir) / config / "reruns.json")


def reruns_table(config: str, results_dir: str | Path | None = None) -> str:
    """Markdown table of :func:`load_reruns`: the earlier run's outcome beside the committed
    run's test NLL, the change, and the first epoch where their validation NLLs part."""
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
        now, change, split = "not yet rerun", "", ""
        if current and current["provenance"]["git_commit"] != earlier["git_commit"]:
            if "validation_split" in earlier:
                where = earlier["validation_split"]
                split = f"epoch {where['epoch']} (lr {where['lr']:.0e})" if where else "never"
            now = f"{current['test_nll']:.3f}"
            if "test_nll" in earlier:
                change = f"{current['test_nll'] - earlier['test_nll']:+.3f}"
        lines.append(
            f"| {LABELS[entry['model']]} | {entry['seed']} | {before} | {now} | {change} "
            f"| {split} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class PaperComparison:
    """One model's test NLL over its seeds against the paper's: ``difference`` = ours - paper
    (nats per step), ``relative`` = that / paper, and the ``reproduces_paper`` verdict."""

    ours: criteria.SeedSummary | None
    paper: float
    difference: float | None
    relative: float | None
    verdict: str


def paper_comparisons(
    config: str = "authors", results_dir: str | Path | None = None
) -> dict[str, PaperComparison]:
    """:class:`PaperComparison` of every model of a config at the authors' setting."""
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
    (stable - unconstrained) / unconstrained, and the ``stability_cost`` verdict."""

    free: criteria.SeedSummary
    stable: criteria.SeedSummary
    relative: float
    verdict: str


def stability_costs(runs: SeedRuns) -> dict[str, StabilityCost]:
    """:class:`StabilityCost` by cell (``"rnn"``, ``"lstm"``) of the pairs with both runs."""
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


def stability_cost_table(runs_by_label: dict[str, SeedRuns]) -> str:
    """Markdown table of :func:`stability_costs` for each labelled set of runs."""
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
    """Markdown table of the chapter's main result (config ``authors``): each model's test NLL
    over its seeds, the paper's number and our difference from it, the gap to the
    ``baseline``, and the stable model's :class:`StabilityCost`."""
    compared = paper_comparisons("authors", results_dir)
    costs = stability_costs(load_seed_results("authors", results_dir))
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
        cost = costs.get(cell) if variant == "stable" else None
        versus = f"{100 * cost.relative:+.1f}%: {cost.verdict}" if cost else ""
        difference = f"{found.difference:+.2f} ({100 * found.relative:+.1f}%)"
        if cell in NOT_THE_AUTHORS_MODEL:
            difference += ", another model"
        lines.append(
            f"| {LABELS[name]} | {found.ours.mean:.2f} ± {found.ours.sd:.2f} | {marked} "
            f"| {difference} | {baseline_comparison(found.ours, baseline)} | {versus} |"
        )
    lines.append(_baseline_row(baseline, lines[0]))
    return "\n".join(lines)


def training_extent_table(runs: SeedRuns) -> str:
    """Markdown table: each model and seed's best validation epoch, epochs run and final lr."""
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


def early_stop_table(results: Runs) -> str:
    """Markdown table: each run's epochs, and for a run ended by ``--stop-below-lr`` its lr
    then and the bound on how far the skipped epochs could have moved its weights."""
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


def input_layer_table(results: Runs, reference: SeedRuns) -> str:
    """Markdown table: the ``single_seed_ablation`` rule on each one-seed ``full`` run against
    the same model without the input layer over its seeds (``reference``, ``authors``)."""
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


def context_used(curve: dict[str, Any], tolerance: float | None = None) -> int | None:
    """The smallest ``k`` whose NLL is within ``tolerance`` (default: the ``truncation``
    rule's) of the recurrent one, relative."""
    if tolerance is None:
        tolerance = criteria.criterion("truncation")["relative_tolerance"]
    for k, loss in zip(curve["k"], curve["loss"], strict=True):
        if loss <= curve["recurrent_loss"] * (1 + tolerance):
            return k
    return None


def truncation_verdict(k: int | None, measured_up_to: int, exact_from: int | None) -> str:
    """The ``truncation`` verdict on a smallest context ``k`` (None: none) of a curve measured
    up to ``measured_up_to``; from ``exact_from`` on a context covers every scored frame."""
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
    """The sampled state-Jacobian spectral norms of one model: range, median, share below 1."""

    smallest: float
    median: float
    largest: float
    below_one: float
    count: int


def jacobian_stats(entry: dict[str, Any]) -> JacobianStats | None:
    """:class:`JacobianStats` of one model's analysis entry (None without norms)."""
    if not entry.get("jacobian_norms"):
        return None
    norms = np.array([x for layer in entry["jacobian_norms"] for x in layer])
    return JacobianStats(
        float(norms.min()), float(np.median(norms)), float(norms.max()),
        float(np.mean(norms < 1)), int(norms.size),
    )  # fmt: skip


def gradient_ratio(entry: dict[str, Any], distance: int | None = None) -> float | None:
    """Mean gradient norm at ``distance`` (default: the ``gradient_vanishes`` rule's) over
    the one at 0, from one model's analysis entry (None when not measured)."""
    if "figure2" not in entry:
        return None
    distance = criteria.criterion("gradient_vanishes")["distance"] if distance is None else distance
    norms = dict(zip(entry["figure2"]["distance"], entry["figure2"]["mean_norm"], strict=True))
    if distance not in norms or not norms[0]:
        return None
    return norms[distance] / norms[0]


def memory_reading(name: str, results: Runs, baseline: float) -> str:
    """Whether a model beats the no-memory baseline (``beats_baseline``), indicative on too
    few seeds; "" without a run."""
    run = results.get(name)
    if run is None or "test_nll" not in run:
        return ""
    summary = seed_summary({int(run["seed"]): run})
    if criteria.beats_baseline(summary, baseline):
        return "beats it"
    if not criteria.enough_seeds("jsb", summary):
        return f"not below it by the margin ({criteria.seeds_label(summary.n)}: indicative)"
    return "no better than the baseline"


@dataclass(frozen=True)
class Measured:
    """One model's measurements of memory and their verdicts (``""``: not measured or read)."""

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
    results: Runs | None = None,
    baseline: float | None = None,
    curve_key: str = "truncated_eval",
) -> dict[str, Measured]:
    """:class:`Measured` of every model of ``analysis`` (a context of ``frames - 1`` on
    ``truncated_eval`` sees every scored frame: no verdict there)."""
    frames = analysis.get("config", {}).get("frames")
    exact_from = frames - 1 if curve_key == "truncated_eval" and frames else None
    ratio_needed = criteria.criterion("gradient_vanishes")["ratio"]
    found = {}
    for name in LABELS:
        entry = analysis.get(name)
        if not isinstance(entry, dict):
            continue
        curve, ratio = entry.get(curve_key), gradient_ratio(entry)
        k = context_used(curve) if curve else None
        nlls = (curve["recurrent_loss"], curve["loss"][0]) if curve else (None, None)
        verdict = truncation_verdict(k, curve["k"][-1], exact_from) if curve else ""
        vanishes = "" if ratio is None else "supported" if ratio < ratio_needed else "not supported"
        memory = memory_reading(name, results, baseline) if results and baseline else ""
        found[name] = Measured(*nlls, k, verdict, ratio, vanishes, jacobian_stats(entry), memory)
    return found


def measurements_table(
    analysis: dict[str, Any],
    results: Runs | None = None,
    baseline: float | None = None,
    curve_key: str = "truncated_eval",
) -> str:
    """Markdown table of :func:`measured`, one row per model."""
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
    """The contexts ``k`` of a piano-roll entry as increasing integers."""
    return sorted(int(k) for k in entry["probs"])


Value = float | int | str
SHORT = {"rnn-unconstrained": "rnn", "rnn-stable": "srnn", "lstm-unconstrained": "lstm",
         "lstm-stable": "slstm", "lstm-authors-bug": "bug"}  # fmt: skip
PREFIX = {"authors": "sgd", "adam-tcn": "tcn", "full": "full"}  # of a config's keys
GAP_CONTEXTS = (1, 4, 8, 16, 32)


def _percent(value: float, reference: float) -> float:
    return 100 * criteria.relative_gap(value, reference)


def seeded_values(config: str, baseline: float, results_dir: str | Path | None = None) -> dict:
    """``<prefix>_<model>_mean|sd|n|vs_base|best_first|best_last`` of every model of a seeded
    config and ``<prefix>_<cell>_stable_below|cost_verdict`` of each pair (:data:`PREFIX`)."""
    prefix = PREFIX[config]
    runs = load_seed_results(config, results_dir)
    values: dict[str, Value] = {}
    for name, each in runs.items():
        summary = seed_summary(each)
        key = f"{prefix}_{SHORT[name]}"
        values |= {f"{key}_mean": summary.mean, f"{key}_sd": summary.sd, f"{key}_n": summary.n,
                   f"{key}_vs_base": -_percent(summary.mean, baseline)}  # fmt: skip
        best = sorted(run["best_epoch"] for run in each.values())
        values |= {f"{key}_best_first": best[0], f"{key}_best_last": best[-1]}
    for cell, cost in stability_costs(runs).items():
        values[f"{prefix}_{cell}_stable_below"] = -100 * cost.relative
        values[f"{prefix}_{cell}_cost_verdict"] = cost.verdict
    return values


def paper_values(results_dir: str | Path | None = None) -> dict[str, Value]:
    """``paper_<model>_diff|verdict`` at the authors' setting, and ``tcn_<model>_below_paper``:
    how far the ``adam-tcn`` mean lies below the paper's number, in percent (the least and
    the most as ``tcn_below_paper_least|most``)."""
    values: dict[str, Value] = {}
    tcn = load_seed_results("adam-tcn", results_dir)
    for name, found in paper_comparisons("authors", results_dir).items():
        if found.relative is not None:
            values[f"paper_{SHORT[name]}_diff"] = 100 * found.relative
        values[f"paper_{SHORT[name]}_verdict"] = found.verdict
        if name in tcn:
            below = -_percent(seed_summary(tcn[name]).mean, found.paper)
            values[f"tcn_{SHORT[name]}_below_paper"] = below
    below = [v for k, v in values.items() if k.endswith("_below_paper")]
    if below:
        values["tcn_below_paper_least"], values["tcn_below_paper_most"] = min(below), max(below)
    return values


def extent_values(results_dir: str | Path | None = None) -> dict[str, Value]:
    """The ``authors`` unconstrained LSTM seeds whose best epoch came before 400: how many, the
    first and last such epoch, and their largest final learning rate."""
    runs = load_seed_results("authors", results_dir)
    early = sorted(
        (run["best_epoch"], run["epochs"][-1]["lr"])
        for run in runs["lstm-unconstrained"].values()
        if run["best_epoch"] < 400
    )
    return {
        "sgd_lstm_early_count": len(early),
        "sgd_lstm_early_first": early[0][0] if early else 0,
        "sgd_lstm_early_last": early[-1][0] if early else 0,
        "sgd_lstm_early_lr": max((lr for _, lr in early), default=0.0),
    }


def measured_values(
    config: str, results_dir: str | Path | None = None, curve_key: str = "truncated_eval"
) -> dict[str, Value]:
    """``m_<prefix>_<model>_k|short|grad|vanishes|jac_min|jac_median|jac_max|jac_below`` of a
    config's seed-1111 models (``grad``, ``jac_below`` in percent); on
    ``truncated_eval_after`` also ``..._gap<k>`` = NLL(k) - NLL(recurrent) at
    :data:`GAP_CONTEXTS` and ``..._tolerance``, the ``truncation`` tolerance in nats."""
    analysis = load_full_analysis(results_dir, config)
    if analysis is None:
        return {}
    tolerance = criteria.criterion("truncation")["relative_tolerance"]
    values: dict[str, Value] = {}
    for name, found in measured(analysis, curve_key=curve_key).items():
        key = f"m_{PREFIX[config]}_{SHORT[name]}"
        if found.context is not None:
            values[f"{key}_k"] = found.context
        values[f"{key}_short"] = found.truncation
        if found.gradient_ratio is not None:
            values[f"{key}_grad"] = 100 * found.gradient_ratio
            values[f"{key}_vanishes"] = found.vanishes
        if jac := found.jacobians:
            values[f"{key}_jac_min"], values[f"{key}_jac_max"] = jac.smallest, jac.largest
            values[f"{key}_jac_median"], values[f"{key}_jac_below"] = (
                jac.median,
                100 * jac.below_one,
            )
        curve = analysis[name].get(curve_key)
        if curve_key == "truncated_eval_after" and curve:
            losses = dict(zip(curve["k"], curve["loss"], strict=True))
            for k in GAP_CONTEXTS:
                if k in losses:
                    values[f"{key}_gap{k}"] = losses[k] - curve["recurrent_loss"]
            values[f"{key}_tolerance"] = tolerance * curve["recurrent_loss"]
    return values


def chapter_values(baseline: float, results_dir: str | Path | None = None) -> dict[str, Value]:
    """Every number and verdict word the prose of Chapter 9 and its companion page quotes
    (``baseline``: the no-memory model's test NLL, which the notebook computes from the data)."""
    values: dict[str, Value] = {
        "seeds_needed": criteria.load_criteria()["seeds"]["jsb"],
        "seeds_needed_wikitext2": criteria.load_criteria()["seeds"]["wikitext2"],
        "cost_tolerance": 100 * criteria.criterion("stability_cost")["relative_tolerance"],
        "baseline_margin": 100 * criteria.criterion("beats_baseline")["relative_margin"],
        "truncation_tolerance": 100 * criteria.criterion("truncation")["relative_tolerance"],
        "gradient_distance": criteria.criterion("gradient_vanishes")["distance"],
        "gradient_ratio": 100 * criteria.criterion("gradient_vanishes")["ratio"],
        "reproduce_tolerance": 100 * criteria.criterion("reproduces_paper")["relative_tolerance"],
        "single_seed_sd": criteria.criterion("single_seed_ablation")["sd_multiple"],
    }
    for config in ("authors", "adam-tcn"):
        values |= seeded_values(config, baseline, results_dir)
    values |= paper_values(results_dir) | extent_values(results_dir)
    values |= measured_values("authors", results_dir, "truncated_eval_after")
    values |= measured_values("adam-tcn", results_dir) | measured_values("full", results_dir)
    full = load_results(results_dir)
    for name, run in full.items():
        values[f"full_{SHORT[name]}_nll"] = run["test_nll"]
        values[f"full_{SHORT[name]}_vs_base"] = -_percent(run["test_nll"], baseline)
        values[f"full_{SHORT[name]}_above_base"] = _percent(run["test_nll"], baseline)
    adam = load_results(results_dir, config="adam")
    for name, run in adam.items():
        values[f"adam_{SHORT[name]}_nll"] = run["test_nll"]
    rises = [
        later["train_nll"] - earlier["train_nll"]
        for runs in (full, adam)
        if "rnn-stable" in runs
        for earlier, later in itertools.pairwise(runs["rnn-stable"]["epochs"])
    ]
    if rises:
        values["ablation_srnn_largest_rise"] = max(rises)
    return values
