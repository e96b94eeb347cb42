"""(beta-)ELBO and log-loss DLM of the sparse variational GP against dense numpy formulas
(DLM paper, Sec. 1-2), and Jensen's inequality between their data terms."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch
from gpdlm_math_ref import (
    kl_gauss,
    log_normal,
    make_gaussian_lik,
    make_svgp,
    quad_log_marginal,
    svgp_marginals,
    whitened_to_dense,
)

from gpdlm_cli.estimators import ExactEstimator, QuadratureEstimator
from gpdlm_cli.likelihoods import (
    LogitLikelihood,
    PoissonExpLikelihood,
    PoissonSoftplusLikelihood,
    ProbitLikelihood,
)
from gpdlm_cli.objectives import DLM, ELBO

N, M, D = 40, 7, 2
JITTER = 1e-10
OUTPUTSCALE, LENGTHSCALE, NOISE = 1.7, 0.9, 0.25


def _problem(seed: int):
    """Inputs, inducing inputs and a model with non-trivial (random) whitened q(u)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, D))
    Z = rng.uniform(-2, 2, size=(M, D))
    m_tilde = rng.normal(size=M)
    S_chol = np.tril(rng.normal(scale=0.4, size=(M, M)), -1) + np.diag(rng.uniform(0.3, 1.2, size=M))
    model = make_svgp(Z, OUTPUTSCALE, LENGTHSCALE, JITTER, m_tilde, S_chol)
    f_true = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    return rng, X, Z, model, f_true


def _dense_marginals(model, X, Z):
    m, V, os_, ls = whitened_to_dense(model, Z, JITTER)
    assert (os_, ls) == pytest.approx((OUTPUTSCALE, LENGTHSCALE), rel=1e-12)
    mu, var, Kuu = svgp_marginals(X, Z, m, V, os_, ls, JITTER)
    return mu, var, kl_gauss(m, V, Kuu)


