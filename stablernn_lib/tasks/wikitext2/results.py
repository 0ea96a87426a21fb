"""The committed WikiText-2 results (``data/results/wikitext2/``) as the numbers and Markdown
tables of Chapter 8 and its evidence page (percentages in percent)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from stablernn_lib.core import criteria, paper_claims
from stablernn_lib.core.criteria import percent_gap
from stablernn_lib.core.io import readable_device
from stablernn_lib.core.tables import text_table
from stablernn_lib.tasks import training
from stablernn_lib.tasks.wikitext2.data import WIKITEXT2_TOKENS, WIKITEXT2_VOCAB_SIZE
from stablernn_lib.tasks.wikitext2.train import CONFIGS, RESULTS_DIR, results_folder
from stablernn_lib.tasks.wikitext2.variants import (
    MODEL_LABELS,
    VARIANTS_BY_NAME,
    variant_name,
)
from stablernn_lib.theory.lstm_certificate import authors_constants_constraint

PAPER_TEST_PPL_KEYS: dict[str, str] = {name: f"wt2-{name}-ppl" for name in VARIANTS_BY_NAME}
PARTIAL_DIR = RESULTS_DIR / "gpu-partial"
CONVERGED, SHORT = "cpu-converged", "cpu"
PAIR = (variant_name("lstm", False), variant_name("lstm", True))

Run = dict[str, Any]
SeedRuns = dict[str, dict[int, Run]]
Numbers = dict[str, float | int | str]


def model_label(name: str) -> str:
    """``"lstm-stable"`` -> ``"LSTM, stable"``."""
    cell, kind = VARIANTS_BY_NAME[name][0], name.partition("-")[2]
    return f"{MODEL_LABELS[cell]}, {kind}"


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf8"))


def load_full_results(results_dir: str | Path | None = None) -> dict[str, Any]:
    """Every ``*.json`` of a results folder (default ``RESULTS_DIR``) by file stem."""
    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    return {path.stem: _read_json(path) for path in sorted(folder.glob("*.json"))}


def load_seed_results(config: str = "cpu") -> SeedRuns:
    """Every completed run of a config by variant and seed (``seed<N>/`` beside its own)."""
    folder = results_folder(config)
    found: SeedRuns = {}
    for path in sorted([*folder.glob("*.json"), *folder.glob("seed*/*.json")]):
        if path.stem in VARIANTS_BY_NAME:
            run = _read_json(path)
            if run.get("status") == "completed" and "test_ppl" in run:
                found.setdefault(path.stem, {})[int(run["seed"])] = run
    return found


def load_idle_timing(config_name: str) -> dict[str, Any] | None:
    """The analysis of a config timed on an idle machine, or None."""
    path = RESULTS_DIR / "timing" / f"analysis-{config_name}-idle.json"
    return _read_json(path) if path.is_file() else None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl``, checked to be the epochs 1, 2, ... in order."""
    lines = path.read_text(encoding="utf8").splitlines()
    epochs = [json.loads(line) for line in lines if line.strip()]
    if [row["epoch"] for row in epochs] != list(range(1, len(epochs) + 1)):
        raise ValueError(
            f"{path}: the epochs are not 1, 2, ... in order; the file is damaged (copy the "
            "run's metrics.jsonl again)"
        )
    return epochs


def unfinished_epochs(config: str, variant: str) -> list[dict[str, Any]]:
    """The per-epoch metrics of an unfinished run of ``config`` (empty when none)."""
    path = results_folder(config) / "unfinished" / f"{variant}.metrics.jsonl"
    return read_metrics(path) if path.is_file() else []


def load_partial_runs(folder: str | Path = PARTIAL_DIR) -> dict[str, Run]:
    """The full scale's unfinished runs of ``plan.json`` (job, config, epochs, provenance)."""
    folder = Path(folder)
    if not (folder / "plan.json").exists():
        return {}
    plan = _read_json(folder / "plan.json")
    runs: dict[str, Run] = {}
    for job in plan["jobs"]:
        metrics = folder / f"{job['name']}.metrics.jsonl"
        if not metrics.exists():
            continue
        name = variant_name(job["cell"], job["stable"])
        if name in runs:
            raise ValueError(f"{folder}: two unfinished runs of {name}; keep one per model")
        runs[name] = {
            "job": job["name"],
            "config": job["config"],
            "epochs": read_metrics(metrics),
            "provenance": plan["provenance"],
        }
    return runs


def load_converged() -> dict[str, Run]:
    """The ``cpu-converged`` runs of its own seed by variant, unfinished ones included."""
    seed = CONFIGS[CONVERGED].seed
    runs = {
        name: by_seed[seed]
        for name, by_seed in load_seed_results(CONVERGED).items()
        if seed in by_seed
    }
    for name in PAIR:
        epochs = unfinished_epochs(CONVERGED, name)
        if name not in runs and epochs:
            config = asdict(CONFIGS[CONVERGED])
            runs[name] = {"epochs": epochs, "config": config, "unfinished": True}
    return runs


def seed_summary(runs: dict[int, Run]) -> criteria.SeedSummary:
    """Test perplexity over the seeds of one variant."""
    return criteria.summarize({seed: run["test_ppl"] for seed, run in runs.items()})


