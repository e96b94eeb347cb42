"""`gpdlm bias`: the statistics on hand-computed tensors, the protocol on a small Poisson problem
(uPS unbiased, bMC's bias shrinking with L), probit's closed-form reference, MLflow tracking, and
bad input (one line, exit 2, no run)."""

from __future__ import annotations

import json
import logging
import math
import sys

import pytest
import torch
from mlflow.tracking import MlflowClient

from gpdlm_cli.exceptions import GpdlmError, NumericalError
from gpdlm_cli.metrics import condition_statistics, coordinate_bias, gradient_statistics
from gpdlm_cli.run import bias as bias_cmd
from gpdlm_cli.run.bias import run_bias
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.tracking.identity import config_hash

from ..conftest import compose, exhaustive, run_cli

# doctor visits: Poisson counts up to 53; 200 training rows, M = 10 (P = 10 + 55 = 65 parameters)
POISSON = [
    "dataset=doctor_visits",
    "dataset.split.train_size=200",
    "model.num_inducing=10",
    "trainer.max_iters=30",
    "progress=false",
]


# ----- the statistics, by hand ----------------------------------------------------------------------
def test_unbiased_spread_by_hand():
    g = torch.tensor([3.0, 4.0])  # |g| = 5
    G = torch.tensor([[3.0, 4.0], [6.0, 8.0], [0.0, 0.0]])  # g, 2g, 0: mean is exactly g
    s = gradient_statistics(G, g)
    assert s["ref_norm"] == 5.0 and s["repetitions"] == 3
    assert s["cond_i_mean"] == pytest.approx(1.0) and s["cond_i_median"] == pytest.approx(1.0)  # (1, 2, 0)
    assert s["cond_ii_mean"] == pytest.approx(1.0) and s["cond_ii_median"] == pytest.approx(1.0)
    assert s["bias"] == 0.0 and s["bias_rel"] == 0.0
    assert s["mse"] == pytest.approx(50 / 3) and s["mse_rel"] == pytest.approx(50 / 3 / 25)  # (0 + 25 + 25) / 3
    # sample variances 9 and 16: tr(S) / R = 25 / 3
    assert s["bias_noise"] == pytest.approx(math.sqrt(25 / 3))
    assert s["bias_debiased"] == 0.0 and s["bias_chi2"] == 0.0
    assert s["cond_i_se"] == pytest.approx(1.0 / math.sqrt(3))  # std of (1, 2, 0) is 1
    c1, c2 = condition_statistics(G, g)
    assert c1.tolist() == pytest.approx([1, 2, 0]) and c2.tolist() == pytest.approx([1, 2, 0])


def test_biased_estimates_by_hand():
    g = torch.tensor([1.0, 0.0])
    G = torch.tensor([[2.0, 1.0], [2.0, -1.0], [2.0, 0.0], [2.0, 0.0]])  # mean (2, 0): bias (1, 0)
    s = gradient_statistics(G, g)
    assert s["cond_i_mean"] == pytest.approx(2.0) and s["cond_i_se"] == pytest.approx(0.0)
    r5 = math.sqrt(5)
    assert s["cond_ii_mean"] == pytest.approx((2 * r5 + 4) / 4)
    assert s["cond_ii_median"] == pytest.approx((2 + r5) / 2)  # even R: mean of the two middle values
    assert s["bias"] == pytest.approx(1.0) and s["bias_rel"] == pytest.approx(1.0)
    assert s["mse"] == pytest.approx((2 + 2 + 1 + 1) / 4)
    # = |b|^2 + (R-1)/R tr(S): S = diag(0, 2/3)
    assert s["mse"] == pytest.approx(1.0 + 3 / 4 * 2 / 3)
    assert s["bias_noise"] == pytest.approx(math.sqrt(2 / 3 / 4))
    assert s["bias_debiased"] == pytest.approx(math.sqrt(1 - 1 / 6))
    assert s["bias_chi2"] == math.inf  # coordinate 0 is biased without any variance
    assert coordinate_bias(G, g).tolist() == pytest.approx([1.0, 0.0])


