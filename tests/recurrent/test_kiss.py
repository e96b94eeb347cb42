"""KISS-GP on a fixed embedding approaches the exact GP (Sec. 4.2, App. A), with the outputscale
outside the grid interpolation (diag K = s_f^2). The exact NLML is computed here with scipy."""

from __future__ import annotations

import math

import gpytorch
import numpy as np
import pytest
import scipy.linalg
import torch

from gpdlm_cli.features.recurrent import FeatureMap
from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.models.deep_kernel import DeepKernelGP

N, ELL, SF2, S2 = 1000, 0.3, 1.5, 0.01


def kiss_model(dim: int, grid_size: int) -> DeepKernelGP:
    net = FeatureMap("narx", None, 3, units=4, layers=1, out_dim=dim)  # only its output width matters here
    lik = GaussianLikelihood(noise_init=S2, noise_min=1e-6)
    model = DeepKernelGP(net, [gpytorch.kernels.RBFKernel(ard_num_dims=dim)], [lik], inference="kiss",
                         grid_size=grid_size, kiss_dense_below=10**6)  # evaluated densely: no CG/Lanczos noise
    model.gps[0].covar_module.outputscale = SF2
    model.gps[0].covar_module.base_kernel.base_kernel.lengthscale = ELL
    return model


def data(dim: int):
    rng = np.random.default_rng(dim)
    h = rng.uniform(-1, 1, size=(N, dim))
    y = np.sin(3 * h).sum(1) + 0.1 * rng.standard_normal(N)
    return h, y


def exact_nlml(h, y) -> float:
    d2 = ((h[:, None, :] - h[None, :, :]) ** 2).sum(-1)
    K = SF2 * np.exp(-0.5 * d2 / ELL**2) + S2 * np.eye(N)
    c = scipy.linalg.cho_factor(K, lower=True)
    alpha = scipy.linalg.cho_solve(c, y)
    return 0.5 * y @ alpha + np.log(np.diag(c[0])).sum() + 0.5 * N * math.log(2 * math.pi)


def kiss_nlml_and_diag(dim: int, grid_size: int, h, y):
    model = kiss_model(dim, grid_size)
    ht = torch.as_tensor(h)
    model.fit_grid(ht)
    with torch.no_grad():  # dense evaluation of W K_UU W^T (kiss_dense_below)
        value = float(model.nlml(ht, torch.as_tensor(y)))
        diag = model.gps[0].covar_module(ht).to_dense().diagonal()
    return value, diag


@pytest.mark.parametrize("dim,sizes", [(1, (8, 16, 32, 64)), (2, (8, 16, 32))])
def test_kiss_nlml_approaches_exact_with_the_grid(dim, sizes):
    h, y = data(dim)
    ref = exact_nlml(h, y)
    errors = []
    for m in sizes:
        value, diag = kiss_nlml_and_diag(dim, m, h, y)
        errors.append(abs(value - ref) / N)
        if m >= 32:
            assert errors[-1] <= 1e-3, (m, errors)
            # the outputscale is applied once (ScaleKernel outside GridInterpolationKernel): diag K = s_f^2
            assert float((diag - SF2).abs().max()) <= 0.02 * SF2
    assert all(a > b for a, b in zip(errors, errors[1:])), errors


def test_kiss_predictions_match_the_exact_gp():
    """Predictive means on a fixed 1-D embedding: KISS (m = 64) against the exact GP in numpy."""
    h, y = data(1)
    model = kiss_model(1, 64)
    ht, yt = torch.as_tensor(h), torch.as_tensor(y)
    model.fit_grid(ht)
    gp = model.gps[0]
    gp.set_train_data(ht, yt, strict=False)
    model._train_h = ht
    hs = np.linspace(-0.95, 0.95, 50)[:, None]
    gp.eval()
    with torch.no_grad(), model.settings(N), gpytorch.settings.fast_pred_var(False):
        mu = gp(torch.as_tensor(hs)).mean.numpy()
    K = SF2 * np.exp(-0.5 * (h - h.T) ** 2 / ELL**2) + S2 * np.eye(N)
    Ks = SF2 * np.exp(-0.5 * (hs - h.T) ** 2 / ELL**2)
    mu_exact = Ks @ np.linalg.solve(K, y)
    np.testing.assert_allclose(mu, mu_exact, atol=5e-3)


def test_kiss_nlml_after_predictions_sees_new_hyperparameters():
    """Predictions leave the GP in eval mode, where gpytorch's GridKernel caches K_UU with its graph;
    the NLML must not reuse it (stale hyperparameters, a second backward through a freed graph)."""
    h, y = data(1)
    model = kiss_model(1, 64)
    ht, yt = torch.as_tensor(h[:300]), torch.as_tensor(y[:300])
    model.fit_grid(ht)
    gp = model.gps[0]
    gp.set_train_data(ht, yt, strict=False)
    gp.eval()
    with torch.no_grad():
        gp(ht[:5])  # a prediction: fills the caches
    values = []
    for ell in (ELL, 2 * ELL):
        model.gps[0].covar_module.base_kernel.base_kernel.lengthscale = ell
        value = model.nlml(ht, yt)
        value.backward()
        values.append(float(value))
    d2 = (h[:300] - h[:300].T) ** 2
    for v, ell in zip(values, (ELL, 2 * ELL)):
        K = SF2 * np.exp(-0.5 * d2 / ell**2) + S2 * np.eye(300)
        c = scipy.linalg.cho_factor(K, lower=True)
        ref = 0.5 * y[:300] @ scipy.linalg.cho_solve(c, y[:300]) + np.log(np.diag(c[0])).sum() + 150 * math.log(2 * math.pi)
        assert abs(v - ref) / 300 < 1e-3, (v, ref)
