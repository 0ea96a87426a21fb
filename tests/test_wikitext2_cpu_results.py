"""The committed WikiText-2 results of the `cpu` scale: consistent with the code, and complete.

Every file present in ``data/results/wikitext2/cpu/`` must have been written by the
current configs (a result of an older config would be shown as this one's). Whether
all of them are there is a separate test, which fails with the list of what is missing
and the commands that make it (the runs take hours).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest
from chapter8_text import chapter8_numbers, chapter8_prose

from stablernn_lib.core.io import same_config
from stablernn_lib.tasks.wikitext2.data import WIKITEXT2_TOKENS, WIKITEXT2_VOCAB_SIZE
from stablernn_lib.tasks.wikitext2.measurements import ANALYSIS_CONFIGS
from stablernn_lib.tasks.wikitext2.train import CONFIGS, results_folder
from stablernn_lib.tasks.wikitext2.variants import MODEL_VARIANTS, variant_name

FOLDER = results_folder("cpu")
VARIANTS = [variant_name(cell, stable) for cell, stable in MODEL_VARIANTS]
EXPECTED = [f"{name}.json" for name in VARIANTS] + ["analysis.json"]


def _as_json(value: object) -> object:
    return json.loads(json.dumps(value))


def _load(name: str) -> dict:
    with open(FOLDER / name, encoding="utf8") as handle:
        return json.load(handle)


def _present(names: list[str]) -> list[str]:
    return [name for name in names if (FOLDER / name).is_file()]


@pytest.mark.parametrize("variant", VARIANTS)
def test_training_result_matches_the_code(variant: str) -> None:
    if not (FOLDER / f"{variant}.json").is_file():
        pytest.skip(f"{FOLDER / variant}.json not committed yet")
    result = _load(f"{variant}.json")
    config = CONFIGS["cpu"]
    assert same_config(result["config"], config)
    assert variant_name(result["model"], result["stable"]) == variant
    assert result["status"] == "completed" and result["task"] == "wikitext2"
    assert result["vocab_size"] == WIKITEXT2_VOCAB_SIZE
    assert {"git_commit", "device", "torch", "created_utc"} <= set(result["provenance"])
    assert [epoch["epoch"] for epoch in result["epochs"]] == list(range(1, config.epochs + 1))
    assert math.isclose(result["test_ppl"], math.exp(result["test_loss"]), rel_tol=1e-9)
    best = min(epoch["val_loss"] for epoch in result["epochs"])
    assert math.isclose(result["best_val_loss"], best, rel_tol=1e-12)
    assert result["wall_seconds"] > 0
    for epoch in result["epochs"]:  # every epoch read the whole training split
        assert math.isclose(
            epoch["train_tokens_per_second"] * epoch["epoch_seconds"],
            (WIKITEXT2_TOKENS["train"] // config.batch_size - 1) * config.batch_size,
            rel_tol=1e-6,
        )


def test_analysis_matches_the_code() -> None:
    if not (FOLDER / "analysis.json").is_file():
        pytest.skip(f"{FOLDER / 'analysis.json'} not committed yet")
    analysis = _load("analysis.json")
    config = ANALYSIS_CONFIGS["cpu"]
    assert analysis["config"] == _as_json(asdict(config))
    assert same_config(analysis["lm_config"], CONFIGS["cpu"])
    for variant in VARIANTS:
        entry = analysis.get(variant, {})
        if "truncated_eval" in entry:
            curve = entry["truncated_eval"]
            assert curve["k"] == list(config.truncation_ks) and max(curve["k"]) >= 100
            assert all(math.isfinite(ppl) for ppl in curve["ppl"] + [curve["recurrent_ppl"]])
        if "figure2" in entry:
            profile = entry["figure2"]
            assert profile["distance"] == list(range(config.max_distance + 1))
            assert profile["count"][0] >= 20_000  # target positions averaged over
        if "jacobian_norms" in entry:
            layers = entry["jacobian_norms"]
            assert len(layers) == CONFIGS["cpu"].num_layers
            assert all(len(norms) == config.jacobian_positions for norms in layers)
    for cell in ("rnn", "lstm"):
        record = analysis.get(f"weights_close-{cell}")
        if record:
            assert record["ks"] == list(config.weights_ks)
            assert record["step"][-1] == config.weights_steps


def test_cpu_results_are_complete() -> None:
    missing = [name for name in EXPECTED if name not in _present(EXPECTED)]
    if (FOLDER / "analysis.json").is_file():
        analysis = _load("analysis.json")
        parts = ["truncated_eval", "figure2", "jacobian_norms"]
        missing += [
            f"analysis.json: {variant}/{part}"
            for variant in VARIANTS
            for part in parts
            if part not in analysis.get(variant, {})
        ]
        missing += [
            f"analysis.json: {variant}/diagonal_certificates"
            for variant in VARIANTS
            if variant.startswith("rnn")
            and "diagonal_certificates" not in analysis.get(variant, {})
        ]
        missing += [
            f"analysis.json: weights_close-{cell}"
            for cell in ("rnn", "lstm")
            if f"weights_close-{cell}" not in analysis
        ]
    if missing:
        pytest.fail(
            f"cpu-scale results incomplete, missing in {FOLDER}: "
            + ", ".join(missing)
            + "; make them with the commands of the cpu scale on Chapter 8's evidence page "
            "(section Reproduce)"
        )


def test_table_by_scale_and_claim_readings_say_what_ran_and_what_did_not() -> None:
    from stablernn_lib.tasks.wikitext2.results import (
        claim_readings,
        claims_table,
        smallest_k_within,
        table_by_scale,
    )

    cpu = {"rnn-unconstrained": {"test_ppl": 200.0}, "rnn-stable": {"test_ppl": 230.0}}
    table = table_by_scale({"ours, cpu scale": cpu, "ours, full scale": {}})
    assert "| RNN (tanh) | unconstrained | 146.7 ✓ | 200.0 | not run yet |" in table
    assert table.count("not run yet") == 6
    curve = {"k": [1, 10, 100], "ppl": [400.0, 203.0, 201.0], "recurrent_ppl": 200.0}
    assert smallest_k_within(curve) == 100 and smallest_k_within(curve, 0.02) == 10
    profile = {"mean_norm": [1.0] + [1e-3] * 30}
    cpu["analysis"] = {"rnn-unconstrained": {"truncated_eval": curve, "figure2": profile}}
    readings = {(r.cell, r.claim): r for r in claim_readings(cpu)}
    # one seed each: the number, and no verdict (criteria.json asks for 3 seeds)
    cost = readings[("rnn", "stability_cost")]
    assert cost.value == pytest.approx(15.0) and cost.verdict == "no verdict (fewer than 3 seeds)"
    assert readings[("rnn", "truncation")].value == 100
    assert readings[("rnn", "truncation")].verdict == "supported"
    assert readings[("rnn", "gradient_vanishes")].value == pytest.approx(1e-3)
    assert readings[("rnn", "gradient_vanishes")].verdict == "supported"
    assert all(readings[("lstm", c)].verdict == "not yet run" for c in
               ("stability_cost", "truncation", "gradient_vanishes"))  # fmt: skip
    # a measurement of one trained model is labelled indicative, never a claim
    assert all(r.indicative for r in readings.values() if r.claim != "stability_cost")
    claims = claims_table(list(readings.values()), "cpu")
    assert "one trained model: indicative" in claims
    assert "| gradient at 20, % of at 0 | 0.1% |" in claims  # the ratio 1e-3, in percent
    # three seeds each: the seed means, judged by the criteria file
    seeds = {
        "rnn-unconstrained": {
            s: {"seed": s, "test_ppl": v} for s, v in ((1, 199), (2, 200), (3, 201))
        },
        "rnn-stable": {s: {"seed": s, "test_ppl": v} for s, v in ((1, 229), (2, 230), (3, 231))},
    }
    rnn = claim_readings(cpu, seeds)[0]
    assert rnn.value == pytest.approx(15.0) and rnn.seeds == (1, 2, 3)
    assert rnn.verdict == "not supported"
    seeds["rnn-stable"] = {s: {"seed": s, "test_ppl": v} for s, v in ((1, 203), (2, 204), (3, 205))}
    assert claim_readings(cpu, seeds)[0].verdict == "supported"


def test_chapter8_claim_readings_use_the_seed_means_and_agree_with_the_seeds_table() -> None:
    """The evidence page's table of claims gives the same verdict as the seeds table, from
    the same seed means."""
    from stablernn_lib.tasks.wikitext2.results import (
        claim_readings,
        load_full_results,
        load_seed_results,
        seeds_table,
    )

    readings = claim_readings(load_full_results(FOLDER), load_seed_results("cpu"))
    table = seeds_table("cpu")
    runs = _committed_runs("cpu")
    for cell, label in (("rnn", "RNN (tanh)"), ("lstm", "LSTM")):
        (reading,) = [r for r in readings if (r.cell, r.claim) == (cell, "stability_cost")]
        stable = runs[f"{cell}-stable"]
        free = runs[f"{cell}-unconstrained"]
        mean_s, mean_f = (sum(v.values()) / len(v) for v in (stable, free))
        assert reading.value == pytest.approx(100 * (mean_s / mean_f - 1))
        row = next(r for r in table.splitlines() if r.startswith(f"| {label}, stable"))
        assert row.rstrip(" |").rsplit("| ", 1)[1] == reading.verdict
    # the measurements name the seed of the model they were taken on
    assert all(r.seeds == (1111,) for r in readings if r.claim != "stability_cost")


def test_first_layer_only_run_is_committed_and_matches_the_code() -> None:
    """Chapter 8's test of the authors' first-layer-only projection: the stable LSTM of
    config ``cpu-first-layer`` and its measurements on the cpu scale's test sample."""
    folder = results_folder("cpu-first-layer")
    expected = ("lstm-stable.json", "analysis.json")
    missing = [name for name in expected if not (folder / name).is_file()]
    if missing:
        pytest.fail(
            f"missing in {folder}: {missing}; make them with `python -m stablernn_lib train "
            "--model lstm --stable --config cpu-first-layer` and `python -m stablernn_lib "
            "lm-analysis --config cpu-first-layer --variants lstm-stable --parts truncated "
            "figure2 jacobians`"
        )
    config = CONFIGS["cpu-first-layer"]
    with open(folder / "lstm-stable.json", encoding="utf8") as handle:
        result = json.load(handle)
    assert same_config(result["config"], config) and config.projected_layers == 1
    assert (result["model"], result["stable"], result["status"]) == ("lstm", True, "completed")
    assert [epoch["epoch"] for epoch in result["epochs"]] == list(range(1, config.epochs + 1))
    with open(folder / "analysis.json", encoding="utf8") as handle:
        analysis = json.load(handle)
    assert analysis["config"] == _as_json(asdict(ANALYSIS_CONFIGS["cpu-first-layer"]))
    assert same_config(analysis["lm_config"], config)
    entry = analysis["lstm-stable"]
    assert {"truncated_eval", "figure2", "jacobian_norms"} <= set(entry)
    # the same test sample and contexts as the cpu scale, so the curves compare directly
    cpu = ANALYSIS_CONFIGS["cpu"]
    assert entry["truncated_eval"]["k"] == list(cpu.truncation_ks)
    assert analysis["config"]["test_tokens"] == cpu.test_tokens


