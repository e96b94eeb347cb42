"""`gpdlm resume` only continues dead runs, into the store they came from (issue 45, items 1, 5, 7 and
the broken-config tracebacks): a FINISHED run and a run whose process is alive are refused with one
line; a RUNNING run whose process is gone is closed KILLED and continued, linked both ways; a folder
resumed from another directory logs into its original store; a broken config.yaml is one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli.run.train import run_train
from gpdlm_cli.signals import Terminated, install_signal_handlers
from gpdlm_cli.training.checkpoint import FILE

from ..conftest import compose, kill_last_stage_at, run_cli
from .conftest import copy_store

pytestmark = pytest.mark.slow  # each trains a small run (~5 s)

OV = [
    "dataset=diabetes",
    "model.num_inducing=8",
    "dataset.split.train_size=60",
    "trainer.max_iters=30",
    "trainer.eval_every=5",
    "trainer.checkpoint_every=1",
    "threads=1",
    "progress=false",
    "tracking.system_metrics=null",
]


@pytest.fixture
def stopped(template_db, tmp_path, monkeypatch):
    """(folder, store uri, run id) of a run stopped by SIGTERM at iteration 12 (KILLED, checkpoint there)."""
    from gpdlm_cli import build
    from gpdlm_cli.run.lifecycle import make_tracker

    install_signal_handlers()
    uri = copy_store(template_db, tmp_path / "store")
    cfg = compose(OV + [f"tracking.uri={uri}"])
    real = kill_last_stage_at(monkeypatch, 12)
    folder = tmp_path / "run"
    tracker = make_tracker(cfg.tracking)
    with pytest.raises(Terminated):
        run_train(cfg, folder, tracker=tracker)
    monkeypatch.setattr(build, "build_method", real)
    assert (folder / FILE).is_file()
    return folder, uri, tracker.run_id


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_finished_run_is_refused_with_one_line(stopped, tmp_path, capsys):
    folder, uri, rid = stopped
    MlflowClient(uri).set_terminated(rid, "FINISHED")  # e.g. killed after it was closed, before its checkpoint went
    rc, err = run_cli(["resume", str(folder)], tmp_path, capsys)
    assert rc == 2 and len(err) == 1 and f"run {rid} is FINISHED: nothing to resume" in err[0], err
    assert len(MlflowClient(uri).search_runs([MlflowClient(uri).get_run(rid).info.experiment_id])) == 1


def test_a_run_already_continued_is_refused_and_names_its_successor(stopped, tmp_path, capsys):
    """Resuming a run a second time by its id (its first continuation stopped again) would link it to a
    third run and skip the second: refused with one line naming the run to resume; no run is added."""
    from mlflow.entities import RunTag

    folder, uri, rid = stopped
    client = MlflowClient(uri)
    client.log_batch(rid, tags=[RunTag("gpdlm.resumed_as", "b" * 32)])
    exp = client.get_run(rid).info.experiment_id
    rc, err = run_cli(["resume", rid, "--tracking-uri", uri], tmp_path, capsys)
    assert rc == 2 and len(err) == 2 and err[0].startswith(f"gpdlm: run {rid[:8]} "), err  # which run the id named
    assert err[1] == (
        f"gpdlm: error: run {rid} was already continued as run {'b' * 32}; resume that one (gpdlm resume {'b' * 32})"
    ), err
    assert len(client.search_runs([exp])) == 1 and (folder / FILE).is_file()


def test_a_run_whose_process_is_alive_is_refused(stopped, tmp_path, capsys):
    from mlflow.entities import RunTag

    folder, uri, rid = stopped
    client = MlflowClient(uri)
    client.update_run(rid, status="RUNNING")  # its process (this one) is alive
    client.log_batch(rid, tags=[RunTag("gpdlm.pid", str(os.getpid()))])
    rc, err = run_cli(["resume", str(folder)], tmp_path, capsys)
    assert rc == 2 and len(err) == 1 and "is still running" in err[0], err
    assert client.get_run(rid).info.status == "RUNNING"


def test_a_folder_a_live_process_trains_into_is_refused(stopped, tmp_path, capsys):
    from gpdlm_cli.files import folder_lock

    folder, uri, rid = stopped
    with folder_lock(folder):  # as a live `gpdlm train` holds it
        rc, err = run_cli(["resume", str(folder)], tmp_path, capsys)
    assert rc == 2 and len(err) == 1 and f"still being trained by a live process (pid {os.getpid()})" in err[0], err


def test_an_orphan_is_closed_and_continued_into_its_own_store_from_another_directory(stopped, tmp_path, capsys):
    """RUNNING with its process gone (SIGKILL): resumed from another directory, the new run goes to the
    run's own store (not a new mlflow.db there) and ends FINISHED; the orphan ends KILLED, linked to it."""
    from mlflow.entities import RunTag

    folder, uri, rid = stopped
    client = MlflowClient(uri)
    client.update_run(rid, status="RUNNING")
    client.log_batch(rid, tags=[RunTag("gpdlm.pid", str(_dead_pid()))])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rc, err = run_cli(["resume", str(folder)], elsewhere, capsys)
    assert rc == 0, err
    assert not (elsewhere / "mlflow.db").exists()
    old = client.get_run(rid)
    runs = client.search_runs([old.info.experiment_id])
    new = [r for r in runs if r.info.run_id != rid]
    assert len(runs) == 2 and new[0].info.status == "FINISHED"
    assert new[0].data.tags["gpdlm.resumed_from"] == rid
    assert old.info.status == "KILLED" and old.data.tags["gpdlm.resumed_as"] == new[0].info.run_id
    assert "closed by gpdlm resume" in old.data.tags["failure_reason"]
    assert not (folder / FILE).exists()


