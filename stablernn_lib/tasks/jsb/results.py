"""The committed JSB Chorales results (``data/results/jsb/``) as the numbers and Markdown
tables of Chapter 9 and its companion page (percentages in percent, NLL in nats per step)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stablernn_lib.core import criteria, paper_claims
from stablernn_lib.core.tables import text_table
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
    """Every completed run of a published config by model and seed (``seed<N>/`` beside)."""
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
    gap = criteria.gap_label(summary.mean, baseline)
    if not criteria.enough_seeds("jsb", summary):
        return f"{gap} ({criteria.seeds_label(summary.n)}: no verdict)"
    beats = criteria.beats_baseline(summary, baseline)
    return f"{gap}: {'beats it' if beats else 'no better than the baseline'}"


def _baseline_row(baseline: float, columns: int) -> list[str]:
    """The baseline's row of a table of ``columns`` columns."""
    return [BASELINE_LABEL, f"{baseline:.2f}", *[""] * (columns - 2)]


def results_table(results: Runs, baseline: float, smoke: Runs | None = None) -> str:
    """Markdown table: test NLL of the ``full`` runs against the baseline and the paper."""
    columns = ["model", "ours, with input layer", "vs baseline", "epochs run", "best epoch"]
    columns += ["wall time", *(["ours, smoke"] if smoke is not None else [])]
    columns += ["reported by the paper"]
    rows = []
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
        row = [LABELS[name], ours, versus, ran, best, wall]
        if smoke is not None:
            entry = smoke.get(name)
            row.append(f"{entry['test_nll']:.2f}" if entry and "test_nll" in entry else "")
        key = PAPER_KEYS.get((cell, variant))
        row.append(paper_claims.marked(key) if key else "(not a row of the paper)")
        rows.append(row)
    return text_table(columns, [*rows, _baseline_row(baseline, len(columns))])


def optimizer_diagnostic_table(sgd: Runs, adam: Runs, baseline: float) -> str:
    """Markdown table: test NLL of each ``full`` model under SGD and the ``adam`` diagnostic."""
    clip = CONFIGS["adam"].clip
    rows = []
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
        rows.append([LABELS[name], *cells, marked])
    adam = f"Adam lr 1e-3, clip {clip:g}, diagnostic (best epoch of {CONFIGS['adam'].epochs})"
    columns = f"model | SGD, authors' schedule (epochs) | {adam} | reported by the paper"
    return text_table(columns, [*rows, _baseline_row(baseline, 4)])


def rerun_command(config: str, cell: str, variant: str, seed: int | str | None = None) -> str:
    """The command that trains (or resumes) one run of a published config."""
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
    """Markdown: the command pattern of any row of a config's table and each missing run's."""
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
    """A Markdown code block of one command, lines broken before flags at ``width`` characters."""
    words = command.split(" --")
    lines = [words[0]]
    for flag in words[1:]:
        if len(lines[-1]) + len(flag) + 3 <= width:
            lines[-1] += f" --{flag}"
        else:
            lines.append(f"  --{flag}")
    return ["", "```bash", " \\\n".join(lines), "```"]


def seeds_table(config: str, baseline: float, results_dir: str | Path | None = None) -> str:
    """Markdown table of a seeded config: test NLL over seeds, baseline and stability cost."""
    runs = load_seed_results(config, results_dir)
    paper, costs = config in PAPER_SETTING_CONFIGS, stability_costs(runs)
    columns = [f"model (config `{config}`)", "test NLL over seeds", "vs baseline"]
    columns += ["stable vs unconstrained", "stability costs little? (criteria.json)"]
    columns += ["reported by the paper"] if paper else []
    rows = []
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        reported = [paper_claims.marked(PAPER_KEYS[(cell, variant)])] if paper else []
        if name not in runs:
            command = f"not yet run: `{rerun_command(config, cell, variant)}`"
            rows.append([LABELS[name], command, "", "", "", *reported])
            continue
        summary, cost = seed_summary(runs[name]), costs.get(cell)
        gap = verdict = ""
        if variant == "stable" and cost:
            gap, verdict = f"{100 * cost.relative:+.1f}%", cost.verdict
        versus = baseline_comparison(summary, baseline)
        rows.append([LABELS[name], summary.describe(2), versus, gap, verdict, *reported])
    rows.append(_baseline_row(baseline, len(columns)))
    return text_table(columns, rows, right=(3,))