def _committed_runs(config: str) -> dict[str, dict[int, float]]:
    """Independently of the library's loader: {variant: {seed: test ppl}} of a config."""
    folder = results_folder(config)
    found: dict[str, dict[int, float]] = {}
    for path in [*folder.glob("*.json"), *folder.glob("seed*/*.json")]:
        if path.stem in VARIANTS:
            run = json.loads(path.read_text())
            assert run["config"]["seed"] == run["seed"], path
            if path.parent.name.startswith("seed"):
                assert path.parent.name == f"seed{run['seed']}", path
                assert run["config"]["name"] == f"{config}-seed{run['seed']}", path
            found.setdefault(path.stem, {})[run["seed"]] = run["test_ppl"]
    return found


def test_seeds_commands_name_each_planned_seed_and_whether_it_is_committed() -> None:
    from stablernn_lib.tasks.wikitext2.results import seeds_commands

    runs = _committed_runs("cpu")
    lines = seeds_commands("cpu").splitlines()
    assert len(lines) >= 4 * 3  # four models x the three seeds the criteria ask for
    for variant in VARIANTS:
        cell, kind = variant.split("-")
        flags = f"--model {cell}{' --stable' if kind == 'stable' else ''} --config cpu --resume"
        for seed in (1111, 2, 3):
            command = f"python -m stablernn_lib train {flags}"
            command += "" if seed == 1111 else f" --seed {seed}"  # 1111: the config's own
            state = "committed" if seed in runs.get(variant, {}) else "not run yet"
            assert f"{command}  # {state}" in lines, (variant, seed)


