"""The table's runner on a CPU: budget cuts and resumes, a group, a killed detached run that
resumes, Slurm submission through submitit, the reader's GPU function, the device script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from stablernn_tools.synthetic_corpus import write_synthetic_corpus

from stablernn_lib.tasks import table_runs as tr
from stablernn_lib.tasks.wikitext2.data import Corpus
from stablernn_lib.tasks.wikitext2.train import CONFIGS

submitit = pytest.importorskip("submitit", reason="submitit is in the test extra")

ROOT = Path(__file__).resolve().parents[1]
TINY = replace(CONFIGS["smoke"], name="tiny", embedding_size=8, hidden_size=8, epochs=2)
SAFETY = 600.0  # seconds: only to end a hung test, never reached by a working run


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory) -> Path:
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), lines=(1500, 60, 60))


@pytest.fixture(scope="module")
def corpus(corpus_folder: Path) -> Corpus:
    return Corpus.from_folder(corpus_folder)


class FakeClock:
    """``time.monotonic`` that advances one second per call: a budget in calls."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + SAFETY
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def test_jobs_from_variants_configs_and_seeds() -> None:
    jobs = tr.make_jobs(["rnn-stable", "lstm-unconstrained@cpu-first-layer"], "full", [1, 2])
    assert [job.name for job in jobs] == [
        "rnn-stable-full-seed1",
        "rnn-stable-full-seed2",
        "lstm-unconstrained-cpu-first-layer-seed1",
        "lstm-unconstrained-cpu-first-layer-seed2",
    ]
    assert jobs[2].config == replace(CONFIGS["cpu-first-layer"], seed=1)
    assert tr.make_jobs(["rnn-unconstrained@full-rnn-lr2"])[0].config.lr == 2.0
    assert jobs[0].to_json()["config"]["name"] == "full" and jobs[0].to_json()["stable"]
    with pytest.raises(ValueError, match="unknown variant"):
        tr.make_jobs(["gru-stable"])
    with pytest.raises(ValueError, match="listed twice"):
        tr.make_jobs(["rnn-stable", "rnn-stable@full"])