def smallest_k_within(curve: dict[str, Any], tolerance: float = 0.01) -> int | None:
    """The smallest measured ``k`` whose perplexity is within ``tolerance`` of the recurrent one."""
    return criteria.smallest_context(curve["k"], curve["ppl"], curve["recurrent_ppl"], tolerance)


def worst_jacobians(config: str, variant: str = "lstm-stable") -> list[float] | None:
    """The largest state-Jacobian norm of each layer of a config's model, or None."""
    path = results_folder(config) / "analysis.json"
    norms = _read_json(path).get(variant, {}).get("jacobian_norms") if path.is_file() else None
    return [max(layer) for layer in norms] if norms else None


def learning_rate_cuts(run: Run) -> int:
    """How many times the schedule cut a run's learning rate."""
    rates = [epoch["lr"] for epoch in run["epochs"]]
    return sum(after < before for before, after in zip(rates, rates[1:], strict=False))


def equal_epoch_gaps(runs: dict[str, Run]) -> dict[str, dict[str, dict[str, float]]]:
    """Per cell, both models' validation perplexity and rate at the last epoch both reached
    (``"last"``) and the last before a rate cut (``"uncut"``); gap = (stable - free) / free."""
    gaps: dict[str, dict[str, dict[str, float]]] = {}
    for cell in MODEL_LABELS:
        free, stable = (runs.get(variant_name(cell, s)) for s in (False, True))
        if free is None or stable is None:
            continue
        last = min(len(free["epochs"]), len(stable["epochs"]))
        start_lr, uncut = free["config"]["lr"], 0
        while uncut < last and all(r["epochs"][uncut]["lr"] == start_lr for r in (free, stable)):
            uncut += 1
        gaps[cell] = {}
        for when, epoch in (("last", last), ("uncut", uncut)):
            if epoch:
                a, b = free["epochs"][epoch - 1], stable["epochs"][epoch - 1]
                gaps[cell][when] = {
                    "epoch": epoch,
                    "unconstrained": a["val_ppl"],
                    "stable": b["val_ppl"],
                    "gap": (b["val_ppl"] - a["val_ppl"]) / a["val_ppl"],
                    "unconstrained_lr": a["lr"],
                    "stable_lr": b["lr"],
                }
    return gaps


def time_budget(
    runs: dict[str, Any], benchmark: dict[str, Any], idle_analysis: dict[str, Any]
) -> dict[str, tuple[float, float]]:
    """Seconds of each part of a scale's budget, ``{part: (as committed, idle)}``; idle runs
    are estimated from the benchmark's epoch time and evaluation speed."""
    evaluated = benchmark["epochs"] * WIKITEXT2_TOKENS["valid"] + WIKITEXT2_TOKENS["test"]
    parts: dict[str, tuple[float, float]] = {}
    for name, (cell, stable) in VARIANTS_BY_NAME.items():
        if name in runs:
            model = benchmark["models"][cell]
            epoch = model["epoch_seconds_stable" if stable else "epoch_seconds_unconstrained"]
            estimate = benchmark["epochs"] * epoch + evaluated / model["eval_tokens_per_second"]
            parts[f"training {name}"] = (runs[name]["wall_seconds"], estimate)
    parts["every analysis"] = (
        sum(runs.get("analysis", {}).get("seconds", {}).values()),
        sum(idle_analysis.get("seconds", {}).values()),
    )
    parts["total"] = (sum(a for a, _ in parts.values()), sum(b for _, b in parts.values()))
    return parts


def runs_summary(results: dict[str, Any]) -> str:
    """Markdown table: device, commit, epochs and wall time of each run."""
    rows = [
        f"{name} | {readable_device(run['provenance']['device'])} | "
        f"{run['provenance']['git_commit'][:12]} | {len(run['epochs'])} | "
        f"{run['wall_seconds'] / 60:.1f} min"
        for name in VARIANTS_BY_NAME
        if (run := results.get(name))
    ]
    return text_table("run | device | git commit | epochs | wall time", rows, right=(3, 4))


def epochs_table(results: dict[str, Run], run_label: str = "run") -> str:
    """Markdown table: validation perplexity per epoch, test perplexity, wall time."""
    rows = []
    for name, run in results.items():
        epochs = ", ".join(f"{e['val_ppl']:.0f}" for e in run["epochs"])
        seconds = run["wall_seconds"]
        wall = f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds:.0f} s"
        rows.append(f"{name} | {run['vocab_size']:,} | {epochs} | {run['test_ppl']:.1f} | {wall}")
    columns = f"{run_label} | vocabulary | val ppl per epoch | test ppl | wall time"
    return text_table(columns, rows, right=(1, 3, 4))


def time_budget_table(
    runs: dict[str, Any], benchmark: dict[str, Any], idle_analysis: dict[str, Any]
) -> str:
    """Markdown table of :func:`time_budget` in minutes."""
    rows = []
    for part, (measured, idle) in time_budget(runs, benchmark, idle_analysis).items():
        kind = "measured" if part == "every analysis" else "estimated"
        if part == "total":
            rows.append(f"**total** | **{measured / 60:.0f}** | **{idle / 60:.0f}**")
        else:
            rows.append(f"{part} | {measured / 60:.0f} | {idle / 60:.0f} ({kind})")
    device = readable_device(benchmark["provenance"]["device"])
    columns = f"part | minutes, as committed (measured) | minutes, idle machine ({device})"
    return text_table(columns, rows, right=(1, 2))