def test_schedule_table_shows_each_runs_rates_from_the_files() -> None:
    from stablernn_lib.tasks.wikitext2.results import schedule_table

    rows = schedule_table("cpu").splitlines()[2:]
    runs = _committed_runs("cpu")
    assert len(rows) == sum(len(seeds) for seeds in runs.values())
    folder = results_folder("cpu")
    for variant, seeds in runs.items():
        cell, kind = variant.split("-")
        label = f"{'RNN (tanh)' if cell == 'rnn' else 'LSTM'}, {kind}"
        for seed, ppl in seeds.items():
            path = folder / ("" if seed == 1111 else f"seed{seed}") / f"{variant}.json"
            rates = [epoch["lr"] for epoch in json.loads(path.read_text())["epochs"]]
            row = f"| {label} | {seed} | {ppl:.1f} | {', '.join(f'{r:g}' for r in rates)} |"
            assert row in rows, row


def test_seeds_table_rows_are_computed_from_the_committed_files() -> None:
    from stablernn_lib.tasks.wikitext2.results import schedule_table, seeds_table

    table, each_seed = seeds_table("cpu"), schedule_table("cpu")
    for variant, by_seed in _committed_runs("cpu").items():
        values = [by_seed[s] for s in sorted(by_seed)]
        mean = sum(values) / len(values)
        shown = f"{mean:.1f}" + ("" if len(values) > 1 else f" (one seed, {sorted(by_seed)[0]})")
        assert shown in table, (variant, shown)
        assert f"(n = {len(values)})" in table or len(values) == 1
        for seed, value in by_seed.items():  # each seed's value once, in the schedule table
            assert f"| {seed} | {value:.1f} |" in each_seed
            assert f"{seed}: {value:.1f}" not in table