def test_statistics_edge_cases():
    s = gradient_statistics(torch.tensor([[1.0, 1.0]]), torch.tensor([1.0, 0.0]))  # R = 1: no spread
    assert s["cond_i_mean"] == 1.0 and s["bias"] == 1.0 and "bias_noise" not in s and "cond_i_se" not in s
    with pytest.raises(NumericalError, match="reference gradient has norm 0"):
        gradient_statistics(torch.ones(3, 2), torch.zeros(2))
    with pytest.raises(NumericalError, match="estimate 2 of 3 is not finite"):
        gradient_statistics(torch.tensor([[1.0, 0], [math.nan, 0], [1, 0]]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        gradient_statistics(torch.ones(3, 2), torch.ones(3))


# ----- the reference gradient -----------------------------------------------------------------------
def test_chunked_reference_equals_autograd_and_quadrature_matches_closed_form(monkeypatch):
    """Probit: the row-chunked gradient equals autograd of the DLM objective, and 100-node adaptive
    quadrature equals the closed form, at a non-trivial q(u)."""
    from gpdlm_cli import build
    from gpdlm_cli import objectives as O
    from gpdlm_cli.estimators import ExactEstimator, QuadratureEstimator

    cfg = bias_cmd.effective_config(
        compose(["dataset=breast_cancer", "dataset.split.train_size=120", "model.num_inducing=8"])
    )
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    model, lik = method.model, method.likelihood
    flat = bias_cmd._Flattener(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.q_u.variational_mean.copy_(torch.randn(8, generator=gen, dtype=torch.float64))
        model.q_u.chol_variational_covar.copy_(
            torch.eye(8, dtype=torch.float64) * 0.5
            + 0.1 * torch.randn(8, 8, generator=gen, dtype=torch.float64).tril(-1)
        )
    x, y, n, beta = data.x_train[:50], data.y_train[:50], splits.n_train, 0.5
    direct = flat(torch.autograd.grad(O.DLM(model, lik, ExactEstimator(), n, beta)(x, y), flat.params))
    monkeypatch.setattr(bias_cmd, "_CHUNK_ELEMENTS", 7)  # 7 rows per chunk: 8 chunks
    chunked = flat(bias_cmd._chunked_gradient(model, lik, ExactEstimator(), x, y, n, beta, flat.params, 1))
    assert flat.size == 8 + 36
    assert torch.allclose(chunked, direct, rtol=1e-12, atol=1e-14)
    quad = flat(
        bias_cmd._chunked_gradient(model, lik, QuadratureEstimator(num_nodes=100), x, y, n, beta, flat.params, 100)
    )
    assert float((quad - direct).norm() / direct.norm()) < 1e-10


# ----- the protocol on Poisson counts ---------------------------------------------------------------
_CACHE: dict = {}


def _poisson(tmp_path_factory, *overrides):
    if overrides not in _CACHE:
        cfg = compose(POISSON + ["tracking.enabled=false", *overrides])
        _CACHE[overrides] = run_bias(cfg, tmp_path_factory.mktemp("bias"), tracker=NullTracker())
    return _CACHE[overrides]


@pytest.mark.slow
def test_ups_is_unbiased_against_quadrature(tmp_path_factory):
    m = _poisson(tmp_path_factory, "estimator=ups")
    assert m["repetitions"] == 100 and m["num_params"] == 65 and m["batch_rows"] == 200
    # the quadrature reference is converged: 50 nodes give the same gradient
    assert m["reference_check_rel"] < 1e-8
    # condition (i): mean 1 within 4 standard errors (observed 0.9977 +- 0.0018)
    assert abs(m["cond_i_mean"] - 1) < 4 * m["cond_i_se"]
    # |mean g_hat - g| is at the level of its own noise floor sqrt(tr S / R) (observed 0.0039 vs 0.0030):
    # chi^2 per coordinate ~ 1 (observed 1.17), and the bias is < 1% of |g| (observed 0.4%)
    assert m["bias"] < 2 * m["bias_noise"]
    assert 0.5 < m["bias_chi2"] < 2.0
    assert m["bias_rel"] < 0.01
    assert m["ups_fallback_fraction"] == 0 and m["ups_acceptance_rate"] > 0.5
    # the paper's 10000-sample bMC reference is itself badly biased here (counts up to 53 sit 7 prior
    # standard deviations from q's mass): 48% away from quadrature, so uPS looks biased against it
    assert m["bmc10000_vs_reference_rel"] > 0.2
    assert m["bias_rel_vs_bmc10000"] > 0.2


@pytest.mark.slow
def test_bmc_bias_shrinks_with_the_number_of_samples(tmp_path_factory):
    m1 = _poisson(tmp_path_factory, "estimator=bmc", "estimator.num_samples=1")
    m100 = _poisson(tmp_path_factory, "estimator=bmc", "estimator.num_samples=100")
    # observed: relative bias 1.15 (L = 1, the ELBO's gradient) and 0.40 (L = 100)
    assert m1["bias_debiased_rel"] > 0.8
    assert m100["bias_debiased_rel"] < 0.6 * m1["bias_debiased_rel"]
    for m in (m1, m100):  # both are biased far beyond their noise floors
        assert m["bias"] > 20 * m["bias_noise"] and m["bias_chi2"] > 100
    assert m1["cond_i_mean"] < 0.5  # observed 0.26: condition (i) holds, but with a small constant
    assert m1["ms_per_estimate"] > 0 and m100["ms_per_estimate"] > 0


# ----- probit: closed-form reference, MLflow -------------------------------------------------------
@pytest.mark.slow
def test_probit_run_uses_the_closed_form_and_is_tracked(tmp_path, mlflow_uri):
    over = [
        "dataset=breast_cancer",
        "dataset.split.train_size=150",
        "model.num_inducing=10",
        "trainer.max_iters=30",
        "estimator=bmc",
        "estimator.num_samples=10",
        "bias.repetitions=40",
        "bias.bmc_reference_samples=2000",
        "bias.batch=100",
        "progress=false",
        f"tracking.uri={mlflow_uri}",
        "tracking.experiment=bias",
    ]
    cfg = compose(over)
    metrics = run_bias(cfg, tmp_path, overrides=over)
    stats = json.loads((tmp_path / "bias_stats.json").read_text())
    assert stats["reference"] == "exact" and stats["likelihood"] == "probit"
    assert "reference_check_rel" not in metrics  # no quadrature involved
    assert metrics["batch_rows"] == 100 and metrics["n_train"] == 150 and "repetitions_vs_bmc2000" not in metrics
    assert len(stats["per_repetition"]["cond_i"]) == 40 and len(stats["per_coordinate"]["bias_vs_bmc2000"]) == 65
    assert (tmp_path / "bias_histograms.png").stat().st_size > 10_000
    # the bMC reference agrees with the closed form for probit (observed 0.3%)
    assert metrics["bmc2000_vs_reference_rel"] < 0.05

    client = MlflowClient(mlflow_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("bias").experiment_id])
    assert run.info.status == "FINISHED"
    tags, params = run.data.tags, run.data.params
    assert tags["gpdlm.command"] == "bias" and tags["gpdlm.bias_reference"] == "exact"
    assert tags["gpdlm.overrides"] == " ".join(over) and len(tags["gpdlm.dataset_fingerprint"]) == 16
    assert tags["gpdlm.config_hash"] != config_hash(cfg)  # never mistaken for a `train` run of this config
    assert params["model.variant"] == "fixed" and params["bias.repetitions"] == "40"
    for k in (
        "cond_i_mean",
        "cond_i_median",
        "cond_ii_mean",
        "cond_ii_median",
        "bias",
        "bias_rel",
        "mse",
        "ms_per_estimate",
        "cond_i_mean_vs_bmc2000",
        "bias_rel_vs_bmc2000",
        "mean_block_bias_rel",
    ):
        assert run.data.metrics[k] == pytest.approx(metrics[k]), k
    assert [p.step for p in client.get_metric_history(run.info.run_id, "train_loss")] == list(range(1, 31))
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "bias_stats.json", "bias_histograms.png"} <= arts


# ----- bad input --------------------------------------------------------------------------------------
BAD = [
    (["bias.repetitions=0"], "the 'repetitions' parameter of bias must be an integer >= 1; got 0"),
    (["bias.reference_nodes=1"], "the 'reference_nodes' parameter of bias"),
    (["bias.bmc_reference_samples=-1"], "the 'bmc_reference_samples' parameter of bias"),
    (["bias.batch=0"], "the 'batch' parameter of bias"),
    (["estimator=exact"], "gpdlm bias studies stochastic estimators: bmc, smooth_bmc, ups; got estimator=exact"),
    (["estimator=quadrature"], "studies stochastic estimators"),
    (["estimator=auto"], "studies stochastic estimators"),
    (["model=svgp"], "gpdlm bias studies the DLM gradient: use model=dlm"),
    (["estimator=bmc", "estimator.num_samples=0"], "the 'num_samples' parameter of estimator=bmc"),
    (["estimator=smooth_bmc", "estimator.nu=-1"], "the 'nu' parameter of estimator=smooth_bmc"),
    (
        ["estimator=ups", "estimator.sampler=exact", "likelihood=poisson_exp", "dataset=doctor_visits"],
        "sampler=exact needs likelihood=gaussian or probit",
    ),
    (["estimator=bmc", "objective.beta=-1"], "the 'beta' parameter of objective"),
    (["estimator=bmc", "model.num_inducing=5000"], "an integer in [1, n_train=690]"),
    (["estimator=bmc", "likelihood=probit"], "likelihood=probit is for classification targets"),
]


# the fast lane: the table's first 3 cases; make test, all
@pytest.mark.parametrize("overrides,message", exhaustive(BAD, fast=3, ids=lambda c: " ".join(c[0])))
def test_bad_input_is_caught_before_any_run(tmp_path, overrides, message):
    tracker = NullTracker()
    with pytest.raises(GpdlmError) as info:
        run_bias(compose(["progress=false"] + overrides), tmp_path, tracker=tracker)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1
    assert tracker.status is None  # no run was started


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    """`gpdlm bias <bad>` through the dispatcher, in this process."""
    db = tmp_path / "mlflow.db"
    rc, lines = run_cli(["bias", "estimator=exact", f"tracking.uri=sqlite:///{db}"], tmp_path, capsys)
    assert rc == 2, lines
    assert lines == [
        "gpdlm: error: gpdlm bias studies stochastic estimators: bmc, smooth_bmc, ups; got estimator=exact "
        "(it is deterministic: no variance, and exact/quadrature are the reference)"
    ]
    assert not db.exists()


@pytest.mark.slow
def test_cli_multirun_over_estimators(tmp_path, mlflow_uri, monkeypatch, capsys):
    """`gpdlm bias -m ...` through the real dispatcher and Hydra, in-process (a subprocess would spend
    most of its time importing torch, mlflow, matplotlib and scikit-learn again)."""
    from hydra.core.global_hydra import GlobalHydra

    from gpdlm_cli import cli
    from gpdlm_cli.sweep import callback as sweep

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sweep, "OUTCOMES", [])
    # `++`: Hydra checks the non-swept overrides against the default estimator (auto, no num_samples)
    args = [
        "bias",
        "-m",
        "estimator=bmc,ups",
        "++estimator.num_samples=5",
        "dataset=doctor_visits",
        "dataset.split.train_size=80",
        "model.num_inducing=5",
        "trainer.max_iters=10",
        "bias.repetitions=8",
        "bias.bmc_reference_samples=500",
        "progress=false",
        f"tracking.uri={mlflow_uri}",
        "tracking.experiment=sweep",
    ]
    root = logging.getLogger()
    handlers, level, threads = list(root.handlers), root.level, torch.get_num_threads()
    try:
        rc = cli.main(args)
    finally:  # undo Hydra's global state: its config module and its job logging
        GlobalHydra.instance().clear()
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        root.setLevel(level)
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "2 finished, 0 skipped, 0 failed" in err
    client = MlflowClient(mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
    parents = [r for r in runs if r.data.tags.get("gpdlm.sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert sorted(r.data.params["estimator.name"] for r in children) == ["bmc", "ups"]
    assert all(r.info.status == "FINISHED" and r.data.tags["gpdlm.command"] == "bias" for r in children)
    assert all(math.isfinite(r.data.metrics["cond_i_mean_vs_bmc500"]) for r in children)
    # both estimators were studied at the same point: the same reference gradient
    assert len({round(r.data.metrics["ref_norm"], 12) for r in children}) == 1
    assert len(list(tmp_path.glob("outputs/multirun/*/*/*/bias_stats.json"))) == 2
