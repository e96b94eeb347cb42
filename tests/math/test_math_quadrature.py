"""Gauss-Hermite quadrature (gpdlm_cli.estimators.quadrature) against scipy.integrate.quad:
log E_q[p(y|f)] and its gradients in (mu, var), E_q[log p(y|f)], for the non-Gaussian likelihoods,
including counts in the hundreds where a log of a sum of probabilities underflows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gpdlm_math_ref import quad_expected_log_prob, quad_log_marginal

from gpdlm_cli.estimators import QuadratureEstimator
from gpdlm_cli.likelihoods import (
    LogitLikelihood,
    PoissonExpLikelihood,
    PoissonSoftplusLikelihood,
    ProbitLikelihood,
)

LIKS = {
    "poisson_exp": PoissonExpLikelihood,
    "poisson_softplus": PoissonSoftplusLikelihood,
    "logit": LogitLikelihood,
    "probit": ProbitLikelihood,
}

# (y, mu, var): aligned and misaligned prior/likelihood, wide and narrow q, counts in the hundreds
CASES = {
    "poisson_exp": [
        (0.0, 0.0, 1.0),
        (3.0, 0.5, 0.3),
        (7.0, -1.0, 2.0),
        (150.0, 0.0, 1.0),
        (400.0, 0.0, 1.0),
        (150.0, -3.0, 0.5),
        (400.0, 6.0, 0.01),
        (2.0, 4.0, 1.5),
    ],
    "poisson_softplus": [
        (0.0, 0.0, 1.0),
        (3.0, 0.5, 0.3),
        (7.0, -1.0, 2.0),
        (150.0, 0.0, 1.0),
        (400.0, 0.0, 1.0),
        (150.0, -3.0, 0.5),
        (400.0, 380.0, 100.0),
        (1.0, -4.0, 0.2),
    ],
    "logit": [(1.0, 0.0, 1.0), (0.0, 0.0, 1.0), (1.0, 3.0, 4.0), (1.0, -6.0, 0.5), (0.0, 8.0, 9.0), (1.0, -20.0, 0.1)],
    "probit": [(1.0, 0.0, 1.0), (0.0, 0.0, 1.0), (1.0, 3.0, 4.0), (1.0, -6.0, 0.5), (0.0, 8.0, 9.0), (1.0, -20.0, 0.1)],
}
PARAMS = [(name, *c) for name, cases in CASES.items() for c in cases]


def _t(v, grad=False):
    return torch.tensor([v], dtype=torch.float64, requires_grad=grad)


@pytest.mark.parametrize("num_nodes", [20, 32])
@pytest.mark.parametrize("name,y,mu,var", PARAMS)
def test_adaptive_log_marginal_and_gradients_match_quad(name, y, mu, var, num_nodes):
    lik = LIKS[name]()
    ref, ref_dmu, ref_dvar = quad_log_marginal(name, y, mu, var, with_grad=True)
    mu_t, var_t = _t(mu, True), _t(var, True)
    out = QuadratureEstimator(num_nodes=num_nodes).log_marginal(lik, _t(y), mu_t, var_t)
    dmu, dvar = torch.autograd.grad(out.sum(), (mu_t, var_t))
    val = out.item()
    assert math.isfinite(val)
    # 1e-6 relative everywhere (large counts reach ~1e-10) except one skewed case: a wide q cut on
    # one side by the logistic link (y=1, mu=3, var=4), where 20 Laplace-centred nodes reach 4e-6
    # relative (var = 4 is below the logit's tail rule; probit takes its tail rule there, 5e-15).
    skewed = name == "logit" and (y, mu, var) == (1.0, 3.0, 4.0) and num_nodes == 20
    rel = 2e-5 if skewed else 1e-6
    assert val == pytest.approx(ref, rel=rel, abs=1e-9)
    # gradients: scale-aware tolerance (d/dmu ranges from ~1e-9 to ~30 over these cases)
    assert dmu.item() == pytest.approx(ref_dmu, rel=max(rel, 1e-5), abs=1e-7)
    assert dvar.item() == pytest.approx(ref_dvar, rel=max(rel, 1e-5), abs=1e-7)


def test_reference_guard_quad_gradients_equal_finite_differences():
    """Not a test of gpdlm: a guard of the scipy reference ``quad_log_marginal`` that the gradient
    checks above rely on (its ratio-of-integrals gradients equal central differences of its value)."""
    for name, y, mu, var in [("poisson_exp", 150.0, -3.0, 0.5), ("logit", 1.0, 3.0, 4.0)]:
        _, dmu, dvar = quad_log_marginal(name, y, mu, var, with_grad=True)
        h = 1e-4
        fd_mu = (quad_log_marginal(name, y, mu + h, var) - quad_log_marginal(name, y, mu - h, var)) / (2 * h)
        fd_var = (quad_log_marginal(name, y, mu, var + h) - quad_log_marginal(name, y, mu, var - h)) / (2 * h)
        assert dmu == pytest.approx(fd_mu, rel=1e-5, abs=1e-8)
        assert dvar == pytest.approx(fd_var, rel=1e-5, abs=1e-8)


def test_large_counts_underflow_without_log_space():
    """The case the log-space quadrature exists for: with lambda = softplus(f), p(400|f) is below
    the smallest double over q's bulk, so log(sum_k w_k p(y|f_k)) is -inf, while the estimator is
    finite and right (log E_q[p] ~ -1022)."""
    lik = PoissonSoftplusLikelihood()
    ref = quad_log_marginal("poisson_softplus", 400.0, 0.0, 1.0)
    assert ref < -746  # log of the smallest subnormal double is ~ -744.4
    x, w = np.polynomial.hermite.hermgauss(20)
    f = math.sqrt(2.0) * x
    lam = np.logaddexp(0.0, f)
    with np.errstate(divide="ignore"):
        naive = np.log(np.sum(w / math.sqrt(math.pi) * np.exp(400 * np.log(lam) - lam - math.lgamma(401))))
    assert not np.isfinite(naive)
    out = QuadratureEstimator(num_nodes=20).log_marginal(lik, _t(400.0), _t(0.0), _t(1.0)).item()
    assert out == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize(
    "name,y,mu,var",
    [
        ("poisson_exp", 150.0, 0.0, 1.0),
        ("poisson_exp", 400.0, 6.0, 0.01),
        ("poisson_softplus", 150.0, -3.0, 0.5),
        ("probit", 1.0, -20.0, 0.1),
    ],
)
def test_non_adaptive_is_worse_on_peaked_cases(name, y, mu, var):
    """Documents why ``adaptive`` exists: with few nodes placed on q rather than on the tilted
    density, the error is orders of magnitude larger."""
    lik = LIKS[name]()
    ref = quad_log_marginal(name, y, mu, var)
    args = (lik, _t(y), _t(mu), _t(var))
    err_adaptive = abs(QuadratureEstimator(num_nodes=8, adaptive=True).log_marginal(*args).item() - ref)
    err_plain = abs(QuadratureEstimator(num_nodes=8, adaptive=False).log_marginal(*args).item() - ref)
    assert err_plain > 1e-3 * abs(ref)
    assert err_adaptive < 1e-3 * err_plain


@pytest.mark.parametrize("name", list(LIKS))
def test_expected_log_prob_matches_quad(name):
    lik = LIKS[name]()
    est = QuadratureEstimator(num_nodes=40)
    for y, mu, var in CASES[name]:
        if name == "poisson_softplus" and var > 10:
            continue  # log softplus is not polynomial-like across a q of sd 10 near f = 0
        ref = quad_expected_log_prob(name, y, mu, var)
        got = est.expected_log_prob(lik, _t(y), _t(mu), _t(var)).item()
        assert got == pytest.approx(ref, rel=1e-6, abs=1e-8), (y, mu, var)


def test_poisson_exp_closed_form_expected_log_prob_matches_quad():
    lik = PoissonExpLikelihood()
    for y, mu, var in CASES["poisson_exp"] + [(12.0, 2.0, 3.0)]:
        ref = quad_expected_log_prob("poisson_exp", y, mu, var)
        got = lik.expected_log_prob_closed(_t(y), _t(mu), _t(var)).item()
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-9), (y, mu, var)