def test_ablation_rows_are_computed_from_the_committed_files() -> None:
    from stablernn_lib.tasks.wikitext2.results import ABLATION_ROWS, ablation_table

    table, commands = ablation_table()
    rows = table.splitlines()[2:]
    assert len(rows) == len(ABLATION_ROWS)
    for row, (label, config, stable, _, _) in zip(rows, ABLATION_ROWS, strict=True):
        assert row.startswith(f"| {label} |")
        runs = _committed_runs(config).get(variant_name("lstm", stable), {})
        if not runs:
            metrics = (
                results_folder(config)
                / "unfinished"
                / f"{variant_name('lstm', stable)}.metrics.jsonl"
            )
            if metrics.is_file():  # an unfinished run: how far it got, read from its metrics
                done = len(metrics.read_text(encoding="utf8").splitlines())
                assert f"| unfinished ({done} of at most {CONFIGS[config].epochs} epochs" in row
            else:
                assert "not run yet" in row
            continue
        mean = sum(runs.values()) / len(runs)
        assert f"| {mean:.1f}" in row, (label, mean)
        assert f"--config {config} --resume" in commands


def _quoted(*keys: str) -> None:
    """Each key is written in the prose through a glue role."""
    text = chapter8_prose()
    for key in keys:
        assert f"{{glue:text}}`{key}" in text, key


def _mean(values: dict[int, float]) -> float:
    return sum(values.values()) / len(values)


def test_chapter8_reading_of_the_cpu_seeds_holds() -> None:
    """The main table and its reading: three seeds of each model; the RNN pair's gap is over
    5% but inconclusive, its noise one run whose schedule cut the learning rate; the stable
    LSTM is about a quarter worse: not supported."""
    from stablernn_lib.tasks.wikitext2.results import seed_summary, seeds_table

    runs = _committed_runs("cpu")
    assert all(len(runs[variant]) >= 3 for variant in VARIANTS)
    numbers = chapter8_numbers()
    for variant in VARIANTS:
        cell, kind = variant.split("-")
        key = f"{cell}_{'free' if kind == 'unconstrained' else 'stable'}"
        summary = seed_summary({s: {"test_ppl": v} for s, v in runs[variant].items()})
        assert numbers[f"{key}_mean"] == pytest.approx(summary.mean)
        assert numbers[f"{key}_sd"] == pytest.approx(summary.sd)
        _quoted(f"{key}_mean:.1f", f"{key}_sd:.1f")
    rows = seeds_table("cpu").splitlines()
    free = _mean(runs["rnn-unconstrained"])
    gap = _mean(runs["rnn-stable"]) / free - 1
    rnn_row = next(r for r in rows if r.startswith("| RNN (tanh), stable"))
    assert gap > 0.05 and rnn_row.endswith("| inconclusive |")
    assert (
        numbers["rnn_gap"] == pytest.approx(100 * gap) and numbers["rnn_verdict"] == "inconclusive"
    )
    # the one run whose rate was cut, and the range of every other RNN run (rate 5 throughout)
    folder = results_folder("cpu")
    cut, others = [], []
    for variant in ("rnn-unconstrained", "rnn-stable"):
        for seed in runs[variant]:
            path = folder / ("" if seed == 1111 else f"seed{seed}") / f"{variant}.json"
            run = json.loads(path.read_text())
            rates = [epoch["lr"] for epoch in run["epochs"]]
            (cut if min(rates) < max(rates) else others).append((variant, seed, run))
    assert [(variant, seed) for variant, seed, _ in cut] == [("rnn-unconstrained", 2)]
    cut_run = cut[0][2]
    assert [e["lr"] for e in cut_run["epochs"]][3:] == [5.0, 1.25, 1.25]  # cut after epoch 4
    assert cut_run["epochs"][3]["val_loss"] > cut_run["epochs"][2]["val_loss"]
    assert numbers["rnn_cut_seed"] == 2 and numbers["rnn_cut_epoch"] == 4
    assert numbers["rnn_cut_ppl"] == pytest.approx(cut_run["test_ppl"])
    low, high = (f(run["test_ppl"] for _, _, run in others) for f in (min, max))
    assert (numbers["rnn_kept_low"], numbers["rnn_kept_high"]) == pytest.approx((low, high))
    uncut = [v for s, v in runs["rnn-unconstrained"].items() if s != 2]
    within = sum(uncut) / len(uncut) / _mean(runs["rnn-stable"]) - 1
    assert numbers["rnn_free_uncut_vs_stable"] == pytest.approx(100 * within)
    assert abs(within) < 0.01
    _quoted("rnn_cut_ppl:.1f", "rnn_kept_low:.1f", "rnn_kept_high:.1f", "rnn_verdict")
    lstm_gap = _mean(runs["lstm-stable"]) / _mean(runs["lstm-unconstrained"]) - 1
    assert 0.2 < lstm_gap < 0.3 and numbers["lstm_gap"] == pytest.approx(100 * lstm_gap)
    lstm_row = next(r for r in rows if r.startswith("| LSTM, stable"))
    assert lstm_row.endswith("| not supported |") and numbers["lstm_verdict"] == "not supported"
    _quoted("lstm_gap:+.1f", "lstm_verdict")


