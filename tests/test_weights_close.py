"""Proposition 2, Theorem 1 and the Figure 1 experiment (stablernn_lib.theory.weights_close)."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import types

import numpy as np
import pytest
import sympy as sp
import torch

from stablernn_lib.__main__ import main
from stablernn_lib.core.truncation import truncated_states
from stablernn_lib.theory import weights_close as wc

SMOKE = wc.CONFIGS["smoke"]


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("figure1")
    wc.run_figure1(SMOKE, out, progress=False)
    return out


@pytest.fixture(scope="module")
def smoke_units(smoke_dir):
    return wc.load_results(smoke_dir, "smoke")["units"]


# ----------------------------------------------------------------------------- the bounds


def test_proposition2_bound_known_value():
    # alpha gamma k lambda^k N^(alpha beta + 1) = 0.5 * 2 * 3 * 0.125 * 4^1.5 = 3
    assert wc.proposition2_bound(0.5, 2.0, 1.0, 3, 0.5, 4) == pytest.approx(3.0)
    assert wc.proposition2_bound(1.0, 1e6, 1e6, 1, 0.5, 1000) == math.inf


@pytest.mark.parametrize("alpha", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("beta", [0.0, 0.3, 2.0, 50.0])
@pytest.mark.parametrize("k", [1, 5])
def test_closed_form_dominates_the_iterated_recurrence(alpha, beta, k):
    gamma, lam, num_steps = 2.0, 0.7, 300
    steps = wc.step_sizes("decay", alpha, num_steps)
    iterated = wc.recurrence_bound_log10(steps, beta, gamma * k * lam**k)
    for n in (1, 2, 10, 77, num_steps):  # e_{n+1}, the distance after n steps
        closed = wc.proposition2_bound_log10(alpha, gamma, beta, k, lam, n)
        assert iterated[n] <= closed + 1e-12
    exact = wc.decay_recurrence_solution_log10(alpha, beta, gamma * k * lam**k, num_steps)
    assert exact == pytest.approx(iterated[-1], rel=1e-9, abs=1e-9)


def test_recurrence_iteration_matches_a_hand_computation():
    # e_2 = 0.5 g, e_3 = (1 + 0.5 b) e_2 + 0.5 g with constant step 0.5, b = 2, g = 3
    log_e = wc.recurrence_bound_log10(np.array([0.5, 0.5]), 2.0, 3.0)
    assert log_e[0] == -np.inf
    assert 10 ** log_e[1:] == pytest.approx([1.5, 2 * 1.5 + 1.5])


@pytest.mark.parametrize("c", [0.0, 0.2, 1.0, 7.5])
def test_product_bound_holds(c):
    slack = wc.product_bound_slack(c, 500)
    assert np.all(slack <= 1e-12)
    assert slack[-1] == 0.0  # the empty product at t = N


def test_sympy_solution_and_unrolling_agree_with_the_recurrence():
    solution = wc.symbolic_recurrence_solution()
    t, c, d = sp.symbols("t c d", positive=True)
    values = {c: 0.7, d: 0.3}
    steps = wc.step_sizes("decay", 1.0, 9)  # alpha = 1: c = beta, d = gap
    iterated = 10 ** wc.recurrence_bound_log10(steps, 0.7, 0.3)
    for n in range(1, 10):
        assert float(solution.subs(values).subs(t, n + 1)) == pytest.approx(iterated[n])
    iterated_expr, unrolled_expr = wc.symbolic_unrolling(5)
    assert sp.simplify(iterated_expr - unrolled_expr) == 0


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="schedule"):
        wc.step_sizes("cosine", 1.0, 10)
    with pytest.raises(ValueError, match="alpha"):
        wc.step_sizes("decay", 0.0, 10)
    with pytest.raises(ValueError, match="config"):
        wc.get_config("huge")
    with pytest.raises(ValueError, match="lam"):
        dataclasses.replace(SMOKE, lam=1.2)
    with pytest.raises(ValueError, match="lambda"):
        wc.proposition2_bound(1.0, 1.0, 1.0, 2, 1.5, 10)


# ----------------------------------------------------------------------------- the experiment


def test_truncated_prediction_matches_the_truncation_module():
    instance = wc.make_instance(SMOKE, "tanh", seed=3)
    with torch.no_grad():
        ours = wc.final_predictions(instance.start, instance.train_inputs, k=5)
        theirs = truncated_states(instance.start, instance.train_inputs, 5)[-1]
    torch.testing.assert_close(ours, theirs)


def test_projection_keeps_every_iterate_in_the_stable_set():
    instance = wc.make_instance(SMOKE, "tanh", seed=1)
    steps = wc.step_sizes("constant", 3.0, 30)  # large steps leave the ball before projecting
    recurrent = wc.recurrent_trajectory(instance, steps)
    norms = torch.linalg.matrix_norm(recurrent.weights, ord=2)
    assert torch.all(norms <= SMOKE.lam + 1e-10)
    assert torch.any(norms >= SMOKE.lam - 1e-8)  # the constraint is active
    step = torch.as_tensor(steps).reshape(-1, 1, 1)
    unprojected = recurrent.weights[:-1] - step * recurrent.gradients
    assert torch.any(torch.linalg.matrix_norm(unprojected, ord=2) > SMOKE.lam + 1e-3)
    run = wc.truncated_run(instance, 2, steps, recurrent)
    assert torch.linalg.matrix_norm(run.model.weight_hh.detach(), ord=2) <= SMOKE.lam + 1e-10


def test_full_context_gives_identical_runs():
    instance = wc.make_instance(SMOKE, "tanh", seed=2)
    steps = wc.step_sizes("constant", 1.0, 15)
    recurrent = wc.recurrent_trajectory(instance, steps)
    for k in (SMOKE.seq_len, SMOKE.seq_len + 7):
        run = wc.truncated_run(instance, k, steps, recurrent)
        assert np.all(run.distance == 0) and np.all(run.gradient_gap == 0)
    assert wc.truncated_run(instance, 1, steps, recurrent).distance[-1] > 0


def _below(distance: list[float], log10_bound: list[float | None]) -> bool:
    """``distance <= 10^bound`` at every recorded step (``None``: an infinite bound).

    Files store 6 significant digits, and after one step the stepwise bound is an
    equality, hence the tolerance of 1e-4 in log10 (0.02 %).
    """
    bound = np.array([np.inf if v is None else v for v in log10_bound])
    with np.errstate(divide="ignore"):
        return bool(np.all(np.log10(np.array(distance)) <= bound + 1e-4))


def test_recorded_ratios_are_the_quantities_of_the_proof():
    instance = wc.make_instance(SMOKE, "tanh", seed=4)
    data = (instance.train_inputs, instance.train_targets)
    steps = wc.step_sizes("decay", 1.0, 6)
    recurrent = wc.recurrent_trajectory(instance, steps)
    longer = wc.truncated_run(instance, 3, steps, recurrent)
    shorter = wc.truncated_run(
        instance, 3, steps[:-1], wc.recurrent_trajectory(instance, steps[:-1])
    )
    # at step t = 6 the longer run measures at w_6 and w^k_6, the end of the shorter run
    _, at_truncated = wc.recurrent_weight_gradient(shorter.model, *data)
    _, truncated = wc.recurrent_weight_gradient(shorter.model, *data, k=3)
    distance = shorter.distance[-1]
    assert longer.distance[5] == pytest.approx(distance)
    moved = (recurrent.gradients[5] - at_truncated).norm()
    assert longer.smoothness[5] == pytest.approx(float(moved) / distance)
    assert longer.gradient_gap[5] == pytest.approx(float((at_truncated - truncated).norm()))


def test_smoke_distance_never_exceeds_the_proved_bounds(smoke_units):
    decay = [u for u in smoke_units if u["schedule"] == "decay"]
    assert len(decay) == len(SMOKE.ks) * len(SMOKE.seeds) * len(SMOKE.activations)
    for unit in smoke_units:
        # valid for every schedule: the one-step inequality with measured ratios,
        # and the recurrence with the constants of Lemmas 2 and 3
        for key in ("stepwise_log10", "theory_log10"):
            assert _below(unit["distance"], unit[key]), (key, unit["k"])
        assert unit["gradient_gap_max"] <= unit["lemma2_bound"]  # Lemma 2
        assert unit["beta_hat"] <= unit["theory"]["beta"]  # Lemma 3
    for unit in decay:  # Proposition 2 is proved for alpha_t = alpha / t
        for key in ("prop2_empirical_log10", "prop2_theory_log10", "empirical_log10"):
            assert _below(unit["distance"], unit[key]), (key, unit["k"])


def test_smoke_distances_shrink_with_k_and_vanish_at_full_context(smoke_units):
    for schedule in SMOKE.schedules:
        units = sorted((u for u in smoke_units if u["schedule"] == schedule), key=lambda u: u["k"])
        finals = [u["final_distance"] for u in units]
        assert all(a > b for a, b in zip(finals, finals[1:], strict=False) if a > 0)
        full = [u for u in units if u["k"] >= SMOKE.seq_len]
        assert full and all(u["final_distance"] == 0 for u in full)
        assert all(u["theorem1"]["prediction_gap_max"] == 0 for u in full)


def test_theorem1_prediction_gap_within_its_bound(smoke_units):
    for unit in smoke_units:
        result = unit["theorem1"]
        assert result["prediction_gap_max"] <= result["bound_from_measured_distance"]
        parts = result["weights_part_max"] + result["truncation_part_max"]
        assert result["prediction_gap_max"] <= parts + 1e-12


def test_training_lowers_the_loss(smoke_units):
    for unit in smoke_units:
        losses = unit["train_loss_recurrent"]
        assert losses[-1] < 0.5 * losses[0]


# ----------------------------------------------------------------------------- files


def test_results_resume_without_recomputing(smoke_dir, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(smoke_dir, out)
    runs = out / "smoke" / "runs"
    again = wc.run_figure1(SMOKE, out, progress=False)
    assert again["summary"]["units_computed"] == 0
    removed = sorted(runs.glob("tanh-decay-*-k2.json"))[0]
    kept = json.loads(removed.read_text())
    removed.unlink()
    (runs / "tanh-constant-seed0-k4.json").write_text('{"config": "smo')  # half-written
    again = wc.run_figure1(SMOKE, out, progress=False)
    assert again["summary"]["units_computed"] == 2
    assert json.loads(removed.read_text())["distance"] == kept["distance"]
    changed = dataclasses.replace(SMOKE, alpha=0.5)
    again = wc.run_figure1(changed, out, progress=False)
    assert again["summary"]["units_computed"] == len(again["units"])
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_cli_smoke_run_writes_results_with_provenance(tmp_path):
    assert main(["figure1", "--config", "smoke", "--out", str(tmp_path)]) == 0
    folder = tmp_path / "smoke"
    summary = json.loads((folder / "summary.json").read_text())
    assert {"git_commit", "device", "created_utc"} <= set(summary["provenance"])
    assert summary["config"]["seeds"] == list(SMOKE.seeds)
    assert summary["wall_time_s"] > 0
    assert len(summary["table"]) == len(list((folder / "runs").glob("*.json")))
    assert summary["units_resumed"] == 0 and summary["units_computed"] == len(summary["table"])
    # the units' compute times add up to the run's time (each group's shared recurrent run
    # split over its ks), and every unit says where it was computed
    units = [json.loads(p.read_text()) for p in (folder / "runs").glob("*.json")]
    assert summary["compute_time_s"] == pytest.approx(sum(u["compute_time_s"] for u in units))
    assert 0.5 * summary["wall_time_s"] <= summary["compute_time_s"] <= summary["wall_time_s"]
    assert all("git_commit" in u["provenance"] and u["compute_time_s"] > 0 for u in units)
    lines = (folder / "figure1.csv").read_text().splitlines()
    assert lines[0].split(",") == list(wc.TABLE_FIELDS)
    assert all(line.split(",")[0] in SMOKE.activations for line in lines[1:])
    assert (folder / "figure1.png").stat().st_size > 1000


# ----------------------------------------------------------------------------- reports


def _unit(activation: str, schedule: str, seed: int, k: int, rng: np.random.Generator) -> dict:
    """A synthetic unit with the fields the reports read (random distances and bounds)."""
    steps = 5
    distance = [float(d) for d in rng.uniform(0.1, 2.0, steps)]
    bound = lambda: [float(b) for b in rng.uniform(-1.0, 1.0, steps)]  # noqa: E731
    gaps = {name: float(rng.uniform(0.1, 3.0)) for name in ("gap", "weights", "trunc", "bound")}
    return {
        "activation": activation,
        "schedule": schedule,
        "seed": seed,
        "k": k,
        "distance": distance,
        "final_distance": distance[-1],
        "stepwise_log10": bound(),
        "prop2_empirical_log10": bound(),
        "prop2_theory_log10": bound(),
        "empirical_log10": bound(),
        "theorem1": {
            "prediction_gap_max": gaps["gap"],
            "weights_part_max": gaps["weights"],
            "truncation_part_max": gaps["trunc"],
            "bound_from_measured_distance": gaps["bound"],
            "test_loss_recurrent": float(rng.uniform(0, 1)),
            "test_loss_truncated": float(rng.uniform(0, 1)),
        },
    }


@pytest.fixture(scope="module")
def synthetic_units() -> list[dict]:
    rng = np.random.default_rng(7)
    units = [
        _unit(activation, schedule, seed, k, rng)
        for activation in ("identity", "tanh")
        for schedule in ("decay", "constant")
        for seed in (0, 1, 2)
        for k in (1, 3)
    ]
    # seed 3 has a decay run only (it is left out of every ratio); k = 9 never moved
    units.append(_unit("tanh", "decay", 3, 1, rng) | {"distance": [9.0] * 5, "final_distance": 9})
    for schedule in ("decay", "constant"):
        still = _unit("tanh", schedule, 0, 9, rng)
        units.append(still | {"distance": [0.0] * 5, "final_distance": 0.0})
    return units


def _brute_force_ratio(runs: list[dict], bounds: list[dict], key: str) -> float:
    """max over seeds and steps n >= 2 of distance / 10**bound, in plain arithmetic."""
    ratios = [
        run["distance"][n] / 10.0 ** bound[key][n]
        for run, bound in zip(runs, bounds, strict=True)
        for n in range(1, len(run["distance"]))
        if run["distance"][n] > 0
    ]
    return max(ratios)


def test_ratio_of_a_distance_to_a_log10_bound_by_hand():
    assert wc._ratio(0.5, math.log10(2.0)) == pytest.approx(0.25)
    assert wc._ratio(3.0, -2.0) == pytest.approx(300.0)
    assert wc._ratio(1.0, None) == 0.0  # no bound recorded (overflow): nothing is claimed
    assert math.isnan(wc._ratio(0.0, 1.0)) and math.isnan(wc._ratio(None, 1.0))
    assert wc._ratio(10.0, -1000.0) == pytest.approx(1e300)  # capped, not an overflow
    # the first step is skipped (an equality there), a missing distance too
    assert wc._max_ratio([100.0, 1.0, None, 2.0], [0.0, 0.0, 0.0, math.log10(4.0)]) == 1.0
    assert math.isnan(wc._max_ratio([5.0, 0.0], [0.0, 0.0]))


def test_bound_report_equals_a_brute_force_over_seeds_and_steps(synthetic_units):
    report = wc.bound_report(synthetic_units)
    assert [(row["activation"], row["k"]) for row in report] == [
        ("identity", 1),
        ("identity", 3),
        ("tanh", 1),
        ("tanh", 3),
    ]  # tanh k = 9 never moved: no row
    for row in report:
        decay, constant = (
            [
                u
                for seed in (0, 1, 2)
                for u in synthetic_units
                if (u["activation"], u["k"], u["schedule"], u["seed"])
                == (row["activation"], row["k"], schedule, seed)
            ]
            for schedule in ("decay", "constant")
        )
        expected = {
            "decay_final": sum(u["final_distance"] for u in decay) / 3,
            "decay_vs_stepwise": _brute_force_ratio(decay, decay, "stepwise_log10"),
            "decay_vs_prop2_empirical": _brute_force_ratio(decay, decay, "prop2_empirical_log10"),
            "decay_prop2_theory_log10": max(u["prop2_theory_log10"][-1] for u in decay),
            "constant_final": sum(u["final_distance"] for u in constant) / 3,
            "constant_vs_recurrence": _brute_force_ratio(constant, constant, "stepwise_log10"),
            "constant_recurrence_log10": max(u["empirical_log10"][-1] for u in constant),
            "constant_vs_decay_stepwise": _brute_force_ratio(constant, decay, "stepwise_log10"),
            "constant_vs_decay_prop2_empirical": _brute_force_ratio(
                constant, decay, "prop2_empirical_log10"
            ),
        }
        assert set(row) == {"activation", "k", *expected}
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-9), key


def test_bound_tables_split_the_report_by_schedule(synthetic_units):
    report = wc.bound_report(synthetic_units)
    text = wc.bound_tables(report)
    first, second = text.split("**Constant step**")
    assert first.startswith("**Steps $\\alpha/t$**")
    assert "÷ stepwise bound" in first and "÷ own recurrence" not in first
    assert "÷ own recurrence" in second and "÷ stepwise bound" not in second
    # one header, one rule and one line per row in each table
    for part in (first, second):
        lines = [line for line in part.splitlines() if line.startswith("|")]
        assert len(lines) == 2 + len(report)
        assert lines[0].count("|") == (7 if part is first else 8)  # columns + 1


def test_theorem1_table_by_hand(synthetic_units):
    rows = wc.theorem1_table(synthetic_units)
    keys = sorted({(u["activation"], u["schedule"], u["k"]) for u in synthetic_units})
    assert [(r["activation"], r["schedule"], r["k"]) for r in rows] == keys
    for row in rows:
        chosen = [
            u["theorem1"]
            for u in synthetic_units
            if (u["activation"], u["schedule"], u["k"])
            == (row["activation"], row["schedule"], row["k"])
        ]
        assert row["gap_max"] == max(c["prediction_gap_max"] for c in chosen)
        assert row["weights_part"] == max(c["weights_part_max"] for c in chosen)
        assert row["truncation_part"] == max(c["truncation_part_max"] for c in chosen)
        assert row["bound_min"] == min(c["bound_from_measured_distance"] for c in chosen)
        for key, name in (("loss_recurrent", "recurrent"), ("loss_truncated", "truncated")):
            mean = sum(c[f"test_loss_{name}"] for c in chosen) / len(chosen)
            assert row[key] == pytest.approx(mean)
    assert set(wc.THEOREM1_TABLE_HEADERS) == set(rows[0])


def test_the_committed_full_run_keeps_the_proved_bounds():
    """Chapter 7's table: the stepwise recurrence (proved for the run's own steps) holds in
    every recorded step of every seed of the committed full run."""
    full = wc.full_results("smoke")
    assert full is not None and len(full["units"]) == 72
    assert full == wc.load_results(wc.COMMITTED_RESULTS, "full")
    report = wc.bound_report(full["units"])
    assert {(row["activation"], row["k"]) for row in report} == {
        (a, k) for a in ("identity", "tanh") for k in (1, 2, 4, 8, 16, 24)
    }  # every k of the run is below the sequence length T = 32
    for row in report:
        assert 0 < row["decay_vs_stepwise"] <= 1 + 1e-9
        assert 0 < row["constant_vs_recurrence"] <= 1 + 1e-9
        assert 0 < row["decay_vs_prop2_empirical"] <= 1 + 1e-9


def test_full_results_without_the_committed_files_says_how_to_make_them(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(wc, "COMMITTED_RESULTS", tmp_path)
    assert wc.full_results("smoke") is None
    assert "python -m stablernn_lib figure1 --config full" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown mode"):
        wc.full_results("paper")


def test_widget_grid_runs_each_lambda_and_schedule():
    config = dataclasses.replace(SMOKE, seeds=(0,), num_steps=20, num_records=4)
    grid = wc.widget_grid(lams=(0.5, 0.9), ks=(1, 2), config=config)
    assert set(grid) == {(lam, s) for lam in (0.5, 0.9) for s in config.schedules}
    for (lam, schedule), units in grid.items():
        assert [u["k"] for u in units] == [1, 2]
        assert {(u["lam"], u["schedule"], u["activation"]) for u in units} == {
            (lam, schedule, config.activations[0])
        }
    # a larger lambda keeps more of the past: the truncated weights move further away
    final = {key: units[0]["final_distance"] for key, units in grid.items()}
    assert final[(0.9, "decay")] > final[(0.5, "decay")]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lam": 0.0}, r"lam must lie in \(0, 1\) for a stable model, got 0.0"),
        ({"lam": 1.0}, r"lam must lie in \(0, 1\) for a stable model, got 1.0"),
        ({"ks": ()}, r"ks must be a non-empty tuple of contexts >= 1, got \(\)"),
        ({"ks": (0, 2)}, r"ks must be a non-empty tuple of contexts >= 1, got \(0, 2\)"),
        ({"schedules": ("cosine",)}, "schedule"),
        ({"activations": ("relu",)}, "relu"),
    ],
)
def test_a_config_outside_the_theorem_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SMOKE, **change)


def test_defaults_of_the_loaders_and_the_widget(monkeypatch, tmp_path):
    # load_results reads the "full" config by default, and its summary and units
    full = wc.load_results(wc.COMMITTED_RESULTS)
    assert full["summary"]["config"]["name"] == "full" and len(full["units"]) == 72
    assert set(full) == {"summary", "units"}
    # full mode recomputes (resumably) into the rerun folder: here a stand-in run
    calls = []
    monkeypatch.setattr(wc, "run_figure1", lambda *args, **kw: calls.append(args) or "ran")
    assert wc.full_results("full") == "ran" and calls == [("full", wc.RERUN_RESULTS)]
    # the widget runs the smoke config for seed 0 by default
    seen = []

    def fake_group(config, activation, schedule, seed, ks, lam):
        seen.append((config.name, activation, schedule, seed, tuple(ks), lam))
        return []

    monkeypatch.setattr(wc, "run_group", fake_group)
    wc.widget_grid(lams=(0.5,), ks=(1,))
    assert seen == [("smoke", "tanh", s, 0, (1,), 0.5) for s in SMOKE.schedules]


def test_ratios_refuse_curves_of_different_lengths_and_a_report_skips_a_still_key():
    with pytest.raises(ValueError, match="zip"):
        wc._max_ratio([1.0, 2.0, 3.0], [0.0, 0.0])
    # a seed that has a bound but no run is not a seed of the ratio
    runs = {0: {"distance": [1.0, 1.0]}}
    bounds = {0: {"b": [0.0, 0.0]}, 1: {"b": [0.0, -5.0]}}
    assert wc._worst(runs, bounds, "b") == pytest.approx(1.0)
    rng = np.random.default_rng(3)
    units = [
        _unit("tanh", schedule, 0, k, rng) for schedule in ("decay", "constant") for k in (1, 3)
    ]
    for schedule in ("decay", "constant"):  # k = 2 never moved: skipped, the loop goes on
        units.append(_unit("tanh", schedule, 0, 2, rng) | {"final_distance": 0.0})
    assert [row["k"] for row in wc.bound_report(units)] == [1, 3]


def test_a_run_shows_its_progress_by_default(smoke_dir, capsys):
    wc.run_figure1(SMOKE, smoke_dir)  # every unit resumed: nothing recomputed
    bar = capsys.readouterr().err
    total = len(SMOKE.activations) * len(SMOKE.schedules) * len(SMOKE.seeds) * len(SMOKE.ks)
    assert "figure1 smoke" in bar and f"{total}/{total}" in bar


def test_an_instance_is_the_draws_of_its_seed_in_order():
    """Teacher, start (U copied from the teacher, not trained), then inputs N(0, 1/D) and
    targets = teacher's output + noise, all float64 from one generator, as written out here."""
    from stablernn_lib.core.models import random_vanilla_rnn

    config = dataclasses.replace(SMOKE, num_train=5, num_test=3, noise_std=0.5)
    instance = wc.make_instance(config, "identity", seed=4, lam=0.6)
    generator = torch.Generator().manual_seed(4)
    sizes = (config.input_size, config.hidden_size)
    teacher = random_vanilla_rnn(*sizes, 0.6, "identity", generator=generator)
    start = random_vanilla_rnn(*sizes, 0.6, "identity", generator=generator)
    expected = []
    for num in (5, 3):
        inputs = torch.randn((config.seq_len, num, config.input_size), generator=generator,
                             dtype=torch.float64) / math.sqrt(config.input_size)  # fmt: skip
        with torch.no_grad():
            clean = teacher.output(teacher.run(inputs)[-1])
        noise = torch.randn(clean.shape, generator=generator, dtype=torch.float64)
        expected += [inputs, clean + 0.5 * noise]
    got = [instance.train_inputs, instance.train_targets, instance.test_inputs]
    got.append(instance.test_targets)
    for value, reference in zip(got, expected, strict=True):
        assert value.dtype == torch.float64
        torch.testing.assert_close(value, reference, rtol=1e-12, atol=1e-12)
    model = instance.start
    assert model.activation == "identity" and instance.lam == 0.6
    torch.testing.assert_close(model.weight_hh.detach(), start.weight_hh.detach())
    torch.testing.assert_close(model.weight_ih.detach(), teacher.weight_ih.detach())
    assert not model.weight_ih.requires_grad and model.weight_hh.requires_grad