def table_by_scale(scales: dict[str, dict[str, Any]]) -> str:
    """Markdown table per variant: the paper's test perplexity, then ours per scale."""
    rows = []
    for name, (cell, stable) in VARIANTS_BY_NAME.items():
        ours = [
            f"{r[name]['test_ppl']:.1f}" if "test_ppl" in r.get(name, {}) else "not run yet"
            for r in scales.values()
        ]
        paper = paper_claims.marked(PAPER_TEST_PPL_KEYS[name])
        variant = "stable" if stable else "unconstrained"
        rows.append([MODEL_LABELS[cell], variant, paper, *ours])
    columns = ["model", "variant", "reported by the paper", *scales]
    return text_table(columns, rows, right=range(2, len(columns)))


def rerun_command(config: str, cell: str, stable: bool, seed: int | None = None) -> str:
    """The one command that trains (or resumes) one committed run."""
    command = f"python -m stablernn_lib train --model {cell}{' --stable' if stable else ''}"
    command += f" --config {config} --resume"
    own = seed is None or seed == CONFIGS[config].seed
    return command + ("" if own else f" --seed {seed}")


def seeds_commands(config: str = "cpu") -> str:
    """The command of each model and seed, committed or asked for by the criteria."""
    needed = criteria.load_criteria()["seeds"]["wikitext2"]
    runs = load_seed_results(config)
    planned = training.planned_seeds(CONFIGS[config].seed, needed, first_extra=2)
    lines = []
    for name, (cell, stable) in VARIANTS_BY_NAME.items():
        found = runs.get(name, {})
        for seed in dict.fromkeys([*planned, *sorted(found)]):
            state = "committed" if seed in found else "not run yet"
            lines.append(f"{rerun_command(config, cell, stable, seed)}  # {state}")
    return "\n".join(lines)


def seeds_table(config: str = "cpu") -> str:
    """Markdown table: test perplexity over seeds, the stable gap and its verdict."""
    runs = load_seed_results(config)
    rows = []
    for name in VARIANTS_BY_NAME:
        found = runs.get(name, {})
        if not found:
            rows.append([model_label(name), "not run yet", "", ""])
            continue
        summary, gap, verdict = seed_summary(found), "", ""
        free = runs.get(name.replace("stable", "unconstrained"), {})
        if name.endswith("-stable") and free:
            reference = seed_summary(free)
            gap = criteria.gap_label(summary.mean, reference.mean)
            verdict = criteria.stability_cost_verdict("wikitext2", reference, summary)
        rows.append([model_label(name), summary.describe(each=False), gap, verdict])
    columns = f"model ({config} scale) | test perplexity over seeds | stable vs unconstrained"
    return text_table(f"{columns} | verdict (criteria.json)", rows, right=(2,))


def schedule_table(config: str = "cpu") -> str:
    """Markdown table: each run's test perplexity and learning rate per epoch."""
    runs, own = load_seed_results(config), CONFIGS[config].seed
    rows = []
    for name in VARIANTS_BY_NAME:
        found = runs.get(name, {})
        for seed in sorted(found, key=lambda seed: (seed != own, seed)):
            rates = ", ".join(f"{epoch['lr']:g}" for epoch in found[seed]["epochs"])
            rows.append(f"{model_label(name)} | {seed} | {found[seed]['test_ppl']:.1f} | {rates}")
    columns = f"model ({config} scale) | seed | test perplexity | learning rate, epoch by epoch"
    return text_table(columns, rows, right=(1, 2))


def converged_table() -> str:
    """Markdown table of the LSTM pair after 6 epochs and until the decay is used up."""
    lines = []
    for config in (SHORT, CONVERGED):
        results = load_full_results(results_folder(config))
        free = results.get(PAIR[0], {}).get("test_ppl")
        for name in PAIR:
            when = "6 epochs"
            if config == CONVERGED:
                ran = ""
                if name in results:
                    ran = f" ({len(results[name]['epochs'])} epochs)"
                elif epochs := unfinished_epochs(CONVERGED, name):
                    ran = f" (unfinished, {len(epochs)} epochs so far)"
                when = f"until the decay is used up{ran}"
            label, run = f"{name.split('-')[1]}, {when}", results.get(name)
            if not run:
                lines.append([label, "no result yet", "", "", ""])
                continue
            gap = criteria.gap_label(run["test_ppl"], free) if free and name == PAIR[1] else "—"
            entry = results.get("analysis", {}).get(name, {})
            curve, reach = entry.get("truncated_eval"), "not measured"
            if curve is not None:
                k = smallest_k_within(curve)
                reach = f"none up to {curve['k'][-1]}" if k is None else str(k)
            medians = " / ".join(
                f"{torch.tensor(norms).median():.2f}" for norms in entry.get("jacobian_norms", [])
            )
            medians = medians or "not measured"
            lines.append(f"{label} | {run['test_ppl']:.1f} | {gap} | {reach} | {medians}")
    columns = f"LSTM, cpu scale, seed {CONFIGS[CONVERGED].seed} | test ppl | vs unconstrained"
    columns += " | smallest k within 1% | median Jacobian norm, layer 1 / 2"
    return text_table(columns, lines, right=(1, 2, 3, 4))


