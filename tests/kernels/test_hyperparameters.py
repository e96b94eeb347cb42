"""A run's learned hyperparameters are logged as the model uses them (issue 47, item 2): hyperparameters.json
in the run folder and as an MLflow artifact, scalar hp.* metrics, equal to the trained model's constrained
values read back through the MLflow store; `gpdlm runs`/`compare --hyperparameters` show them."""

from __future__ import annotations

import json

import pytest
import torch
from mlflow.tracking import MlflowClient

from gpdlm_cli.run import train as train_module
from gpdlm_cli.run.hyperparameters import hyperparameters
from gpdlm_cli.run.train import run_train

from ..conftest import compose, fast


def _trained_run(tmp_path, mlflow_uri, monkeypatch, overrides, experiment):
    """run_train on ``overrides``; returns (metrics, the trained method, the MLflow run)."""
    captured = {}
    real = train_module.prepare

    def keep(cfg, *a, **k):
        captured["p"] = real(cfg, *a, **k)
        return captured["p"]

    monkeypatch.setattr(train_module, "prepare", keep)
    cfg = compose(fast([f"tracking.uri={mlflow_uri}", f"tracking.experiment={experiment}", *overrides]))
    metrics = run_train(cfg, tmp_path)
    client = MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id])
    return metrics, captured["p"].method, run, client


@pytest.mark.parametrize(
    "model,kernel_path,noise_path",
    [
        pytest.param("sgpr", "model.covar_module", "model.likelihood.gp.noise_covar.noise", marks=pytest.mark.slow),
        pytest.param("svgp", "model.covar_module", "likelihood.gp.noise_covar.noise", marks=pytest.mark.slow),
        pytest.param("dlm", "model.covar_module", "likelihood.gp.noise_covar.noise", marks=pytest.mark.slow),
        pytest.param("fitc", "model.covar_module", "model.likelihood.gp.noise_covar.noise", marks=pytest.mark.slow),
        pytest.param("exact", "model.covar_module", "model.likelihood.noise_covar.noise", marks=pytest.mark.slow),
    ],
)
def test_logged_hyperparameters_equal_the_models_constrained_values(
    tmp_path, mlflow_uri, monkeypatch, model, kernel_path, noise_path
):
    ard = model != "exact"
    over = [f"model={model}", "trainer.max_iters=20", "trainer.eval_every=0"] + (["kernel.ard=true"] if ard else [])
    _, method, run, client = _trained_run(tmp_path, mlflow_uri, monkeypatch, over, f"hp-{model}")
    kernel = method.model.covar_module
    lengthscale = kernel.base_kernel.lengthscale.detach().flatten().tolist()
    outputscale = float(kernel.outputscale.detach())
    noise = float(method.likelihood.noise.detach())
    assert lengthscale != [1.0] * len(lengthscale) and noise != 0.1  # trained away from the initial values
    # the artifact, in the folder and in the MLflow store, byte for byte
    local = json.loads((tmp_path / "hyperparameters.json").read_text())
    assert "hyperparameters.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    stored = json.loads(
        open(client.download_artifacts(run.info.run_id, "hyperparameters.json", str(tmp_path / "dl"))).read()
    )
    assert stored == local
    values = stored["values"]
    assert values[f"{kernel_path}.base_kernel.lengthscale"] == (lengthscale if ard else lengthscale[0])
    assert values[f"{kernel_path}.outputscale"] == outputscale
    assert values[noise_path] == noise
    # the scalar metrics (MLflow stores float64 exactly)
    m = run.data.metrics
    assert m["hp.outputscale"] == outputscale and m["hp.noise"] == noise
    if ard:
        assert [m[f"hp.lengthscale.{i}"] for i in range(8)] == lengthscale and "hp.lengthscale" not in m
        assert m["hp.num_inducing"] == 20 and stored["num_inducing"] == 20
    else:
        assert m["hp.lengthscale"] == lengthscale[0]
    # constrained, not raw: the softplus of the raw value (plus the noise's lower bound)
    raw = kernel.raw_outputscale.detach()
    assert outputscale == pytest.approx(float(torch.nn.functional.softplus(raw)), rel=1e-12)
    assert float(raw) != pytest.approx(outputscale, rel=1e-3)


def test_parameters_shared_by_two_modules_are_listed_once_and_a_raw_mean_through_its_property():
    import gpytorch

    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.methods.base import Method

    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5, ard_num_dims=2)).double()
    lik = GaussianLikelihood().double()
    model = gpytorch.models.ExactGP(None, None, lik.gp)
    model.covar_module, model.mean_module = kernel, gpytorch.means.ConstantMean().double()
    model.mean_module.constant = 0.25
    h = hyperparameters(Method("exact", model, lik, []))
    assert h["values"] == {
        "model.likelihood.noise_covar.noise": pytest.approx(
            0.1, rel=1e-6
        ),  # across CPUs float rounding differs (1e-9 to 2e-7 relative measured on an AMD EPYC, 2026-11-29)
        "model.covar_module.outputscale": pytest.approx(float(kernel.outputscale.detach())),
        "model.covar_module.base_kernel.lengthscale": pytest.approx(kernel.base_kernel.lengthscale.flatten().tolist()),
        "model.mean_module.constant": 0.25,
    }
    assert set(h["metrics"]) == {"hp.noise", "hp.outputscale", "hp.lengthscale.0", "hp.lengthscale.1", "hp.constant"}
    assert h["num_inducing"] is None


def test_runs_and_compare_show_hyperparameters_on_request(tmp_path, mlflow_uri, monkeypatch, capsys):
    over = ["model=sgpr", "trainer.max_iters=10", "trainer.eval_every=0", "kernel.ard=true"]
    _, method, run, _ = _trained_run(tmp_path / "run", mlflow_uri, monkeypatch, over, "hp-show")
    m = run.data.metrics
    store = ["--tracking-uri", mlflow_uri, "--experiment", "hp-show"]
    from gpdlm_cli.analysis import records as R
    from gpdlm_cli.commands import compare, run_list
    from gpdlm_cli.commands.run_list import hyperparameter_cells, hyperparameter_columns

    columns = hyperparameter_columns([m])
    assert [name for name, _ in columns] == ["lengthscale", "noise", "num_inducing", "outputscale"]
    cells = hyperparameter_cells(m, columns)
    assert cells[0] == " ".join(R.fmt_num(m[f"hp.lengthscale.{i}"]) for i in range(8))
    assert cells[1] == R.fmt_num(float(method.likelihood.noise.detach())) and cells[2] == "20"
    capsys.readouterr()
    assert run_list.main([*store, "--hyperparameters"]) == 0
    out = capsys.readouterr().out
    assert "noise" in out and "outputscale" in out and "num_inducing" in out and cells[1] in out
    assert run_list.main(store) == 0
    assert "outputscale" not in capsys.readouterr().out  # only on request
    assert compare.main([*store, "--hyperparameters", "--no-figures", "--no-log", "--out", str(tmp_path / "cmp")]) == 0
    csv = (tmp_path / "cmp" / "runs.csv").read_text()
    assert "hp.noise" in csv and "hp.lengthscale.7" in csv and "hp.num_inducing" in csv