def test_a_budget_cut_leaves_unfinished_records_and_the_same_call_resumes(
    corpus, tmp_path, monkeypatch
) -> None:
    jobs = [tr.Job("rnn", True, TINY), tr.Job("lstm", False, TINY)]
    out, archive = tmp_path / "run", tmp_path / "back" / "table.tgz"
    eager = tr.Training("cpu", "eager")
    monkeypatch.setattr(time, "monotonic", FakeClock())  # the loop reads it once a step
    summary = tr.run_table(
        jobs, out, corpus=corpus, budget_s=50, reserve_s=5, how=eager, archive=archive
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
    assert "unfinished" in tr.format_status(out)
    resumed = tr.run_table(jobs, out, corpus=corpus, how=eager)
    assert resumed["completed"] == 2
    result = tr.final_result(out, jobs[0].name)
    assert [e["epoch"] for e in result["epochs"]] == [1, 2] and result["test_ppl"] > 1
    assert "test" in tr.format_status(out).splitlines()[0]
    with pytest.raises(ValueError, match="must exceed the reserve"):
        tr.run_table(jobs, out, corpus=corpus, budget_s=5, reserve_s=10)


def test_the_table_trained_together_as_one_group(corpus, tmp_path, monkeypatch) -> None:
    jobs = [tr.Job("rnn", True, TINY), tr.Job("lstm", False, replace(TINY, lr=20.0))]
    out, eager = tmp_path / "run", tr.Training("cpu", "eager")
    monkeypatch.setattr(time, "monotonic", FakeClock())  # cut the group in its 2nd epoch
    tr.run_table(jobs, out, corpus=corpus, budget_s=50, reserve_s=5, how=eager, together=True)
    monkeypatch.undo()
    cut = [tr.read_json(out / "results" / f"{job.name}.json") for job in jobs]
    assert [r["status"] for r in cut] == ["unfinished", "unfinished"]
    assert [len(r["epochs"]) for r in cut] == [1, 1] and cut[0]["group"].startswith("group-2-")
    summary = tr.run_table(jobs, out, corpus=corpus, how=eager, together=True)
    assert summary["completed"] == 2
    for job in jobs:
        result = tr.final_result(out, job.name)
        assert result["trained_in_group_of"] == 2 and len(result["epochs"]) == TINY.epochs
        assert result["test_ppl"] > 1


def test_a_diverging_job_is_a_final_result_beside_another_calls_job(corpus, tmp_path) -> None:
    job = tr.Job("rnn", False, replace(TINY, lr=1e4, clip=1e4))
    other = tr.Job("lstm", False, TINY)  # planned by another call, e.g. a queued Slurm job
    tr.write_plan(tmp_path, [other])
    summary = tr.run_table([job], tmp_path, corpus=corpus, how=tr.Training("cpu", "plain"))
    result = tr.final_result(tmp_path, job.name)
    assert result["status"] == "diverged" and "diverged" in result["error"]
    assert "reason" not in result and "diverged" in tr.format_status(tmp_path)
    assert [row["status"] for row in summary["rows"]] == ["pending", "diverged"]
    assert summary["planned_jobs"] == [other.name, job.name]


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_a_killed_detached_run_resumes_when_submitted_again(corpus_folder, tmp_path) -> None:
    """submitit's local executor runs the table detached; SIGKILL its process after the
    first epoch; submitting again resumes from the checkpoint (epoch 1 is not retrained)."""
    job = tr.Job("rnn", True, replace(TINY, epochs=3))
    out = tmp_path / "run"
    how = tr.Training("cpu", "eager", checkpoint_every=0.0)
    call = {"corpus_folder": str(corpus_folder), "how": how}
    (first,) = tr.submit([job], out, cluster="local", timeout_min=10, **call)
    metrics = out / "runs" / job.name / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= 1, "an epoch")
    epoch_one = metrics.read_text().splitlines()[0]
    (task,) = _children(int(first.job_id))
    os.kill(task, signal.SIGKILL)
    wait_until(first.done, "the killed job's end")
    assert tr.final_result(out, job.name) is None
    (again,) = tr.submit([job], out, cluster="local", timeout_min=10, **call)
    summary = again.result()  # waits; raises if the job failed
    assert summary["completed"] == 1
    result = tr.final_result(out, job.name)
    assert [e["epoch"] for e in result["epochs"]] == [1, 2, 3]
    assert metrics.read_text().splitlines()[0] == epoch_one  # resumed, not started over
    assert tr.submit([job], out, cluster="local", **call) == []  # nothing left to run


def test_slurm_gets_one_requeueable_job_per_model(tmp_path, monkeypatch) -> None:
    """Slurm through submitit's executor, with a test double of AutoExecutor."""
    submitted, parameters = [], {}

    class SlurmDouble:
        cluster = "slurm"

        def __init__(self, folder, cluster) -> None:
            parameters["folder"] = folder

        def update_parameters(self, **kwargs) -> None:
            parameters.update(kwargs)

        def submit(self, call):
            submitted.append(call)
            return call

    monkeypatch.setattr(submitit, "AutoExecutor", SlurmDouble)
    jobs = [tr.Job("rnn", True, TINY), tr.Job("lstm", False, TINY)]
    runs = tr.submit(jobs, tmp_path, cluster="slurm", partition="gpu", data_dir="/data")
    assert [run.jobs for run in runs] == [[job] for job in jobs]
    assert parameters["gpus_per_node"] == 1 and parameters["slurm_partition"] == "gpu"
    assert parameters["folder"] == tmp_path.resolve() / "jobs"
    plan = tr.read_json(tmp_path / "plan.json")
    assert [record["name"] for record in plan["jobs"]] == [job.name for job in jobs]
    assert tr.format_status(tmp_path).count("pending") == 2  # queued: no epoch yet
    requeued = runs[0].checkpoint()
    assert isinstance(requeued, submitit.helpers.DelayedSubmission)
    assert requeued.function is runs[0]