def test_the_training_loss_is_half_the_mean_squared_distance():
    instance = wc.make_instance(SMOKE, "tanh", seed=1)
    model, inputs, targets = instance.start, instance.train_inputs, instance.train_targets
    for k in (None, 2):
        predictions = wc.final_predictions(model, inputs, k).detach().numpy()
        by_hand = np.mean(
            [0.5 * np.sum((p - t) ** 2) for p, t in zip(predictions, targets.numpy(), strict=True)]
        )
        loss = wc.final_state_loss(model, inputs, targets, k).detach()
        assert float(loss) == pytest.approx(by_hand)


def test_record_points_and_rounded_values():
    assert len(wc.record_steps(1000, 5)) <= 6 and wc.record_steps(1000, 5)[-1] == 1000
    assert list(wc.record_steps(10, 3)) == [1, 3, 10]
    assert wc._finite_or_none(1.23456789) == 1.23457
    assert wc._finite_or_none(math.inf) is None and wc._finite_or_none(math.nan) is None


def test_a_run_without_a_folder_computes_everything_and_shows_no_bar_when_asked(capsys):
    config = dataclasses.replace(SMOKE, ks=(1, 2), num_steps=5, num_records=3)
    results = wc.run_figure1(config, progress=False)
    assert results["summary"]["units_computed"] == len(results["units"]) == 4
    assert capsys.readouterr().err == ""
    results = wc.run_figure1(config, resume=True)  # nothing to resume from without a folder
    assert results["summary"]["units_computed"] == 4
    assert "run/s" in capsys.readouterr().err  # the bar counts runs


