"""`gpdlm ui`: the MLflow UI command line (127.0.0.1 unless --host), bad input, and one real start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from gpdlm_cli import cli
from gpdlm_cli.commands import ui

from .conftest import copy_store, one_line_error


@pytest.fixture
def store_dir(template_db, tmp_path):
    copy_store(template_db, tmp_path)
    return tmp_path


def test_default_command_line_binds_localhost(store_dir, monkeypatch):
    monkeypatch.chdir(store_dir)
    argv = ui.command([])
    assert argv == [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri",
                    f"sqlite:///{store_dir.resolve() / 'mlflow.db'}", "--host", "127.0.0.1", "--port", "5000",
                    "--workers", "1"]


def test_host_port_and_uri_options(store_dir):
    uri = f"sqlite:///{store_dir / 'mlflow.db'}"
    argv = ui.command(["--port", "5123", "--host", "0.0.0.0", "--tracking-uri", uri, "--workers", "2"])
    assert argv[4:] == ["--backend-store-uri", uri, "--host", "0.0.0.0", "--port", "5123", "--workers", "2"]
    # a server URI is passed on as it is (nothing to check locally)
    assert ui.command(["--tracking-uri", "http://tracking.example:5000"])[5] == "http://tracking.example:5000"


def test_cli_execs_the_server(store_dir, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(os, "execve", lambda path, argv, env: calls.append((path, argv, env)))
    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", raising=False)
    uri = f"sqlite:///{store_dir / 'mlflow.db'}"
    assert cli.main(["ui", "--tracking-uri", uri, "--port", "5001"]) == 0
    assert [c[:2] for c in calls] == [(sys.executable, ui.build_argv(uri, "127.0.0.1", 5001))]
    assert calls[0][2]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"  # no GenAI job runner processes
    assert "http://127.0.0.1:5001" in capsys.readouterr().err


def test_ui_opens_the_training_runs_of_the_experiment(store_dir, monkeypatch, capsys):
    """The printed address lands on gpdlm's view: the experiment is marked as model training (not
    MLflow 3's GenAI view) and a shared view state lists training runs with key columns."""
    import json

    from mlflow.tracking import MlflowClient

    from gpdlm_cli.tracking import ensure_experiment

    uri = f"sqlite:///{store_dir / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp_id = client.create_experiment("older")  # made without gpdlm's tags (an older store)
    monkeypatch.setattr(os, "execve", lambda *a: None)
    assert cli.main(["ui", "--tracking-uri", uri, "--experiment", "older"]) == 0
    assert (f"open http://127.0.0.1:5000/#/experiments/{exp_id}?viewStateShareKey=gpdlm&workflowType=machine_learning"
            in capsys.readouterr().err)
    tags = client.get_experiment(exp_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.gpdlm"])
    assert view["searchFilter"] == "tags.`gpdlm.command` = 'train'"
    assert {"params.`objective.beta`", "params.`model.variant`", "metrics.`test_nll`", "attributes.`Dataset`"} <= set(
        view["selectedColumns"])
    new = ensure_experiment(client, "fresh", uri)  # gpdlm's own experiments get the view at creation
    assert json.loads(client.get_experiment(new).tags["mlflow.sharedViewState.gpdlm"]) == view


@pytest.mark.parametrize("args,message", [
    (["--tracking-uri", "sqlite:////nonexistent/dir/mlflow.db"], "no MLflow store at /nonexistent/dir/mlflow.db"),
    (["--port", "0"], "--port must be in 1..65535; got 0"),
    (["--port", "http"], "argument --port: invalid int value: 'http'"),
    (["--workers", "0"], "--workers must be >= 1; got 0"),
])
def test_bad_input_is_one_line_exit_2(store_dir, monkeypatch, capsys, args, message):
    monkeypatch.chdir(store_dir)
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("must not start a server on bad input"))
    assert cli.main(["ui", *args]) == 2
    assert message in one_line_error(capsys)


def test_default_store_missing_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["ui"]) == 2
    assert "no MLflow store at" in one_line_error(capsys)
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_the_server_really_starts_and_answers(ui_server):
    """`gpdlm ui`'s command line really serves: /health answers 200 on 127.0.0.1 (the server is
    started by the session fixture ``ui_server``, which also stops it)."""
    proc, port = ui_server["proc"], ui_server["port"]
    # bounded: 60 s after the server was started, and at least 15 s of polling here
    status, deadline = None, max(ui_server["started"] + 60, time.monotonic() + 15)
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                status = resp.status
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            time.sleep(0.5)
    assert status == 200, ui_server["log"].read_text(errors="replace")[-2000:]
    # the features gpdlm does not use are off: the CLI process and one server worker, no job runners
    group = subprocess.run(["ps", "-o", "args=", "-g", str(proc.pid)], capture_output=True, text=True).stdout
    assert len(group.strip().splitlines()) <= 2 and "huey" not in group, group
