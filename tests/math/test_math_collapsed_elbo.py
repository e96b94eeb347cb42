"""The collapsed (beta-)ELBO of SVGP for Gaussian regression (issue 9, item 4) against dense numpy:
its q(u) is the optimum of the uncollapsed beta-ELBO, its value at beta = 1 is Titsias' bound, and
the predictive it leaves in the model is SGPR's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
import torch
from gpdlm_math_ref import kl_gauss, log_normal, make_gaussian_lik, make_svgp, rbf, svgp_marginals, whitened_to_dense

from gpdlm_cli.objectives import CollapsedELBO

N, M, D = 40, 7, 2
OUTPUTSCALE, LENGTHSCALE, NOISE, JITTER = 1.3, 0.7, 0.08, 1e-10


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 4, size=(N, D))
    y = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + rng.normal(scale=np.sqrt(NOISE), size=N)
    Z = rng.uniform(0, 4, size=(M, D))
    return X, y, Z


def dense_neg_elbo(X, y, Z, m, V, beta):
    """-(1/N)[sum_i E_q log N(y_i|f_i, s2) - beta KL(N(m,V) || N(0,K_uu))], dense (DLM paper Sec. 2)."""
    mu, var, Kuu = svgp_marginals(X, Z, m, V, OUTPUTSCALE, LENGTHSCALE, JITTER)
    expected = log_normal(y, mu, NOISE) - 0.5 * var / NOISE
    return -(expected.sum() - beta * kl_gauss(m, V, Kuu)) / len(y)


def titsias_bound(X, y, Z):
    Kff = rbf(X, X, OUTPUTSCALE, LENGTHSCALE)
    Kuu = rbf(Z, Z, OUTPUTSCALE, LENGTHSCALE) + JITTER * np.eye(len(Z))
    Kfu = rbf(X, Z, OUTPUTSCALE, LENGTHSCALE)
    Qff = Kfu @ np.linalg.solve(Kuu, Kfu.T)
    lml = scipy.stats.multivariate_normal(np.zeros(len(X)), Qff + NOISE * np.eye(len(X))).logpdf(y)
    return lml - np.trace(Kff - Qff) / (2 * NOISE)


def _collapsed(X, y, Z, beta):
    model = make_svgp(Z, OUTPUTSCALE, LENGTHSCALE, JITTER)
    lik = make_gaussian_lik(NOISE)
    obj = CollapsedELBO(model, lik, N, beta)
    value = float(obj(torch.as_tensor(X), torch.as_tensor(y)))
    m, V, _, _ = whitened_to_dense(model, Z, JITTER)
    return value, m, V, model


def test_beta_one_is_titsias_bound():
    X, y, Z = _data()
    value, m, V, _ = _collapsed(X, y, Z, 1.0)
    assert value == pytest.approx(-titsias_bound(X, y, Z) / N, rel=1e-10)
    assert dense_neg_elbo(X, y, Z, m, V, 1.0) == pytest.approx(value, rel=1e-10)  # the q(u) it wrote attains it


@pytest.mark.parametrize("beta", [0.05, 1.0, 7.0])
def test_written_q_is_the_optimum_of_the_uncollapsed_beta_elbo(beta):
    """A numerical minimisation of the dense beta-ELBO over (m, chol V) from the prior cannot beat the
    closed form, and the closed form's value is the collapsed objective."""
    X, y, Z = _data(1)
    value, m, V, _ = _collapsed(X, y, Z, beta)
    assert dense_neg_elbo(X, y, Z, m, V, beta) == pytest.approx(value, rel=1e-10)
    Kuu = rbf(Z, Z, OUTPUTSCALE, LENGTHSCALE) + JITTER * np.eye(M)
    L0 = np.linalg.cholesky(Kuu)
    tril = np.tril_indices(M)

    def f(theta):
        Lv = np.zeros((M, M))
        Lv[tril] = theta[M:]
        return dense_neg_elbo(X, y, Z, theta[:M], Lv @ Lv.T + 1e-12 * np.eye(M), beta)

    res = scipy.optimize.minimize(
        f, np.concatenate([np.zeros(M), L0[tril]]), method="L-BFGS-B", options={"maxiter": 5000, "maxfun": 100000}
    )
    assert res.fun >= value - 1e-7 and res.fun == pytest.approx(value, abs=1e-5)


