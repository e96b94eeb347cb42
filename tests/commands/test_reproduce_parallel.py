"""`gpdlm reproduce` with a parallel launcher (`hydra/launcher=joblib`, Slurm, Ray): the jobs run in other
processes, where the reproduce's Hydra callback has no progress and no budget. Until 2026-11-30 such a reproduce
printed its progress once per multirun (a beta grid of ~300 jobs: 10-30 minutes without a line) and its
`--budget` stopped it only between multiruns, after all of the last one's jobs. Now a thread of the reproduce
process prints a line per job as its outcome record appears, and each job checks `sweep.deadline` (the budget's
end, passed to every multirun) before it starts: past it, it is skipped, not trained."""

from __future__ import annotations

import re
import time

import pytest
from omegaconf import OmegaConf

from gpdlm_cli.commands import reproduce as rp
from gpdlm_cli.hydra_apps import past_deadline
from gpdlm_cli.sweep.callback import record_outcome

from ..conftest import copy_store, run_cli
from ..run.test_sweeps import TINY, runs, split_runs


def test_a_job_started_past_the_deadline_is_not_trained():
    assert past_deadline(OmegaConf.create({"sweep": {}})) is None
    assert past_deadline(OmegaConf.create({"sweep": {"deadline": time.time() + 60}})) is None
    why = past_deadline(OmegaConf.create({"sweep": {"deadline": time.time() - 1}}))
    assert why is not None and why.startswith("past the budget of gpdlm reproduce (sweep.deadline ")
    assert why.startswith(rp.LATE)  # what the reproduce process reads as "not run" (Progress.count)


@pytest.mark.slow  # real multiruns: over ~3 s (make test-fast stays under 2 minutes)
def test_the_jobs_of_a_multirun_past_its_deadline_are_skipped_and_say_why(tmp_path, template_db, capsys):
    """Through `gpdlm train -m` (the default launcher here: the job-side check is the same in every launcher)."""
    copy_store(template_db, tmp_path)
    db = tmp_path / "mlflow.db"
    argv = ["train", "-m", "seed=0,1", f"tracking.uri=sqlite:///{db}", "tracking.experiment=late", *TINY]
    code, lines = run_cli([*argv, f"+sweep.deadline={time.time() - 5:.0f}"], tmp_path, capsys)
    assert code == 0
    assert sum("gpdlm: skipped: past the budget of gpdlm reproduce" in ln for ln in lines) == 2
    assert any("0 finished, 2 skipped, 0 failed" in ln for ln in lines), lines
    parents, children = split_runs(runs(db, "late"))
    assert children == []  # nothing trained, no run made
    # a deadline ahead: trained
    code, lines = run_cli([*argv, f"+sweep.deadline={time.time() + 3600:.0f}"], tmp_path, capsys)
    assert code == 0 and len(split_runs(runs(db, "late"))[1]) == 2


def test_a_line_per_job_as_its_outcome_appears_and_none_counted_twice(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rp, "WATCH_S", 0.05)
    p = rp.Progress(total=5, deadline=None)
    p.started -= 20.0
    with rp.OutcomeWatcher(p, tmp_path, " or the --done records"):
        record_outcome(tmp_path, 0, "finished", ["seed=0", "tracking.uri=sqlite:///x.db", "threads=1"])
        record_outcome(tmp_path, 1, "skipped", ["seed=1"])
        deadline = time.monotonic() + 10
        while p.done < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (p.done, p.trained) == (2, 1)  # seen while the multirun runs
        record_outcome(tmp_path, 2, "skipped", ["seed=2"], "past the budget of gpdlm reproduce (...)")
        record_outcome(tmp_path, 10, "finished", ["seed=10"], resumed="abc at step 40")
    # the job past the budget was not run: read, not done (still left)
    assert (p.done, p.trained, p.resumed) == (3, 1, 1) and len(p.read) == 4  # the last poll at the end
    err = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(r"gpdlm reproduce: 1/5 jobs done \(finished: seed=0\), 4 left, about \d+ s left", err[0])
    assert err[1].startswith("gpdlm reproduce: 2/5 jobs done (skipped: FINISHED in the store or the --done records")
    assert "2/5 jobs done (skipped: past the budget of gpdlm reproduce (...): seed=2), 3 left" in err[2]
    assert "3/5 jobs done (finished, resumed abc at step 40: seed=10), 2 left" in err[3]


def test_the_default_launchers_callback_counts_by_the_same_rule(tmp_path, monkeypatch, capsys):
    """`ReproduceCallback.on_job_end` (jobs in this process) counts through `Progress.count` as the watcher does:
    a job skipped past the budget is not done, a finished one is, with its wall time in this process."""
    p = rp.Progress(total=3, deadline=None)
    monkeypatch.setattr(rp, "PROGRESS", p)
    callback = rp.ReproduceCallback()
    for job, (status, reason) in enumerate([("finished", None), ("skipped", "past the budget of gpdlm reproduce (x)")]):
        config = OmegaConf.create(
            {"hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"num": job}, "overrides": {"task": [f"seed={job}"]}}}
        )
        callback.on_job_start(config)
        record_outcome(tmp_path, job, status, [f"seed={job}"], reason)
        callback.on_job_end(config)
    assert (p.done, p.trained) == (1, 1)
    assert len(p.recent_seconds) == 1 and 0 <= p.recent_seconds[0] < 5.0
    err = capsys.readouterr().err.strip().splitlines()
    assert "1/3 jobs done (skipped: past the budget of gpdlm reproduce (x): seed=1), 2 left" in err[-1]


def test_a_budgeted_reproduce_passes_its_deadline_and_watches_a_parallel_launcher(tmp_path, monkeypatch):
    import sys

    from gpdlm_cli.commands import train as train_cmd

    seen = []
    monkeypatch.setattr(train_cmd, "train_main", lambda: seen.append(list(sys.argv)))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    watched = []
    monkeypatch.setattr(rp.OutcomeWatcher, "__enter__", lambda self: watched.append(self.dir) or self)
    monkeypatch.setattr(rp.OutcomeWatcher, "__exit__", lambda self, *exc: None)
    m = rp.Multirun("classification", [], jobs=2, argvs=[["+experiment=classification"]])
    joblib = rp.Multirun("classification", ["hydra/launcher=joblib"], jobs=2)
    joblib.argvs = [["+experiment=classification", "hydra/launcher=joblib"]]
    plan = rp.Plan("dlm", "paper", "fast", [m, joblib], [])
    p = rp.Progress(total=4, deadline=time.monotonic() + 600)
    before = time.time()
    rp._launch(plan, f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path, p)
    deadlines = [float(a.split("=", 1)[1]) for argv in seen for a in argv if a.startswith("+sweep.deadline=")]
    assert len(deadlines) == 2 and all(before + 598 <= d <= time.time() + 601 for d in deadlines)
    assert len(watched) == 1  # the joblib multirun's outcomes only: the basic launcher's jobs run in this process
    seen.clear()
    rp._launch(plan, f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path, rp.Progress(total=4, deadline=None))
    assert not any(a.startswith("+sweep.deadline=") for argv in seen for a in argv)
