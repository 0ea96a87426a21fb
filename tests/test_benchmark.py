"""The benchmark of the tooling on a CPU: every ratio it records, the floor of a step, the
result files' names and keys, and the README's quote of the committed fast-step file."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest
from stablernn_tools import benchmark as bench
from stablernn_tools.synthetic_corpus import write_synthetic_corpus

from stablernn_lib.tasks.table_runs import Job
from stablernn_lib.tasks.wikitext2 import benchmark_reports as reports
from stablernn_lib.tasks.wikitext2.data import Corpus
from stablernn_lib.tasks.wikitext2.train import CONFIGS

ROOT = Path(__file__).resolve().parents[1]
TINY = replace(CONFIGS["smoke"], name="tiny", embedding_size=8, hidden_size=8, num_layers=2)
QUICK = 0.01  # seconds of timing per measurement: the values are not tested, their keys are


@pytest.fixture
def tiny(monkeypatch) -> str:
    monkeypatch.setitem(CONFIGS, "tiny", TINY)
    return "tiny"


def test_the_ratios_of_every_constrained_step_and_the_solvers(tiny, tmp_path) -> None:
    result = bench.step_ratios(tiny, "cpu", QUICK)
    seconds = result["step_seconds"]
    assert set(seconds) == set(bench.STEP_VARIANTS) and min(seconds.values()) > 0
    for name, (variant, baseline) in bench.RATIOS.items():
        assert result["ratios"][name] == pytest.approx(seconds[variant] / seconds[baseline])
    assert "rnn-stable / rnn-unconstrained" in result["ratios"]
    assert {"host_eigh_float32", "host_svd_float32", "fast_path"} <= set(result["solver_seconds"])
    assert result["provenance"]["git_commit"] and result["threads"] >= 1
    assert "rnn-stable / rnn-unconstrained" in reports.format_step_ratios(result)


def test_the_overhead_tokens_per_second_and_figure2(tiny) -> None:
    result = bench.overhead(tiny, "cpu", QUICK, figure2_distance=3)
    # the smoke config trains on 200,000 tokens in 20 streams of 10,000 rows: 286 windows of 35
    assert result["steps_per_epoch"] == 286 and result["epochs"] == TINY.epochs
    for cell in ("rnn", "lstm"):
        timings = result["models"][cell]
        assert timings["projection_seconds"] > 0 and timings["train_tokens_per_second"] > 0
        assert timings["stable_overhead"] == pytest.approx(
            timings["step_seconds_stable"] / timings["step_seconds_unconstrained"] - 1
        )
        assert timings["epoch_seconds_stable"] == 286 * timings["step_seconds_stable"]
    assert result["figure2"]["max_relative_difference"] < 1e-4
    assert "overhead" in reports.format_benchmark(result)
    table = reports.training_time_table({"benchmark-cpu-tiny": result})
    assert table.count("| tiny | cpu") == 2 and table.count(f"{TINY.epochs} x:") == 2


def test_the_output_layers_on_the_whole_vocabulary(tiny) -> None:
    result = bench.output_layer(tiny, "cpu", QUICK)
    steps = result["step_seconds"]
    assert result["vocab_size"] == 33_278 and set(steps) == {"softmax", "adaptive"}
    assert result["speedup"]["rnn"] == pytest.approx(
        steps["softmax"]["rnn"] / steps["adaptive"]["rnn"]
    )
    assert "softmax" in reports.format_output_layer(result)


def test_the_floor_of_a_full_step_on_an_h100() -> None:
    floor = bench.step_floor(700, 200, 33_278, "NVIDIA H100 80GB HBM3", tf32=False)
    assert floor["flops"] == pytest.approx(27.95e9, rel=1e-3)  # about 28 GFLOP
    assert floor["compute_ms"] == pytest.approx(0.417, rel=1e-2)
    assert floor["memory_ms"] == pytest.approx(1000 * 16 * 700 * 33_278 / 3.35e12)
    assert floor["floor_ms"] == max(floor["compute_ms"], floor["memory_ms"])
    tf32 = bench.step_floor(700, 200, 33_278, "NVIDIA H200", tf32=True)
    assert tf32["floor_ms"] == tf32["memory_ms"] < floor["floor_ms"]  # memory-bound in TF32
    assert bench.step_floor(700, 200, 33_278, "cpu", False)["compute_ms"] is None


def test_the_plain_and_fast_steps_of_every_job_and_the_group(tmp_path) -> None:
    folder = write_synthetic_corpus(tmp_path / "corpus", lines=(1500, 60, 60))
    corpus = Corpus.from_folder(folder)
    small = replace(TINY, num_layers=1)
    jobs = [Job("rnn", True, small), Job("rnn", False, small)]
    result = bench.fast_step(
        jobs, corpus, device="cpu", modes=("plain", "eager"), steps=2, group_mode="eager"
    )
    row = result["jobs"][jobs[0].name]
    assert set(row["step_ms"]) == {"plain", "eager"} and min(row["step_ms"].values()) > 0
    speedup = row["step_ms"]["plain"] / row["step_ms"]["eager"]
    assert row["speedup_over_plain"]["eager"] == pytest.approx(speedup)
    assert row["last_loss"]["plain"] == pytest.approx(row["last_loss"]["eager"], rel=1e-4)
    assert result["group"]["members"] == [job.name for job in jobs]
    assert "speed-up eager" in bench.format_fast_step(result)


def run_command(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    args = parser.parse_args(["benchmark", *argv])
    return args.func(args)


def test_the_tf32_check_compares_the_losses_after_the_same_steps(tiny, tmp_path) -> None:
    folder = write_synthetic_corpus(tmp_path / "corpus", lines=(1500, 60, 60))
    where = ["--device", "cpu", "--out", str(tmp_path), "--corpus-folder", str(folder)]
    fast = ["--variants", "rnn-stable", "--modes", "plain", "eager", "--steps", "2"]
    assert run_command("fast-step", "--config", tiny, *where, *fast, "--tf32-check") == 0
    name = "benchmark-tiny-cpu-fast-step.json"
    fp32 = json.loads((tmp_path / name).read_text())["jobs"]
    ((job, row),) = json.loads((tmp_path / "tf32" / name).read_text())["jobs"].items()
    check = row["tf32_vs_fp32"]
    assert check["mode"] == "eager" and check["loss_fp32"] == fp32[job]["last_loss"]["eager"]
    assert check["relative_difference"] < 1e-6  # no TF32 on a CPU


def test_the_command_writes_the_files_the_chapters_read(tiny, tmp_path, capsys) -> None:
    where = ["--device", "cpu", "--out", str(tmp_path), "--min-run-time", str(QUICK)]
    assert run_command("ratios", "--config", tiny, *where) == 0
    written = json.loads((tmp_path / "benchmark-tiny-cpu-ratios.json").read_text())
    committed = json.loads(
        (ROOT / "data/results/wikitext2/benchmark-cpu-cpu-ratios.json").read_text()
    )
    assert set(written["ratios"]) == set(committed["ratios"])
    assert set(written["solver_seconds"]) == set(committed["solver_seconds"])
    assert "written to" in capsys.readouterr().out


def test_the_readme_quotes_the_committed_cpu_benchmark() -> None:
    folder = ROOT / "data" / "results" / "wikitext2"
    committed = json.loads((folder / "benchmark-smoke-cpu-fast-step.json").read_text())
    text = " ".join((folder / "README.md").read_text().split())
    assert committed["device_name"] == "cpu" and committed["threads"] == 1
    rows = {name.rsplit("-smoke", 1)[0]: row["step_ms"] for name, row in committed["jobs"].items()}
    for label, variant in (("RNN", "rnn-unconstrained"), ("stable LSTM", "lstm-stable")):
        plain, eager = rows[variant]["plain"], rows[variant]["eager"]
        assert f"{label} {plain:.1f} / {eager:.1f}" in text
    group = committed["group"]
    assert f"{group['group_step_ms']:.1f} ms a step against" in text
    assert f"{group['sum_of_alone_step_ms']:.1f} ms for their steps alone" in text
    assert f"load average {committed['load_average_before']:.0f} on 2 cores" in text