def test_gradients_match_finite_differences_of_the_dense_bound():
    """Envelope theorem: d/dtheta of the collapsed objective (autograd through the optimal q) equals
    the finite difference of the dense optimum, here in the noise and the inducing inputs."""
    X, y, Z = _data(2)
    model = make_svgp(Z, OUTPUTSCALE, LENGTHSCALE, JITTER)
    lik = make_gaussian_lik(NOISE)
    CollapsedELBO(model, lik, N, 1.0)(torch.as_tensor(X), torch.as_tensor(y)).backward()
    gz = model.variational_strategy.inducing_points.grad.numpy()
    h = 1e-6
    for i, j in [(0, 0), (3, 1)]:
        Zp, Zm = Z.copy(), Z.copy()
        Zp[i, j] += h
        Zm[i, j] -= h
        fd = (-titsias_bound(X, y, Zp) + titsias_bound(X, y, Zm)) / (2 * h * N)
        assert gz[i, j] == pytest.approx(fd, rel=1e-5, abs=1e-9)


def test_equals_gpytorch_sgpr_value_and_gradients():
    """Issue 21, item 5: the lean collapsed bound (written in torch, no linear operators) against gpytorch's own
    SGPR -- an ``ExactGP`` with an ``InducingPointKernel`` and ``ExactMarginalLogLikelihood``, whose added loss
    term is -tr(K - Q) / (2 s2) -- in float64: the value and the gradient in Z and the kernel's parameters. Ours equals the
    dense scipy bound to 1e-10 (test_beta_one_is_titsias_bound; 1e-9 here, without jitter); gpytorch's SGPR itself sits 1.2e-8
    (relative) from that dense bound on this problem (its low-rank-plus-diagonal solve), so the comparison
    with gpytorch holds to 1e-7 and no tighter."""
    import gpytorch

    X, y, Z = _data(3)
    Xt, yt, Zt = (torch.as_tensor(a) for a in (X, y, Z))
    model = make_svgp(Z, OUTPUTSCALE, LENGTHSCALE, 0.0)  # gpytorch's InducingPointKernel adds no jitter to K_uu
    lik = make_gaussian_lik(NOISE)
    ours = CollapsedELBO(model, lik, N, 1.0)(Xt, yt)
    theirs_lik = gpytorch.likelihoods.GaussianLikelihood().double()
    theirs_lik.noise = NOISE

    class SGPR(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(Xt, yt, theirs_lik)
            self.mean_module = gpytorch.means.ZeroMean()
            base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
            base.outputscale, base.base_kernel.lengthscale = OUTPUTSCALE, LENGTHSCALE
            self.covar_module = gpytorch.kernels.InducingPointKernel(
                base, inducing_points=Zt.clone(), likelihood=theirs_lik
            )

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    sgpr = SGPR().double()
    sgpr.train(), theirs_lik.train()
    with (
        gpytorch.settings.max_cholesky_size(10_000),
        gpytorch.settings.cholesky_jitter(float_value=0.0, double_value=0.0),
    ):
        theirs = -gpytorch.mlls.ExactMarginalLogLikelihood(theirs_lik, sgpr)(sgpr(Xt), yt)
    assert float(ours) == pytest.approx(-titsias_bound(X, y, Z) / N, rel=1e-9)  # dense: jitter 1e-10, ours 0
    assert float(ours) == pytest.approx(float(theirs), rel=1e-7)
    k_ours, k_theirs = model.covar_module, sgpr.covar_module.base_kernel  # the same gpytorch kernel parametrisation
    g_ours = torch.autograd.grad(
        ours, [model.inducing_points, k_ours.raw_outputscale, k_ours.base_kernel.raw_lengthscale]
    )
    g_theirs = torch.autograd.grad(
        theirs, [sgpr.covar_module.inducing_points, k_theirs.raw_outputscale, k_theirs.base_kernel.raw_lengthscale]
    )
    for a, b in zip(g_ours, g_theirs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-9)
