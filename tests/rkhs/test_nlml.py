"""The d x d marginal likelihood and the closed-form posterior against dense n x n numpy/scipy
(Shoham & Avron Sec. 2.2; rkhs-spec C1), and the feature maps against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch

from gpdlm_cli.features import MLP, LinearKernelMap, RandomFourierMap
from gpdlm_cli.objectives import batch_nlml, dxd_objective, feature_nlml

from ._setup import LOG_2PI, concrete, hyperparameters, rff_model


def softplus(v):
    return np.log1p(np.exp(v))


def rff_numpy(x, omega, raw_ell, raw_s):
    """sqrt(s/m) [cos(x/ell @ omega), sin(x/ell @ omega)], written from the definition."""
    u = (x / softplus(raw_ell)) @ omega
    return np.sqrt(softplus(raw_s) / u.shape[1]) * np.hstack([np.cos(u), np.sin(u)])


def dense_nlml(Z, y, s2):
    """Per-point -log N(y | 0, Z Z^T + s2 I) with slogdet and solve on the n x n matrix."""
    n = len(y)
    K = Z @ Z.T + s2 * np.eye(n)
    _, logdet = np.linalg.slogdet(K)
    return 0.5 * (y @ np.linalg.solve(K, y) + logdet + n * LOG_2PI) / n


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def dense_nlml_gradient(x, y, omega, raw_ell, raw_s, raw_s2):
    """d NLML / d(raw ell, raw s, raw s2) = (1/2n) tr((K^-1 - a a^T) dK), a = K^-1 y, with dK from
    the analytic derivative of the RFF features (ell = softplus(raw), etc.)."""
    n = len(y)
    ell, s = softplus(raw_ell), softplus(raw_s)
    Z = rff_numpy(x, omega, raw_ell, raw_s)
    K = Z @ Z.T + (1e-6 + softplus(raw_s2)) * np.eye(n)
    Kinv = np.linalg.inv(K)
    a = Kinv @ y
    P = Kinv - np.outer(a, a)
    u = (x / ell) @ omega
    scale = np.sqrt(s / u.shape[1])
    dZ_dell = scale * np.hstack([np.sin(u) * u / ell, -np.cos(u) * u / ell]) * sigmoid(raw_ell)
    dZ_ds = Z * 0.5 / s * sigmoid(raw_s)
    grads = []
    for dZ in (dZ_dell, dZ_ds):
        grads.append(0.5 * np.sum(P * (dZ @ Z.T + Z @ dZ.T)) / n)
    grads.append(0.5 * np.trace(P) * sigmoid(raw_s2) / n)
    return grads


def theta_numpy(model):
    return [float(p.detach()) if p.numel() == 1 else p.detach().numpy().copy() for p in hyperparameters(model)]


def dense_nlml_of_theta(x, y, omega, theta):
    raw_ell, raw_s, raw_s2 = theta
    return dense_nlml(rff_numpy(x, omega, raw_ell, raw_s), y, 1e-6 + softplus(raw_s2))


@pytest.mark.parametrize("n,d", [(120, 20), (60, 200)], ids=["d<n", "d>n"])
def test_dxd_nlml_equals_the_dense_n_by_n_nlml_and_its_gradient(n, d):
    """rtol 1e-10 against numpy slogdet/solve and scipy's multivariate_normal, at three parameter
    settings; (min_w l + n log 2 pi)/(2n) at w* = F^-1 Z^T y is the same number; the streamed
    model.nlml() (blocks of 7 rows) too; autograd gradients match the dense
    numpy NLML's analytic gradient (rtol 1e-8) and its central differences (rtol 1e-4, h = 1e-5)."""
    x, y = concrete(n)
    model = rff_model(x, y, d)
    model.block_rows = 7
    omega = model.kernel_map.omega.numpy()
    xn, yn = x.numpy(), y.numpy()
    for ell, s, s2 in [(1.0, 1.0, 0.1), (3.0, 5.0, 0.02), (0.5, 0.3, 1.5)]:
        with torch.no_grad():
            model.kernel_map.raw_lengthscale.fill_(float(np.log(np.expm1(ell))))
            model.kernel_map.raw_outputscale.fill_(float(np.log(np.expm1(s))))
            model.likelihood.gp.noise = s2
        theta = theta_numpy(model)
        Z = rff_numpy(xn, omega, *theta[:2])
        s2n = 1e-6 + softplus(theta[2])
        ref = dense_nlml(Z, yn, s2n)
        K = Z @ Z.T + s2n * np.eye(n)
        assert -scipy.stats.multivariate_normal(np.zeros(n), K).logpdf(yn) / n == pytest.approx(ref, rel=1e-10)
        Zt = model.features(x)
        assert np.allclose(Zt.detach().numpy(), Z, rtol=1e-12, atol=1e-14)  # the RFF map is its definition
        value = feature_nlml(Zt, y, model.noise)
        assert float(value.detach()) == pytest.approx(ref, rel=1e-10)
        assert model.nlml() == pytest.approx(ref, rel=1e-10)
        with torch.no_grad():
            w_star = torch.as_tensor(np.linalg.solve(Z.T @ Z + s2n * np.eye(d), Z.T @ yn))
            l_min = dxd_objective(Zt, y, w_star, model.noise)
        assert (float(l_min) + n * LOG_2PI) / (2 * n) == pytest.approx(ref, rel=1e-10)
        # gradients wrt (raw ell, raw s, raw s2): the dense analytic form, and central differences
        grads = [float(g.sum()) for g in torch.autograd.grad(value, hyperparameters(model))]
        assert grads == pytest.approx(dense_nlml_gradient(xn, yn, omega, *theta), rel=1e-8, abs=1e-12)
        h = 1e-5
        for k in range(3):
            up, down = list(theta), list(theta)
            up[k], down[k] = up[k] + h, down[k] - h
            fd = (dense_nlml_of_theta(xn, yn, omega, up) - dense_nlml_of_theta(xn, yn, omega, down)) / (2 * h)
            assert grads[k] == pytest.approx(fd, rel=1e-4, abs=1e-7), (k, ell, s, s2)


