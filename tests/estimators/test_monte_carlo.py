"""bMC and smooth-bMC: reproducible samples, value and gradients against numpy on the same draws, the
O(1/L) bias of the log-of-average gradient, the unbiased ELBO term, and smooth-bMC's exact relation
to bMC (float64, fixed seeds)."""

import math

import numpy as np
import pytest
import torch

from gpdlm_cli.estimators import BMCEstimator, SmoothBMCEstimator
from gpdlm_cli.likelihoods import PoissonExpLikelihood, ProbitLikelihood

from ._tilted import exact_gradient

D = torch.float64


def _grads(est, lik, y, mu, var, n):
    """Per-draw gradients: n i.i.d. copies of the point, one estimator call."""
    m = torch.full((n,), mu, dtype=D, requires_grad=True)
    v = torch.full((n,), var, dtype=D, requires_grad=True)
    out = est.log_marginal(lik, torch.full((n,), y, dtype=D), m, v)
    out.sum().backward()
    return out.detach(), m.grad, v.grad


def test_seed_reproduces_and_separates_streams():
    lik, y = ProbitLikelihood(), torch.ones(50, dtype=D)
    mu, var = torch.linspace(-2, 2, 50, dtype=D), torch.full((50,), 0.7, dtype=D)
    est = BMCEstimator(num_samples=5)
    est.seed(3, "cpu")
    a = est.log_marginal(lik, y, mu, var)
    est.seed(3, "cpu")
    assert torch.equal(a, est.log_marginal(lik, y, mu, var))
    est.seed(4, "cpu")
    assert not torch.equal(a, est.log_marginal(lik, y, mu, var))
    assert BMCEstimator.stochastic and SmoothBMCEstimator.stochastic


def test_bmc_gradient_bias_shrinks_with_samples():
    """Poisson y=10 under q=N(0,1) (likelihood narrower than q): |E[grad] - grad| at L = 1, 10, 100
    is about 6.3 / 2.9 / 0.23 for mu and 2.5 / 1.2 / 0.16 for var; each step must shrink it by more
    than 4 standard errors, and L=100 must be 5x better than L=1."""
    lik, y, mu, var = PoissonExpLikelihood(), 10.0, 0.0, 1.0
    true_mu, true_var = exact_gradient("poisson_exp", y, mu, var)
    bias, se = {}, {}
    for L, n in ((1, 20000), (10, 20000), (100, 4000)):
        est = BMCEstimator(num_samples=L)
        est.seed(0, "cpu")
        _, gm, gv = _grads(est, lik, y, mu, var, n)
        bias[L] = (abs(gm.mean().item() - true_mu), abs(gv.mean().item() - true_var))
        se[L] = (gm.std().item() / math.sqrt(n), gv.std().item() / math.sqrt(n))
    for k in (0, 1):
        assert bias[1][k] - bias[10][k] > 4 * (se[1][k] + se[10][k])
        assert bias[10][k] - bias[100][k] > 4 * (se[10][k] + se[100][k])
        assert bias[100][k] < bias[1][k] / 5


def test_bmc_expected_log_prob_is_unbiased():
    """mean_l log p(y|f_l) and its gradient match the closed form E_q[log p] within 4 standard errors."""
    lik, n = PoissonExpLikelihood(), 20000
    y, mu0, var0 = 7.0, 0.5, 0.8
    est = BMCEstimator(num_samples=2)
    est.seed(1, "cpu")
    m = torch.full((n,), mu0, dtype=D, requires_grad=True)
    v = torch.full((n,), var0, dtype=D, requires_grad=True)
    yy = torch.full((n,), y, dtype=D)
    out = est.expected_log_prob(lik, yy, m, v)
    out.sum().backward()
    m1 = torch.tensor([mu0], dtype=D, requires_grad=True)
    v1 = torch.tensor([var0], dtype=D, requires_grad=True)
    ref = lik.expected_log_prob_closed(yy[:1], m1, v1)
    ref_m, ref_v = torch.autograd.grad(ref.sum(), (m1, v1))
    for est_vals, target in ((out.detach(), ref.item()), (m.grad, ref_m.item()), (v.grad, ref_v.item())):
        assert abs(est_vals.mean().item() - target) < 4 * est_vals.std().item() / math.sqrt(n)