def partial_runs_table(runs: dict[str, Run]) -> str:
    """Markdown table: each unfinished run's config, epochs and best validation perplexity."""
    rows = []
    for name in VARIANTS_BY_NAME:
        if (run := runs.get(name)) is None:
            continue
        config, epochs = run["config"], run["epochs"]
        at, best = min(enumerate(epochs, 1), key=lambda item: item[1]["val_ppl"])
        rows.append(
            f"{model_label(name)} | `{config['name']}` (lr {config['lr']:g}) | "
            f"{len(epochs)} of {config['epochs']} | {best['val_ppl']:.1f} ({at})"
        )
    columns = "model (full scale, unfinished) | config | epochs run"
    return text_table(f"{columns} | best validation perplexity (epoch)", rows, right=(2, 3))


@dataclass(frozen=True)
class ClaimReading:
    """One claim's measured ``value`` for one cell on one scale and its rule's verdict."""

    cell: str
    claim: str
    value: float | int | None
    seeds: tuple[int, ...]
    verdict: str
    indicative: bool


def claim_readings(
    results: dict[str, Any], seed_runs: SeedRuns | None = None
) -> list[ClaimReading]:
    """Each claim of the paper per cell on one scale (seed runs default to ``results``')."""
    if seed_runs is None:
        seed_runs = {
            name: {int(run.get("seed", 0)): run}
            for name, run in results.items()
            if name in VARIANTS_BY_NAME and "test_ppl" in run
        }
    analysis = results.get("analysis", {})
    seed = analysis.get("lm_config", {}).get("seed")
    measured = (seed,) if seed is not None else ()
    truncation, vanishes = criteria.criterion("truncation"), criteria.criterion("gradient_vanishes")
    readings = []
    for cell in ("rnn", "lstm"):
        free, stable = (seed_runs.get(variant_name(cell, s)) for s in (False, True))
        reading = ClaimReading(cell, "stability_cost", None, (), "not yet run", False)
        if free and stable:
            a, b = seed_summary(free), seed_summary(stable)
            verdict = criteria.stability_cost_verdict("wikitext2", a, b)
            seeds = tuple(sorted(set(a.seeds) & set(b.seeds)))
            gap = percent_gap(b.mean, a.mean)
            reading = ClaimReading(cell, "stability_cost", gap, seeds, verdict, False)
        readings.append(reading)
        entry = analysis.get(variant_name(cell, False), {})
        reading = ClaimReading(cell, "truncation", None, (), "not yet run", True)
        if curve := entry.get("truncated_eval"):
            k = smallest_k_within(curve, truncation["relative_tolerance"])
            supported = k is not None and k <= truncation["max_k"]
            verdict = "supported" if supported else "not supported"
            reading = ClaimReading(cell, "truncation", k, measured, verdict, True)
        readings.append(reading)
        profile = entry.get("figure2")
        reading = ClaimReading(cell, "gradient_vanishes", None, (), "not yet run", True)
        if profile and len(profile["mean_norm"]) > vanishes["distance"]:
            ratio = profile["mean_norm"][vanishes["distance"]] / profile["mean_norm"][0]
            verdict = criteria.vanishes_verdict(ratio)
            reading = ClaimReading(cell, "gradient_vanishes", ratio, measured, verdict, True)
        readings.append(reading)
    return readings


_CLAIMS = {
    "stability_cost": ("stability costs little", "stable vs unconstrained, seed means"),
    "truncation": ("a model of short context", "smallest k within 1% (unconstrained)"),
    "gradient_vanishes": ("the gradient vanishes with distance", "gradient at 20, % of at 0"),
}


def claims_table(readings: list[ClaimReading], scale: str) -> str:
    """Markdown table of :func:`claim_readings`: claim, measured value, seeds, verdict."""
    rows = []
    for r in readings:
        claim, measure = _CLAIMS[r.claim]
        ran = r.verdict != "not yet run"
        if not ran:
            value = ""
        elif r.value is None:
            value = f"none up to {criteria.criterion('truncation')['max_k']}"
        else:
            value = {
                "stability_cost": f"{r.value:+.1f}%",
                "gradient_vanishes": f"{r.value:.1%}",
                "truncation": f"k = {r.value}",
            }[r.claim]
        verdict = r.verdict + (" (one trained model: indicative)" if r.indicative and ran else "")
        seeds = ", ".join(map(str, r.seeds))
        rows.append([MODEL_LABELS[r.cell], claim, measure, value, seeds, verdict])
    columns = f"model | the paper's claim | what we measure ({scale}) | value | seeds"
    return text_table(f"{columns} | verdict (criteria.json)", rows, right=(3,))