def test_chapter8_measurement_numbers_match_the_committed_files() -> None:
    """Every number the measurements' paragraphs state, from the cpu analysis (seed 1111)."""
    import torch

    from stablernn_lib.core import criteria
    from stablernn_lib.tasks.wikitext2.results import smallest_k_within

    analysis = _load("analysis.json")
    assert analysis["lm_config"]["seed"] == 1111
    numbers = chapter8_numbers()
    distance = criteria.criterion("gradient_vanishes")["distance"]
    for variant in VARIANTS:
        cell, kind = variant.split("-")
        key = f"{cell}_{'free' if kind == 'unconstrained' else 'stable'}"
        entry = analysis[variant]
        norms = entry["figure2"]["mean_norm"]
        assert numbers[f"{key}_fig2_ratio"] == pytest.approx(100 * norms[distance] / norms[0])
        assert numbers[f"{key}_fig2_last"] == pytest.approx(100 * norms[-1] / norms[0])
        k = smallest_k_within(entry["truncated_eval"])
        assert numbers[f"{key}_k"] == ("none up to 100" if k is None else k)
        layers = [torch.tensor(layer) for layer in entry["jacobian_norms"]]
        for i, layer in enumerate(layers, start=1):
            assert numbers[f"{key}_jac_l{i}"] == pytest.approx(float(layer.median()))
            assert numbers[f"{key}_below1_l{i}"] == pytest.approx(
                100 * float((layer < 1).double().mean())
            )
        assert numbers[f"{key}_worst_jac"] == pytest.approx(max(float(x.max()) for x in layers))
    # the readings the prose draws from them
    assert numbers["rnn_free_fig2_ratio"] > 100 * criteria.criterion("gradient_vanishes")["ratio"]
    assert numbers["rnn_stable_k"] == numbers["lstm_stable_k"] == 8
    assert numbers["rnn_free_k"] == 13 and numbers["lstm_free_k"] == "none up to 100"
    assert numbers["rnn_stable_worst_jac"] < 1 and numbers["lstm_stable_worst_jac"] < 1
    assert 1.5 < numbers["lstm_free_fig2_last"] < 2.5  # "levels off at about 2%"
    for cell in ("rnn", "lstm"):
        record = analysis[f"weights_close-{cell}"]
        for name, values in record["relative_distance"].items():
            assert numbers[f"wc_{cell}_{name.replace('=', '')}"] == pytest.approx(100 * values[-1])
    assert numbers["wc_lstm_k2"] > numbers["wc_lstm_k5"] > numbers["wc_lstm_k10"]
    _quoted("rnn_free_fig2_ratio:.1f", "lstm_free_fig2_last:.1f", "rnn_free_k", "rnn_stable_k",
            "lstm_free_k100_excess:.1f", "rnn_free_jac_l1:.2f", "rnn_free_below1_l1:.1f",
            "lstm_stable_worst_jac:.2f", "wc_lstm_k2:.0f", "wc_rnn_k10:.0f")  # fmt: skip


def test_chapter8_first_layer_row_and_anchor_match_the_committed_files() -> None:
    from stablernn_lib.core import criteria

    runs = _committed_runs("cpu")
    free = _mean(runs["lstm-unconstrained"])
    first = _committed_runs("cpu-first-layer")["lstm-stable"][1111]
    numbers = chapter8_numbers()
    assert numbers["first_layer_gap"] == pytest.approx(100 * (first / free - 1))
    # the anchor (the example's 2 x 200 LSTM at lr 20) against our unconstrained LSTM at lr 20
    lr20 = criteria.summarize(_committed_runs("cpu-lr20")["lstm-unconstrained"])
    assert numbers["anchor_gap"] == pytest.approx(100 * (lr20.mean / 142.07 - 1))
    _quoted("first_layer_gap:+.1f", "anchor_gap:.0f")