@pytest.mark.parametrize("nu", [0.0, 1e-4, 1e-2])
def test_smooth_bmc_value_and_gradient_match_numpy_on_the_same_draws(nu):
    """smooth-bMC (bMC for nu = 0) against numpy on the same standard normals eps_l (the estimator's
    stream: torch.randn((n, L)) from a generator seeded with its seed): with f_l = mu + sqrt(var) eps_l
    and m = (1/L) sum_l p(y|f_l), the value is log(m + nu), d/dmu = (1/L) sum_l p'(f_l) / (m + nu) and
    d/dvar = (1/L) sum_l p'(f_l) eps_l / (2 sqrt(var)) / (m + nu), p' = p (y - e^f) (Poisson, exp link),
    all computed in log space (p reaches 1e-60 here)."""
    from scipy.special import gammaln, logsumexp

    lik, L = PoissonExpLikelihood(), 7
    y = np.array([0.0, 3.0, 40.0, 200.0])
    mu0, var0 = np.array([1.0, -2.0, 0.5, 0.0]), np.array([0.3, 2.0, 1.5, 1.0])
    est = BMCEstimator(num_samples=L) if nu == 0 else SmoothBMCEstimator(num_samples=L, nu=nu)
    est.seed(11, "cpu")
    mu, var = torch.tensor(mu0, requires_grad=True), torch.tensor(var0, requires_grad=True)
    out = est.log_marginal(lik, torch.tensor(y), mu, var)
    out.sum().backward()

    eps = torch.randn((4, L), generator=torch.Generator().manual_seed(11), dtype=D).numpy()
    f = mu0[:, None] + np.sqrt(var0)[:, None] * eps
    log_p = y[:, None] * f - np.exp(f) - gammaln(y + 1)[:, None]
    log_denom = np.logaddexp(logsumexp(log_p, axis=1) - np.log(L), np.log(nu) if nu else -np.inf)
    w = np.exp(log_p - log_denom[:, None]) / L  # p(y|f_l) / (L (m + nu))
    dlogp = y[:, None] - np.exp(f)
    np.testing.assert_allclose(out.detach().numpy(), log_denom, rtol=1e-12)
    np.testing.assert_allclose(mu.grad.numpy(), (w * dlogp).sum(1), rtol=1e-10)
    np.testing.assert_allclose(var.grad.numpy(), (w * dlogp * eps).sum(1) / (2 * np.sqrt(var0)), rtol=1e-10)
    assert log_p.min() < -100  # the log-space path matters here


def test_smooth_bmc_shrinks_bmc_by_the_smoothed_denominator():
    """For nu > 0, value = log(m + nu) with m the bMC average likelihood, so (same samples):
    0 <= value - bmc_value = log(1 + nu/m) <= nu/m, and grad = bmc_grad * m/(m + nu) exactly."""
    lik, nu = PoissonExpLikelihood(), 1e-4
    y = torch.tensor([0.0, 5.0, 60.0, 200.0], dtype=D)
    mu0, var0 = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=D), torch.tensor([1.0, 1.0, 2.0, 1.0], dtype=D)
    res = {}
    for est in (BMCEstimator(num_samples=10), SmoothBMCEstimator(num_samples=10, nu=nu)):
        est.seed(2, "cpu")
        mu, var = mu0.clone().requires_grad_(), var0.clone().requires_grad_()
        out = est.log_marginal(lik, y, mu, var)
        out.sum().backward()
        res[est.name] = (out.detach(), mu.grad, var.grad)
    (vb, gmb, gvb), (vs, gms, gvs) = res["bmc"], res["smooth_bmc"]
    m = vb.exp()
    diff = vs - vb
    assert torch.all(diff >= 0) and torch.all(diff <= nu / m * (1 + 1e-12))
    shrink = m / (m + nu)
    torch.testing.assert_close(gms, gmb * shrink, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(gvs, gvb * shrink, rtol=1e-10, atol=1e-14)
    assert shrink[-1] < 0.5  # y=200 under N(0,1): average likelihood ~ 1e-9, smoothing matters
    assert shrink[0] > 1 - 1e-3  # a well-covered point (y=0 under N(0,1)) is barely changed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bmc_dtype_and_shape(dtype):
    est = BMCEstimator(num_samples=3)
    est.seed(0, "cpu")
    mu = torch.zeros(4, 5, dtype=dtype)
    out = est.log_marginal(ProbitLikelihood(), torch.ones(4, 5, dtype=dtype), mu, torch.ones(4, 5, dtype=dtype))
    assert out.shape == (4, 5) and out.dtype == dtype and torch.isfinite(out).all()
