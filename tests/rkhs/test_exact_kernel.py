"""BSGD on the exact Gaussian kernel of the network's features (`model=bsgd features=nn kernel=rbf`),
as Shoham & Avron ran it in Tables 3 and 5: the minibatch objective, its gradient, the full-data
posterior (exact, and the subset-of-data approximation above model.posterior_max_rows) and the run,
each against numpy/scipy computations written here (the network's forward and backward pass
included)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from gpdlm_cli import build
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import NoRunTracker, compose

SMALL = ["dataset.split.train_size=200", "progress=false", "tracking.enabled=false", "threads=1"]
EXACT = ["model=bsgd", "features=nn", "features.widths=[16,16]", "kernel=rbf", "trainer.batch_size=24"]
ELL, SCALE, NOISE = 2.0, 1.5, 0.2  # a point away from the initial (1, 1, 0.1)


def built(*overrides):
    cfg = compose([*SMALL, *EXACT, *overrides])
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    return method, data, splits, cfg


def set_hyperparameters(method, ell=ELL, scale=SCALE, noise=NOISE):
    k = method.model.kernel
    with torch.no_grad():
        k.base_kernel.lengthscale = ell
        k.outputscale = scale
        method.likelihood.gp.noise = noise


def network(model):
    """(W1, c1, W2, c2) of the 2-layer ReLU input map, as numpy."""
    return [p.detach().cpu().numpy().astype(float) for p in model.input_map.parameters()]


def numpy_features(params, x):
    W1, c1, W2, c2 = params
    a1 = x @ W1.T + c1
    h1 = np.maximum(a1, 0)
    a2 = h1 @ W2.T + c2
    return np.maximum(a2, 0), (a1, h1, a2)


def rbf(z1, z2, ell, s):
    d2 = ((z1[:, None, :] - z2[None, :, :]) ** 2).sum(-1)
    return s * np.exp(-d2 / (2 * ell**2))


def hyper(method):
    k = method.model.kernel
    with torch.no_grad():
        return float(k.base_kernel.lengthscale), float(k.outputscale), float(method.likelihood.noise)


def test_the_minibatch_objective_and_its_gradient_are_numpys_rbf_nlml():
    """On a batch of 24 concrete rows with a 16-16 ReLU network at (ell, s, s2) = (2, 1.5, 0.2), the
    BSGD objective is -log N(y_S | 0, K_SS + s2 I) / b with K_SS = s exp(-||z_i - z_j||^2 / (2 ell^2)),
    z = g(x) from numpy's forward pass of the network's weights: scipy's multivariate normal to 1e-12.
    Its gradient (autograd) equals numpy's closed form dNLML/dK = (A^-1 - alpha alpha^T) / (2b) chained
    to ell, s, s2 (through their softplus constraints) and, by numpy backpropagation through both ReLU
    layers, to every network weight, rel 1e-9."""
    method, data, _, _ = built()
    set_hyperparameters(method)
    objective = method.stages[0].objective
    x, y = data.x_train[:24], data.y_train[:24]
    value = objective(x, y)
    params = list(method.stages[0].params)
    grads = torch.autograd.grad(value, params)

    X, Y = x.cpu().numpy(), y.cpu().numpy()
    net = network(method.model)
    Z, (a1, h1, a2) = numpy_features(net, X)
    ell, s, s2 = hyper(method)
    b = len(Y)
    K = rbf(Z, Z, ell, s)
    A = K + s2 * np.eye(b)
    expected = -scipy.stats.multivariate_normal(np.zeros(b), A).logpdf(Y) / b
    assert float(value.detach()) == pytest.approx(expected, rel=1e-12)

    Ainv = np.linalg.inv(A)
    alpha = Ainv @ Y
    G = (Ainv - np.outer(alpha, alpha)) / (2 * b)  # dNLML/dK (and d/d(s2 I))
    D2 = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    d_ell = np.sum(G * K * D2 / ell**3)
    d_s = np.sum(G * K / s)
    d_s2 = np.trace(G)
    # dNLML/dz_i = sum_j 2 G_ij dK_ij/dz_i = -(2 / ell^2) sum_j G_ij K_ij (z_i - z_j)
    GK = G * K
    dZ = -(2 / ell**2) * (GK.sum(1)[:, None] * Z - GK @ Z)
    W1, c1, W2, c2 = net
    da2 = dZ * (a2 > 0)
    dW2, dc2 = da2.T @ h1, da2.sum(0)
    da1 = (da2 @ W2) * (a1 > 0)
    dW1, dc1 = da1.T @ X, da1.sum(0)
    # the raw parameters: softplus for ell and s (gpytorch's Positive), softplus + 1e-6 for s2 (GreaterThan)
    chain = {
        "raw_lengthscale": d_ell * (1 - np.exp(-ell)),
        "raw_outputscale": d_s * (1 - np.exp(-s)),
        "raw_noise": d_s2 * (1 - np.exp(-(s2 - 1e-6))),
    }
    names = {id(p): n.rsplit(".", 1)[-1] for n, p in method.model.named_parameters()}
    nets = iter([dW1, dc1, dW2, dc2])
    seen = set()
    for p, g in zip(params, grads):
        name = names[id(p)]
        want = chain[name] if name in chain else next(nets)
        np.testing.assert_allclose(g.cpu().numpy().reshape(np.shape(want)), want, rtol=1e-9, atol=1e-13)
        seen.add(name)
    assert seen == {"weight", "bias", "raw_lengthscale", "raw_outputscale", "raw_noise"}


def numpy_posterior(Z, Y, Zs, ell, s, s2):
    """Dense GP: per-point NLML (scipy) and the latent predictive mean and variance at Zs."""
    n = len(Y)
    A = rbf(Z, Z, ell, s) + s2 * np.eye(n)
    nlml = -scipy.stats.multivariate_normal(np.zeros(n), A).logpdf(Y) / n
    Ks = rbf(Zs, Z, ell, s)
    mean = Ks @ np.linalg.solve(A, Y)
    var = s - np.einsum("ij,ji->i", Ks, np.linalg.solve(A, Ks.T))
    return nlml, mean, var


def test_train_nlml_and_prediction_are_the_dense_numpy_posterior_after_training():
    """After 2 epochs of BSGD (batch 24, the default optimiser), the monitor train_nlml is scipy's
    full-data per-point NLML of the RBF kernel on numpy's g(x) of all 200 training rows plus log s_y,
    and the latent predictive mean and variance at the test rows are numpy's dense GP posterior
    K_*n (K + s2 I)^-1 y and s - diag(K_*n (K + s2 I)^-1 K_n*): rel 1e-9. The run's test RMSE and NLL
    (gpdlm's metrics) are those of that posterior with the noise added (target units)."""
    from gpdlm_cli.metrics.predictive import predictive_metrics
    from gpdlm_cli.training import run_stages

    method, data, splits, cfg = built(
        "trainer.max_iters=null", "trainer.max_epochs=2", "trainer.eval_every=0", "trainer.keep_best=null"
    )
    w0 = [p.detach().clone() for p in method.model.input_map.parameters()]
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=data.x_val.shape[0])
    run_stages(method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(0))
    assert all(not torch.equal(a, b) for a, b in zip(w0, method.model.input_map.parameters()))
    model = method.model
    assert model.exact and model.posterior_rows == 200

    net = network(model)
    Z, _ = numpy_features(net, data.x_train.cpu().numpy())
    Zs, _ = numpy_features(net, data.x_test.cpu().numpy())
    ell, s, s2 = hyper(method)
    nlml, mean, var = numpy_posterior(Z, data.y_train.cpu().numpy(), Zs, ell, s, s2)
    y_std = float(splits.y_std)
    assert method.monitors["train_nlml"]() == pytest.approx(nlml + math.log(y_std), rel=1e-9)
    mu, v = model.marginals(data.x_test)
    np.testing.assert_allclose(mu.cpu().numpy(), mean, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(v.cpu().numpy(), var, rtol=1e-8, atol=1e-10)

    metrics = predictive_metrics(model, method.likelihood, data.x_test, data.y_test, y_std=y_std)
    yt = data.y_test.cpu().numpy()
    assert metrics["test_rmse"] == pytest.approx(np.sqrt(np.mean((mean - yt) ** 2)) * y_std, rel=1e-9)
    nll = -scipy.stats.norm(mean, np.sqrt(var + s2)).logpdf(yt).mean() + math.log(y_std)
    assert metrics["test_nll"] == pytest.approx(nll, rel=1e-9)
    diag = method.diagnostics()
    assert diag["posterior_rows"] == 200 and diag["train_nlml_exact_kernel"] == pytest.approx(
        nlml + math.log(y_std), rel=1e-9
    )
    assert (diag["lengthscale"], diag["outputscale"], diag["noise"]) == pytest.approx((ell, s, s2), rel=1e-12)


def test_above_posterior_max_rows_the_posterior_is_the_exact_gp_of_a_fixed_seeded_subset():
    """model.posterior_max_rows=60 on 200 training rows: the posterior conditions on 60 distinct rows,
    the same for the same seed and others for another; train_nlml is scipy's per-point NLML of those
    rows and the predictive numpy's dense posterior on them (rel 1e-9); the tag and posterior_rows
    say so, and no train_nlml_exact_kernel is logged (it would not be the full data's)."""
    method, data, splits, _ = built("model.posterior_max_rows=60")
    set_hyperparameters(method)
    model = method.model
    rows = model.rows.cpu().numpy()
    assert not model.exact and model.posterior_rows == 60
    assert len(set(rows.tolist())) == 60 and np.all(np.diff(rows) > 0) and rows.max() < 200
    again, _, _, _ = built("model.posterior_max_rows=60")
    other, _, _, _ = built("model.posterior_max_rows=60", "seed=1")
    assert np.array_equal(again.model.rows.cpu().numpy(), rows) and not np.array_equal(
        other.model.rows.cpu().numpy(), rows
    )

    net = network(model)
    Z, _ = numpy_features(net, data.x_train.cpu().numpy()[rows])
    Zs, _ = numpy_features(net, data.x_test.cpu().numpy())
    nlml, mean, var = numpy_posterior(Z, data.y_train.cpu().numpy()[rows], Zs, *hyper(method))
    assert model.nlml() == pytest.approx(nlml, rel=1e-9)
    mu, v = model.marginals(data.x_test)
    np.testing.assert_allclose(mu.cpu().numpy(), mean, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(v.cpu().numpy(), var, rtol=1e-8, atol=1e-10)
    assert method.tags["gpdlm.train_nlml_kernel"] == "rbf exact (a fixed random subset of 60 of the 200 training rows)"
    diag = method.diagnostics()
    assert diag["posterior_rows"] == 60 and "train_nlml_exact_kernel" not in diag


def test_gpdlm_train_runs_exact_kernel_bsgd_and_selects_its_best_iterate(tmp_path, capsys):
    """`gpdlm train model=bsgd features=nn kernel=rbf` (16-16 network, batch 24, 4 epochs, evaluated every
    epoch, AdaDelta lr 1 as in the study): the run lowers the full-data NLML below its initial value,
    ends on the iterate with the lowest train_nlml, which is also train_nlml_exact_kernel (all rows),
    and is tagged as BSGD on the exact RBF kernel. Its saved model comes back: `gpdlm eval` rebuilds it
    from model.pt and reproduces every metric bit for bit."""
    from gpdlm_cli.commands import evaluate

    tracker = NullTracker()
    cfg = compose(
        [
            *SMALL,
            *EXACT,
            "trainer.max_iters=null",
            "trainer.max_epochs=4",
            "trainer.eval_every=0",
            "trainer.eval_every_epochs=1",
            "trainer.optimizer=adadelta",
            "trainer.lr=1.0",
            "trainer.stop_rule=none",
        ]
    )
    _, splits, data = build.load_data(cfg)
    start = build.build_method(cfg, data, splits.task).monitors["train_nlml"]()
    metrics = run_train(cfg, tmp_path, tracker=tracker)
    curve = dict(tracker.steps["train_nlml"])  # epochs 1-3 in the loop, and the final iterate's (epoch 4)
    assert len(curve) == 4
    assert metrics["train_nlml"] <= min(curve.values()) + 1e-12 and metrics["train_nlml"] < start - 0.05
    assert metrics["train_nlml_exact_kernel"] == metrics["train_nlml"]
    assert (
        metrics["posterior_rows"] == 200 and math.isfinite(metrics["test_rmse"]) and math.isfinite(metrics["test_nll"])
    )
    assert (
        tracker.tags["gpdlm.rkhs_setting"]
        == "bsgd biased for b < n: the exact b x b NLML of each uniform batch (exact rbf kernel)"
    )
    assert tracker.tags["gpdlm.train_nlml_kernel"] == "rbf exact (all 200 training rows)"
    assert tracker.tags["gpdlm.keep_best"].startswith("train_nlml")
    capsys.readouterr()
    assert evaluate.eval_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "reproduced" in out and "CHANGED" not in out, out


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["model.posterior_max_rows=0"],
            "the 'posterior_max_rows' parameter of model=bsgd must be an integer >= 1; got 0",
        ),
        (
            ["model=scgd"],
            "model=scgd needs a finite feature map, kernel=linear or kernel=rff (kernel=rbf has none) "
            "(model=bsgd also takes an exact kernel: rbf or a Matern)",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_run(tmp_path, overrides, message):
    cfg = compose([*SMALL, *EXACT, "trainer.max_iters=5", *overrides])
    with pytest.raises(GpdlmError) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    assert message in str(e.value) and "\n" not in str(e.value)