def test_every_one_seed_row_is_read_against_both_references_as_the_rule_says() -> None:
    """The ablation's readings: a constraint row with one seed says, against the course
    model and against the unconstrained LSTM, whether its effect exceeds 5 of that model's
    seed sd (criteria.single_seed_ablation), and carries no verdict."""
    from stablernn_lib.core import criteria
    from stablernn_lib.tasks.wikitext2.results import ABLATION_ROWS, ablation_readings

    runs = _committed_runs("cpu")
    references = {
        "course": criteria.summarize(runs["lstm-stable"]),
        "unconstrained": criteria.summarize(runs["lstm-unconstrained"]),
    }
    readings = {r.label: r for r in ablation_readings()}
    one_seed = 0
    for label, config, stable, _, reference in ABLATION_ROWS:
        row = _committed_runs(config).get("lstm-stable", {}) if stable else {}
        if config == "cpu" or reference != "cpu" or len(row) != 1:
            continue
        one_seed += 1
        reading = readings[label]
        (value,) = row.values()
        assert reading.verdict is None and reading.seeds == 1
        for name, summary in references.items():
            effect, limit, readable = reading.effects[name]
            assert effect == pytest.approx(abs(value - summary.mean))
            assert limit == pytest.approx(5 * summary.sd)
            assert readable is criteria.single_seed_readable(value, summary)
    assert one_seed >= 3


def test_chapter8_says_which_runs_came_before_the_criteria() -> None:
    """The runs of seed 1111 and cpu-first-layer predate criteria.json (no criteria_commit);
    the later seeds and ablation rows record it."""
    from stablernn_lib.core.results import results_path

    text = chapter8_prose()
    assert "were known when the {glue:text}`tolerance:.0f`% tolerance was fixed" in text
    assert "2026-" not in text and "edf3b22" not in text  # a method, not a production story
    before = [
        *(FOLDER / f"{name}.json" for name in VARIANTS),
        results_folder("cpu-first-layer") / "lstm-stable.json",
    ]
    for path in before:
        provenance = json.loads(path.read_text())["provenance"]
        assert "criteria_commit" not in provenance, path
        assert provenance["created_utc"].startswith("2026-11-23"), path
    after = [*FOLDER.glob("seed*/*.json"), results_folder("cpu-authors-first") / "lstm-stable.json"]
    assert after
    for path in after:
        assert json.loads(path.read_text())["provenance"]["criteria_commit"].startswith("edf3b22")
    assert "2026-11-25" in json.loads(results_path("criteria.json").read_text())["written"]


def test_chapter8_says_which_factor_explains_the_lstm_gap() -> None:
    """Each ablation row's perplexity, gap, share of the course constraint's gap and worst
    Jacobian norm from the files; the forget-gate cap's value from the constraint's
    constants; the ranking of the readings table agrees."""
    import math

    from stablernn_lib.tasks.wikitext2.results import ablation_readings, ablation_readings_table
    from stablernn_lib.theory.lstm_certificate import (
        AUTHORS_INPUT_FORGET_SCALE,
        AUTHORS_RECURRENT_SCALES,
    )

    numbers = chapter8_numbers()
    runs = _committed_runs("cpu")
    free, course = _mean(runs["lstm-unconstrained"]), _mean(runs["lstm-stable"])
    course_gap = course / free - 1
    shares = {}
    for key, config in (("free_forget", "cpu-free-forget"), ("first_layer", "cpu-first-layer"),
                        ("authors_first", "cpu-authors-first"), ("authors_all", "cpu-authors-all"),
                        ("upper", "cpu-free-forget-upper")):  # fmt: skip
        ppl = _mean(_committed_runs(config)["lstm-stable"])
        gap = ppl / free - 1
        shares[config] = 100 * (course_gap - gap) / course_gap
        assert numbers[f"{key}_ppl"] == pytest.approx(ppl), config
        assert numbers[f"{key}_gap"] == pytest.approx(100 * gap), config
        assert numbers[f"{key}_share"] == pytest.approx(shares[config]), config
        with open(results_folder(config) / "analysis.json", encoding="utf8") as handle:
            norms = json.load(handle)["lstm-stable"]["jacobian_norms"]
        assert numbers[f"{key}_worst_jac"] == pytest.approx(max(max(layer) for layer in norms))
    assert shares["cpu-first-layer"] > 50 and shares["cpu-free-forget"] > 50
    assert numbers["free_forget_worst_jac"] > 1
    cap = 1 / (1 + math.exp(-(AUTHORS_RECURRENT_SCALES["f"] + AUTHORS_INPUT_FORGET_SCALE)))
    assert cap <= 0.60 and "\\sigma(0.155 + 0.25) \\approx 0.60" in chapter8_prose()
    table = ablation_readings_table(ablation_readings())
    assert table.index("| authors' rescaling, first layer only | 3 |") < table.index(
        "| course constraint, forget cap lifted | 1 |"
    )
    _quoted("free_forget_share:.0f", "first_layer_share:.0f", "free_forget_worst_jac:.2f")


