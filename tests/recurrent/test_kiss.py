"""KISS-GP on an embedding (GP-LSTM paper Sec. 4.2, App. A) against the dense GP written here in
numpy/scipy: anisotropic ARD lengthscales on dimensions of unequal ranges (the setting in which
gpytorch's reversed Kronecker factors swapped the dimensions, issue 19), through the production
path: ``DeepKernelGP.nlml`` as training calls it, ``condition`` + ``marginals_all`` as evaluation
calls them (dense below ``kiss_dense_below`` windows; CG, the preconditioner and LOVE above)."""

from __future__ import annotations

import math

import gpytorch
import numpy as np
import pytest
import scipy.linalg
import torch

import gpdlm_cli.models.deep_kernel as deep_kernel
from gpdlm_cli.exceptions import NumericalError
from gpdlm_cli.features.recurrent import FeatureMap
from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.models.deep_kernel import DeepKernelGP

SF2 = 1.3
CASES = {  # E: (lengthscales, ranges of the embedding's dimensions, grid points per dimension)
    2: ((0.3, 0.7), (1.0, 3.0), 100),
    3: ((0.4, 0.9, 0.6), (1.0, 3.0, 2.0), 48),
}


def identity_network(E: int) -> FeatureMap:
    """A NARX feature map that returns its input: h = head(relu([x; -x])) = relu(x) - relu(-x) = x."""
    net = FeatureMap("narx", None, E, units=2 * E, layers=1, out_dim=E).double()
    eye = torch.eye(E, dtype=torch.float64)
    with torch.no_grad():
        net.body[0].weight.copy_(torch.cat([eye, -eye]))
        net.body[0].bias.zero_()
        net.head.weight.copy_(torch.cat([eye, -eye], 1))
        net.head.bias.zero_()
    return net


def kiss_model(E: int, s2: float, grid: int | None = None, **kw) -> DeepKernelGP:
    ell, _, default_grid = CASES[E]
    model = DeepKernelGP(
        identity_network(E),
        [gpytorch.kernels.RBFKernel(ard_num_dims=E)],
        [GaussianLikelihood(noise_init=s2, noise_min=1e-6)],
        inference="kiss",
        grid_size=grid or default_grid,
        **kw,
    )
    model.gps[0].covar_module.outputscale = SF2
    model.gps[0].covar_module.base_kernel.base_kernel.lengthscale = torch.tensor([ell], dtype=torch.float64)
    model.likelihoods[0].gp.noise = s2
    return model


def embedding(E: int, n: int, seed: int = 0, s2: float = 0.01):
    _, span, _ = CASES[E]
    rng = np.random.default_rng(seed)
    h = rng.uniform(-1, 1, size=(n, E)) * np.array(span)
    y = np.sin(3 * h / np.array(span)).sum(1) + math.sqrt(s2) * rng.standard_normal(n)
    return h, y


def rbf(a, b, ell):
    return SF2 * np.exp(-0.5 * (((a[:, None, :] - b[None, :, :]) / np.asarray(ell)) ** 2).sum(-1))


def exact_nlml_and_cotangents(h, y, ell, s2):
    """NLML / N and its gradient dL/dh_i = (1/N) sum_j A_ij k_ij (h_i - h_j) / ell^2, A = a a^T - K^-1."""
    n = len(y)
    K0 = rbf(h, h, ell)
    c = scipy.linalg.cho_factor(K0 + s2 * np.eye(n), lower=True)
    alpha = scipy.linalg.cho_solve(c, y)
    nlml = 0.5 * y @ alpha + np.log(np.diag(c[0])).sum() + 0.5 * n * math.log(2 * math.pi)
    A = np.outer(alpha, alpha) - scipy.linalg.cho_solve(c, np.eye(n))
    diff = (h[:, None, :] - h[None, :, :]) / np.asarray(ell) ** 2
    grad = ((A * K0)[:, :, None] * diff).sum(1) / n
    return nlml / n, grad


def cosine(a, b):
    return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("E", [2, 3])
def test_kiss_kernel_is_the_dense_kernel_with_anisotropic_lengthscales(E):
    """W K_UU W^T with ARD lengthscales on ranges 1 : 3 (: 2) against the dense RBF: max error < 1e-3
    (gpytorch 1.15's GridInterpolationKernel: 0.56 in 2-D, the lengthscales acting on the swapped
    dimensions). The structured operator (what CG multiplies by) and the dense form agree to 1e-10."""
    ell, _, _ = CASES[E]
    h, _ = embedding(E, 400)
    model = kiss_model(E, 0.01)
    ht = torch.as_tensor(h)
    model.fit_grid(ht)
    K_exact = rbf(h, h, ell)
    v = np.random.default_rng(1).standard_normal((400, 3))
    with torch.no_grad():
        Kv = model.gps[0].covar_module(ht).matmul(torch.as_tensor(v)).numpy()  # the structured operator
    assert np.abs(Kv - K_exact @ v).max() / np.abs(K_exact @ v).max() < 1e-3
    with torch.no_grad():
        K = model.covariance(0, ht).numpy()  # the dense form (below kiss_dense_below)
        diag = model.covariance(0, ht, diag=True).numpy()
    np.testing.assert_allclose(Kv, K @ v, rtol=0, atol=1e-10)
    err = np.abs(K - K_exact).max()
    assert err < 1e-3, err
    np.testing.assert_allclose(diag, np.diag(K), rtol=0, atol=1e-12)