def test_svgp_marginals_and_kl_match_dense_formulas():
    _, X, Z, model, _ = _problem(0)
    mu_ref, var_ref, kl_ref = _dense_marginals(model, X, Z)
    mu, var = model.marginals(torch.as_tensor(X))
    np.testing.assert_allclose(mu.detach().numpy(), mu_ref, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(var.detach().numpy(), var_ref, rtol=1e-8, atol=1e-9)
    assert float(model.kl_divergence().detach()) == pytest.approx(kl_ref, rel=1e-9)
    # non-trivial q(u): the KL is far from 0 and the marginals far from the prior
    assert kl_ref > 1.0 and np.abs(var_ref - OUTPUTSCALE).max() > 0.1


@pytest.mark.parametrize("beta", [1.0, 0.3, 2.5])
def test_gaussian_elbo_matches_dense(beta):
    rng, X, Z, model, f_true = _problem(1)
    y = f_true + rng.normal(scale=np.sqrt(NOISE), size=N)
    lik = make_gaussian_lik(NOISE)
    s2 = float(lik.noise.detach())
    assert s2 == pytest.approx(NOISE, rel=1e-12)

    obj = ELBO(model, lik, ExactEstimator(), N, beta)
    value = obj(torch.as_tensor(X), torch.as_tensor(y)).item()

    mu, var, kl = _dense_marginals(model, X, Z)
    # E_{N(f|mu,var)}[-log N(y|f,s2)] = 1/2 log(2 pi s2) + ((y-mu)^2 + var) / (2 s2)
    e_nlp = 0.5 * np.log(2 * np.pi * s2) + ((y - mu) ** 2 + var) / (2 * s2)
    ref = (e_nlp.sum() + beta * kl) / N
    assert value == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_gaussian_dlm_matches_dense(beta):
    rng, X, Z, model, f_true = _problem(2)
    y = f_true + rng.normal(scale=np.sqrt(NOISE), size=N)
    lik = make_gaussian_lik(NOISE)
    value = DLM(model, lik, ExactEstimator(), N, beta)(torch.as_tensor(X), torch.as_tensor(y)).item()
    mu, var, kl = _dense_marginals(model, X, Z)
    ref = (-log_normal(y, mu, var + NOISE).sum() + beta * kl) / N
    assert value == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("beta", [1.0, 3.0])
def test_probit_dlm_matches_dense(beta):
    rng, X, Z, model, f_true = _problem(3)
    y = (f_true + 0.3 * rng.normal(size=N) > 0).astype(float)
    value = DLM(model, ProbitLikelihood().double(), ExactEstimator(), N, beta)(
        torch.as_tensor(X), torch.as_tensor(y)
    ).item()
    mu, var, kl = _dense_marginals(model, X, Z)
    ref = (-scipy.stats.norm.logcdf((2 * y - 1) * mu / np.sqrt(1 + var)).sum() + beta * kl) / N
    assert value == pytest.approx(ref, rel=1e-9)


def test_closed_forms_are_the_integrals():
    """The two DLM closed forms (Gaussian, probit) equal quad integrals of N(f|mu,var) p(y|f),
    including a probit point deep in the tail (log Phi ~ -229)."""
    lik_g = make_gaussian_lik(NOISE)
    probit = ProbitLikelihood()
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    for y, mu, var in [(0.3, -0.4, 0.7), (2.5, 0.1, 2.0), (-1.0, 1.0, 0.05)]:
        got = lik_g.log_marginal_closed(t(y), t(mu), t(var)).item()
        assert got == pytest.approx(quad_log_marginal("gaussian", y, mu, var, NOISE), rel=1e-10)
    for y, mu, var in [(1.0, 0.4, 0.8), (0.0, 0.4, 0.8), (1.0, -3.0, 3.0), (1.0, -30.0, 1.0)]:
        got = probit.log_marginal_closed(t(y), t(mu), t(var)).item()
        assert np.isfinite(got)
        assert got == pytest.approx(quad_log_marginal("probit", y, mu, var), rel=1e-8)


LIKS = {
    "gaussian": lambda: make_gaussian_lik(NOISE),
    "probit": lambda: ProbitLikelihood().double(),
    "logit": lambda: LogitLikelihood().double(),
    "poisson_exp": lambda: PoissonExpLikelihood().double(),
    "poisson_softplus": lambda: PoissonSoftplusLikelihood().double(),
}


def _targets(name, rng, n):
    if name == "gaussian":
        return rng.normal(scale=2.0, size=n)
    if name in ("probit", "logit"):
        return rng.integers(0, 2, size=n).astype(float)
    return rng.poisson(rng.uniform(0, 30, size=n)).astype(float)


@pytest.mark.parametrize("name", list(LIKS))
def test_jensen_log_marginal_exceeds_expected_log_prob(name):
    """log E_q[p] >= E_q[log p] per point (strictly, for var > 0), with quadrature; and the DLM
    loss <= the ELBO loss for the same q(u) and beta."""
    lik = LIKS[name]()
    rng = np.random.default_rng(10)
    n = 200
    y = torch.as_tensor(_targets(name, rng, n))
    mu = torch.as_tensor(rng.normal(scale=2.0, size=n))
    var = torch.as_tensor(rng.uniform(0.05, 3.0, size=n))
    q = QuadratureEstimator(num_nodes=40)
    lm = q.log_marginal(lik, y, mu, var)
    elp = q.expected_log_prob(lik, y, mu, var)
    assert torch.isfinite(lm).all() and torch.isfinite(elp).all()
    gap = (lm - elp).detach().numpy()
    assert (gap > 0).all(), gap.min()
    if name == "gaussian":  # the gap is closed form: log N(y|mu,var+s2) - log N(y|mu,s2) + var/(2 s2)
        yn, mun, vn = y.numpy(), mu.numpy(), var.numpy()
        exact = log_normal(yn, mun, vn + NOISE) - log_normal(yn, mun, NOISE) + vn / (2 * NOISE)
        np.testing.assert_allclose(gap, exact, rtol=1e-8)

    _, X, Z, model, f_true = _problem(11)
    yt = torch.as_tensor(_targets(name, rng, N))
    Xt = torch.as_tensor(X)
    dlm = DLM(model, lik, q, N, 0.7)(Xt, yt).item()
    elbo = ELBO(model, lik, q, N, 0.7)(Xt, yt).item()
    assert dlm < elbo


@pytest.mark.parametrize("objective", ["dlm", "elbo"])
@pytest.mark.parametrize("beta", [0.3, 4.0])
def test_minibatch_objectives_average_to_the_full_objective(objective, beta):
    """Sec. 4's scaling: a minibatch B of size b < N gives mean_{i in B} loss_i + beta KL / N, an unbiased
    estimate of the per-datum objective (1/N)[sum_i loss_i + beta KL]. Over a partition of the N points
    into batches of 8 the mean of the minibatch objectives equals the full-batch objective and the dense
    reference (KL divided by N, not by b: that mistake changes each minibatch value by beta KL (1/b - 1/N))."""
    rng, X, Z, model, f_true = _problem(4)
    y = f_true + rng.normal(scale=np.sqrt(NOISE), size=N)
    lik = make_gaussian_lik(NOISE)
    cls = {"dlm": DLM, "elbo": ELBO}[objective]
    obj = cls(model, lik, ExactEstimator(), N, beta)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    batches = np.array_split(rng.permutation(N), N // 8)
    minibatch = [obj(Xt[b], yt[b]).item() for b in batches]
    mu, var, kl = _dense_marginals(model, X, Z)
    if objective == "dlm":
        loss = -log_normal(y, mu, var + NOISE)
    else:
        loss = 0.5 * np.log(2 * np.pi * NOISE) + ((y - mu) ** 2 + var) / (2 * NOISE)
    ref = (loss.sum() + beta * kl) / N
    assert np.mean(minibatch) == pytest.approx(ref, rel=1e-9)
    assert np.mean(minibatch) == pytest.approx(obj(Xt, yt).item(), rel=1e-12)
    for b, value in zip(batches, minibatch):  # each minibatch value, too
        assert value == pytest.approx(loss[b].mean() + beta * kl / N, rel=1e-9)
