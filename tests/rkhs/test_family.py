"""The RKHS family and feature maps through `gpdlm train`'s real path: what users run, what gets
logged, bad input, and that `features=none` leaves every existing run bit-identical."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpdlm_cli import build
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import NoRunTracker, compose, exhaustive

SMALL = ["dataset.split.train_size=200", "progress=false", "tracking.enabled=false", "threads=1"]


def run(tmp_path, *overrides):
    cfg = compose([*SMALL, *overrides])
    tracker = NullTracker()
    return run_train(cfg, tmp_path, tracker=tracker), tracker, cfg


BAD = [
    (
        ["model=scgd", "kernel=rbf"],
        "model=scgd needs a finite feature map, kernel=linear or kernel=rff (kernel=rbf has none)",
    ),
    (["model=minimax", "kernel.name=matern52"], "model=minimax needs a finite feature map"),
    (
        ["model=bsgd", "kernel=rff", "likelihood=probit"],
        "model=bsgd maximises the Gaussian marginal likelihood: use likelihood=gaussian",
    ),
    (
        ["model=scgd", "kernel=linear", "features=nn", "features.widths=[128,0]"],
        "the 'widths' parameter of features=nn must be a non-empty list of integers >= 1; got [128, 0]",
    ),
    (
        ["model=svgp", "features=nn", "features.widths=[]"],
        "the 'widths' parameter of features=nn must be a non-empty list",
    ),
    (
        ["model=dlm", "features=nn", "features.activation=gelu"],
        "the 'activation' parameter of features=nn must be one of relu, tanh",
    ),
    (
        ["model=scgd", "features.name=lstm", "kernel=linear"],
        "the 'name' parameter of features must be one of none, nn; got 'lstm'",
    ),
    (
        ["model=scgd", "kernel=linear", "kernel.normaliser=mean"],
        "the 'normaliser' parameter of kernel=linear must be one of data, width; got 'mean'",
    ),
    (
        ["model=scgd", "kernel=rff", "kernel.num_features=0"],
        "the 'num_features' parameter of kernel=rff must be an even integer >= 2",
    ),
    (
        ["model=scgd", "kernel=rff", "kernel.num_features=7"],
        "must be an even integer >= 2 (form=sincos: d/2 sin/cos pairs); got 7",
    ),
    (
        ["model=scgd", "kernel=rff", "kernel.form=cos", "kernel.num_features=0"],
        "the 'num_features' parameter of kernel=rff must be an integer >= 1",
    ),
    (
        ["model=scgd", "kernel=rff", "kernel.lengthscale=0"],
        "the 'lengthscale' parameter of kernel=rff must be a finite float in (0, inf)",
    ),
    (
        ["model=scgd", "kernel=linear", "model.b0=0"],
        "the 'b0' parameter of model=scgd must be a float in (0, 1]; got 0",
    ),
    (
        ["model=scgd", "kernel=linear", "model.b0=1.5"],
        "the 'b0' parameter of model=scgd must be a float in (0, 1]; got 1.5",
    ),
    (
        ["model=scgd", "kernel=linear", "model.b0=0.9", "model.b_min=0.95"],
        "the 'b_min' parameter of model=scgd must be a float in [0, b0=0.9]",
    ),
    (
        ["model=scgd", "kernel=linear", "model.b_decay=-0.5"],
        "the 'b_decay' parameter of model=scgd must be a finite float >= 0",
    ),
    (
        ["model=minimax", "kernel=linear", "model.mu=0"],
        "the 'mu' parameter of model=minimax must be a finite float in (0, inf); got 0",
    ),
    (
        ["model=minimax", "kernel=linear", "model.mu=-1.0"],
        "the 'mu' parameter of model=minimax must be a finite float in (0, inf)",
    ),
    (
        ["model=minimax", "kernel=linear", "model.mu_growth=0.5"],
        "the 'mu_growth' parameter of model=minimax must be a finite float >= 1",
    ),
    (
        ["model=minimax", "kernel=linear", "model.mu=10", "model.mu_max=5"],
        "the 'mu_max' parameter of model=minimax must be a float >= mu=10",
    ),
    (
        ["model=minimax", "kernel=linear", "model.exact_penalty=1"],
        "the 'exact_penalty' parameter of model=minimax must be true or false; got 1",
    ),
    (
        ["model=minimax", "kernel=linear", "model.w_max=0"],
        "the 'w_max' parameter of model=minimax must be a float in (0, inf] or null; got 0",
    ),
    (
        ["model=bsgd", "kernel=linear", "model.batching=knn"],
        "the 'batching' parameter of model=bsgd must be 'uniform' or 'nearest'",
    ),
    (
        ["model=svgp", "kernel=linear", "model.num_inducing=20"],
        "kernel=linear has rank d=8: model.num_inducing must be <= d",
    ),
]


# the fast lane: the table's first 3 cases; make test, all
@pytest.mark.parametrize("overrides,message", exhaustive(BAD, fast=3, ids=lambda c: " ".join(c[0])))
def test_bad_input_is_one_line_before_any_run(tmp_path, overrides, message):
    cfg = compose([*SMALL, "trainer.max_iters=5", *overrides])
    with pytest.raises(GpdlmError) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "metrics.json").exists()


def test_the_linear_kernel_starts_at_the_targets_scale_and_learns_it(tmp_path):
    """`model=scgd features=nn` with the default 128-128 network and kernel=linear on concrete (90/10, no
    validation): the mean of k(x, x) = ||phi(x)||^2 over the training inputs is kernel.outputscale = 1 at
    the start (rel 1e-12 against numpy's mean ||g(x)||^2 of the network's outputs; var(y) = 1.0), where
    the width normaliser gave 0.033 (kernel.normaliser=width, kept: s ||g||^2 / 128); the outputscale is
    a parameter of the `kernel` group and moves in 2 epochs of training. SVGP on the same features and
    kernel starts at the same mean k(x, x). features=none keeps m = d_z (= mean ||x||^2 on standardised
    inputs)."""
    from gpdlm_cli.training import run_stages

    data_keys = ["dataset.split.val_fraction=0", "dataset.split.test_fraction=0.1"]
    cfg = compose(
        [
            "model=scgd",
            "features=nn",
            *data_keys,
            "trainer.batch_size=32",
            "trainer.max_iters=null",
            "trainer.max_epochs=2",
            "trainer.eval_every=0",
            "trainer.lr=0.1",
            "trainer.keep_best=null",
            "progress=false",
            "threads=1",
        ]
    )
    assert (cfg.kernel.name, list(cfg.features.widths)) == ("linear", [128, 128])
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    model = method.model
    with torch.no_grad():
        z = model.input_map(data.x_train).cpu().numpy()
        k_diag = model.features(data.x_train).square().sum(1).cpu().numpy()
    assert k_diag.mean() == pytest.approx(1.0, rel=1e-12)
    assert float(data.y_train.var()) == pytest.approx(1.0, rel=2e-3)
    assert float(model.kernel_map.normaliser) == pytest.approx(np.mean(np.sum(z**2, 1)), rel=1e-12)
    assert np.mean(np.sum(z**2, 1)) / 128 == pytest.approx(0.033, abs=1e-3)  # what the width normaliser gives
    s = model.kernel_map.raw_outputscale
    assert any(p is s for p in method.stages[0].groups["kernel"])
    s0 = float(model.kernel_map.outputscale.detach())
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=data.x_val.shape[0])
    run_stages(method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(0))
    assert abs(float(model.kernel_map.outputscale.detach()) - s0) > 1e-3

    width = build.build_method(
        compose(["model=scgd", "features=nn", *data_keys, "kernel.normaliser=width"]), data, splits.task
    )
    with torch.no_grad():
        assert float(width.model.features(data.x_train).square().sum(1).mean()) == pytest.approx(0.033, abs=1e-3)
    svgp = build.build_method(
        compose(
            ["model=svgp", "features=nn", "kernel=linear", *data_keys, "trainer.batch_size=16", "model.num_inducing=16"]
        ),
        data,
        splits.task,
    )
    with torch.no_grad():
        g = svgp.model.features(data.x_train)
        kxx = svgp.model.gp.covar_module(g, diag=True)
    assert float(kxx.mean()) == pytest.approx(1.0, rel=1e-12)
    none = build.build_method(compose(["model=scgd", "features=none", *data_keys]), data, splits.task)
    assert float(none.model.kernel_map.normaliser) == data.x_train.shape[1]


def test_rkhs_models_default_to_the_linear_kernel():
    """model=scgd|minimax|bsgd alone choose kernel=linear (a finite map); an explicit kernel wins."""
    for model in ("scgd", "minimax", "bsgd"):
        assert compose([f"model={model}"]).kernel.name == "linear"
        assert compose([f"model={model}", "kernel=rff"]).kernel.name == "rff"
    assert compose(["model=svgp"]).kernel.name == "rbf"


# recorded on main at 8ba5895 (before feature maps existed) with the overrides below
BEFORE_FEATURES = {
    "svgp": {
        "val_nll": 4.1982984268100445,
        "val_rmse": 16.011280121725378,
        "test_nll": 4.247932659626958,
        "test_rmse": 16.925753178682562,
    },
    "dlm": {
        "val_nll": 3.401043259340948,
        "val_rmse": 6.903783199012704,
        "test_nll": 3.5220919560293775,
        "test_rmse": 8.085043529928493,
    },
}


@pytest.mark.parametrize("model,extra", [("svgp", ["trainer.batch_size=50"]), ("dlm", ["kernel.ard=true"])])
def test_features_none_keeps_existing_runs_bit_identical(tmp_path, model, extra):
    """A 40-iteration svgp (minibatch) and dlm (ARD, full batch) run on 200 concrete rows give the
    metrics recorded before feature maps were added: to rel 1e-6, since the hot path computes the RBF
    itself (``models/kernels.py``, 2026-11-27; before it these were the same floats, rel 1e-13): its
    last-bit rounding differs from gpytorch's, and 40 Adam steps carry that to 5e-10 (svgp) and 5e-8
    (dlm) relative."""
    metrics, _, cfg = run(
        tmp_path, f"model={model}", *extra, "model.num_inducing=10", "trainer.max_iters=40", "trainer.eval_every=20"
    )
    assert cfg.features.name == "none"
    for k, v in BEFORE_FEATURES[model].items():
        assert metrics[k] == pytest.approx(v, rel=1e-6), k


@pytest.mark.slow
def test_svgp_and_dlm_on_network_features(tmp_path):
    """`model=svgp features=nn trainer.batch_size=16 model.num_inducing=16` (the paper's SVGP column,
    here with a 16-16 network): the GP sees g(x), its inducing points live in feature space (M x 16,
    starting at k-means centres of g(x)), the network is the group `features` and is trained
    jointly; with trainer.lr_scale.features=0 it stays at its initialisation. `model=dlm
    features=nn` and the fixed sq_dlm variant run too."""
    common = [
        "model=svgp",
        "features=nn",
        "features.widths=[16,16]",
        "trainer.batch_size=16",
        "model.num_inducing=16",
        "trainer.max_iters=30",
        "trainer.eval_every=0",
    ]
    cfg = compose([*SMALL, *common])
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    assert method.group_names == ["variational", "inducing", "kernel", "likelihood", "features"]
    net = method.model.features
    Z0 = method.model.inducing_points.detach().clone()
    assert Z0.shape == (16, 16)
    from sklearn.cluster import KMeans

    g = net(data.x_train).detach().cpu().numpy()
    km = KMeans(n_clusters=16, n_init=1, random_state=0, max_iter=100).fit(g)
    np.testing.assert_allclose(Z0.cpu().numpy(), km.cluster_centers_, rtol=1e-10, atol=1e-12)

    w0 = [p.detach().clone() for p in net.parameters()]
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=data.x_val.shape[0])
    from gpdlm_cli.training import run_stages

    run_stages(method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(0))
    assert all(not torch.equal(a, b) for a, b in zip(w0, net.parameters()))

    frozen, _, _ = run(tmp_path / "frozen", *common, "trainer.lr_scale={features:0}", "trainer.lr=0.01")
    assert math.isfinite(frozen["test_nll"])
    for model in (["model=dlm", "trainer.batch_size=32"], ["model=sq_dlm", "model.variant=fixed"]):
        m, _, _ = run(
            tmp_path / model[0],
            *model,
            "features=nn",
            "features.widths=[8]",
            "model.num_inducing=8",
            "trainer.max_iters=20",
            "trainer.eval_every=0",
        )
        assert math.isfinite(m["test_nll"]) and math.isfinite(m["test_rmse"])


def test_train_nlml_monitor_is_in_target_units_before_any_evaluation():
    """The monitor adds log s_y from the data itself, whatever else ran first: keep_best by
    train_nlml must not see its first point without the log s_y shift (2.8 nats on concrete)."""
    cfg = compose([*SMALL, "model=scgd", "features=none", "kernel=rff", "kernel.num_features=16"])
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    assert splits.y_std > 10
    assert method.monitors["train_nlml"]() == pytest.approx(method.model.nlml() + math.log(splits.y_std), rel=1e-12)


@pytest.mark.parametrize("lr,restored", [(0.01, False), (1.0, True)])
def test_scgd_run_logs_train_nlml_in_target_units_and_restores_its_best_iterate(tmp_path, lr, restored):
    """`model=scgd features=nn kernel=linear trainer.batch_size=32 trainer.keep_best=train_nlml`
    (a 16-16 network, 6 epochs of 6 steps, evaluated every epoch): train_nlml = train_nlml_norm + log s_y
    with s_y the training targets' standard deviation, and the final train_nlml is the minimum of the
    per-epoch curve. Both cases of keep_best are asserted, neither can pass by skipping: at lr 0.01 the
    curve falls to the end, the final iterate (step 36, not an in-loop evaluation) is best_iteration and
    beats every logged point; at lr 1.0 it rises after epoch 1, best_iteration is that in-loop step and
    the restored parameters give exactly its logged value. The parameter groups are features, kernel,
    likelihood, weights; iter_ms and peak_memory_mb are logged; ftilde_gap is a step metric (< 1 at lr
    0.01)."""
    metrics, tracker, cfg = run(
        tmp_path,
        "model=scgd",
        "features=nn",
        "features.widths=[16,16]",
        "kernel=linear",
        "trainer.batch_size=32",
        "trainer.max_iters=null",
        "trainer.max_epochs=6",
        "trainer.eval_every=0",
        "trainer.eval_every_epochs=1",
        "trainer.keep_best=train_nlml",
        "trainer.stop_rule=none",
        f"trainer.lr={lr}",
    )
    _, splits, _ = build.load_data(cfg)
    assert metrics["train_nlml"] == pytest.approx(metrics["train_nlml_norm"] + math.log(splits.y_std), rel=1e-12)
    curve = dict(tracker.steps["train_nlml"])  # the in-loop evaluations (epochs 1-5), the final iterate's (6)
    last = metrics["iterations"]
    assert len(curve) == 6 and last == 6 * (splits.n_train // 32) and max(curve) == last
    in_loop = {s: v for s, v in curve.items() if s != last}
    assert metrics["train_nlml"] <= min(curve.values()) + 1e-12
    if restored:
        assert metrics["best_iteration"] in in_loop and metrics["best_iteration"] < last
        assert metrics["train_nlml"] == pytest.approx(curve[metrics["best_iteration"]], rel=1e-12)
    else:  # the selected last step is on the curve, with the run's value
        assert metrics["best_iteration"] == last and metrics["train_nlml"] < min(in_loop.values())
        assert metrics["train_nlml"] == pytest.approx(curve[last], rel=1e-12)
    assert metrics["feature_dim"] == 16 and metrics["iter_ms"] > 0 and metrics["peak_memory_mb"] > 0
    assert "ftilde_gap" in tracker.steps and 0 <= metrics["ftilde_gap"] < (1 if lr < 0.1 else math.inf)
    assert tracker.tags["gpdlm.train_nlml_kernel"] == "linear (d=16)"


@pytest.mark.slow
def test_minimax_and_bsgd_on_rff_log_the_exact_kernel_nlml(tmp_path):
    """`model=minimax features=nn kernel=rff` logs penalty_gap and mu (here, with
    model.exact_penalty=false, mu doubles every epoch from 2: 2, 4, 8 over 3 epochs), and
    train_nlml_exact_kernel (n_train <= model.exact_nlml_max_n);
    A stays >= s2 I (smallest eigenvalue of the final A >= s2 (1 - 1e-8)) and B in the unit ball.
    `model=bsgd model.batching=nearest` trains on nearest-neighbour batches."""
    from gpdlm_cli.training import run_stages

    cfg = compose(
        [
            *SMALL,
            "model=minimax",
            "features=nn",
            "features.widths=[8,8]",
            "kernel=rff",
            "kernel.num_features=24",
            "trainer.batch_size=16",
            "trainer.max_iters=null",
            "trainer.max_epochs=3",
            "trainer.eval_every=0",
            "trainer.eval_every_epochs=1",
            "model.mu=2",
            "model.mu_growth=2",
            "model.exact_penalty=false",
            "trainer.lr=0.01",
            "trainer.keep_best=null",
        ]
    )
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=data.x_val.shape[0])
    logged = []

    def evaluate():
        logged.append(method.monitors["mu"]())
        return {}

    run_stages(
        method.stages,
        data.x_train,
        data.y_train,
        settings,
        generator=torch.Generator().manual_seed(0),
        evaluate=evaluate,
    )
    objective = method.stages[0].objective
    with torch.no_grad():
        assert float(torch.linalg.eigvalsh(objective.A()).min()) >= float(method.model.noise) * (1 - 1e-8)
        assert float(torch.linalg.norm(objective.B)) <= 1 + 1e-12
        assert torch.allclose(objective.B, objective.B.T)
    assert logged == [2.0, 4.0] and objective.mu == 8.0
    diag = method.diagnostics()
    assert math.isfinite(diag["train_nlml_exact_kernel"]) and diag["penalty_gap"] >= 0

    metrics, tracker, _ = run(
        tmp_path,
        "model=bsgd",
        "kernel=rff",
        "kernel.num_features=24",
        "model.batching=nearest",
        "trainer.batch_size=16",
        "trainer.max_iters=20",
        "trainer.eval_every=10",
    )
    assert math.isfinite(metrics["train_nlml"]) and "train_nlml_exact_kernel" in metrics


@pytest.mark.slow
def test_minimax_default_is_an_exact_penalty_and_the_papers_mu_is_labelled_and_warns(tmp_path, capsys):
    """`model=minimax` with its defaults (features=nn 8-8, kernel=rff d = 24, batch 16, 3 epochs): mu starts
    at exact_penalty_bound(F(theta_0)) and at every epoch start is the bound of the current F (numpy's
    ||F|| ||c|| + L, rel 1e-10), so at least ||F|| ||F^-1||; the tag gpdlm.rkhs_setting says "exact
    penalty" and no warning is printed. `model.exact_penalty=false` (the paper's mu = 1): mu stays 1,
    the tag says "inexact penalty (the paper)", the final metrics have penalty_exact = 0 and mu_exact_bound
    > mu_local_threshold > 1, and the run prints one warning line with penalty_gap."""
    from gpdlm_cli.training import run_stages

    common = [
        "model=minimax",
        "features=nn",
        "features.widths=[8,8]",
        "kernel=rff",
        "kernel.num_features=24",
        "trainer.batch_size=16",
        "trainer.max_iters=null",
        "trainer.max_epochs=3",
        "trainer.eval_every=0",
        "trainer.eval_every_epochs=1",
        "trainer.lr=0.01",
        "trainer.keep_best=null",
    ]
    cfg = compose([*SMALL, *common])
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    objective = method.stages[0].objective
    model = method.model

    def numpy_bound():
        F = model.full_F().cpu().numpy()
        s2 = float(model.noise.detach())
        lam = np.linalg.eigvalsh(F)
        c = np.log1p((lam - s2) / s2) / (lam - s2)
        return np.linalg.norm(F) * np.linalg.norm(c) + np.sum(np.log(lam / s2)), np.linalg.norm(F) * np.linalg.norm(
            np.linalg.inv(F)
        )

    seen = []

    def evaluate():  # after epoch k, at the parameters the next epoch starts from
        seen.append((float(objective.mu), *numpy_bound()))
        return {}

    objective.initialise()
    start = numpy_bound()
    assert float(objective.mu) == pytest.approx(start[0], rel=1e-10) and float(objective.mu) > start[1]
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=data.x_val.shape[0])
    run_stages(
        method.stages,
        data.x_train,
        data.y_train,
        settings,
        generator=torch.Generator().manual_seed(0),
        evaluate=evaluate,
    )
    assert len(seen) == 2
    assert seen[0][0] == pytest.approx(start[0], rel=1e-10)  # epoch 0 ran at the start's bound
    assert float(objective.mu) == pytest.approx(seen[-1][1], rel=1e-10)  # epoch 2 at the bound after epoch 1
    assert method.tags["gpdlm.rkhs_setting"].startswith("minimax exact penalty")

    capsys.readouterr()
    metrics, tracker, _ = run(tmp_path / "exact", *common)
    assert "warning" not in capsys.readouterr().err
    assert {"mu_exact_bound", "mu_local_threshold", "penalty_exact"} <= set(metrics)
    metrics, tracker, _ = run(tmp_path / "paper", *common, "model.exact_penalty=false")
    err = capsys.readouterr().err
    assert metrics["mu"] == 1.0 and metrics["penalty_exact"] == 0.0
    assert metrics["mu_exact_bound"] > metrics["mu_local_threshold"] > 1
    assert tracker.tags["gpdlm.rkhs_setting"] == "minimax inexact penalty (the paper): mu = 1"
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "model=minimax ended with mu = 1, below ||F|| ||F^-1||" in warning[0]
    assert f"penalty_gap = {metrics['penalty_gap']:.3g}" in warning[0]


def test_bsgd_refuses_a_full_batch_it_cannot_factorise(tmp_path, monkeypatch):
    """model=bsgd with trainer.batch_size=null is the exact n x n GP: refused above the cap (here
    lowered to 100 rows) before any run, with the remedy."""
    from gpdlm_cli.methods import rkhs

    monkeypatch.setattr(rkhs, "BSGD_MAX_FULL_BATCH", 100)
    cfg = compose([*SMALL, "model=bsgd", "kernel=linear", "trainer.max_iters=5"])
    with pytest.raises(
        GpdlmError, match=r"model=bsgd on the full batch is the exact 200 x 200 GP; set trainer.batch_size"
    ):
        run_train(cfg, tmp_path, tracker=NoRunTracker())
