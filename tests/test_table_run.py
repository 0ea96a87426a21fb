"""The table inside one wall budget (issue 38): budget cuts, resumes, the reader's GPU
function, the benchmark's floor, and the device script's CPU dry run."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from stablernn_lib.tasks import fast_benchmark, table_run
from stablernn_lib.tasks import paper_run as pr
from stablernn_lib.tasks.wikitext2 import data
from stablernn_lib.tasks.wikitext2.data import Corpus, write_synthetic_corpus
from stablernn_lib.tasks.wikitext2.train import CONFIGS

ROOT = Path(__file__).resolve().parents[1]
TINY = replace(CONFIGS["smoke"], name="tiny", embedding_size=8, hidden_size=8, epochs=2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    folder = write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), lines=(1500, 60, 60))
    return Corpus.from_folder(folder)


class FakeClock:
    """``time.monotonic`` that advances one second per call: a budget in calls."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_budget_cut_leaves_unfinished_records_and_the_same_call_resumes(
    corpus, tmp_path, monkeypatch
) -> None:
    jobs = [pr.Job("rnn", True, TINY), pr.Job("lstm", False, TINY)]
    out, archive = tmp_path / "run", tmp_path / "back" / "table.tgz"
    monkeypatch.setattr(time, "monotonic", FakeClock())  # the loop reads it once a step
    summary = table_run.run_table(
        jobs, out, budget_s=50, reserve_s=5, corpus=corpus, step="eager", archive=archive
    )
    monkeypatch.undo()
    first, second = (json.loads((out / "results" / f"{j.name}.json").read_text()) for j in jobs)
    assert first["status"] == "unfinished" and "during its training" in first["reason"]
    assert len(first["epochs"]) == 1  # 30 steps an epoch, cut in the second
    assert first["step_implementation"] == "fast-eager" and first["mean_step_ms"] > 0
    assert second["status"] == "unfinished" and second["epochs"] == []
    assert summary["completed"] == 0 and (out / "runs" / jobs[0].name / "checkpoint.pt").exists()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "run/results/table.json" in names and not [n for n in names if n.endswith(".pt")]
    resumed = table_run.run_table(jobs, out, budget_s=None, corpus=corpus, step="eager")
    assert resumed["completed"] == 2
    result = pr.final_result(out, jobs[0].name)
    assert [e["epoch"] for e in result["epochs"]] == [1, 2] and result["test_ppl"] > 1
    assert result["provenance"]["device"].startswith("cpu")
    with pytest.raises(ValueError, match="must exceed the reserve"):
        table_run.run_table(jobs, out, budget_s=5, reserve_s=10, corpus=corpus)


def test_the_full_table_on_the_readers_gpu_estimates_then_trains_and_resumes(
    corpus, tmp_path, monkeypatch, capsys
) -> None:
    """Run on the CPU with the smoke config standing in for `full`."""
    monkeypatch.setitem(CONFIGS, "tiny", TINY)
    monkeypatch.setattr(pr, "FULL_TABLE_CONFIG", "tiny")
    monkeypatch.setattr(pr, "FULL_TABLE_VARIANTS", ("rnn-stable", "lstm-unconstrained"))
    monkeypatch.setattr(data, "load_wikitext2", lambda data_dir=None: corpus)
    drive = tmp_path / "drive" / "MyDrive"
    monkeypatch.setattr(pr, "GOOGLE_DRIVE", drive)
    assert pr.default_checkpoint_dir().name == "full-table"  # no Drive mounted
    drive.mkdir(parents=True)
    assert pr.default_checkpoint_dir() == drive / "stablernn-runs"
    summary = pr.run_full_table_on_this_gpu(seeds=(1111, 2), estimate_steps=3)
    printed = capsys.readouterr().out
    assert "the whole table ~" in printed and "ms/step" in printed
    assert printed.index("the whole table") < printed.index("training now")
    assert summary["completed"] == 4
    assert (drive / "stablernn-runs" / "results" / "table.json").exists()
    again = pr.run_full_table_on_this_gpu(checkpoint_dir=drive / "stablernn-runs")
    assert "2 of 2 models already finished" in capsys.readouterr().out
    assert again["completed"] == 2


def test_the_floor_of_a_full_step_on_an_h100() -> None:
    floor = fast_benchmark.step_floor(700, 200, 33_278, "NVIDIA H100 80GB HBM3", tf32=False)
    assert floor["flops"] == pytest.approx(27.95e9, rel=1e-3)  # issue 38: about 28 GFLOP
    assert floor["compute_ms"] == pytest.approx(0.417, rel=1e-2)
    assert floor["memory_ms"] == pytest.approx(1000 * 16 * 700 * 33_278 / 3.35e12)
    assert floor["floor_ms"] == max(floor["compute_ms"], floor["memory_ms"])
    tf32 = fast_benchmark.step_floor(700, 200, 33_278, "NVIDIA H200", tf32=True)
    assert tf32["floor_ms"] == tf32["memory_ms"] < floor["floor_ms"]  # memory-bound in TF32
    assert fast_benchmark.step_floor(700, 200, 33_278, "cpu", False)["compute_ms"] is None


