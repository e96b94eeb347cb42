"""A resumed study's dry run says what is left: the jobs that `sweep.skip_finished` (and `gpdlm reproduce`, which
always skips) would skip -- a FINISHED run of the same config hash in the store, or in the run-records files of
`--done` / `sweep.finished_from` -- are counted and left out of the estimate (until 2026-11-30 the dry run of a
half-done study estimated all of it again)."""

from __future__ import annotations

import pytest

from gpdlm_cli import cli
from gpdlm_cli.sweep import plan as plan_mod
from gpdlm_cli.sweep.plan import job_hashes, plan
from gpdlm_cli.tracking.identity import config_hashes

from ..conftest import compose

SVGP = ["model=svgp", "dataset.split.train_size=100", "model.num_inducing=10", "trainer.max_iters=20", "threads=1"]


def test_job_hashes_are_the_hashes_of_each_job_composed_in_full(monkeypatch):
    """Each job's hashes from its shape's config with its own values put in, against composing every job; one
    job per shape of several is composed again to check the shortcut (a compose: ~0.3 s, 2,670 jobs in pol's
    plan), none of the others."""
    import hydra

    jobs = [
        [*SVGP[:1], f"seed={s}", f"objective.beta={b}", "+sweep.scale=paper", *SVGP[1:]]
        for s in (0, 3)
        for b in (0.0976562, 2, 1e-2)
    ] + [["model=dlm", "seed=1", "objective.beta=0.5", "trainer.lr=0.05", "threads=1"]]
    configs = plan_mod._job_configs(jobs)
    assert len({id(cfg) for _, cfg, _ in configs}) == 2  # two shapes composed, seven jobs
    calls = []
    real = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda *a, **k: calls.append(k["overrides"]) or real(*a, **k))
    got = job_hashes(configs)
    assert calls == [jobs[1]]  # the second svgp job, checked; the lone dlm job is the composed config itself
    monkeypatch.undo()
    want = [config_hashes(compose(job)) for job in jobs]
    assert got == want and len({h[0] for h in got}) == len(jobs)


def test_a_job_whose_values_differ_from_a_full_compose_is_composed(monkeypatch):
    """The per-shape check: when the shortcut disagrees with a full compose, every job of the shape is composed."""
    jobs = [[*SVGP, f"seed={s}"] for s in (0, 1, 2)]
    configs = plan_mod._job_configs(jobs)
    real = plan_mod._values
    monkeypatch.setattr(plan_mod, "_values", lambda job: [("seed", 99)] if "seed=1" in job else real(job))
    assert job_hashes(configs) == [config_hashes(compose(job)) for job in jobs]  # seed 1 hashed as seed 99: caught
    monkeypatch.setattr(plan_mod, "_values", real)
    # jobs that set other keys, or more than a value: composed, each
    jobs = [[*SVGP, "seed=0"], [*SVGP, "seed=1", "trainer.lr=0.1"], [*SVGP, "seed=2", "~bias"]]
    configs = plan_mod._job_configs(jobs)
    assert job_hashes(configs) == [config_hashes(compose(job)) for job in jobs]
    # the shape's composed config keeps its own job's values (its probe reads them)
    assert configs[0][1].seed == 0


def _store_with_finished(tmp_path, jobs: list[list[str]], experiment: str, statuses: list[str]) -> str:
    """A SQLite store with one run of each job tagged with its version-3 config hash, in ``statuses``."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(experiment)
    for job, status in zip(jobs, statuses):
        run = client.create_run(
            exp, tags={"gpdlm.command": "train", "gpdlm.config_hash": config_hashes(compose(job))[0]}
        )
        client.log_metric(run.info.run_id, "iterations", 20)
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status)
    return uri


def _fake_probe(monkeypatch):
    monkeypatch.setattr(plan_mod, "_probe_shape", lambda cfg, k, parallel: [("main", False, 20, 50.0, False, 1.0)])
    monkeypatch.setattr(plan_mod, "_iteration_model", lambda *args: None)
    monkeypatch.setattr(plan_mod, "_PROBES", {})


@pytest.mark.slow  # ~5 s: a store written, five configs composed
def test_the_jobs_finished_in_the_store_or_the_done_files_are_counted_and_not_estimated(tmp_path, monkeypatch):
    _fake_probe(monkeypatch)
    monkeypatch.chdir(tmp_path)
    jobs = [[*SVGP, f"seed={s}", "tracking.experiment=est"] for s in range(5)]
    # seeds 0 and 1 FINISHED, 2 FAILED, 3 RUNNING (not finished: trained again), 4 never run
    uri = _store_with_finished(tmp_path, jobs[:4], "est", ["FINISHED", "FINISHED", "FAILED", "RUNNING"])
    sweep = [*SVGP, "seed=0,1,2,3,4", "tracking.experiment=est", f"tracking.uri={uri}"]
    p = plan(sweep, estimate=True, skip_finished=True)
    # 3 jobs left, each 1 s of training plus the fixed cost per job
    assert p.finished == 2 and p.estimate_s == pytest.approx(3 * (1.0 + plan_mod.JOB_OVERHEAD_S))
    assert "sweep of 5 jobs (2 FINISHED in the store or run records: skipped)" in p.summary()
    # without sweep.skip_finished the sweep trains them again: nothing is left out
    p = plan(sweep, estimate=True)
    assert p.finished == 0 and p.estimate_s == pytest.approx(5 * (1.0 + plan_mod.JOB_OVERHEAD_S))
    assert plan([*sweep, "sweep.skip_finished=true"], estimate=True).finished == 2
    # the same runs as run records, on a new store (not created): `--done` / sweep.finished_from
    records = tmp_path / "runs.jsonl.gz"
    assert cli.main(["export", "--tracking-uri", uri, "--output", str(records), "--no-histories"]) == 0
    fresh = [*sweep[:-1], f"tracking.uri=sqlite:///{tmp_path / 'new.db'}"]
    assert plan(fresh, estimate=True, skip_finished=True, done=[records]).finished == 2
    assert plan([*fresh, f"sweep.finished_from=[{records}]"], estimate=True, skip_finished=True).finished == 2
    assert not (tmp_path / "new.db").exists()
    # records of another experiment skip nothing; every job finished: no probe, no time
    assert plan([*fresh, "tracking.experiment=other"], estimate=True, skip_finished=True, done=[records]).finished == 0
    p = plan([*SVGP, "seed=0,1", "tracking.experiment=est", f"tracking.uri={uri}"], estimate=True, skip_finished=True)
    assert (p.finished, p.estimate_s, p.timed_shapes) == (2, 0.0, 0)


def test_the_reproduce_plan_says_how_many_jobs_are_finished_and_how_many_to_train():
    from gpdlm_cli.commands.reproduce import Multirun, Plan, describe

    a = Multirun("classification", [], tables=["fig4"], claims=["D4"], jobs=100, experiment="classification")
    a.finished, a.estimate_s, a.upper_bound = 40, 600.0, True
    b = Multirun("classification", ["dataset=twonorm"], tables=["fig5"], claims=["D5"], jobs=100)
    b.repeats, b.estimate_s = 100, 0.0
    text = describe(Plan("dlm", "paper", "fast", [a, b], []))
    assert "100 jobs (40 FINISHED in the store or the --done files: skipped)" in text
    assert (
        "jobs to train: 60 (100 jobs are in two multiruns; the second skips them as FINISHED; 40 are FINISHED "
        "in the store or the --done files; the estimates leave them out)"
    ) in text