def load_reruns(config: str, results_dir: str | Path | None = None) -> dict[str, Any] | None:
    """``<config>/reruns.json`` (runs trained again, with what the earlier run gave), or None."""
    return _read(_root(results_dir) / config / "reruns.json")


def reruns_table(config: str, results_dir: str | Path | None = None) -> str:
    """Markdown table of :func:`load_reruns` beside the committed runs."""
    reruns = load_reruns(config, results_dir)
    if reruns is None:
        return f"no reruns recorded for config `{config}`"
    runs = load_seed_results(config, results_dir)
    rows = []
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
        rows.append([LABELS[entry["model"]], str(entry["seed"]), before, now, change, split])
    columns = "model | seed | first run | run of the table | change | validation NLL parts (> 0.01)"
    return text_table(columns, rows, right=(1, 4))


@dataclass(frozen=True)
class PaperComparison:
    """Ours against the paper's test NLL: ``difference`` = ours - paper, ``relative`` / paper."""

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
    """A stable model against its unconstrained twin: ``relative`` = (stable - free) / free."""

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
    rows = [
        f"{label} | {LABELS[f'{cell}-unconstrained']} | {cost.free.describe(2)} "
        f"| {cost.stable.describe(2)} | {100 * cost.relative:+.1f}% | {cost.verdict}"
        for label, runs in runs_by_label.items()
        for cell, cost in stability_costs(runs).items()
    ]
    columns = "runs | model | unconstrained | stable | stable vs unconstrained"
    return text_table(f"{columns} | stability costs little?", rows, right=(4,))


def main_table(baseline: float, results_dir: str | Path | None = None) -> str:
    """Markdown table of the chapter's main result (config ``authors``)."""
    compared = paper_comparisons("authors", results_dir)
    costs = stability_costs(load_seed_results("authors", results_dir))
    rows = []
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        marked = paper_claims.marked(PAPER_KEYS[(cell, variant)])
        found = compared[name]
        if found.ours is None:
            rows.append([LABELS[name], "not yet run", marked, "", "", ""])
            continue
        cost = costs.get(cell) if variant == "stable" else None
        versus = f"{100 * cost.relative:+.1f}%: {cost.verdict}" if cost else ""
        difference = f"{found.difference:+.2f} ({100 * found.relative:+.1f}%)"
        if cell in NOT_THE_AUTHORS_MODEL:
            difference += ", another model"
        rows.append(
            f"{LABELS[name]} | {found.ours.mean:.2f} ± {found.ours.sd:.2f} | {marked} "
            f"| {difference} | {baseline_comparison(found.ours, baseline)} | {versus}"
        )
    columns = "model | ours | the paper | ours − paper | vs no-memory baseline"
    rows.append(_baseline_row(baseline, 6))
    return text_table(f"{columns} | stable vs unconstrained", rows, right=(3,))


def training_extent_table(runs: SeedRuns) -> str:
    """Markdown table: each model and seed's best validation epoch, epochs run and final lr."""
    rows = [
        f"{LABELS[name]} | {seed} | {run['best_epoch']} | {len(run['epochs'])} "
        f"| {run['epochs'][-1]['lr']:.0e}"
        for name, each in runs.items()
        for seed, run in sorted(each.items())
    ]
    return text_table("model | seed | best epoch | epochs run | final lr", rows, right=(1, 2, 3, 4))


def early_stop_table(results: Runs) -> str:
    """Markdown table: each run's epochs and, if stopped early, its lr and weight bound."""
    rows = []
    for name, result in results.items():
        early = result.get("stopped_early") or {}
        ran = f"{len(result['epochs'])} of {result['config']['epochs']}"
        lr = f"{early['lr']:.0e}" if early else "(ran every epoch)"
        bound = f"{early['max_weight_change']:.3f} in norm" if early else ""
        rows.append([LABELS[name], ran, lr, bound])
    columns = "model | epochs run | stopped early at lr"
    return text_table(f"{columns} | skipped epochs could move the weights by at most", rows)


