"""Beyond grid sweeps and one machine: an Optuna study whose trials return their validation metric
and are child runs of the study's parent run, and the Ray launcher with tracking pointed at an
`mlflow server`."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from gpdlm_cli.exceptions import ConfigError
from gpdlm_cli.sweep.callback import job_objective, objective_metric

from ..conftest import compose, gpdlm_subprocess
from .conftest import copy_store

TINY = ["trainer.max_iters=15", "model.num_inducing=10", "dataset.split.train_size=80", "progress=false", "threads=1"]


def _children_and_parent(uri, experiment):
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if r.data.tags.get("gpdlm.sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def test_job_objective_is_the_configured_validation_metric():
    metrics = {"val_nll": 1.25, "val_mse": 0.5, "test_nll": 2.0}
    assert objective_metric(compose([])) == "val_nll"
    assert objective_metric(compose(["model=sq_dlm"])) == "val_mse"  # what select uses for square loss
    assert job_objective(compose([]), metrics, {}) == 1.25
    assert job_objective(compose(["sweep.objective=test_nll"]), metrics, {}) == 2.0
    assert job_objective(compose([]), None, {}) == float("inf")  # skipped, nothing to look up
    assert job_objective(compose([]), {"cond_i_mean": 1.0}, {}) == float("inf")  # a bias run has no val_nll
    with pytest.raises(
        ConfigError, match="sweep.objective=val_error is not a metric of this run; choose from: val_mse, val_nll"
    ):
        job_objective(compose(["sweep.objective=val_error"]), metrics, {})


@pytest.mark.slow
def test_optuna_study_trials_are_child_runs_and_return_their_metric(template_db, tmp_path):
    uri = copy_store(template_db, tmp_path)
    proc = gpdlm_subprocess(
        [
            "train",
            "-m",
            "hydra/sweeper=optuna",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.sampler.seed=0",
            "objective.beta=tag(log, interval(0.1, 10))",
            f"tracking.uri={uri}",
            "tracking.experiment=opt",
            "hydra.sweep.dir=study",
            *TINY,
        ],
        tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parents, children = _children_and_parent(uri, "opt")
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.info.run_name.startswith("study-")
    assert (parent.data.tags["gpdlm.sweeper"], parent.data.tags["gpdlm.swept"]) == ("optuna", "objective.beta")
    assert all(
        c.info.status == "FINISHED" and c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children
    )
    betas = [float(c.data.params["objective.beta"]) for c in children]
    assert len(set(betas)) == 3 and all(0.1 <= b <= 10 for b in betas)
    # each trial told Optuna its val_nll: the study's best is the children's minimum
    best = min(children, key=lambda c: c.data.metrics["val_nll"])
    assert parent.data.metrics["best_value"] == pytest.approx(best.data.metrics["val_nll"], rel=1e-12)
    assert float(parent.data.params["best.objective.beta"]) == pytest.approx(float(best.data.params["objective.beta"]))
    results = OmegaConf.load(tmp_path / "study" / "optimization_results.yaml")
    assert results.best_value == pytest.approx(best.data.metrics["val_nll"], rel=1e-12)
    assert f"gpdlm: best trial: val_nll = {best.data.metrics['val_nll']:.6g}" in proc.stderr
    assert best.info.run_name == f"dlm_joint-concrete-b{float(best.data.params['objective.beta']):g}-s0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None or importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None,
    reason="Ray is an optional extra: pip install 'gpdlm[ray]'",
)
def test_ray_launcher_with_a_tracking_server(template_db, tmp_path):
    """Two jobs on a local Ray instance (one CPU), tracked through `mlflow server` over HTTP. The server and the
    command (with the Ray processes it starts) run under ``tests/process_guard.py``: their process groups end
    with this test process, however it ends (a killed pytest used to leave the server listening)."""
    from gpdlm_cli.commands.ui import server_env

    from ..process_guard import start_guarded, stop_guarded

    copy_store(template_db, tmp_path / "server")
    port = _free_port()
    server = start_guarded(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--default-artifact-root",
            str(tmp_path / "artifacts"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=server_env(),
    )
    uri = f"http://127.0.0.1:{port}"
    run = None
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "mlflow server did not start"
                time.sleep(0.5)
        env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1"}
        run = start_guarded(
            [
                sys.executable,
                "-m",
                "gpdlm_cli.cli",
                "train",
                "-m",
                "seed=0,1",
                "hydra/launcher=ray",
                "+hydra.launcher.ray.init.num_cpus=1",
                "+hydra.launcher.ray.init.include_dashboard=false",
                f"tracking.uri={uri}",
                "tracking.experiment=ray",
                *TINY,
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        _, stderr = run.communicate(timeout=400)
        assert run.returncode == 0, stderr[-3000:]
        parents, children = _children_and_parent(uri, "ray")
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"
        assert sorted(c.data.params["seed"] for c in children) == ["0", "1"]
        assert all(
            c.info.status == "FINISHED" and c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
            for c in children
        )
        # the jobs ran in Ray's worker processes, not in the launching one
        assert {c.data.tags["gpdlm.pid"] for c in children}.isdisjoint({str(os.getpid())})
        assert "2 finished, 0 skipped, 0 failed" in stderr
    finally:
        if run is not None:
            stop_guarded(run)
        stop_guarded(server)