@pytest.mark.parametrize("E", [2, 3])
def test_production_kiss_matches_the_exact_gp_at_500_windows(E):
    """Production KISS at N = 500 (dense below model.gp.kiss_dense_below = 2,000): NLML/N within 1e-3 of
    the exact GP's, dL/dh cosine > 0.99, predictive means and variances within 1e-3. Before issue 19,
    CG without a preconditioner and the swapped factors: NLML/N off by up to 0.04, cosine 0.1-0.4."""
    ell, span, _ = CASES[E]
    s2 = 0.01
    h, y = embedding(E, 500, s2=s2)
    model = kiss_model(E, s2)
    ht, yt = torch.as_tensor(h), torch.as_tensor(y)
    model.fit_grid(ht)
    leaf = ht.clone().requires_grad_(True)
    value = model.nlml(leaf, yt) / 500
    (grad,) = torch.autograd.grad(value, leaf)
    ref, ref_grad = exact_nlml_and_cotangents(h, y, ell, s2)
    assert abs(float(value) - ref) < 1e-3, (float(value), ref)
    assert cosine(grad.numpy(), ref_grad) > 0.99

    model.condition(ht, yt)
    hs = np.random.default_rng(2).uniform(-0.9, 0.9, size=(200, E)) * np.array(span)
    mu, var = model.marginals_all(torch.as_tensor(hs))
    Ks = rbf(hs, h, ell)
    c = scipy.linalg.cho_factor(rbf(h, h, ell) + s2 * np.eye(500), lower=True)
    np.testing.assert_allclose(mu[:, 0].numpy(), Ks @ scipy.linalg.cho_solve(c, y), rtol=0, atol=1e-3)
    np.testing.assert_allclose(
        var[:, 0].numpy(), SF2 - np.einsum("ij,ji->i", Ks, scipy.linalg.cho_solve(c, Ks.T)), rtol=0, atol=1e-3
    )
    assert model.is_dense(500)


@pytest.mark.slow
def test_structured_kiss_predictions_match_the_exact_gp():
    """KISS on the structured operator (as above 2,000 windows; forced here at N = 500): gpytorch's mean
    cache (CG) and LOVE variances under fast_pred_var, with gpdlm's tolerances, within 1e-3 of the exact
    GP (gpytorch's defaults: mean error 3e-2, variance error 2e-3); deterministic (LOVE's probe fixed)."""
    ell, span, _ = CASES[2]
    s2 = 0.01
    h, y = embedding(2, 500, s2=s2)
    model = kiss_model(2, s2, grid=64, kiss_dense_below=0)
    ht, yt = torch.as_tensor(h), torch.as_tensor(y)
    hs = torch.as_tensor(np.random.default_rng(2).uniform(-0.9, 0.9, size=(100, 2)) * np.array(span))
    model.condition(ht, yt)
    mu, var = model.marginals_all(hs)
    Ks = rbf(hs.numpy(), h, ell)
    c = scipy.linalg.cho_factor(rbf(h, h, ell) + s2 * np.eye(500), lower=True)
    np.testing.assert_allclose(mu[:, 0].numpy(), Ks @ scipy.linalg.cho_solve(c, y), rtol=0, atol=1e-3)
    np.testing.assert_allclose(
        var[:, 0].numpy(), SF2 - np.einsum("ij,ji->i", Ks, scipy.linalg.cho_solve(c, Ks.T)), rtol=0, atol=1e-3
    )
    model.condition(ht, yt)
    mu2, var2 = model.marginals_all(hs)
    assert torch.equal(mu, mu2) and torch.equal(var, var2)
    assert not model.is_dense(500)