def test_low_rank_mvn_agrees():
    """torch's LowRankMultivariateNormal (capacitance matrix) gives the same log density, rtol 1e-12."""
    x, y = concrete(150)
    model = rff_model(x, y, 40)
    with torch.no_grad():
        Z = model.features(x)
        s2 = model.noise
        mvn = torch.distributions.LowRankMultivariateNormal(torch.zeros(150, dtype=torch.float64), Z, s2.expand(150))
        assert float(-mvn.log_prob(y) / 150) == pytest.approx(float(feature_nlml(Z, y, s2)), rel=1e-12)


def test_closed_form_predictive_equals_the_dense_gp_posterior():
    """marginals(x*) = (k*^T (K + s2 I)^-1 y, k** - k*^T (K + s2 I)^-1 k*) of the dense GP with
    K = Z Z^T (numpy), rtol 1e-8; with d > n as well."""
    x, y = concrete(220)
    for d in (30, 400):
        model = rff_model(x[:150], y[:150], d)
        xs = x[150:]
        with torch.no_grad():
            Z, Zs = model.features(x[:150]).numpy(), model.features(xs).numpy()
            s2 = float(model.noise)
        K = Z @ Z.T + s2 * np.eye(150)
        Ksx = Zs @ Z.T
        mean = Ksx @ np.linalg.solve(K, y[:150].numpy())
        var = (Zs * Zs).sum(1) - np.einsum("ij,ji->i", Ksx, np.linalg.solve(K, Ksx.T))
        mu, v = model.marginals(xs)
        np.testing.assert_allclose(mu.numpy(), mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(v.numpy(), var, rtol=1e-7, atol=1e-10)


def test_batch_nlml_equals_dense_and_exact_kernel_nlml_equals_gaussian_kernel():
    """BSGD's b x b per-point NLML and the exact Gaussian-kernel NLML (what RFF approximates)
    against numpy, rtol 1e-10."""
    x, y = concrete(100)
    model = rff_model(x, y, 24)
    with torch.no_grad():
        Z = model.features(x)
        s2 = model.noise
        idx = torch.arange(10, 42)
        ref = dense_nlml(Z[idx].numpy(), y[idx].numpy(), float(s2))
        assert float(batch_nlml(Z[idx], y[idx], s2)) == pytest.approx(ref, rel=1e-10)
        ell, s = float(model.kernel_map.lengthscale), float(model.kernel_map.outputscale)
    xn = x.numpy()
    sq = ((xn[:, None, :] - xn[None, :, :]) ** 2).sum(-1)
    K = s * np.exp(-sq / (2 * ell**2))
    n = len(xn)
    _, logdet = np.linalg.slogdet(K + float(s2) * np.eye(n))
    ref = 0.5 * (y.numpy() @ np.linalg.solve(K + float(s2) * np.eye(n), y.numpy()) + logdet + n * LOG_2PI) / n
    assert model.exact_kernel_nlml() == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize("form", ["sincos", "cos"])
def test_rff_approximates_the_gaussian_kernel(form):
    """phi(z)^T phi(z') -> s exp(-||z - z'||^2 / (2 ell^2)): with d = 20000 features every entry of a
    30 x 30 Gram matrix is within 0.06 s (Monte Carlo error ~ s / sqrt(d / 2) = 0.01 s per entry)."""
    z = torch.randn(30, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    m = RandomFourierMap(
        3, 20000, lengthscale=1.3, outputscale=2.5, form=form, generator=torch.Generator().manual_seed(5)
    ).double()
    with torch.no_grad():
        phi = m(z)
        approx = (phi @ phi.T).numpy()
    zn = z.numpy()
    exact = 2.5 * np.exp(-((zn[:, None] - zn[None]) ** 2).sum(-1) / (2 * 1.3**2))
    assert phi.shape == (30, 20000)
    assert np.abs(approx - exact).max() < 0.06 * 2.5


def test_linear_map_and_mlp_follow_their_definitions_and_leave_the_global_rng_alone():
    """Linear kernel: phi(z) = sqrt(s / m) z with m = d_z or a given normaliser. MLP: relu after every layer, U(-1/sqrt(fan_in), .)
    weights from the given generator (same seed, same network), the global RNG untouched."""
    z = torch.randn(5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    lin = LinearKernelMap(7, outputscale=3.0).double()
    np.testing.assert_allclose((lin(z) @ lin(z).T).numpy(), 3.0 * (z @ z.T).numpy() / 7, rtol=1e-12)
    lin = LinearKernelMap(7, outputscale=3.0, normaliser=2.5).double()
    np.testing.assert_allclose((lin(z) @ lin(z).T).numpy(), 3.0 * (z @ z.T).numpy() / 2.5, rtol=1e-12)
    state = torch.get_rng_state()
    a = MLP(7, (16, 4), generator=torch.Generator().manual_seed(3)).double()
    b = MLP(7, (16, 4), generator=torch.Generator().manual_seed(3)).double()
    assert torch.equal(torch.get_rng_state(), state)
    for la, lb in zip(a.layers, b.layers):
        assert torch.equal(la.weight, lb.weight) and torch.equal(la.bias, lb.bias)
    (W1, c1), (W2, c2) = ((layer.weight.detach().numpy(), layer.bias.detach().numpy()) for layer in a.layers)
    assert np.abs(W1).max() <= 1 / np.sqrt(7) and np.abs(W2).max() <= 1 / np.sqrt(16) and W1.std() > 0.1
    ref = np.maximum(np.maximum(z.numpy() @ W1.T + c1, 0) @ W2.T + c2, 0)
    np.testing.assert_allclose(a(z).detach().numpy(), ref, rtol=1e-12)
    assert a.out_dim == 4