def test_the_benchmark_times_plain_and_fast_steps_of_every_job(corpus, tmp_path) -> None:
    jobs = [pr.Job("rnn", True, TINY), pr.Job("rnn", False, TINY)]
    result = fast_benchmark.fast_step_benchmark(
        jobs, corpus, device="cpu", modes=("plain", "eager"), steps=2, warmup=1
    )
    row = result["jobs"][jobs[0].name]
    assert set(row["step_ms"]) == {"plain", "eager"} and min(row["step_ms"].values()) > 0
    speedup = row["step_ms"]["plain"] / row["step_ms"]["eager"]
    assert row["speedup_over_plain"]["eager"] == pytest.approx(speedup)
    twin = result["jobs"][jobs[1].name]["step_ms"]
    assert row["over_unconstrained"]["eager"] == pytest.approx(
        row["step_ms"]["eager"] / twin["eager"]
    )
    assert "over_unconstrained" not in result["jobs"][jobs[1].name]
    path = fast_benchmark.write_benchmark(result, tmp_path, "tiny")
    assert path.name == "benchmark-tiny-cpu-fast-step.json"
    assert "speed-up eager" in fast_benchmark.format_benchmark(result)
    assert row["last_loss"]["plain"] == pytest.approx(row["last_loss"]["eager"], rel=1e-4)
    tf32 = fast_benchmark.fast_step_benchmark(
        jobs[:1], corpus, device="cpu", modes=("eager",), steps=2, warmup=1, tf32=True
    )["jobs"][jobs[0].name]["tf32_vs_fp32"]
    assert tf32["after_steps"] == 3 and tf32["relative_difference"] < 1e-6  # no TF32 on a CPU


@pytest.mark.slow
def test_the_device_script_dry_run_finishes_on_its_own_and_archives(tmp_path) -> None:
    """SMOKE=1 BUDGET_S=60 scripts/device_check.sh, with numpy, scipy and ipywidgets made
    unimportable (the GPU machine may lack them).  How long it took is not tested (a loaded
    machine starts Python slowly); that it ended on its own, with the archive, is."""
    blocked = tmp_path / "blocked"
    for module in ("numpy", "scipy", "ipywidgets"):
        (blocked / module).mkdir(parents=True)
        (blocked / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError('blocked', name={module!r})\n"
        )
    out = tmp_path / "out"
    table = tmp_path / "table"
    env = dict(os.environ, SMOKE="1", BUDGET_S="60", OUT=str(out), PYTHONPATH=str(blocked))
    env["TABLE_DIR"] = str(table)
    env["PYTHON"] = os.environ.get("STABLERNN_TEST_PYTHON", str(Path(os.sys.executable)))
    done = subprocess.run(
        [str(ROOT / "scripts" / "device_check.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "device check done" in done.stdout and "table exited" not in done.stdout
    bench = json.loads((out / "benchmark-smoke-cpu-fast-step.json").read_text())
    assert len(bench["jobs"]) == 4
    with tarfile.open(out / "table.tgz") as tar:
        names = tar.getnames()
    assert "table/results/table.json" in names and "table/plan.json" in names
    assert not [name for name in names if name.endswith(".pt")]
    summary = json.loads((table / "results" / "table.json").read_text())
    assert len(summary["rows"]) == 4 and summary["budget_s"] < 60
    assert bench["group"]["members"] == [row["job"] for row in summary["rows"]]
    assert {row["status"] for row in summary["rows"]} <= {"completed", "unfinished"}


def test_the_table_trained_together_as_one_group(corpus, tmp_path, monkeypatch) -> None:
    jobs = [pr.Job("rnn", True, TINY), pr.Job("lstm", False, replace(TINY, lr=20.0))]
    out = tmp_path / "run"
    monkeypatch.setattr(time, "monotonic", FakeClock())  # cut the group in its 2nd epoch
    table_run.run_table(
        jobs, out, budget_s=50, reserve_s=5, corpus=corpus, step="eager", together=True
    )
    monkeypatch.undo()
    cut = [pr._read_json(out / "results" / f"{job.name}.json") for job in jobs]
    assert [r["status"] for r in cut] == ["unfinished", "unfinished"]
    assert [len(r["epochs"]) for r in cut] == [1, 1] and cut[0]["group"].startswith("group-2-")
    summary = table_run.run_table(jobs, out, budget_s=None, corpus=corpus, together=True)
    assert summary["completed"] == 2
    for job in jobs:
        result = pr.final_result(out, job.name)
        assert result["trained_in_group_of"] == 2 and len(result["epochs"]) == TINY.epochs
        assert result["test_ppl"] > 1


def test_the_readme_quotes_the_committed_cpu_benchmark() -> None:
    folder = ROOT / "data" / "results" / "wikitext2"
    bench = json.loads((folder / "benchmark-smoke-cpu-fast-step.json").read_text())
    text = " ".join((folder / "README.md").read_text().split())
    assert bench["device_name"] == "cpu" and bench["threads"] == 1
    rows = {name.rsplit("-smoke", 1)[0]: row["step_ms"] for name, row in bench["jobs"].items()}
    for label, variant in (("RNN", "rnn-unconstrained"), ("stable LSTM", "lstm-stable")):
        plain, eager = rows[variant]["plain"], rows[variant]["eager"]
        assert f"{label} {plain:.1f} / {eager:.1f}" in text
    group = bench["group"]
    assert f"{group['group_step_ms']:.1f} ms a step against" in text
    assert f"{group['sum_of_alone_step_ms']:.1f} ms for their steps alone" in text
    assert f"load average {bench['load_average_before']:.0f} on 2 cores" in text