def input_layer_table(results: Runs, reference: SeedRuns) -> str:
    """Markdown table: the ``single_seed_ablation`` rule on each one-seed ``full`` run."""
    k = criteria.criterion("single_seed_ablation")["sd_multiple"]
    rows = []
    for cell, variant in TABLE_VARIANTS:
        name = f"{cell}-{variant}"
        if name not in results or name not in reference or "test_nll" not in results[name]:
            continue
        row, summary = results[name]["test_nll"], seed_summary(reference[name])
        readable = "yes" if criteria.single_seed_readable(row, summary) else "no: needs seeds"
        rows.append(
            f"{LABELS[name]} | {row:.2f} | {summary.mean:.2f} ± {summary.sd:.2f} "
            f"| {row - summary.mean:+.2f} | {k * summary.sd:.2f} | {readable}"
        )
    columns = "model | with input layer (one seed) | without (config `authors`) | effect"
    return text_table(f"{columns} | {k:g} sd | read on one seed?", rows, right=(1, 3, 4))


def context_used(curve: dict[str, Any], tolerance: float | None = None) -> int | None:
    """The smallest ``k`` whose NLL is within ``tolerance`` of the recurrent one."""
    if tolerance is None:
        tolerance = criteria.criterion("truncation")["relative_tolerance"]
    return criteria.smallest_context(curve["k"], curve["loss"], curve["recurrent_loss"], tolerance)


def truncation_verdict(k: int | None, measured_up_to: int, exact_from: int | None) -> str:
    """The ``truncation`` verdict on a smallest context ``k`` (None: none)."""
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
    """Mean gradient norm at ``distance`` over the one at 0 (None when not measured)."""
    if "figure2" not in entry:
        return None
    distance = criteria.criterion("gradient_vanishes")["distance"] if distance is None else distance
    norms = dict(zip(entry["figure2"]["distance"], entry["figure2"]["mean_norm"], strict=True))
    if distance not in norms or not norms[0]:
        return None
    return norms[distance] / norms[0]


def memory_reading(name: str, results: Runs, baseline: float) -> str:
    """Whether a model beats the no-memory baseline; "" without a run."""
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
    """:class:`Measured` of every model of ``analysis``."""
    frames = analysis.get("config", {}).get("frames")
    exact_from = frames - 1 if curve_key == "truncated_eval" and frames else None
    found = {}
    for name in LABELS:
        entry = analysis.get(name)
        if not isinstance(entry, dict):
            continue
        curve, ratio = entry.get(curve_key), gradient_ratio(entry)
        k = context_used(curve) if curve else None
        nlls = (curve["recurrent_loss"], curve["loss"][0]) if curve else (None, None)
        verdict = truncation_verdict(k, curve["k"][-1], exact_from) if curve else ""
        vanishes = "" if ratio is None else criteria.vanishes_verdict(ratio)
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
    columns = ["model", "recurrent NLL", "NLL at k = 1", "smallest k within 1%: short context?"]
    columns += [f"gradient at {distance} / at 0: vanishes?"]
    columns += ["Jacobian norms: min–max (median); below 1"]
    columns += ["vs no-memory baseline"] if reading else []
    rows = []
    for name, m in measured(analysis, results, baseline, curve_key).items():
        nll = f"{m.recurrent_nll:.2f}" if m.recurrent_nll is not None else ""
        first = f"{m.first_nll:.2f}" if m.first_nll is not None else ""
        k = m.context if m.context is not None else "none"
        short = f"{k}: {m.truncation}" if m.truncation else ""
        ratio = f"{100 * m.gradient_ratio:.2g}%: {m.vanishes}" if m.vanishes else ""
        norms = "(no state map)"
        if jac := m.jacobians:
            norms = f"{jac.smallest:.3f}–{jac.largest:.3f} ({jac.median:.3f}); "
            norms += f"{100 * jac.below_one:.0f}% of {jac.count}"
        memory = [m.memory] if reading else []
        rows.append([LABELS[name], nll, first, short, ratio, norms, *memory])
    return text_table(columns, rows, right=(1, 2))