@pytest.mark.parametrize(
    "text,expected",
    [
        ("model: [unclosed\n", "is not readable YAML"),
        ("- 1\n- 2\n", "is not a gpdlm run config"),
    ],
)
def test_a_broken_config_yaml_is_one_line(stopped, tmp_path, capsys, text, expected):
    folder, _, _ = stopped
    (folder / "config.yaml").write_text(text)
    rc, err = run_cli(["resume", str(folder)], tmp_path, capsys)
    assert rc == 2 and len(err) == 1 and expected in err[0], err


def test_a_run_killed_after_saving_its_model_is_closed_by_runs_stale_finish(template_db, tmp_path, capsys, monkeypatch):
    """A kill between model.pt and the run's end (simulated: the process dies in `close`, the run stays
    RUNNING, its PID gone) leaves a complete folder with its complete checkpoint: `gpdlm runs --stale
    --finish` ends the run FINISHED with the folder's metrics and removes the checkpoint; a run whose
    folder is partial is listed as not finished and left RUNNING."""
    from mlflow.entities import RunTag

    from gpdlm_cli.run import lifecycle
    from gpdlm_cli.run.lifecycle import make_tracker

    uri = copy_store(template_db, tmp_path / "store")
    cfg = compose(OV + [f"tracking.uri={uri}"])
    tracker = make_tracker(cfg.tracking)
    monkeypatch.setattr(type(tracker), "_end", lambda self, status, reason=None: None)  # dies before the end

    def killed(self, files, metrics):
        raise KeyboardInterrupt

    monkeypatch.setattr(lifecycle.TrackedRun, "close", killed)
    folder = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_train(cfg, folder, tracker=tracker)
    monkeypatch.undo()
    client = MlflowClient(uri)
    rid = tracker.run_id
    client.log_batch(rid, tags=[RunTag("gpdlm.pid", str(_dead_pid()))])
    assert (
        client.get_run(rid).info.status == "RUNNING" and (folder / FILE).is_file() and (folder / "model.pt").is_file()
    )
    partial = make_tracker(cfg.tracking)  # a second orphan, stopped mid-training: its folder is partial
    with partial.run(
        run_name="partial",
        tags={
            "gpdlm.output_dir": str(tmp_path),
            "gpdlm.pid": str(_dead_pid()),
            "gpdlm.host": __import__("socket").gethostname(),
        },
    ):
        pass
    client.update_run(partial.run_id, status="RUNNING")
    rc, err = run_cli(["runs", "--stale", "--finish", "--tracking-uri", uri], tmp_path, capsys)
    assert rc == 0, err
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and "gpdlm.finished_by" in run.data.tags
    import json

    saved = json.loads((folder / "metrics.json").read_text())
    assert run.data.metrics["test_nll"] == saved["test_nll"] and run.data.metrics["iterations"] == 30
    assert not (folder / FILE).exists()
    assert client.get_run(partial.run_id).info.status == "RUNNING"