def test_structured_kiss_is_preconditioned_below_2000_windows():
    """The structured path at N = 500 with a kernel of low effective rank (lengthscales 0.8, 2.4 on ranges
    1 : 3): the pivoted-Cholesky preconditioner is on at every size, so four probe draws all give NLML/N
    within 3e-3 (measured: 2.4e-4 to 1.6e-3, the stochastic log det) and dL/dh cosine > 0.99 (measured
    >= 0.998). Without it (linear_operator's default below 2,000 rows): NLML/N off by 3e-3 to 1.9e-2 and
    cosines 0.13 to 0.29 at the same draws."""
    s2 = 0.05
    h, y = embedding(2, 500, s2=s2)
    model = kiss_model(2, s2, kiss_dense_below=0)
    ell = (0.8, 2.4)
    model.gps[0].covar_module.base_kernel.base_kernel.lengthscale = torch.tensor([ell], dtype=torch.float64)
    ht, yt = torch.as_tensor(h), torch.as_tensor(y)
    model.fit_grid(ht)
    ref, ref_grad = exact_nlml_and_cotangents(h, y, ell, s2)
    for seed in range(4):
        leaf = ht.clone().requires_grad_(True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            value = model.nlml(leaf, yt) / 500
            (grad,) = torch.autograd.grad(value, leaf)
        assert abs(float(value) - ref) < 3e-3, (seed, float(value), ref)
        assert cosine(grad.numpy(), ref_grad) > 0.99, seed


def test_a_reversed_kronecker_order_is_refused_at_build_time(monkeypatch):
    """The build-time guard: a gpytorch/linear_operator whose Kronecker product reversed its factors
    (simulated here) makes a KISS model with a 2-D embedding fail with one clear error."""
    from linear_operator.operators import KroneckerProductLinearOperator

    monkeypatch.setattr(
        deep_kernel, "KroneckerProductLinearOperator", lambda *ops: KroneckerProductLinearOperator(*ops[::-1])
    )
    monkeypatch.setattr(deep_kernel, "_CHECKED_DIMS", set())
    with pytest.raises(NumericalError, match="KISS-GP self-check failed in 2-D"):
        kiss_model(2, 0.01)
    monkeypatch.undo()
    assert deep_kernel.check_kiss_kronecker_order(2) < 1e-3


@pytest.mark.slow
def test_kiss_nlml_after_predictions_sees_new_hyperparameters():
    """Predictions leave the GP in eval mode, where the grid kernel caches K_UU with its graph; the
    NLML must not reuse it (stale hyperparameters, a second backward through a freed graph). Dense:
    against the exact NLML (1e-3); structured: against a fresh model with the same probes (1e-10)."""
    ell0, _, _ = CASES[2]
    h, y = embedding(2, 300)
    ht, yt = torch.as_tensor(h), torch.as_tensor(y)

    def seeded_nlml(model):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return model.nlml(ht, yt) / 300

    for dense_below in (2000, 0):
        model = kiss_model(2, 0.01, grid=64, kiss_dense_below=dense_below)
        model.condition(ht, yt)
        model.marginals_all(ht[:5])  # a prediction: fills the caches
        for scale in (1.0, 2.0):
            ell = tuple(scale * e for e in ell0)
            model.gps[0].covar_module.base_kernel.base_kernel.lengthscale = torch.tensor([ell], dtype=torch.float64)
            value = seeded_nlml(model)
            value.backward()
            if dense_below:
                ref, _ = exact_nlml_and_cotangents(h, y, ell, 0.01)
                assert abs(float(value.detach()) - ref) < 1e-3, (scale, float(value.detach()), ref)
            else:
                fresh = kiss_model(2, 0.01, grid=64, kiss_dense_below=0)
                fresh.gps[0].covar_module.base_kernel.base_kernel.lengthscale = torch.tensor([ell], dtype=torch.float64)
                fresh.fit_grid(ht)
                assert float(value.detach()) == pytest.approx(float(seeded_nlml(fresh).detach()), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("dense_below,dense", [(None, True), (0, False)])
def test_the_builder_picks_dense_or_structured_kiss_by_model_gp_kiss_dense_below(dense_below, dense):
    """model.gp.kiss_dense_below (default 2,000): a run with fewer training windows evaluates KISS
    densely (deterministic: its stages are not stochastic); the run's tag says which path it took."""
    from gpdlm_cli import build

    from ..conftest import compose

    extra = [] if dense_below is None else [f"model.gp.kiss_dense_below={dense_below}"]
    cfg = compose(
        [
            "model=gp_narx",
            "dataset=sysid_actuator",
            "dataset.n=160",
            "dataset.lag=5",
            "model.network.units=4",
            "model.gp.inference=kiss",
            "model.gp.grid_size=16",
            "progress=false",
            "tracking.enabled=false",
            *extra,
        ]
    )
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    assert method.model.kiss_dense_below == (2000 if dense_below is None else 0)
    assert method.model.is_dense(splits.n_train) is dense
    assert [s.stochastic for s in method.stages] == [not dense, not dense]  # full, theta
    assert method.tags["gpdlm.kiss_evaluation"].startswith("dense" if dense else "structured")