def piano_roll_contexts(entry: dict[str, Any]) -> list[int]:
    """The contexts ``k`` of a piano-roll entry as increasing integers."""
    return sorted(int(k) for k in entry["probs"])


Value = float | int | str
SHORT = {"rnn-unconstrained": "rnn", "rnn-stable": "srnn", "lstm-unconstrained": "lstm",
         "lstm-stable": "slstm", "lstm-authors-bug": "bug"}  # fmt: skip
PREFIX = {"authors": "sgd", "adam-tcn": "tcn", "full": "full"}  # of a config's keys
GAP_CONTEXTS = (1, 4, 8, 16, 32)


def seeded_values(config: str, baseline: float, results_dir: str | Path | None = None) -> dict:
    """Each model's seed statistics and each pair's stability cost of a seeded config."""
    prefix = PREFIX[config]
    runs = load_seed_results(config, results_dir)
    values: dict[str, Value] = {}
    for name, each in runs.items():
        summary = seed_summary(each)
        key = f"{prefix}_{SHORT[name]}"
        values |= {f"{key}_mean": summary.mean, f"{key}_sd": summary.sd, f"{key}_n": summary.n,
                   f"{key}_vs_base": -criteria.percent_gap(summary.mean, baseline)}  # fmt: skip
        best = sorted(run["best_epoch"] for run in each.values())
        values |= {f"{key}_best_first": best[0], f"{key}_best_last": best[-1]}
    for cell, cost in stability_costs(runs).items():
        values[f"{prefix}_{cell}_stable_below"] = -100 * cost.relative
        values[f"{prefix}_{cell}_cost_verdict"] = cost.verdict
    return values


def paper_values(results_dir: str | Path | None = None) -> dict[str, Value]:
    """Each model against the paper at the authors' setting, and ``adam-tcn`` below it."""
    values: dict[str, Value] = {}
    tcn = load_seed_results("adam-tcn", results_dir)
    for name, found in paper_comparisons("authors", results_dir).items():
        if found.relative is not None:
            values[f"paper_{SHORT[name]}_diff"] = 100 * found.relative
        values[f"paper_{SHORT[name]}_verdict"] = found.verdict
        if name in tcn:
            below = -criteria.percent_gap(seed_summary(tcn[name]).mean, found.paper)
            values[f"tcn_{SHORT[name]}_below_paper"] = below
    below = [v for k, v in values.items() if k.endswith("_below_paper")]
    if below:
        values["tcn_below_paper_least"], values["tcn_below_paper_most"] = min(below), max(below)
    return values


def extent_values(results_dir: str | Path | None = None) -> dict[str, Value]:
    """The ``authors`` unconstrained LSTM seeds whose best epoch came before 400."""
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
    """The measurements of a config's models; on ``truncated_eval_after`` also the NLL gaps
    at :data:`GAP_CONTEXTS` and the ``truncation`` tolerance in nats."""
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
            values[f"{key}_jac_median"] = jac.median
            values[f"{key}_jac_below"] = 100 * jac.below_one
        curve = analysis[name].get(curve_key)
        if curve_key == "truncated_eval_after" and curve:
            losses = dict(zip(curve["k"], curve["loss"], strict=True))
            for k in GAP_CONTEXTS:
                if k in losses:
                    values[f"{key}_gap{k}"] = losses[k] - curve["recurrent_loss"]
            values[f"{key}_tolerance"] = tolerance * curve["recurrent_loss"]
    return values


def chapter_values(baseline: float, results_dir: str | Path | None = None) -> dict[str, Value]:
    """Every number and verdict the prose of Chapter 9 and its companion page quotes."""
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
        values[f"full_{SHORT[name]}_vs_base"] = -criteria.percent_gap(run["test_nll"], baseline)
        values[f"full_{SHORT[name]}_above_base"] = criteria.percent_gap(run["test_nll"], baseline)
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
