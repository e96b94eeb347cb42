"""Fixtures of the analysis-command tests: a store per test module (a copy of the session's template store,
tests/conftest.py: creating the schema costs seconds), and synthetic training runs."""

from __future__ import annotations

import time

import pytest

from ..conftest import copy_store  # noqa: F401 (the command tests import it from here)


@pytest.fixture(scope="module")
def module_uri(template_db, tmp_path_factory):
    return copy_store(template_db, tmp_path_factory.mktemp("store"))


def make_experiment(client, uri: str, name: str) -> str:
    from gpdlm_cli.tracking import ensure_experiment

    return ensure_experiment(client, name, uri)


def make_run(
    client,
    exp_id,
    params: dict,
    metrics: dict,
    *,
    tags: dict | None = None,
    status="FINISHED",
    steps: dict | None = None,
    start_time: int | None = None,
    command: str | None = "train",
) -> str:
    """A run shaped like `gpdlm train`'s: params (strings), final metrics at the last step, step
    metrics (``steps``: {name: [(step, value)]}) and tags."""
    from mlflow.entities import Metric, Param

    all_tags = dict(tags or {})
    if command:
        all_tags["gpdlm.command"] = command
    run = client.create_run(
        exp_id,
        start_time=start_time,
        tags=all_tags,
        run_name=f"{params.get('model.name', 'run')}-s{params.get('seed', '?')}",
    )
    rid = run.info.run_id
    ts = int(time.time() * 1000)
    last = max((s for pts in (steps or {}).values() for s, _ in pts), default=0)
    items = [Metric(k, float(v), ts, s) for k, pts in (steps or {}).items() for s, v in pts]
    items += [Metric(k, float(v), ts, last) for k, v in metrics.items()]
    client.log_batch(rid, metrics=items, params=[Param(k, str(v)) for k, v in params.items()])
    if status != "RUNNING":
        client.set_terminated(rid, status)
    return rid


def one_line_error(capsys) -> str:
    """The single stderr line of a failed command (asserts there is exactly one)."""
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("gpdlm: error: "), err
    return err[0]


# ----- one real `gpdlm ui` server, started early -------------------------------------------------------
UI_TESTS = ("test_the_server_really_starts_and_answers", "test_the_printed_addresses_show_gpdlms_view_in_a_browser")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def ui_server(request, template_db, tmp_path_factory):
    """`gpdlm ui` on a free port, for test_ui's real-start and browser tests, launched at the start of
    the session so that its slow boot (two Python processes importing MLflow's server) overlaps the
    other tests; the tests poll it. Its store holds experiment ``gpdlm``: two training runs and a
    ``compare`` run (``runs``: {name: run id}); the address ``gpdlm ui`` printed is the first line
    of ``log``. Started under a guard (``tests/process_guard.py``; ``proc`` is the guard, its pid the
    group's id): its whole process group is stopped at the end of the session, and also when pytest
    dies before that (killed, SIGTERM, Ctrl-C) or exits without the teardown. None when neither test
    is collected."""
    import shutil
    import subprocess

    from mlflow.tracking import MlflowClient

    from ..conftest import gpdlm_subprocess
    from ..process_guard import start_guarded, stop_guarded

    browser = any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"))
    wanted = UI_TESTS if browser else UI_TESTS[:1]  # the browser test is skipped without a browser
    if not any(item.name in wanted for item in request.session.items):
        yield None
        return
    d = tmp_path_factory.mktemp("ui")
    uri = copy_store(template_db, d)
    client = MlflowClient(uri)
    exp_id = make_experiment(client, uri, "gpdlm")
    runs = {
        f"dlm-concrete-s{s}": make_run(
            client,
            exp_id,
            {"model.name": "dlm", "seed": s, "objective.beta": 1.0},
            {"test_nll": 3.25 + s, "test_rmse": 5.5},
        )
        for s in (0, 1)
    }
    runs["compare"] = make_run(client, exp_id, {}, {}, command="compare")
    for name, rid in runs.items():
        client.set_tag(rid, "mlflow.runName", name)
    port = _free_port()
    log = open(d / "ui.log", "wb")
    proc = gpdlm_subprocess(  # guarded: the server's group ends with this process, however it ends
        ["ui", "--tracking-uri", uri, "--port", str(port)],
        d,
        runner=start_guarded,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield {
            "proc": proc,
            "port": port,
            "log": d / "ui.log",
            "started": time.monotonic(),
            "uri": uri,
            "experiment_id": exp_id,
            "runs": runs,
        }
    finally:
        stop_guarded(proc)  # the server and its worker: the guard's process group
        log.close()