UNIT_KEYS = {
    "config", "activation", "schedule", "k", "lam", "alpha", "num_steps", "steps", "distance",
    "stepwise_log10", "empirical_log10", "theory_log10", "prop2_empirical_log10",
    "prop2_theory_log10", "beta_hat", "gamma_hat", "gradient_gap_max", "lemma2_bound",
    "theory", "final_distance", "max_distance", "train_loss_recurrent",
    "train_loss_truncated", "theorem1",
}  # fmt: skip


def _assert_curve(saved: list, expected: np.ndarray) -> None:
    """A saved curve (6 significant digits; ``None`` where not finite) against its values."""
    expected = np.where(np.isfinite(expected), expected, np.nan)
    np.testing.assert_allclose(np.array(saved, dtype=float), expected, rtol=1e-5)


def test_a_units_curves_are_its_bounds_recomputed_from_its_recorded_constants(smoke_units):
    """Each unit's theory and empirical curves are the recurrence with its own constants
    (Lemma 2's gap gamma k lambda^k, Lemma 3's beta; the measured maxima), read at its steps."""
    for unit in smoke_units:
        saved = {"seed", "compute_time_s", "provenance", "config_values"}  # added by run_group
        assert set(unit) == UNIT_KEYS | saved and unit["config"] == "smoke"
        steps = wc.step_sizes(unit["schedule"], unit["alpha"], unit["num_steps"])
        at = np.array(unit["steps"])
        k, lam = unit["k"], unit["lam"]
        gap = unit["theory"]["gamma"] * k * lam**k
        assert unit["lemma2_bound"] == pytest.approx(gap)
        theory = wc.recurrence_bound_log10(steps, unit["theory"]["beta"], gap)[at]
        _assert_curve(unit["theory_log10"], theory)
        empirical = wc.recurrence_bound_log10(steps, unit["beta_hat"], unit["gradient_gap_max"])
        _assert_curve(unit["empirical_log10"], empirical[at])
        if unit["final_distance"] > 0:  # not vacuous: a unit whose weights moved apart
            assert np.isfinite(empirical[at][1:]).all() and np.isfinite(theory[1:]).all()
            assert all(v is not None for v in unit["stepwise_log10"][1:])
        assert unit["gamma_hat"] == pytest.approx(unit["gradient_gap_max"] / (k * lam**k))
        assert unit["final_distance"] == pytest.approx(unit["distance"][-1], rel=1e-5)
        assert unit["max_distance"] >= max(unit["distance"]) * (1 - 1e-5)
        # the losses are read before each recorded step's update: all of them measured
        for name in ("train_loss_recurrent", "train_loss_truncated"):
            assert len(unit[name]) == len(at) and all(v is not None for v in unit[name])


