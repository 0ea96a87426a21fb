"""The paper-scale runner on a CPU dry run: tiny models, real processes, kills and resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from stablernn_lib.tasks import paper_run as pr
from stablernn_lib.tasks.wikitext2.data import write_synthetic_corpus
from stablernn_lib.tasks.wikitext2.train import CONFIGS

# Tiny models on a synthetic corpus: ~15 steps an epoch, so that a run lasts long enough
# to be killed in the middle; a checkpoint after every step (checkpoint_every=0).
TINY = replace(
    CONFIGS["smoke"],
    name="tiny",
    embedding_size=8,
    hidden_size=8,
    epochs=12,
    train_tokens=None,
    eval_tokens=None,
    vocab_size=None,
)
SAFETY = 600.0  # seconds: only to end a hung test, never reached by a working run


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + SAFETY
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def supervisor_done(out: Path) -> bool:
    return not pr._alive(pr._read_json(out / "supervisor.json"))


def epochs_done(out: Path, job: pr.Job) -> int:
    return len(pr._metrics(out / "runs" / job.name))


def start(jobs: list[pr.Job], out: Path, corpus: Path, **kwargs) -> dict:
    return pr.start_run(
        jobs, out, device="cpu", threads=1, checkpoint_every=0.0, corpus_folder=corpus, **kwargs
    )


# The jobs of the three runs below: (killed, other), (long, short), (exploding,).
KILLED, OTHER = pr.Job("rnn", True, TINY), pr.Job("lstm", False, replace(TINY, epochs=2))
LONG, SHORT = pr.Job("lstm", True, TINY), pr.Job("rnn", False, replace(TINY, epochs=1))
EXPLODING = pr.Job("rnn", False, replace(TINY, epochs=2, lr=1e4, clip=1e4))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), lines=(800, 40, 40))


def kill_mid_run(out: Path) -> None:
    """SIGKILL the killed job's worker after its first epoch; wait for the run's end."""
    wait_until(lambda: epochs_done(out, KILLED) >= 1, "the first epoch")
    worker = pr._read_json(out / "runs" / KILLED.name / "worker.json")
    os.kill(worker["pid"], signal.SIGKILL)
    wait_until(lambda: supervisor_done(out), "the end of the run")


def stop_then_resume(out: Path, back: Path, corpus: Path) -> dict:
    """Stop the run once the short job is done and the long one has an epoch; then, in a
    new folder holding only what came back (results, the long job's checkpoint), start
    it again and wait for its end.  Returns what was seen on the way."""
    wait_until(lambda: pr.final_result(out, SHORT.name) is not None, "the short job")
    wait_until(lambda: epochs_done(out, LONG) >= 1, "an epoch of the long job")
    signalled = pr.stop_run(out)  # the supervisor, which passes the request on
    wait_until(lambda: supervisor_done(out), "the stop")
    seen = {
        "signalled": signalled,
        "states": {row["job"]: row["state"] for row in pr.run_status(out)},
        "status": pr.format_status(out),
    }
    # The machine is lost; what came back: the results and the long job's checkpoint.
    shutil.copytree(out / "results", back / "results")
    (back / "runs" / LONG.name).mkdir(parents=True)
    shutil.copy(out / "runs" / LONG.name / "checkpoint.pt", back / "runs" / LONG.name)
    start([LONG, SHORT], back, corpus, retries=0)
    wait_until(lambda: supervisor_done(back), "the resumed run")
    return seen


@pytest.fixture(scope="module")
def runs(corpus: Path, tmp_path_factory) -> dict:
    """The module's three runs, all started at once so that they train side by side.

    Threads drive the killed and the stopped run (:func:`kill_mid_run`,
    :func:`stop_then_resume`) while the tests wait for them in turn, so no run waits for
    another's test.  "second start" is what a second ``start`` in the diverged run's
    folder raised while its supervisor was running (it runs for seconds: it imports torch).
    """
    folder = tmp_path_factory.mktemp("runs")
    outs = {name: folder / name for name in ("killed", "stopped", "diverged", "copied-back")}
    start([KILLED, OTHER], outs["killed"], corpus, retries=1)
    start([LONG, SHORT], outs["stopped"], corpus, retries=0)
    start([EXPLODING], outs["diverged"], corpus, retries=3)
    try:
        start([EXPLODING], outs["diverged"], corpus, retries=3)
        second = "started"
    except ValueError as error:
        second = str(error)
    with ThreadPoolExecutor(max_workers=2) as pool:
        drivers = {
            "kill": pool.submit(kill_mid_run, outs["killed"]),
            "stop": pool.submit(stop_then_resume, outs["stopped"], outs["copied-back"], corpus),
        }
        yield {**outs, **drivers, "second start": second}
        for out in outs.values():  # a failed test may leave a run going: end it
            if out.exists():
                pr.stop_run(out)


def test_jobs_from_variants_configs_and_seeds() -> None:
    jobs = pr.make_jobs(["rnn-stable", "lstm-unconstrained@cpu-first-layer"], "full", [1, 2])
    assert [job.name for job in jobs] == [
        "rnn-stable-full-seed1",
        "rnn-stable-full-seed2",
        "lstm-unconstrained-cpu-first-layer-seed1",
        "lstm-unconstrained-cpu-first-layer-seed2",
    ]
    assert jobs[2].config == replace(CONFIGS["cpu-first-layer"], seed=1)
    assert pr.make_jobs(["rnn-unconstrained@full-rnn-lr2"])[0].config.lr == 2.0
    assert pr.make_jobs(["lstm-stable"], "cpu")[0].config.seed == CONFIGS["cpu"].seed
    with pytest.raises(ValueError, match="unknown variant"):
        pr.make_jobs(["gru-stable"])
    with pytest.raises(ValueError, match="unknown config"):
        pr.make_jobs(["rnn-stable@nope"])
    with pytest.raises(ValueError, match="listed twice"):
        pr.make_jobs(["rnn-stable", "rnn-stable@full"])


def test_a_killed_worker_is_restarted_and_resumes(runs: dict) -> None:
    killed, other, out = KILLED, OTHER, runs["killed"]
    runs["kill"].result(timeout=2 * SAFETY)
    rows = {row["job"]: row for row in pr.run_status(out)}
    assert rows[killed.name]["state"] == rows[other.name]["state"] == "completed"
    assert rows[killed.name]["exit_codes"] == [-signal.SIGKILL, 0]
    result = pr.final_result(out, killed.name)
    assert [epoch["epoch"] for epoch in result["epochs"]] == list(range(1, TINY.epochs + 1))
    assert result["seed"] == TINY.seed and result["job"] == killed.name
    starts = [attempt["start_step"] for attempt in result["attempts"]]
    assert starts[0] == 0 and starts[1] > 0  # the second process resumed mid-run
    assert (out / "results" / f"{killed.name}.json").stat().st_size < 1 << 20
    text = pr.format_status(out)
    assert f"{killed.name}" in text and "completed" in text and "test" in text
    assert "supervisor: not running" in text


def test_stop_then_resume_on_another_machine_from_what_came_back(runs: dict) -> None:
    long, short, back = LONG, SHORT, runs["copied-back"]
    seen = runs["stop"].result(timeout=3 * SAFETY)
    assert seen["signalled"] == 1  # the supervisor, which passes the request on
    assert seen["states"] == {long.name: "stopped", short.name: "completed"}
    assert "supervisor: not running" in seen["status"]
    assert not (back / "runs" / short.name).exists()  # finished before: not run again
    result = pr.final_result(back, long.name)
    assert result["status"] == "completed"
    assert len(result["epochs"]) == TINY.epochs
    # attempts.jsonl did not come back: one attempt here, resumed from the checkpoint
    assert [a["start_step"] > 0 for a in result["attempts"]] == [True]


def test_a_diverged_run_is_a_final_result(runs: dict) -> None:
    exploding, out = EXPLODING, runs["diverged"]
    wait_until(lambda: supervisor_done(out), "the run")
    result = pr.final_result(out, exploding.name)
    assert result["status"] == "diverged" and "diverged" in result["error"]
    assert pr._read_json(out / "supervisor.json")["jobs"][exploding.name]["exit_codes"] == [0]
    assert "diverged" in pr.format_status(out)


def test_start_refuses_a_changed_job_and_a_second_supervisor(runs: dict, corpus: Path) -> None:
    assert "already running" in runs["second start"]
    out = runs["diverged"]
    wait_until(lambda: supervisor_done(out), "the run")
    changed = pr.Job("rnn", False, replace(EXPLODING.config, lr=1.0))
    assert changed.name == EXPLODING.name
    with pytest.raises(ValueError, match="another config"):
        start([changed], out, corpus)
    plan = json.loads((out / "plan.json").read_text())
    assert [record["name"] for record in plan["jobs"]] == [EXPLODING.name]
    assert plan["jobs"][0]["config"]["lr"] == EXPLODING.config.lr


def test_watch_archives_the_small_files_of_a_finished_run(runs: dict, tmp_path: Path) -> None:
    """After the run: one status, and an archive with plan, results, logs and every job's
    metrics, never a checkpoint or the weights."""
    import tarfile

    runs["kill"].result()
    out = runs["killed"]
    archive = tmp_path / "back" / "run.tgz"
    assert pr.wait_for(out, every=0.01, archive=archive) is True
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    prefix = out.name
    assert {f"{prefix}/plan.json", f"{prefix}/supervisor.json"} <= names
    for job in (KILLED, OTHER):
        assert f"{prefix}/results/{job.name}.json" in names
        assert f"{prefix}/runs/{job.name}/metrics.jsonl" in names
    assert any(name.startswith(f"{prefix}/logs/") for name in names)
    assert not [n for n in names if n.endswith((".pt", ".partial"))]
    assert not list(archive.parent.glob("*.partial"))


def test_watch_returns_at_its_time_limit_with_an_archive(tmp_path: Path) -> None:
    """A run still going: watch returns False before ``timeout``, archive written."""
    out = tmp_path / "run"
    (out / "runs" / "a").mkdir(parents=True)
    (out / "plan.json").write_text(json.dumps({"jobs": [], "retries": 0}))
    (out / "runs" / "a" / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (out / "runs" / "a" / "checkpoint.pt").write_bytes(b"0" * 1000)
    # a live supervisor: this test's own process
    (out / "supervisor.json").write_text(json.dumps(pr._process_record(os.getpid())))
    archive = tmp_path / "run.tgz"
    assert pr.wait_for(out, every=0.05, timeout=0.2, archive=archive) is False
    import tarfile

    with tarfile.open(archive) as tar:
        assert "run/runs/a/metrics.jsonl" in tar.getnames()
        assert "run/runs/a/checkpoint.pt" not in tar.getnames()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without GPU")
def test_start_refuses_the_full_config_on_a_cpu_unless_asked(tmp_path: Path) -> None:
    from stablernn_lib.__main__ import main

    argv = ["paper-run", "start", "--out", str(tmp_path / "run"), "--config", "full"]
    with pytest.raises(SystemExit, match="no CUDA GPU found: the full configs.*--device cpu"):
        main(argv)
    assert not (tmp_path / "run").exists()