def test_chapter8_reading_of_the_forget_cap_test_holds() -> None:
    """``cpu-free-forget-upper``: its gap, effect against the course model (readable by the
    single-seed rule), Jacobian norms per layer, and the split of layer 2's cost between the
    cap and the other gates, from the files."""
    from stablernn_lib.core import criteria

    numbers = chapter8_numbers()
    runs = _committed_runs("cpu")
    course = _mean(runs["lstm-stable"])
    upper = _mean(_committed_runs("cpu-free-forget-upper")["lstm-stable"])
    first = _mean(_committed_runs("cpu-first-layer")["lstm-stable"])
    assert criteria.single_seed_readable(upper, criteria.summarize(runs["lstm-stable"]))
    with open(results_folder("cpu-free-forget-upper") / "analysis.json", encoding="utf8") as handle:
        layer1, layer2 = (max(n) for n in json.load(handle)["lstm-stable"]["jacobian_norms"])
    assert layer1 < 1 < layer2
    assert (numbers["upper_layer1_jac"], numbers["upper_layer2_jac"]) == pytest.approx(
        (layer1, layer2)
    )
    layer2_cost, cap = course - first, course - upper
    assert numbers["layer2_cost"] == pytest.approx(layer2_cost)
    assert numbers["cap_recovers"] == pytest.approx(cap)
    assert numbers["other_gates_cost"] == pytest.approx(upper - first)
    assert "cap_share" not in numbers  # one share on the site: the ablation table's
    assert 0.7 < cap / layer2_cost < 0.8  # "the largest single cost, not the whole of it"
    _quoted("layer2_cost:.1f", "cap_recovers:.1f", "upper_layer2_jac:.2f")


def test_chapter8_reading_of_the_lr20_rows_holds() -> None:
    from stablernn_lib.core import criteria

    numbers = chapter8_numbers()
    lr20 = _committed_runs("cpu-lr20")
    seeds5 = criteria.summarize(_committed_runs("cpu")["lstm-unconstrained"])
    free20, stable20 = _mean(lr20["lstm-unconstrained"]), _mean(lr20["lstm-stable"])
    assert free20 < seeds5.mean - 5 * seeds5.sd  # "far below"
    course5 = _mean(_committed_runs("cpu")["lstm-stable"])
    gap20, gap5 = 100 * (stable20 / free20 - 1), 100 * (course5 / seeds5.mean - 1)
    assert (numbers["lr20_free"], numbers["lr20_stable"]) == pytest.approx((free20, stable20))
    assert numbers["lr20_gap"] == pytest.approx(gap20) and gap20 > gap5  # "widens the gap"
    assert stable20 < course5 and seeds5.mean - free20 > course5 - stable20  # "helps both, ..."
    _quoted("lr20_free:.1f", "lr20_stable:.1f", "lr20_gap:+.1f")


def test_chapter8_reading_of_the_authors_first_layer_row_holds() -> None:
    """The authors' rescaling on the first layer, three seeds: within 5% ("supported"), its
    worst one-step Jacobian norm above 1 (not contractive)."""
    from stablernn_lib.core import criteria
    from stablernn_lib.tasks.wikitext2.results import ablation_readings, seed_summary

    runs = _committed_runs("cpu-authors-first")["lstm-stable"]
    assert len(runs) >= 3
    row = seed_summary({s: {"test_ppl": v} for s, v in runs.items()})
    free_runs = _committed_runs("cpu")["lstm-unconstrained"]
    free = seed_summary({s: {"test_ppl": v} for s, v in free_runs.items()})
    assert criteria.stability_cost_verdict("wikitext2", free, row) == "supported"
    numbers = chapter8_numbers()
    assert numbers["authors_first_verdict"] == "supported" and numbers["authors_first_n"] == 3
    assert numbers["authors_first_sd"] == pytest.approx(row.sd)
    assert numbers["authors_first_gap"] == pytest.approx(100 * (row.mean / free.mean - 1))
    assert numbers["authors_first_worst_jac"] > 1
    reading = next(r for r in ablation_readings() if r.config == "cpu-authors-first")
    assert reading.verdict == "supported"
    _quoted("authors_first_gap:+.1f", "authors_first_worst_jac:.2f", "authors_first_verdict")