def test_the_full_table_on_the_readers_gpu_estimates_then_trains_and_resumes(
    corpus, tmp_path, monkeypatch, capsys
) -> None:
    """Run on the CPU with the tiny config standing in for `full`."""
    monkeypatch.setitem(CONFIGS, "tiny", TINY)
    monkeypatch.setattr(tr, "FULL_TABLE_CONFIG", "tiny")
    monkeypatch.setattr(tr, "FULL_TABLE_VARIANTS", ("rnn-stable", "lstm-unconstrained"))
    monkeypatch.setattr(tr, "load_wikitext2", lambda data_dir=None: corpus)
    drive = tmp_path / "drive" / "MyDrive"
    monkeypatch.setattr(tr, "GOOGLE_DRIVE", drive)
    assert tr.default_checkpoint_dir().name == "full-table"  # no Drive mounted
    drive.mkdir(parents=True)
    assert tr.default_checkpoint_dir() == drive / "stablernn-runs"
    summary = tr.run_full_table_on_this_gpu(seeds=(1111, 2), estimate_steps=3)
    printed = capsys.readouterr().out
    assert "the whole table ~" in printed and "ms/step" in printed
    assert printed.index("the whole table") < printed.index("training now")
    assert summary["completed"] == 4
    assert (drive / "stablernn-runs" / "results" / "table.json").exists()
    again = tr.run_full_table_on_this_gpu(checkpoint_dir=drive / "stablernn-runs")
    assert "2 of 2 models already finished" in capsys.readouterr().out
    assert again["completed"] == len(again["planned_jobs"]) == 4  # the folder's whole plan


def test_a_group_pays_off_when_faster_and_its_run_fits() -> None:
    bench = {
        "jobs": {"a": {"steps_per_epoch": 100, "epochs": 10}},
        "group": {"group_step_ms": 50.0, "sum_of_alone_step_ms": 100.0},
    }
    assert tr.group_pays_off(bench, seconds_left=100.0)  # 50 s of 90 s
    assert not tr.group_pays_off(bench, seconds_left=50.0)  # a cut group finishes nothing
    bench["group"]["sum_of_alone_step_ms"] = 51.0
    assert not tr.group_pays_off(bench, seconds_left=100.0)
    assert not tr.group_pays_off({"group": None}, seconds_left=100.0)


def test_run_refuses_the_full_config_on_a_cpu_unless_asked(tmp_path, monkeypatch) -> None:
    from stablernn_lib.__main__ import main

    monkeypatch.setattr(tr.torch.cuda, "is_available", lambda: False)
    argv = ["paper-run", "run", "--out", str(tmp_path / "run"), "--config", "full"]
    with pytest.raises(SystemExit, match="no CUDA GPU found: the full configs.*--device cpu"):
        main(argv)
    assert not (tmp_path / "run").exists()


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
    out, table = tmp_path / "out", tmp_path / "table"
    env = dict(os.environ, SMOKE="1", BUDGET_S="60", OUT=str(out), PYTHONPATH=str(blocked))
    env["TABLE_DIR"] = str(table)
    env["PYTHON"] = os.environ.get("STABLERNN_TEST_PYTHON", sys.executable)
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


def test_submit_without_submitit_names_the_extra(tmp_path, monkeypatch, capsys) -> None:
    from stablernn_lib.__main__ import main

    monkeypatch.setitem(sys.modules, "submitit", None)  # not installed
    argv = ["paper-run", "submit", "--out", str(tmp_path), "--config", "smoke", "--device", "cpu"]
    assert main(argv) == 2
    assert "install the 'slurm' extra" in capsys.readouterr().err