def test_the_summary_table_reads_the_last_recorded_point_of_each_curve(smoke_units):
    rows = wc.summary_table(smoke_units)
    by_key = {(u["activation"], u["schedule"], u["seed"], u["k"]): u for u in smoke_units}
    for row in rows:
        unit = by_key[(row["activation"], row["schedule"], row["seed"], row["k"])]
        for field, curve in (("stepwise_final", "stepwise_log10"),
                             ("empirical_final", "empirical_log10"),
                             ("prop2_empirical_final", "prop2_empirical_log10")):  # fmt: skip
            last = unit[curve][-1]
            expected = None if last is None or last >= 308 else 10.0**last
            assert row[field] == (None if expected is None else pytest.approx(expected)), field
        assert row["theory_final_log10"] == unit["theory_log10"][-1]
    # a bound past 10^308 (or none) is written as null, never as Infinity
    huge = dict(smoke_units[0], stepwise_log10=[400.0], empirical_log10=[None])
    huge["prop2_empirical_log10"] = [308.5]  # 10^308.5 overflows a float
    row = wc.summary_table([huge])[0]
    assert row["stepwise_final"] is None and row["empirical_final"] is None
    assert row["prop2_empirical_final"] is None
    text = wc.table_csv(wc.summary_table(smoke_units))
    assert "\r" not in text and text.count("\n") == len(smoke_units) + 1


def test_a_units_compute_time_adds_its_share_of_the_shared_recurrent_run(monkeypatch):
    """With a clock that ticks once a reading: the recurrent run takes 1 tick, each
    truncated run 1 tick, so each of the two units costs 1 + 1/2 ticks."""
    ticks = iter(range(100))
    monkeypatch.setattr(wc, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    config = dataclasses.replace(SMOKE, ks=(1, 2), num_steps=3, num_records=2)
    units = wc.run_group(config, "tanh", "decay", 0, (1, 2))
    assert [u["compute_time_s"] for u in units] == [1.5, 1.5]