# The LSTM ablation: label, config, stable, the layers certified contractive, and the config of
# the row's unconstrained reference.
ABLATION_ROWS: tuple[tuple[str, str, bool, str, str], ...] = (
    ("unconstrained", "cpu", False, "none (no constraint)", "cpu"),
    ("course constraint, every layer", "cpu", True, "every layer", "cpu"),
    ("course constraint, first layer only", "cpu-first-layer", True, "layer 1 only", "cpu"),
    ("authors' rescaling, first layer only", "cpu-authors-first", True, "none", "cpu"),
    ("authors' rescaling, every layer", "cpu-authors-all", True, "none", "cpu"),
    ("course constraint, forget cap lifted", "cpu-free-forget", True, "none", "cpu"),
    ("course constraint, forget cap lifted above layer 1", "cpu-free-forget-upper", True,
     "layer 1 only", "cpu"),
    ("unconstrained, lr 20", "cpu-lr20", False, "none (no constraint)", "cpu-lr20"),
    ("course constraint, every layer, lr 20", "cpu-lr20", True, "every layer", "cpu-lr20"),
    ("unconstrained, until the decay is used up", "cpu-converged", False,
     "none (no constraint)", "cpu-converged"),
    ("course constraint, every layer, until the decay is used up", "cpu-converged", True,
     "every layer", "cpu-converged"),
)  # fmt: skip


def _ablation_runs() -> dict[str, SeedRuns]:
    """:func:`load_seed_results` of every config of :data:`ABLATION_ROWS`."""
    return {
        config: load_seed_results(config) for config in dict.fromkeys(r[1] for r in ABLATION_ROWS)
    }


def ablation_table() -> tuple[str, str]:
    """The LSTM ablation as a Markdown table, and the commands of its rows."""
    rows, commands = [], []
    every = _ablation_runs()
    for label, config, stable, certified, reference in ABLATION_ROWS:
        variant = variant_name("lstm", stable)
        runs = every[config].get(variant, {})
        commands.append(rerun_command(config, "lstm", stable))
        if stable and config != "cpu":
            commands.append(
                f"python -m stablernn_lib lm-analysis --config {config} --parts "
                "jacobians --variants lstm-stable"
            )
        if not runs:
            epochs, most = unfinished_epochs(config, variant), CONFIGS[config].epochs
            missing = f"unfinished ({len(epochs)} of at most {most} epochs so far)"
            rows.append([label, certified, missing if epochs else "not run yet", "", ""])
            continue
        summary, free = seed_summary(runs), every[reference].get("lstm-unconstrained")
        gap = criteria.gap_label(summary.mean, seed_summary(free).mean) if stable and free else ""
        worst = worst_jacobians(config, variant)
        worst_text = "not measured" if worst is None else f"{max(worst):.2f}"
        rows.append([label, certified, summary.describe(each=config != "cpu"), gap, worst_text])
    columns = "LSTM, cpu scale | certified contractive | test perplexity | vs unconstrained"
    table = text_table(f"{columns} | worst one-step Jacobian norm", rows, right=(3, 4))
    return table, "\n".join(dict.fromkeys(commands))


@dataclass(frozen=True)
class AblationReading:
    """One stable ablation row: gap and share of the course gap closed (percent), a verdict
    with enough seeds, else ``effects``: ``{name: (|row - mean|, k sd, readable)}``."""

    label: str
    config: str
    seeds: int
    gap: float
    share_closed: float | None
    verdict: str | None
    effects: dict[str, tuple[float, float, bool]]


def ablation_readings() -> list[AblationReading]:
    """Every committed stable ablation row with its reference, but the course model's."""
    every = _ablation_runs()

    def gap_of(config: str, reference: str) -> float | None:
        runs, free = every[config].get("lstm-stable"), every[reference].get("lstm-unconstrained")
        if runs and free:
            return percent_gap(seed_summary(runs).mean, seed_summary(free).mean)
        return None

    course = gap_of("cpu", "cpu")
    if course is None:
        return []
    needed = criteria.load_criteria()["seeds"]["wikitext2"]
    k = criteria.criterion("single_seed_ablation")["sd_multiple"]
    readings = []
    for label, config, stable, _, reference in ABLATION_ROWS:
        gap = gap_of(config, reference) if stable and config != "cpu" else None
        if gap is None:
            continue
        summary = seed_summary(every[config]["lstm-stable"])
        verdict, effects = None, {}
        if summary.n >= needed:
            free = seed_summary(every[reference]["lstm-unconstrained"])
            verdict = criteria.stability_cost_verdict("wikitext2", free, summary)
        elif reference == "cpu":
            for name, variant in (("course", "lstm-stable"), ("unconstrained", PAIR[0])):
                if found := every["cpu"].get(variant):
                    ref = seed_summary(found)
                    effects[name] = (
                        abs(summary.mean - ref.mean),
                        k * ref.sd,
                        criteria.single_seed_readable(summary.mean, ref),
                    )
        share = 100 * (course - gap) / course if reference == "cpu" else None
        readings.append(AblationReading(label, config, summary.n, gap, share, verdict, effects))
    return readings


def ablation_readings_table(readings: list[AblationReading]) -> str:
    """Markdown table of :func:`ablation_readings`, by the share of the course gap closed."""
    rows = []
    for r in sorted(readings, key=lambda r: (r.share_closed is None, -(r.share_closed or 0))):
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
        rows.append([r.label, str(r.seeds), f"{r.gap:+.1f}%", share, read])
    columns = "change from the course model (LSTM, cpu scale) | seeds | gap"
    columns += " | share of the course gap closed | how the criteria read it"
    return text_table(columns, rows, right=(1, 2, 3))


