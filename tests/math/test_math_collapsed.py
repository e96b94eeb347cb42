"""Collapsed sparse GPs (SGPR: Titsias, 2009; FITC: Snelson and Ghahramani, 2006) against dense
numpy/scipy formulas, and against the exact GP when Z = X."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import scipy.stats
import torch
from gpdlm_math_ref import kernel_hypers, make_gaussian_lik, make_kernel, rbf

from gpdlm_cli.models import CollapsedSparseGP

N, M, D = 30, 8, 2
OUTPUTSCALE, LENGTHSCALE, NOISE = 1.4, 0.8, 0.09
JITTER = 1e-10


def _data(seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 4, size=(N, D))
    y = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + rng.normal(scale=np.sqrt(NOISE), size=N)
    Z = rng.uniform(0, 4, size=(M, D))
    Xs = rng.uniform(-0.5, 4.5, size=(15, D))
    return X, y, Z, Xs


def _model(Z, kind, mean=None):
    kernel = make_kernel(OUTPUTSCALE, LENGTHSCALE)
    lik = make_gaussian_lik(NOISE)
    mean = gpytorch.means.ZeroMean() if mean is None else mean
    model = CollapsedSparseGP(torch.as_tensor(Z), kernel, mean, lik, kind=kind, jitter=JITTER).double()
    assert kernel_hypers(kernel) == pytest.approx((OUTPUTSCALE, LENGTHSCALE), rel=1e-12)
    assert float(lik.noise.detach()) == pytest.approx(NOISE, rel=1e-12)
    return model


def _dense(X, Z, y, kind):
    """Reference log marginal: N(y | 0, Q_ff + Lambda) (- tr(K_ff - Q_ff)/(2 s2) for SGPR)."""
    Kff = rbf(X, X, OUTPUTSCALE, LENGTHSCALE)
    Kuu = rbf(Z, Z, OUTPUTSCALE, LENGTHSCALE) + JITTER * np.eye(len(Z))
    Kfu = rbf(X, Z, OUTPUTSCALE, LENGTHSCALE)
    Qff = Kfu @ np.linalg.solve(Kuu, Kfu.T)
    if kind == "sgpr":
        C = Qff + NOISE * np.eye(len(X))
        corr = -np.trace(Kff - Qff) / (2 * NOISE)
    else:
        C = Qff + np.diag(np.diag(Kff - Qff)) + NOISE * np.eye(len(X))
        corr = 0.0
    return scipy.stats.multivariate_normal(np.zeros(len(X)), C).logpdf(y) + corr


def _exact_lml(X, y):
    K = rbf(X, X, OUTPUTSCALE, LENGTHSCALE) + NOISE * np.eye(len(X))
    return scipy.stats.multivariate_normal(np.zeros(len(X)), K).logpdf(y)


def _dense_predict(X, y, Z, Xs, kind):
    """mean = K_*u (K_uu + K_uf L^-1 K_fu)^-1 K_uf L^-1 y, var = K_** - Q_** + K_*u (...)^-1 K_u*,
    with L = Lambda = s2 I (SGPR) or diag(K_ff - Q_ff) + s2 I (FITC)."""
    Kff_diag = np.full(len(X), OUTPUTSCALE)
    Kuu = rbf(Z, Z, OUTPUTSCALE, LENGTHSCALE) + JITTER * np.eye(len(Z))
    Kfu = rbf(X, Z, OUTPUTSCALE, LENGTHSCALE)
    Ksu = rbf(Xs, Z, OUTPUTSCALE, LENGTHSCALE)
    qff = np.einsum("ij,ji->i", Kfu, np.linalg.solve(Kuu, Kfu.T))
    lam = NOISE + (Kff_diag - qff if kind == "fitc" else np.zeros(len(X)))
    Sigma = Kuu + Kfu.T @ (Kfu / lam[:, None])
    mean = Ksu @ np.linalg.solve(Sigma, Kfu.T @ (y / lam))
    qss = np.einsum("ij,ji->i", Ksu, np.linalg.solve(Kuu, Ksu.T))
    var = OUTPUTSCALE - qss + np.einsum("ij,ji->i", Ksu, np.linalg.solve(Sigma, Ksu.T))
    return mean, var


def _exact_predict(X, y, Xs):
    K = rbf(X, X, OUTPUTSCALE, LENGTHSCALE) + NOISE * np.eye(len(X))
    Ksf = rbf(Xs, X, OUTPUTSCALE, LENGTHSCALE)
    mean = Ksf @ np.linalg.solve(K, y)
    var = OUTPUTSCALE - np.einsum("ij,ji->i", Ksf, np.linalg.solve(K, Ksf.T))
    return mean, var


@pytest.mark.parametrize("kind", ["sgpr", "fitc"])
@pytest.mark.parametrize("seed", [0, 1])
def test_log_marginal_matches_dense(kind, seed):
    X, y, Z, _ = _data(seed)
    model = _model(Z, kind)
    got = model.log_marginal(torch.as_tensor(X), torch.as_tensor(y)).item()
    ref = _dense(X, Z, y, kind)
    assert got == pytest.approx(ref, rel=1e-9)
    # the two differ on this problem, so each test pins its own formula
    assert abs(_dense(X, Z, y, "sgpr") - _dense(X, Z, y, "fitc")) > 1e-2


def test_sgpr_with_constant_mean_uses_residuals():
    X, y, Z, _ = _data(2)
    mean = gpytorch.means.ConstantMean().double()
    mean.constant.data.fill_(0.7)
    got = _model(Z, "sgpr", mean).log_marginal(torch.as_tensor(X), torch.as_tensor(y)).item()
    assert got == pytest.approx(_dense(X, Z, y - 0.7, "sgpr"), rel=1e-9)


@pytest.mark.parametrize("kind", ["sgpr", "fitc"])
def test_equals_exact_gp_when_Z_is_X(kind):
    X, y, _, _ = _data(3)
    model = _model(X, kind)
    got = model.log_marginal(torch.as_tensor(X), torch.as_tensor(y)).item()
    assert got == pytest.approx(_exact_lml(X, y), rel=1e-7)


@pytest.mark.parametrize("seed", range(5))
def test_sgpr_is_a_lower_bound(seed):
    X, y, Z, _ = _data(10 + seed)
    got = _model(Z, "sgpr").log_marginal(torch.as_tensor(X), torch.as_tensor(y)).item()
    exact = _exact_lml(X, y)
    assert got <= exact
    assert exact - got > 1e-3  # M = 8 random inducing inputs are not sufficient statistics here


@pytest.mark.parametrize("kind", ["sgpr", "fitc"])
def test_predictive_marginals_match_dense(kind):
    X, y, Z, Xs = _data(4)
    model = _model(Z, kind)
    model.set_train_data(torch.as_tensor(X), torch.as_tensor(y))
    with torch.no_grad():
        mu, var = model.marginals(torch.as_tensor(Xs))
    mu_ref, var_ref = _dense_predict(X, y, Z, Xs, kind)
    np.testing.assert_allclose(mu.numpy(), mu_ref, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(var.numpy(), var_ref, rtol=1e-7, atol=1e-9)
    # SGPR and FITC predict differently here
    other = _dense_predict(X, y, Z, Xs, "fitc" if kind == "sgpr" else "sgpr")
    assert np.abs(other[0] - mu_ref).max() > 1e-3


@pytest.mark.parametrize("kind", ["sgpr", "fitc"])
def test_predictive_marginals_equal_exact_gp_when_Z_is_X(kind):
    X, y, _, Xs = _data(5)
    model = _model(X, kind)
    model.set_train_data(torch.as_tensor(X), torch.as_tensor(y))
    with torch.no_grad():
        mu, var = model.marginals(torch.as_tensor(Xs))
    mu_ref, var_ref = _exact_predict(X, y, Xs)
    np.testing.assert_allclose(mu.numpy(), mu_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(var.numpy(), var_ref, rtol=1e-6, atol=1e-7)
