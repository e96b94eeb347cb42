"""An interrupted sweep closes the runs its dead workers left RUNNING (2026-11-30: a Ctrl-C to a joblib
`gpdlm reproduce` left one child RUNNING, its worker killed before its step ended)."""

from __future__ import annotations

import socket
import subprocess
import sys

from mlflow.tracking import MlflowClient

from gpdlm_cli.sweep import callback as cb
from gpdlm_cli.tracking.liveness import process_tags

from ..conftest import copy_store


def _child(client, exp, parent, tags):
    return client.create_run(exp, tags={"mlflow.parentRunId": parent, **tags}).info.run_id


def test_an_interrupted_sweep_closes_the_running_runs_of_its_dead_workers(tmp_path, template_db, monkeypatch):
    client = MlflowClient(copy_store(template_db, tmp_path))
    exp = client.create_experiment("orphans")
    parent = client.create_run(exp, tags={"gpdlm.sweep": "parent"}).info.run_id
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = {"gpdlm.host": socket.gethostname(), "gpdlm.pid": dead.stdout.strip(), "gpdlm.process_start": "1.0"}
    worker = _child(client, exp, parent, gone)
    other_host = _child(client, exp, parent, {**gone, "gpdlm.host": "another-node"})
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = _child(client, exp, parent, {**gone, "gpdlm.pid": str(alive.pid), "gpdlm.process_start": ""})
        mine = _child(client, exp, parent, process_tags())
        finished = _child(client, exp, parent, gone)
        client.set_terminated(finished, "FINISHED")
        sweep = cb.SweepCallback()
        sweep.client, sweep.parent_run_id = client, parent
        monkeypatch.setattr(cb, "CHILDREN_WAIT_S", 0.3)
        sweep.end("KILLED", reason="interrupted")
    finally:
        alive.kill()
    status = {r: client.get_run(r).info.status for r in (worker, other_host, live, mine, finished, parent)}
    assert status == {
        worker: "KILLED",  # its process is gone: closed, with the reason
        other_host: "RUNNING",  # another host: `gpdlm runs --stale` judges it by its last log
        live: "RUNNING",  # still alive after the wait: its own handler closes it
        mine: "RUNNING",  # this process's run: never waited for, never closed here
        finished: "FINISHED",
        parent: "KILLED",
    }
    reason = client.get_run(worker).data.tags["failure_reason"]
    assert reason == f"orphaned: process {dead.stdout.strip()} is gone (closed by its sweep, interrupted)"