def _seed_numbers(out: Numbers) -> None:
    """The cpu scale's models over their seeds, each cell's cost and verdict."""
    runs = load_seed_results("cpu")
    summaries = {name: seed_summary(runs[name]) for name in VARIANTS_BY_NAME}
    for name, s in summaries.items():
        key = name.replace("unconstrained", "free").replace("-", "_")
        out[f"{key}_mean"], out[f"{key}_sd"], out[f"{key}_n"] = s.mean, s.sd, s.n
    for cell in ("rnn", "lstm"):
        free, stable = summaries[f"{cell}-unconstrained"], summaries[f"{cell}-stable"]
        out[f"{cell}_gap"] = percent_gap(stable.mean, free.mean)
        out[f"{cell}_verdict"] = criteria.stability_cost_verdict("wikitext2", free, stable)
    rnn = runs["rnn-unconstrained"]
    cut = [seed for seed, run in rnn.items() if learning_rate_cuts(run)]
    if len(cut) == 1:
        seed, run = cut[0], rnn[cut[0]]
        out["rnn_cut_seed"], out["rnn_cut_ppl"] = seed, run["test_ppl"]
        out["rnn_cut_epoch"] = next(
            i for i, e in enumerate(run["epochs"]) if e["lr"] < run["epochs"][0]["lr"]
        )
        kept = [
            other["test_ppl"]
            for name in ("rnn-unconstrained", "rnn-stable")
            for s, other in runs[name].items()
            if (name, s) != ("rnn-unconstrained", seed)
        ]
        out["rnn_kept_low"], out["rnn_kept_high"] = min(kept), max(kept)
        others = [v["test_ppl"] for s, v in rnn.items() if s != seed]
        uncut = sum(others) / len(others)
        out["rnn_free_uncut_vs_stable"] = percent_gap(uncut, out["rnn_stable_mean"])
    out["tolerance"] = 100 * criteria.criterion("stability_cost")["relative_tolerance"]


def _ablation_numbers(out: Numbers) -> None:
    """The LSTM rows changed one factor at a time."""
    free, course = out["lstm_free_mean"], out["lstm_stable_mean"]
    course_gap, every = percent_gap(course, free), _ablation_runs()
    for key, config in (
        ("first_layer", "cpu-first-layer"),
        ("authors_first", "cpu-authors-first"),
        ("authors_all", "cpu-authors-all"),
        ("free_forget", "cpu-free-forget"),
        ("upper", "cpu-free-forget-upper"),
    ):
        s = seed_summary(every[config]["lstm-stable"])
        out[f"{key}_ppl"], out[f"{key}_sd"], out[f"{key}_n"] = s.mean, s.sd, s.n
        out[f"{key}_gap"] = percent_gap(s.mean, free)
        out[f"{key}_share"] = 100 * (course_gap - out[f"{key}_gap"]) / course_gap
        out[f"{key}_worst_jac"] = max(worst_jacobians(config) or [])
    out["upper_layer1_jac"], out["upper_layer2_jac"] = worst_jacobians("cpu-free-forget-upper")
    out["authors_first_verdict"] = criteria.stability_cost_verdict(
        "wikitext2",
        seed_summary(every["cpu"]["lstm-unconstrained"]),
        seed_summary(every["cpu-authors-first"]["lstm-stable"]),
    )
    first, upper = out["first_layer_ppl"], out["upper_ppl"]
    out["layer2_cost"], out["cap_recovers"] = course - first, course - upper
    out["other_gates_cost"] = upper - first
    out["lr20_free"] = seed_summary(every["cpu-lr20"]["lstm-unconstrained"]).mean
    out["lr20_stable"] = seed_summary(every["cpu-lr20"]["lstm-stable"]).mean
    out["lr20_gap"] = percent_gap(out["lr20_stable"], out["lr20_free"])


def _model_numbers(out: Numbers, key: str, entry: dict[str, Any]) -> list[Any]:
    """One measured model's smallest context within 1% and Jacobian norms; its layers' norms."""
    curve = entry["truncated_eval"]
    k = smallest_k_within(curve)
    out[f"{key}_k"] = "none up to 100" if k is None else k
    out[f"{key}_k100_excess"] = percent_gap(curve["ppl"][-1], curve["recurrent_ppl"])
    layers = [torch.tensor(layer) for layer in entry["jacobian_norms"]]
    for number, layer in enumerate(layers, start=1):
        out[f"{key}_jac_l{number}"] = float(layer.median())
    out[f"{key}_worst_jac"] = max(float(layer.max()) for layer in layers)
    return layers


