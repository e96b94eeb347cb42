"""The trigonometric kernel estimate (eq. 2) and the three models' closed forms, against dense
numpy computations written here: the estimate is unbiased with MSE s^4 (1 - k~^2)^2 / (2m); SSGP's
marginal likelihood and predictive equal the exact GP with the finite kernel; VSSGP's analytic
moments of f = phi^T s equal Monte Carlo; the analytic KL of N(b, M M^T) equals the dense formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.models import SSGP, VSSGP, CollapsedVSSGP, SpectralPosterior, trig_features


def np_features(x, freqs):
    """phi(x) of eq. (2) in numpy: (n, 2m), columns cos, sin per frequency."""
    u = 2 * np.pi * x @ freqs.T
    out = np.empty((x.shape[0], 2 * freqs.shape[0]))
    out[:, 0::2], out[:, 1::2] = np.cos(u), np.sin(u)
    return out


def test_features_give_the_cosine_sum():
    rng = np.random.default_rng(0)
    x, x2, freqs = rng.normal(size=(7, 3)), rng.normal(size=(5, 3)), rng.normal(size=(11, 3))
    s2, m = 1.7, 11
    phi = trig_features(torch.as_tensor(x), torch.as_tensor(freqs)).numpy()
    phi2 = trig_features(torch.as_tensor(x2), torch.as_tensor(freqs)).numpy()
    K = phi @ (s2 / m * np.eye(2 * m)) @ phi2.T
    direct = s2 / m * np.cos(2 * np.pi * np.einsum("abd,md->abm", x[:, None, :] - x2[None, :, :], freqs)).sum(-1)
    np.testing.assert_allclose(K, direct, rtol=0, atol=1e-13)
    np.testing.assert_allclose(phi, np_features(x, freqs), rtol=0, atol=1e-14)


def test_kernel_estimate_is_unbiased_with_the_exact_mse_rate():
    """For r_i ~ N(0, (4 pi^2 Delta)^-1), E[k^] = k and E[(k^ - k)^2] = s^4 (1 - k~^2)^2 / (2m)
    (Var cos = (1 - k~^2)^2 / 2 with k~ = k / s^2); 4000 draws per m, d = 5, Delta = I."""
    rng = np.random.default_rng(1)
    d, R, s2 = 5, 4000, 1.3
    direction = np.ones(d) / math.sqrt(d)
    taus = [math.sqrt(sq) * direction for sq in (0.2, 1.25, 5.0)]  # k~ = 0.905, 0.535, 0.082
    x0 = torch.as_tensor(rng.normal(size=(1, d)))
    ms = (10, 100, 1000)
    mse = np.zeros((len(taus), len(ms)))
    for j, m in enumerate(ms):
        freqs = torch.as_tensor(rng.normal(size=(R, m, d)) / (2 * np.pi))
        phi_b = trig_features(x0, freqs)[:, 0, :]  # (R, 2m)
        for i, tau in enumerate(taus):
            k_true = s2 * math.exp(-0.5 * tau @ tau)
            phi_a = trig_features(x0 + torch.as_tensor(tau), freqs)[:, 0, :]
            k_hat = (s2 / m * (phi_a * phi_b).sum(-1)).numpy()
            err = k_hat - k_true
            assert abs(err.mean()) < 5 * err.std() / math.sqrt(R), (m, i)  # unbiased
            theory = s2**2 * (1 - (k_true / s2) ** 2) ** 2 / (2 * m)
            mse[i, j] = (err**2).mean()
            assert 0.9 <= mse[i, j] / theory <= 1.1, (m, i, mse[i, j] / theory)
        k0 = s2 / m * (trig_features(x0, freqs[:5])[:, 0, :] ** 2).sum(-1)
        np.testing.assert_allclose(k0.numpy(), s2, rtol=1e-13)  # k^(0) = s^2 exactly
    for i in range(len(taus)):
        slope = np.polyfit(np.log(ms), np.log(mse[i]), 1)[0]
        assert abs(slope + 1) <= 0.05, (i, slope)


def _ssgp(n=60, d=2, m=7, seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, d)), rng.normal(size=n)
    lik = GaussianLikelihood(noise_init=0.3).double()
    model = SSGP(
        m, d, lik, prior_lengthscale=0.8, signal_init=1.6, generator=torch.Generator().manual_seed(seed)
    ).double()
    return model, lik, x, y


def test_ssgp_marginal_likelihood_and_predictive_equal_the_dense_finite_kernel_gp():
    model, lik, x, y = _ssgp()
    xs = np.random.default_rng(9).normal(size=(9, 2))
    freqs = model.frequencies.detach().numpy()
    s2, sn2, m = float(model.signal_variance.detach()), float(lik.noise.detach()), freqs.shape[0]
    phi, phs = np_features(x, freqs), np_features(xs, freqs)
    K = s2 / m * phi @ phi.T + sn2 * np.eye(len(y))
    sign, logdet = np.linalg.slogdet(K)
    nll = 0.5 * (y @ np.linalg.solve(K, y) + logdet + len(y) * np.log(2 * np.pi))
    tx, ty = torch.as_tensor(x), torch.as_tensor(y)
    got = float(model.neg_log_marginal(tx, ty).detach())
    assert got == pytest.approx(nll, rel=1e-11)
    Ks = s2 / m * phs @ phi.T
    mean = Ks @ np.linalg.solve(K, y)
    var = s2 / m * (phs**2).sum(1) - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T))
    model.set_train_data(tx, ty)
    with torch.no_grad():
        mu, v = model.marginals(torch.as_tensor(xs))
    np.testing.assert_allclose(mu.numpy(), mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(v.numpy(), var, rtol=0, atol=1e-10)


def test_vssgp_analytic_moments_of_f_equal_monte_carlo():
    rng = np.random.default_rng(2)
    m, d = 4, 3
    model = VSSGP(m, d, prior_lengthscale=0.7, init_scale=0.5, generator=torch.Generator().manual_seed(3)).double()
    with torch.no_grad():
        model.raw_w_sd.copy_(torch.as_tensor(rng.uniform(-1, 0.5, size=(m, d))))
        model.s_mean.copy_(torch.as_tensor(rng.normal(size=2 * m)))
        model.raw_s_sd.copy_(torch.as_tensor(rng.uniform(-2, 0, size=2 * m)))
        model.raw_lengthscale.copy_(torch.as_tensor(rng.uniform(0, 1, size=d)))
    xs = rng.normal(size=(4, d))
    with torch.no_grad():
        mu, var = (t.numpy() for t in model.marginals(torch.as_tensor(xs)))
        scale = model.freq_scale.numpy()
        w_mean, w_sd = model.w_mean.numpy(), torch.nn.functional.softplus(model.raw_w_sd).numpy()
        s_mean, s_sd = model.s_mean.numpy(), torch.nn.functional.softplus(model.raw_s_sd).numpy()
    N = 200_000
    r = (w_mean + w_sd * rng.normal(size=(N, m, d))) * scale  # frequencies in cycles
    s = s_mean + s_sd * rng.normal(size=(N, 2 * m))
    u = 2 * np.pi * np.einsum("nmd,xd->nxm", r, xs)
    f = (np.cos(u) * s[:, None, 0::2] + np.sin(u) * s[:, None, 1::2]).sum(-1)  # (N, 4)
    mc_mean, mc_var = f.mean(0), f.var(0)
    se_mean = f.std(0) / math.sqrt(N)
    se_var = ((f - mc_mean) ** 2).std(0) / math.sqrt(N)
    assert np.all(np.abs(mu - mc_mean) < 5 * se_mean), (mu, mc_mean, se_mean)
    assert np.all(np.abs(var - mc_var) < 5 * se_var), (var, mc_var, se_var)
    # its KL: frequencies (prior N(0, I) in w units) and weights (prior N(0, s_s^2 / m))
    p_s = float(model.signal_variance) / m
    kl = 0.5 * np.sum(w_sd**2 + w_mean**2 - 1 - np.log(w_sd**2)) + 0.5 * np.sum(
        s_sd**2 / p_s + s_mean**2 / p_s - 1 - np.log(s_sd**2 / p_s)
    )
    assert float(model.kl_divergence()) == pytest.approx(kl, rel=1e-12)


@pytest.mark.parametrize("cov", ["full", "block", "diag"])
def test_posterior_kl_equals_the_dense_gaussian_kl(cov):
    rng = np.random.default_rng(4)
    m, d = 3, 2
    q = SpectralPosterior(
        m, d, cov=cov, prior_lengthscale=0.5, signal_init=1.4, generator=torch.Generator().manual_seed(0)
    ).double()
    with torch.no_grad():
        q.b.copy_(torch.as_tensor(rng.normal(size=q.D)))
        q.raw_diag.copy_(torch.as_tensor(rng.normal(size=q.D)))
        if q.offdiag is not None:
            q.offdiag.copy_(torch.as_tensor(rng.normal(size=(q.D, q.D))))
    M = q.scale_tril().detach().numpy()
    assert np.all(np.triu(M, 1) == 0) and np.all(np.diag(M) > 0)
    if cov == "diag":
        assert np.all(np.tril(M, -1) == 0)
    if cov == "block":  # no covariance between r_1, r_2, r_3 and s
        groups = np.r_[np.repeat(np.arange(m), d), np.full(2 * m, m)]
        assert np.all(M[groups[:, None] != groups[None, :]] == 0) and np.any(np.tril(M, -1) != 0)
    P = np.r_[np.full(m * d, (2 * np.pi * 0.5) ** -2), np.full(2 * m, 1.4 / m)]
    S, b = M @ M.T, q.b.detach().numpy()
    kl = 0.5 * (np.trace(S / P[:, None]) + b @ (b / P) - q.D + np.log(P).sum() - np.linalg.slogdet(S)[1])
    assert float(q.kl_divergence()) == pytest.approx(kl, rel=1e-11)


def np_feature_moments(x, mean, var):
    """E[phi] (n, 2m) and E[phi phi^T] of each row (n, 2m, 2m) for independent r_i ~ N(mean_i, diag var_i)
    (cycles), from the Gaussian characteristic function, written as differences of moments in float64."""
    a, v = 2 * np.pi * x @ mean.T, 4 * np.pi**2 * (x**2) @ var.T
    e1, e2 = np.exp(-v / 2), np.exp(-2 * v)
    ec, es = e1 * np.cos(a), e1 * np.sin(a)
    e_phi = np.empty((x.shape[0], 2 * mean.shape[0]))
    e_phi[:, 0::2], e_phi[:, 1::2] = ec, es
    second = np.einsum("ni,nj->nij", e_phi, e_phi)  # different frequencies are independent
    for i in range(mean.shape[0]):
        c, s = 2 * i, 2 * i + 1
        second[:, c, c] = 0.5 * (1 + e2[:, i] * np.cos(2 * a[:, i]))
        second[:, s, s] = 0.5 * (1 - e2[:, i] * np.cos(2 * a[:, i]))
        second[:, c, s] = second[:, s, c] = 0.5 * e2[:, i] * np.sin(2 * a[:, i])
    return e_phi, second


def test_vssgp_feature_variances_keep_float32_precision():
    """The covariances of (cos u, sin u) in closed form with expm1 (no difference of moments): with
    concentrated q(w) (sd 1e-3 of the prior's), Var f in float32 is within 1e-4 of a float64
    reference (the difference of moments was 8% off at the smallest variance)."""
    torch.manual_seed(0)
    model = VSSGP(20, 5, init_scale=1e-3, generator=torch.Generator().manual_seed(0)).float()
    with torch.no_grad():
        model.s_mean.copy_(3 * torch.randn(40, generator=torch.Generator().manual_seed(1)))
        model.raw_s_sd.fill_(-20.0)
        x = 2 * torch.randn(1000, 5, generator=torch.Generator().manual_seed(2))
        _, var = model.marginals(x)
        scale = model.freq_scale.double().numpy()
        mean, sd = (
            model.w_mean.double().numpy() * scale,
            torch.nn.functional.softplus(model.raw_w_sd).double().numpy() * scale,
        )
        s_mean, S = model.s_mean.double().numpy(), torch.nn.functional.softplus(model.raw_s_sd).double().numpy() ** 2
    e_phi, second = np_feature_moments(x.double().numpy(), mean, sd**2)
    cov = second - np.einsum("ni,nj->nij", e_phi, e_phi)
    ref = np.einsum("i,nij,j->n", s_mean, cov, s_mean) + np.einsum("nii,i->n", second, S)
    assert ref.min() < 1e-4  # small variances, where the cancellation showed
    np.testing.assert_allclose(var.double().numpy(), ref, rtol=1e-4)


def _collapsed(n=40, d=2, m=3, seed=5):
    """A CollapsedVSSGP at a random (non-optimal) q(w), s_s^2, s_n^2 and its data."""
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, d)), rng.normal(size=n)
    lik = GaussianLikelihood(noise_init=0.4).double()
    model = CollapsedVSSGP(
        m, d, lik, prior_lengthscale=0.7, signal_init=1.3, generator=torch.Generator().manual_seed(seed)
    ).double()
    with torch.no_grad():
        model.raw_w_sd.copy_(torch.as_tensor(rng.uniform(-2.0, 0.0, size=(m, d))))
    model.set_train_data(torch.as_tensor(x), torch.as_tensor(y))
    scale = float(model.freq_scale[0])
    w_mean, w_sd = model.w_mean.detach().numpy(), torch.nn.functional.softplus(model.raw_w_sd).detach().numpy()
    return model, lik, x, y, w_mean, w_sd, scale


def _np_optimal_q_s(x, y, w_mean, w_sd, scale, s2, sn2):
    """The optimal q(s) = N(mu, Sigma) for fixed q(w) (Gal & Turner; their use_exact_A), dense, and E[Phi], Psi."""
    m = w_mean.shape[0]
    e_phi, second = np_feature_moments(x, w_mean * scale, (w_sd * scale) ** 2)
    psi = second.sum(0)
    Sigma = np.linalg.inv(psi / sn2 + np.eye(2 * m) * m / s2)
    return Sigma @ e_phi.T @ y / sn2, Sigma, e_phi, psi


def _np_elbo(y, e_phi, psi, mu, Sigma, s2, sn2, kl_w):
    """E_q[log N(y | Phi s, sn2 I)] - KL(q(s) || N(0, s2/m I)) - KL(q(w) || p(w)), expectations written out."""
    n, m2 = len(y), len(mu)
    expected = -0.5 * n * np.log(2 * np.pi * sn2) - (
        y @ y - 2 * y @ e_phi @ mu + np.trace(psi @ (np.outer(mu, mu) + Sigma))
    ) / (2 * sn2)
    p = s2 / (m2 // 2)
    kl_s = 0.5 * (np.trace(Sigma) / p + mu @ mu / p - m2 + m2 * np.log(p) - np.linalg.slogdet(Sigma)[1])
    return expected - kl_s - kl_w


def test_collapsed_vssgp_bound_is_the_elbo_at_the_optimal_q_s():
    """-neg_log_marginal equals the ELBO with q(s) at its optimum, written out densely in numpy; any
    other q(s) gives less; and the ELBO equals a Monte Carlo average over q(w) (20,000 draws)."""
    model, lik, x, y, w_mean, w_sd, scale = _collapsed()
    s2, sn2 = float(model.signal_variance), float(lik.noise)
    kl_w = 0.5 * np.sum(w_sd**2 + w_mean**2 - 1 - np.log(w_sd**2))
    mu, Sigma, e_phi, psi = _np_optimal_q_s(x, y, w_mean, w_sd, scale, s2, sn2)
    elbo = _np_elbo(y, e_phi, psi, mu, Sigma, s2, sn2, kl_w)
    got = -float(model.neg_log_marginal(torch.as_tensor(x), torch.as_tensor(y)))
    assert got == pytest.approx(elbo, rel=1e-11)
    rng = np.random.default_rng(6)
    for _ in range(5):  # the optimum: perturbed means or covariances give a lower ELBO
        B = rng.normal(size=Sigma.shape) * 0.05
        assert _np_elbo(y, e_phi, psi, mu + 0.05 * rng.normal(size=mu.shape), Sigma, s2, sn2, kl_w) < elbo
        assert _np_elbo(y, e_phi, psi, mu, Sigma + B @ B.T, s2, sn2, kl_w) < elbo
    # Monte Carlo over w ~ q(w): E_w[log N(y | Phi mu, sn2) - tr(Phi^T Phi Sigma) / (2 sn2)]
    N = 20_000
    freqs = (w_mean + w_sd * rng.normal(size=(N,) + w_mean.shape)) * scale
    u = 2 * np.pi * np.einsum("nd,smd->snm", x, freqs)
    phi = np.empty(u.shape[:2] + (2 * w_mean.shape[0],))
    phi[..., 0::2], phi[..., 1::2] = np.cos(u), np.sin(u)
    resid = y - phi @ mu
    draws = (
        -0.5 * len(y) * np.log(2 * np.pi * sn2)
        - (resid**2).sum(-1) / (2 * sn2)
        - np.einsum("sni,ij,snj->s", phi, Sigma, phi) / (2 * sn2)
    )
    expected = _np_elbo(y, e_phi, psi, mu, Sigma, s2, sn2, 0.0)
    p = s2 / w_mean.shape[0]
    kl_s = 0.5 * (np.trace(Sigma) / p + mu @ mu / p - len(mu) + len(mu) * np.log(p) - np.linalg.slogdet(Sigma)[1])
    assert abs(draws.mean() - kl_s - expected) < 5 * draws.std() / math.sqrt(N), (draws.mean() - kl_s, expected)


def test_collapsed_vssgp_predictive_equals_monte_carlo_over_q():
    """E f_* and Var f_* under q(w) q(s) with q(s) optimal: the closed form against 200,000 draws of
    (w, s) and against the dense second moments of phi_*."""
    model, lik, x, y, w_mean, w_sd, scale = _collapsed()
    s2, sn2 = float(model.signal_variance), float(lik.noise)
    mu_s, Sigma, _, _ = _np_optimal_q_s(x, y, w_mean, w_sd, scale, s2, sn2)
    xs = np.random.default_rng(7).normal(size=(4, 2))
    with torch.no_grad():
        mu, var = (t.numpy() for t in model.marginals(torch.as_tensor(xs)))
    e_phi, second = np_feature_moments(xs, w_mean * scale, (w_sd * scale) ** 2)
    np.testing.assert_allclose(mu, e_phi @ mu_s, rtol=1e-11)
    dense_var = np.einsum("nij,ij->n", second, np.outer(mu_s, mu_s) + Sigma) - (e_phi @ mu_s) ** 2
    np.testing.assert_allclose(var, dense_var, rtol=1e-10)
    rng = np.random.default_rng(8)
    N = 200_000
    freqs = (w_mean + w_sd * rng.normal(size=(N,) + w_mean.shape)) * scale
    s = rng.multivariate_normal(mu_s, Sigma, size=N)
    u = 2 * np.pi * np.einsum("xd,smd->sxm", xs, freqs)
    f = (np.cos(u) * s[:, None, 0::2] + np.sin(u) * s[:, None, 1::2]).sum(-1)
    se_mean, se_var = f.std(0) / math.sqrt(N), ((f - f.mean(0)) ** 2).std(0) / math.sqrt(N)
    assert np.all(np.abs(mu - f.mean(0)) < 5 * se_mean), (mu, f.mean(0), se_mean)
    assert np.all(np.abs(var - f.var(0)) < 5 * se_var), (var, f.var(0), se_var)


def test_collapsed_vssgp_with_a_point_mass_q_w_is_ssgp():
    """q(w) with sd 1e-7: the bound + KL(q(w)) is the dense finite-kernel log marginal likelihood at the
    frequencies E[r], and the predictive is the dense GP's (the review's consistency check)."""
    model, lik, x, y, w_mean, _, scale = _collapsed()
    with torch.no_grad():
        model.raw_w_sd.fill_(math.log(math.expm1(1e-7)))
    s2, sn2, m = float(model.signal_variance), float(lik.noise), w_mean.shape[0]
    phi = np_features(x, w_mean * scale)
    K = s2 / m * phi @ phi.T + sn2 * np.eye(len(y))
    nlml = 0.5 * (y @ np.linalg.solve(K, y) + np.linalg.slogdet(K)[1] + len(y) * np.log(2 * np.pi))
    got = float(model.neg_log_marginal(torch.as_tensor(x), torch.as_tensor(y)) - model.kl_frequencies())
    assert got == pytest.approx(nlml, rel=1e-9)
    xs = np.random.default_rng(9).normal(size=(6, 2))
    phs = np_features(xs, w_mean * scale)
    Ks = s2 / m * phs @ phi.T
    with torch.no_grad():
        mu, var = (t.numpy() for t in model.marginals(torch.as_tensor(xs)))
    np.testing.assert_allclose(mu, Ks @ np.linalg.solve(K, y), rtol=0, atol=1e-8)
    dense_var = s2 / m * (phs**2).sum(1) - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T))
    np.testing.assert_allclose(var, dense_var, rtol=0, atol=1e-8)
