"""A `gpdlm train` multirun with ``sweep.skip_finished`` leaves out, before the launch, the jobs whose configuration
has a FINISHED run (``sweep.callback.leave_out_finished``). Until 2026-11-30 each such job was launched to skip
itself (~0.7 s: composition, job folder, data, model): 45 minutes of a resumed classification study's second
multirun (3,825 jobs, every one an earlier multirun's). The jobs left out are counted as skipped as before, and a
launched job keeps its own folder and number."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpdlm_cli.commands import reproduce as rp
from gpdlm_cli.sweep.callback import record_outcome

from ..conftest import copy_store, run_cli
from .test_sweeps import TINY, runs, split_runs


def _outcomes(sweep_dir: Path) -> dict[int, dict]:
    return {int(p.stem): json.loads(p.read_text()) for p in (sweep_dir / "outcomes").glob("*.json")}


@pytest.mark.slow  # real multiruns: over ~3 s (make test-fast stays under 2 minutes)
def test_finished_jobs_are_left_out_before_the_launch_and_counted_as_skipped(tmp_path, template_db, capsys):
    copy_store(template_db, tmp_path)
    db = tmp_path / "mlflow.db"
    base = [
        "train",
        "-m",
        f"tracking.uri=sqlite:///{db}",
        "tracking.experiment=left",
        "sweep.skip_finished=true",
        *TINY,
    ]
    code, _ = run_cli([*base, "seed=0,2", f"hydra.sweep.dir={tmp_path / 'first'}"], tmp_path, capsys)
    assert code == 0 and len(split_runs(runs(db, "left"))[1]) == 2
    code, lines = run_cli([*base, "seed=0,1,2,3", f"hydra.sweep.dir={tmp_path / 'second'}"], tmp_path, capsys)
    assert code == 0
    left_out = [ln for ln in lines if "left out before the launch" in ln]
    assert left_out == [
        "gpdlm: 2 of 4 jobs have a FINISHED run of their configuration in the store: left out before the launch "
        "(sweep.skip_finished)"
    ], lines
    assert any("sweep done: 2 finished, 2 skipped, 0 failed" in ln for ln in lines), lines
    children = split_runs(runs(db, "left"))[1]
    assert sorted(r.data.params["seed"] for r in children) == ["0", "1", "2", "3"]  # nothing trained twice
    second = tmp_path / "second"
    # never launched: no folder; the launched jobs keep the folders (and numbers) they have with none left out
    assert sorted(p.name for p in second.iterdir() if p.name.isdigit()) == ["1", "3"]
    out = _outcomes(second)
    assert {j: (o["status"], o.get("before_launch", False)) for j, o in out.items()} == {
        0: ("skipped", True),
        1: ("finished", False),
        2: ("skipped", True),
        3: ("finished", False),
    }
    assert "seed=1" in out[1]["overrides"] and "seed=2" in out[2]["overrides"]
    assert "seed=1" in (second / "1" / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.slow  # real multiruns: over ~3 s (make test-fast stays under 2 minutes)
def test_a_sweep_over_experiments_checks_each_job_against_its_own(tmp_path, template_db, capsys):
    """The same configuration FINISHED in experiment a is not a finished job of experiment b."""
    copy_store(template_db, tmp_path)
    db = tmp_path / "mlflow.db"
    base = ["train", "-m", f"tracking.uri=sqlite:///{db}", "sweep.skip_finished=true", "seed=0", *TINY]
    assert run_cli([*base, "tracking.experiment=a", f"hydra.sweep.dir={tmp_path / 'a'}"], tmp_path, capsys)[0] == 0
    code, lines = run_cli([*base, "tracking.experiment=a,b", f"hydra.sweep.dir={tmp_path / 'ab'}"], tmp_path, capsys)
    assert code == 0
    assert any("1 of 2 jobs have a FINISHED run" in ln for ln in lines), lines
    assert len(split_runs(runs(db, "a"))[1]) == 1 and len(split_runs(runs(db, "b"))[1]) == 1


@pytest.mark.slow  # real multiruns: over ~3 s (make test-fast stays under 2 minutes)
@pytest.mark.parametrize(
    "setting",
    [
        "hydra.sweep.subdir=job_${hydra.job.num}",  # folders numbered otherwise: leaving out would renumber them
        "sweep.skip_finished=false",
    ],
)
def test_jobs_are_launched_when_they_cannot_be_left_out(tmp_path, template_db, capsys, setting):
    copy_store(template_db, tmp_path)
    db = tmp_path / "mlflow.db"
    base = ["train", "-m", f"tracking.uri=sqlite:///{db}", "tracking.experiment=kept", "seed=0", *TINY]
    assert run_cli([*base, f"hydra.sweep.dir={tmp_path / 'first'}"], tmp_path, capsys)[0] == 0
    code, lines = run_cli(
        [*base, "sweep.skip_finished=true", setting, f"hydra.sweep.dir={tmp_path / 'again'}"], tmp_path, capsys
    )
    assert code == 0 and not any("left out before the launch" in ln for ln in lines), lines
    trained_again = setting == "sweep.skip_finished=false"
    assert len(split_runs(runs(db, "kept"))[1]) == (2 if trained_again else 1)
    assert any(("1 finished" if trained_again else "0 finished, 1 skipped") in ln for ln in lines), lines


def test_reproduce_counts_the_jobs_left_out_in_one_line_and_restarts_its_clock(tmp_path, monkeypatch, capsys):
    """A parallel launcher's watcher and the basic launcher's callback alike: one line for the jobs left out,
    each counted once; the time spent before the launch is not a trained job's."""
    monkeypatch.setattr(rp, "WATCH_S", 0.05)
    for j in (2, 3, 4):
        record_outcome(tmp_path, j, "skipped", [f"seed={j}"], before_launch=True)
    p = rp.Progress(total=5, deadline=None)
    p.started -= 600.0  # ten minutes of planning and leaving out
    with rp.OutcomeWatcher(p, tmp_path):
        record_outcome(tmp_path, 0, "finished", ["seed=0"])
    assert (p.done, p.trained) == (4, 1)
    assert p.left_s() < 60.0  # the job's own seconds times one left, not ten minutes
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("gpdlm reproduce: 3/5 jobs done (3 skipped before the launch: FINISHED in the store)")
    assert err[1].startswith("gpdlm reproduce: 4/5 jobs done (finished: seed=0)") and len(err) == 2

    from omegaconf import OmegaConf

    q = rp.Progress(total=5, deadline=None)
    monkeypatch.setattr(rp, "PROGRESS", q)
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"num": 1}}, "sweep": {}})
    callback = rp.ReproduceCallback()
    callback.on_job_start(config)
    callback.on_job_start(config)  # counted once
    assert q.done == 3 and q.read == {str(tmp_path / "outcomes" / f"{j}.json") for j in (0, 2, 3, 4)}
    assert capsys.readouterr().err.count("3 skipped before the launch") == 1
    assert time.monotonic() - q.started < 5.0