def _converged_numbers(out: Numbers) -> None:
    """The LSTM pair trained until the decay is used up."""
    runs, short = load_converged(), load_seed_results(SHORT)
    seed = CONFIGS[CONVERGED].seed
    analysis = load_full_results(results_folder(CONVERGED))["analysis"]
    short_analysis = load_full_results(results_folder(SHORT))["analysis"]
    single = criteria.criterion("single_seed_ablation")["sd_multiple"]
    for key, name in (("conv_free", PAIR[0]), ("conv_stable", PAIR[1])):
        run, reference = runs[name], seed_summary(short[name])
        early = run.get("stopped_early")
        out[f"{key}_epochs"], out[f"{key}_ppl"] = len(run["epochs"]), run["test_ppl"]
        out[f"{key}_cuts"] = learning_rate_cuts(run) + (1 if early else 0)  # a stop follows a cut
        out[f"{key}_change"] = percent_gap(run["test_ppl"], reference.mean)
        out[f"{key}_limit"] = single * reference.sd
        out[f"{key}_drift"] = 100 * first_epochs_agreement(name, run)
        _model_numbers(out, key, analysis[name])
        for layer, norms in enumerate(short_analysis[name]["jacobian_norms"], start=1):
            out[f"{key}_short_jac_l{layer}"] = float(torch.tensor(norms).median())
    early = runs[PAIR[1]].get("stopped_early")
    out["conv_stop_lr"] = early["lr"] if early else runs[PAIR[1]]["epochs"][-1]["lr"]
    free, stable = (runs[name]["test_ppl"] for name in PAIR)
    out["conv_gap"] = percent_gap(stable, free)
    short_free, short_stable = (short[name][seed]["test_ppl"] for name in PAIR)
    out["conv_gap_same_seed_short"] = percent_gap(short_stable, short_free)
    equal = equal_epoch_gaps(runs)["lstm"]["uncut"]
    out["conv_uncut_epoch"], out["conv_uncut_gap"] = equal["epoch"], 100 * equal["gap"]


def first_epochs_agreement(name: str, run: Run) -> float:
    """The largest relative validation-perplexity difference from the 6-epoch run's epochs."""
    short = load_seed_results(SHORT)[name][CONFIGS[CONVERGED].seed]["epochs"]
    return max(
        abs(a["val_ppl"] - b["val_ppl"]) / b["val_ppl"]
        for a, b in zip(run["epochs"], short, strict=False)
    )


def _unfinished_numbers(out: Numbers) -> None:
    """The full scale's unfinished runs: epochs reached and gaps at equal epochs."""
    runs = load_partial_runs()
    if not runs:
        return
    epochs = sorted(len(run["epochs"]) for run in runs.values())
    out["full_epochs_min"], out["full_epochs_max"] = epochs[0], epochs[-1]
    for cell, both in equal_epoch_gaps(runs).items():
        for when in ("uncut", "last"):
            out[f"full_{cell}_{when}_epoch"] = both[when]["epoch"]
            out[f"full_{cell}_{when}_gap"] = 100 * both[when]["gap"]
    cpu = load_full_results(results_folder("cpu"))
    for key, found in (("full_lstm_gap6", runs), ("cpu_lstm_val_gap6", cpu)):
        free, stable = (found[name]["epochs"][5]["val_ppl"] for name in PAIR)
        out[key] = percent_gap(stable, free)


def _measurement_numbers(out: Numbers) -> None:
    """What the measurements of the cpu scale found."""
    analysis = load_full_results(results_folder("cpu"))["analysis"]
    vanishes = criteria.criterion("gradient_vanishes")
    distance = vanishes["distance"]
    out |= {
        "analysis_seed": analysis["lm_config"]["seed"],
        "test_sample": analysis["config"]["test_tokens"],
        "fig2_distance": distance,
        "fig2_limit": 100 * vanishes["ratio"],
        "max_k": criteria.criterion("truncation")["max_k"],
    }
    for name in VARIANTS_BY_NAME:
        key = name.replace("unconstrained", "free").replace("-", "_")
        norms = analysis[name]["figure2"]["mean_norm"]
        out[f"{key}_fig2_ratio"] = 100 * norms[distance] / norms[0]
        out[f"{key}_fig2_last"] = 100 * norms[-1] / norms[0]
        out[f"{key}_fig2_verdict"] = criteria.vanishes_verdict(norms[distance] / norms[0])
        for number, layer in enumerate(_model_numbers(out, key, analysis[name]), start=1):
            out[f"{key}_below1_l{number}"] = 100 * float((layer < 1).double().mean())
    rnn = analysis["rnn-unconstrained"]["figure2"]["mean_norm"]
    out["fig2_last_distance"], out["rnn_free_fig2_35"] = len(rnn) - 1, 100 * (rnn[35] / rnn[0])
    for cell in ("rnn", "lstm"):
        record = analysis[f"weights_close-{cell}"]
        out["weights_steps"] = record["step"][-1]
        for name, values in record["relative_distance"].items():
            out[f"wc_{cell}_{name.replace('=', '')}"] = 100 * values[-1]
    if rows := analysis["rnn-stable"].get("diagonal_certificates", []):
        out["diag_stable_max"] = max(row["diagonal_lam"] for row in rows)


def _threads(device: str) -> int:
    """The thread count of a provenance device string such as ``"cpu (x86_64, 2 threads)"``."""
    return int(device.rpartition(", ")[2].split()[0])