def test_every_glue_role_of_chapter8_names_a_number_of_the_library() -> None:
    """Every ``{glue:text}`` role of the lesson and the evidence page names a key that
    ``chapter8_numbers`` returns (the notebooks glue all of them), with a format that
    applies to its value."""
    import re

    from myst_nb.core.variables import format_plain_text

    numbers = chapter8_numbers()
    roles = re.findall(r"\{glue:text\}`([^`]+)`", chapter8_prose())
    assert len(roles) > 100
    for role in roles:
        key, _, spec = role.partition(":")
        assert key in numbers, key
        format_plain_text(repr(numbers[key]), spec)  # raises on a format that does not apply


def test_chapter8_cost_numbers_match_the_benchmark_files() -> None:
    """Why the cpu scale's output layer and epochs: the step times of the committed output-
    layer benchmark and cpu benchmark, and the idle epoch timed against its prediction."""
    folder = FOLDER.parent
    layer = json.loads((folder / "benchmark-cpu-output-layer.json").read_text())["step_seconds"]
    bench = json.loads((folder / "benchmark-cpu-cpu.json").read_text())
    epoch = json.loads((folder / "timing" / "lstm-stable-cpu-1-epoch-idle.json").read_text())
    numbers = chapter8_numbers()
    plain = [layer["softmax"][cell] for cell in ("rnn", "lstm")]
    adaptive = [layer["adaptive"][cell] for cell in ("rnn", "lstm")]
    ratios = [p / a for p, a in zip(plain, adaptive, strict=True)]
    assert numbers["ol_softmax_ms_min"] == pytest.approx(1000 * min(plain))
    assert numbers["ol_adaptive_ms_max"] == pytest.approx(1000 * max(adaptive))
    assert (numbers["ol_ratio_min"], numbers["ol_ratio_max"]) == pytest.approx(
        (min(ratios), max(ratios))
    )
    assert numbers["ol_softmax_epoch_max"] == pytest.approx(2984 * max(plain) / 60)
    assert numbers["steps_per_epoch"] == bench["steps_per_epoch"] == 2984
    minutes = [m[k] / 60 for m in bench["models"].values() for k in m if k.startswith("epoch_s")]
    assert (numbers["cpu_epoch_min"], numbers["cpu_epoch_max"]) == pytest.approx(
        (min(minutes), max(minutes))
    )
    assert numbers["idle_epoch_minutes"] == pytest.approx(epoch["wall_seconds"] / 60)
    assert numbers["idle_epoch_minutes"] > numbers["idle_epoch_predicted_minutes"]  # + evaluation
    # the timed epoch reached the committed run's first-epoch validation perplexity
    committed = _load("lstm-stable.json")["epochs"][0]["val_ppl"]
    assert epoch["epochs"][0]["val_ppl"] == pytest.approx(committed, rel=1e-6)
    _quoted("ol_ratio_max:.1f", "cpu_epoch_max:.1f", "idle_epoch_minutes:.1f")


def test_chapter8_reads_the_time_budget_and_figure2_verdicts_from_the_files() -> None:
    """The budget quoted in the lesson's table: the committed wall times of the four cpu runs
    plus their analyses, and the idle estimate's total; Figure 2's verdict per model from the
    criterion's distance and ratio."""
    from stablernn_lib.core import criteria

    numbers = chapter8_numbers()
    analysis = json.loads((FOLDER / "analysis.json").read_text())
    walls = [json.loads((FOLDER / f"{name}.json").read_text())["wall_seconds"] for name in VARIANTS]
    committed = (sum(walls) + sum(analysis["seconds"].values())) / 3600
    assert numbers["budget_committed_hours"] == pytest.approx(committed)
    assert 0 < numbers["budget_idle_hours"] < numbers["budget_committed_hours"]
    assert numbers["budget_committed_threads"] == 1 and numbers["budget_idle_threads"] == 2
    vanishes = criteria.criterion("gradient_vanishes")
    for name in VARIANTS:
        norms = analysis[name]["figure2"]["mean_norm"]
        cell, _, kind = name.partition("-")
        key = f"{cell}_{'free' if kind == 'unconstrained' else 'stable'}_fig2_verdict"
        below = norms[vanishes["distance"]] < vanishes["ratio"] * norms[0]
        assert numbers[key] == ("supported" if below else "not supported"), name
    assert numbers["rnn_free_fig2_verdict"] == "not supported"  # 1.1% against the 1% line
    _quoted("rnn_free_fig2_verdict", "budget_idle_hours:.1f", "budget_committed_hours:.1f")


def test_chapter8_states_each_task_s_seed_minimum_from_the_criteria() -> None:
    from stablernn_lib.core import criteria

    seeds = criteria.load_criteria()["seeds"]
    numbers = chapter8_numbers()
    assert (numbers["seeds_needed"], numbers["seeds_needed_jsb"]) == (
        seeds["wikitext2"],
        seeds["jsb"],
    )
    _quoted("seeds_needed", "seeds_needed_jsb")
