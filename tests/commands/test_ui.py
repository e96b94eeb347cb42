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
    assert argv == [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        f"sqlite:///{store_dir.resolve() / 'mlflow.db'}",
        "--host",
        "127.0.0.1",
        "--port",
        "5000",
        "--workers",
        "1",
    ]


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
    assert (
        f"open http://127.0.0.1:5000/#/experiments/{exp_id}/runs?viewStateShareKey=gpdlm&workflowType=machine_learning"
        in capsys.readouterr().err
    )
    tags = client.get_experiment(exp_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.gpdlm"])
    assert view["searchFilter"] == "tags.`gpdlm.command` = 'train'"
    assert {"params.`objective.beta`", "params.`model.variant`", "metrics.`test_nll`", "attributes.`Dataset`"} <= set(
        view["selectedColumns"]
    )
    new = ensure_experiment(client, "fresh", uri)  # gpdlm's own experiments get the view at creation
    assert json.loads(client.get_experiment(new).tags["mlflow.sharedViewState.gpdlm"]) == view


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tracking-uri", "sqlite:////nonexistent/dir/mlflow.db"], "no MLflow store at /nonexistent/dir/mlflow.db"),
        (["--port", "0"], "--port must be in 1..65535; got 0"),
        (["--port", "http"], "argument --port: invalid int value: 'http'"),
        (["--workers", "0"], "--workers must be >= 1; got 0"),
    ],
)
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
    # (``proc`` is the fixture's guard, tests/process_guard.py: not counted)
    group = subprocess.run(["ps", "-o", "args=", "-g", str(proc.pid)], capture_output=True, text=True).stdout
    server = [ln for ln in group.strip().splitlines() if "process_guard.py" not in ln]
    assert 1 <= len(server) <= 2 and "huey" not in group, group


# ----- what a user sees: the printed addresses in a real (headless) browser ---------------------------
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> str | None:
    import shutil

    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


def _rendered(browser: str, url: str, profile) -> str:
    """The page's DOM after its scripts ran (headless, a fresh profile, a wide window: the runs
    table draws only the columns in view)."""
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=2400,1200",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=20000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stdout


def _wait_healthy(ui_server) -> None:
    proc, port = ui_server["proc"], ui_server["port"]
    deadline = max(ui_server["started"] + 90, time.monotonic() + 15)
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            time.sleep(0.5)
    pytest.fail(ui_server["log"].read_text(errors="replace")[-2000:])


@pytest.mark.slow
@pytest.mark.skipif(_browser() is None, reason="no Chromium/Chrome installed (apt-get install chromium)")
def test_the_printed_addresses_show_gpdlms_view_in_a_browser(ui_server, tmp_path):
    """The address `gpdlm ui` prints opens the training runs with gpdlm's columns (MLflow 3 once
    redirected it to the default view: no metric column, the `compare` run mixed in), and a run's
    address (``naming.ui_hint``) opens the run page in the model-training mode, not the GenAI one."""
    import re

    from gpdlm_cli.run.naming import ui_hint

    _wait_healthy(ui_server)
    port, runs = ui_server["port"], ui_server["runs"]
    printed = ui_server["log"].read_text(errors="replace").splitlines()[0]
    url = re.search(r"open (http://\S+)", printed).group(1)
    page = _rendered(_browser(), url, tmp_path / "profile1")
    assert "dlm-concrete-s0" in page and "dlm-concrete-s1" in page, page[-3000:]
    assert ">compare<" not in page  # only training runs
    assert 'col-id="metrics.`test_nll`"' in page and 'col-id="params.`objective.beta`"' in page
    assert "3.25" in page and "4.25" in page  # the metric's values in their column
    assert url.startswith(f"http://127.0.0.1:{port}/#/experiments/{ui_server['experiment_id']}/runs?")

    hint = ui_hint(ui_server["uri"], ui_server["experiment_id"], runs["dlm-concrete-s0"])
    run_url = f"http://127.0.0.1:{port}/" + hint.rsplit("http://127.0.0.1:5000/", 1)[1]
    page = _rendered(_browser(), run_url, tmp_path / "profile2")
    assert runs["dlm-concrete-s0"] in page and "test_nll" in page
    assert "Observability" not in page and "Judges" not in page  # the GenAI mode's navigation