def benchmark_numbers() -> Numbers:
    """The committed step times and ratios, and the cpu scale's epoch and budget."""
    out: Numbers = {}
    found = {
        name: _read_json(path)
        for name, path in (
            ("gpu", RESULTS_DIR / "benchmark-full-gpu-ratios.json"),
            ("cpu", RESULTS_DIR / "benchmark-cpu-cpu-ratios.json"),
            ("bench", RESULTS_DIR / "benchmark-cpu-cpu.json"),
            ("layer", RESULTS_DIR / "benchmark-cpu-output-layer.json"),
            ("epoch", RESULTS_DIR / "timing" / "lstm-stable-cpu-1-epoch-idle.json"),
        )
        if path.is_file()
    }
    if gpu := found.get("gpu"):
        ratios, steps = gpu["ratios"], gpu["step_seconds"]
        out |= {
            "gpu_device": gpu["provenance"]["device"],
            "gpu_course_ratio": ratios["lstm-course / lstm-unconstrained"],
            "gpu_authors_ratio": ratios["lstm-authors / lstm-unconstrained"],
            "gpu_rnn_ratio": ratios["rnn-stable / rnn-unconstrained"],
            "gpu_svd_ratio": ratios["rnn-stable-svd-on-device / rnn-unconstrained"],
            "gpu_projection_ms": 1000 * gpu["solver_seconds"]["fast_path"],
            "gpu_eigh_ms": 1000 * gpu["solver_seconds"]["host_eigh_float32"],
            "gpu_rnn_step_ms": 1000 * steps["rnn-unconstrained"],
            "gpu_target_ratio": gpu["target_ratio_on_gpu"],
        }
    bench = found.get("bench")
    if bench and (layer := found.get("layer")):  # why the cpu scale's output layer
        steps, per_epoch = layer["step_seconds"], bench["steps_per_epoch"]
        plain, adaptive = steps["softmax"].values(), steps["adaptive"].values()
        ratios = [steps["softmax"][cell] / steps["adaptive"][cell] for cell in steps["softmax"]]
        out["ol_softmax_ms_min"], out["ol_softmax_ms_max"] = 1000 * min(plain), 1000 * max(plain)
        out["ol_adaptive_ms_min"] = 1000 * min(adaptive)
        out["ol_adaptive_ms_max"] = 1000 * max(adaptive)
        out["ol_ratio_min"], out["ol_ratio_max"] = min(ratios), max(ratios)
        out["ol_softmax_epoch_min"] = per_epoch * min(plain) / 60
        out["ol_softmax_epoch_max"] = per_epoch * max(plain) / 60
    if bench:  # the cpu scale's epoch on the idle machine
        minutes = [
            model[kind] / 60
            for model in bench["models"].values()
            for kind in ("epoch_seconds_stable", "epoch_seconds_unconstrained")
        ]
        out["steps_per_epoch"] = bench["steps_per_epoch"]
        out["cpu_epoch_min"], out["cpu_epoch_max"] = min(minutes), max(minutes)
    if bench and (epoch := found.get("epoch")):  # one timed epoch against the estimate
        out["idle_epoch_minutes"] = epoch["wall_seconds"] / 60
        out["idle_epoch_predicted_minutes"] = bench["models"]["lstm"]["epoch_seconds_stable"] / 60
    idle = load_idle_timing("cpu")
    if bench and idle is not None:  # the cpu scale's whole budget
        runs = load_full_results(results_folder("cpu"))
        committed, idle_seconds = time_budget(runs, bench, idle)["total"]
        out["budget_committed_hours"] = committed / 3600
        out["budget_idle_hours"] = idle_seconds / 3600
        out["budget_committed_threads"] = _threads(runs["lstm-stable"]["provenance"]["device"])
        out["budget_idle_threads"] = _threads(bench["provenance"]["device"])
    if cpu := found.get("cpu"):
        out["cpu_rnn_step_ms"] = 1000 * cpu["step_seconds"]["rnn-unconstrained"]
        out["cpu_rnn_ratio"] = cpu["ratios"]["rnn-stable / rnn-unconstrained"]
    return out


def chapter8_numbers() -> Numbers:
    """Every number the prose of Chapter 8 and of its evidence page quotes, by key."""
    rules = criteria.load_criteria()
    out: Numbers = {
        "vocab_size": WIKITEXT2_VOCAB_SIZE,
        **{f"{split}_tokens": count for split, count in WIKITEXT2_TOKENS.items()},
        "cpu_epochs": CONFIGS["cpu"].epochs,
        "cpu_lr": CONFIGS["cpu"].lr,
        "full_epochs": CONFIGS["full"].epochs,
        "full_lr": CONFIGS["full"].lr,
        "seed": CONFIGS["cpu"].seed,
        "seeds_needed": rules["seeds"]["wikitext2"],
        "seeds_needed_jsb": rules["seeds"]["jsb"],
        "lstm_lambda": authors_constants_constraint().contraction_bound(input_bound=1.0),
    }
    _seed_numbers(out)
    _ablation_numbers(out)
    _converged_numbers(out)
    _unfinished_numbers(out)
    _measurement_numbers(out)
    out.update(benchmark_numbers())
    anchor = 142.07  # one user's run of the example's defaults at lr 20 (the evidence page)
    out["anchor_gap"] = percent_gap(out["lr20_free"], anchor)
    return out