@pytest.mark.slow  # real multiruns: over ~3 s (make test-fast stays under 2 minutes)
def test_folders_named_otherwise_keep_their_names_and_the_records_follow_the_launched_jobs(
    tmp_path, template_db, capsys
):
    copy_store(template_db, tmp_path)
    db = tmp_path / "mlflow.db"
    base = ["train", "-m", f"tracking.uri=sqlite:///{db}", "tracking.experiment=named", *TINY]
    base += ["sweep.skip_finished=true", "hydra.sweep.subdir=s${seed}"]
    assert run_cli([*base, "seed=0", f"hydra.sweep.dir={tmp_path / 'first'}"], tmp_path, capsys)[0] == 0
    code, lines = run_cli([*base, "seed=0,1", f"hydra.sweep.dir={tmp_path / 'again'}"], tmp_path, capsys)
    assert code == 0 and any("1 of 2 jobs have a FINISHED run" in ln for ln in lines), lines
    again = tmp_path / "again"
    assert sorted(p.name for p in again.iterdir() if p.name.startswith("s")) == ["s1"]
    out = _outcomes(again)
    assert {j: (o["status"], "seed=0" in o["overrides"]) for j, o in out.items()} == {
        0: ("finished", False),  # the launched job (seed 1) is Hydra's job 0
        1: ("skipped", True),  # the job left out (seed 0) follows it
    }
