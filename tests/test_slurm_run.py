"""The table's runs sent to Slurm with submitit (issue 38), run by submitit's local executor."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stablernn_lib.tasks import paper_run as pr
from stablernn_lib.tasks.wikitext2.data import write_synthetic_corpus
from stablernn_lib.tasks.wikitext2.train import CONFIGS

submitit = pytest.importorskip("submitit", reason="submitit is in the test extra")

TINY = replace(CONFIGS["smoke"], name="tiny", embedding_size=8, hidden_size=8, epochs=2)


@pytest.mark.slow
def test_one_local_job_per_run_and_a_resubmission_skips_the_finished(tmp_path) -> None:
    corpus = write_synthetic_corpus(tmp_path / "corpus", lines=(800, 40, 40))
    from stablernn_lib.tasks.slurm_run import RunJob, submit_runs

    jobs = [pr.Job("rnn", True, TINY), pr.Job("lstm", False, TINY)]
    out = tmp_path / "run"
    submitted = submit_runs(
        jobs, out, cluster="local", corpus_folder=corpus, step="eager", timeout_min=10
    )
    assert len(submitted) == 2
    results = [job.result() for job in submitted]  # waits; raises if a job failed
    assert [r["status"] for r in results] == ["completed", "completed"]
    for job in jobs:
        saved = pr.final_result(out, job.name)
        assert saved["status"] == "completed" and len(saved["epochs"]) == TINY.epochs
    assert {row["state"] for row in pr.run_status(out)} == {"completed"}
    assert submit_runs(jobs, out, cluster="local", corpus_folder=corpus) == []
    run = RunJob(jobs[0].to_json(), str(out))
    requeued = run.checkpoint()
    assert isinstance(requeued, submitit.helpers.DelayedSubmission)
    assert requeued.function is run
