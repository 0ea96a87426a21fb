"""The paper-scale runner on a CPU dry run: tiny models, real processes, kills and resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

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
        time.sleep(0.2)


def supervisor_done(out: Path) -> bool:
    return not pr._alive(pr._read_json(out / "supervisor.json"))


def epochs_done(out: Path, job: pr.Job) -> int:
    return len(pr._metrics(out / "runs" / job.name))


def start(jobs: list[pr.Job], out: Path, corpus: Path, **kwargs) -> dict:
    return pr.start_run(
        jobs, out, device="cpu", threads=1, checkpoint_every=0.0, corpus_folder=corpus, **kwargs
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), lines=(800, 40, 40))


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


def test_a_killed_worker_is_restarted_and_resumes(corpus: Path, tmp_path: Path) -> None:
    killed, other = pr.Job("rnn", True, TINY), pr.Job("lstm", False, replace(TINY, epochs=2))
    out = tmp_path / "run"
    start([killed, other], out, corpus, retries=1)
    wait_until(lambda: epochs_done(out, killed) >= 1, "the first epoch")
    worker = pr._read_json(out / "runs" / killed.name / "worker.json")
    os.kill(worker["pid"], signal.SIGKILL)
    wait_until(lambda: supervisor_done(out), "the end of the run")

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


def test_stop_then_resume_on_another_machine_from_what_came_back(
    corpus: Path, tmp_path: Path
) -> None:
    long, short = pr.Job("lstm", True, TINY), pr.Job("rnn", False, replace(TINY, epochs=1))
    out = tmp_path / "gpu-machine"
    start([long, short], out, corpus, retries=0)
    wait_until(lambda: pr.final_result(out, short.name) is not None, "the short job")
    wait_until(lambda: epochs_done(out, long) >= 1, "an epoch of the long job")
    assert pr.stop_run(out) == 1  # the supervisor, which passes the request on
    wait_until(lambda: supervisor_done(out), "the stop")
    states = {row["job"]: row["state"] for row in pr.run_status(out)}
    assert states == {long.name: "stopped", short.name: "completed"}
    assert "supervisor: not running" in pr.format_status(out)

    # The machine is lost; what came back: the results and the long job's checkpoint.
    back = tmp_path / "copied-back"
    shutil.copytree(out / "results", back / "results")
    (back / "runs" / long.name).mkdir(parents=True)
    shutil.copy(out / "runs" / long.name / "checkpoint.pt", back / "runs" / long.name)
    start([long, short], back, corpus, retries=0)
    wait_until(lambda: supervisor_done(back), "the resumed run")
    assert not (back / "runs" / short.name).exists()  # finished before: not run again
    result = pr.final_result(back, long.name)
    assert result["status"] == "completed"
    assert len(result["epochs"]) == TINY.epochs
    # attempts.jsonl did not come back: one attempt here, resumed from the checkpoint
    assert [a["start_step"] > 0 for a in result["attempts"]] == [True]


def test_a_diverged_run_is_a_final_result(corpus: Path, tmp_path: Path) -> None:
    exploding = pr.Job("rnn", False, replace(TINY, epochs=2, lr=1e4, clip=1e4))
    out = tmp_path / "run"
    start([exploding], out, corpus, retries=3)
    wait_until(lambda: supervisor_done(out), "the run")
    result = pr.final_result(out, exploding.name)
    assert result["status"] == "diverged" and "diverged" in result["error"]
    assert pr._read_json(out / "supervisor.json")["jobs"][exploding.name]["exit_codes"] == [0]
    assert "diverged" in pr.format_status(out)


def test_start_refuses_a_changed_job_and_a_second_supervisor(corpus: Path, tmp_path) -> None:
    job = pr.Job("rnn", False, replace(TINY, epochs=1))
    out = tmp_path / "run"
    start([job], out, corpus)
    with pytest.raises(ValueError, match="already running"):
        start([job], out, corpus)
    wait_until(lambda: supervisor_done(out), "the run")
    changed = pr.Job("rnn", False, replace(TINY, epochs=1, lr=1.0))
    with pytest.raises(ValueError, match="another config"):
        start([changed], out, corpus)
    plan = json.loads((out / "plan.json").read_text())
    assert [record["name"] for record in plan["jobs"]] == [job.name]
