"""Exact GP: gpdlm's ExactMarginalLikelihood and ExactGP.marginals against scikit-learn's
GaussianProcessRegressor with the same (fixed) hyperparameters."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch
from gpdlm_math_ref import kernel_hypers, make_gaussian_lik, make_kernel
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from gpdlm_cli.models import ExactGP
from gpdlm_cli.objectives import ExactMarginalLikelihood

N, D = 35, 2
CASES = [(1.3, 0.7, 0.05), (0.4, 1.9, 0.6)]  # (outputscale, lengthscale, noise)


def _data(seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, D))
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] ** 2 + rng.normal(scale=0.2, size=N)
    Xs = rng.uniform(-2.5, 2.5, size=(12, D))
    return X, y, Xs


def _gpdlm(X, y, c, ls, s2):
    kernel = make_kernel(c, ls)
    lik = make_gaussian_lik(s2)
    model = ExactGP(torch.as_tensor(X), torch.as_tensor(y), kernel, gpytorch.means.ZeroMean(), lik).double()
    # the values gpdlm actually uses, after its constraints (noise > noise_min)
    assert kernel_hypers(kernel) == pytest.approx((c, ls), rel=1e-12)
    assert float(lik.noise.detach()) == pytest.approx(s2, rel=1e-12)
    return model


def _sklearn(X, y, c, ls, s2):
    kernel = ConstantKernel(c, "fixed") * RBF(ls, "fixed") + WhiteKernel(s2, "fixed")
    # alpha=0: sklearn otherwise adds 1e-10 to the diagonal
    return GaussianProcessRegressor(kernel=kernel, alpha=0.0, optimizer=None, normalize_y=False).fit(X, y)


@pytest.mark.parametrize("c,ls,s2", CASES)
def test_exact_marginal_likelihood_matches_sklearn(c, ls, s2):
    X, y, _ = _data(0)
    model = _gpdlm(X, y, c, ls, s2)
    obj = ExactMarginalLikelihood(model, N)
    got = obj(torch.as_tensor(X), torch.as_tensor(y)).item() * N
    ref = -_sklearn(X, y, c, ls, s2).log_marginal_likelihood_value_
    assert got == pytest.approx(ref, rel=1e-8)


@pytest.mark.parametrize("c,ls,s2", CASES)
def test_exact_marginals_match_sklearn_predict(c, ls, s2):
    X, y, Xs = _data(1)
    model = _gpdlm(X, y, c, ls, s2)
    with torch.no_grad():
        mu, var = model.marginals(torch.as_tensor(Xs))
    mean_ref, std_ref = _sklearn(X, y, c, ls, s2).predict(Xs, return_std=True)
    var_ref = std_ref**2 - s2  # sklearn's std includes the WhiteKernel noise: latent = minus s2
    np.testing.assert_allclose(mu.numpy(), mean_ref, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(var.numpy(), var_ref, rtol=1e-6, atol=1e-9)
    assert var_ref.min() > 1e-4  # the comparison is not between clamped values
    assert model.training  # marginals() restores the mode it found
