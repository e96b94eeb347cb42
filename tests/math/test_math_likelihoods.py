"""Likelihoods: log_prob against scipy, dlog_prob/d2log_prob against torch autograd of log_prob,
mode/max_log_prob/sup_log_prob against a dense grid, validate_targets."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import torch
from gpdlm_math_ref import make_gaussian_lik, np_log_prob

from gpdlm_cli.exceptions import DataError
from gpdlm_cli.likelihoods import (
    LogitLikelihood,
    PoissonExpLikelihood,
    PoissonSoftplusLikelihood,
    ProbitLikelihood,
)

NOISE = 0.3
LIKS = {
    "gaussian": lambda: make_gaussian_lik(NOISE),
    "probit": ProbitLikelihood,
    "logit": LogitLikelihood,
    "poisson_exp": PoissonExpLikelihood,
    "poisson_softplus": PoissonSoftplusLikelihood,
}


def _points(name, n=300, seed=0):
    rng = np.random.default_rng(seed)
    f = rng.uniform(-8, 8, size=n)
    if name == "gaussian":
        y = rng.normal(scale=3.0, size=n)
    elif name in ("probit", "logit"):
        y = rng.integers(0, 2, size=n).astype(float)
    else:
        f = rng.uniform(-6, 6, size=n)
        y = rng.poisson(rng.uniform(0, 50, size=n)).astype(float)
        y[:5] = [0.0, 0.0, 1.0, 150.0, 400.0]
    return torch.as_tensor(y), torch.as_tensor(f)


@pytest.mark.parametrize("name", list(LIKS))
def test_log_prob_matches_scipy(name):
    lik = LIKS[name]()
    y, f = _points(name)
    got = lik.log_prob(y, f).detach().numpy()
    ref = np.array([np_log_prob(name, yi, fi, NOISE) for yi, fi in zip(y.numpy(), f.numpy())])
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(LIKS))
def test_derivatives_match_autograd(name):
    lik = LIKS[name]()
    y, f = _points(name, seed=1)
    f = f.clone().requires_grad_(True)
    lp = lik.log_prob(y, f)
    (g,) = torch.autograd.grad(lp.sum(), f, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), f)
    np.testing.assert_allclose(lik.dlog_prob(y, f).detach().numpy(), g.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lik.d2log_prob(y, f).detach().numpy(), h.numpy(), rtol=1e-8, atol=1e-12)
    # the pair the tilted mode finder uses is the same two derivatives
    d1, d2 = lik.log_prob_derivatives(y, f)
    np.testing.assert_allclose(d1.detach().numpy(), g.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(d2.detach().numpy(), h.numpy(), rtol=1e-8, atol=1e-12)
    # log-concavity, which the quadrature's Newton centring and uPS rely on
    assert (lik.d2log_prob(y, f).detach().numpy() <= 0).all()


def test_derivatives_in_far_tails():
    """Probit derivatives in the far tail (z down to -35) are finite and equal the inverse Mills
    ratio r = phi(z)/Phi(z) computed by scipy in log space: d = r, d2 = -r (z + r)."""
    import scipy.special
    import scipy.stats

    lik = ProbitLikelihood()
    z = np.array([-35.0, -20.0, -8.0, 5.0])
    r = np.exp(scipy.stats.norm.logpdf(z) - scipy.special.log_ndtr(z))
    one = torch.ones(len(z), dtype=torch.float64)
    d = lik.dlog_prob(one, torch.as_tensor(z)).numpy()
    d2 = lik.d2log_prob(one, torch.as_tensor(z)).numpy()
    np.testing.assert_allclose(d, r, rtol=1e-10)
    # z + r cancels in the tail (r ~ -z): compare against the scipy value at matched precision
    np.testing.assert_allclose(d2, -r * (z + r), rtol=1e-6)
    assert np.isfinite(d2).all() and (d2 < 0).all() and (d2 > -1).all()


def _np_softplus_poisson(y, f):
    """log p, d/df log p and d2/df2 log p of Poisson(y | lambda = softplus(f)) in numpy, in log space,
    for -700 <= f <= 700 (t = e^f stays a normal double):

    log lambda = log(logaddexp(0, f)) (log1p(t) is exact for tiny t); with sigma = t/(1+t) and
    r = sigma/lambda = exp(log sigma - log lambda):  d = y r - sigma, and
    d2 = y (log lambda)'' - sigma (1 - sigma) with (log lambda)'' = r (lambda - t) / ((1 + t) lambda).
    For t < 1/2, (lambda - t) / lambda = t (t/lambda) a(t) with a(t) = (log1p(t) - t)/t^2 summed as
    its alternating series -1/2 + t/3 - t^2/4 + ... (no cancellation, no underflow)."""
    f = np.asarray(f, dtype=float)
    t = np.exp(f)
    lam = np.logaddexp(0.0, f)
    log_lam = np.log(lam)
    log_sig, log_sig_neg = -np.logaddexp(0.0, -f), -np.logaddexp(0.0, f)
    r = np.exp(log_sig - log_lam)
    tt = np.minimum(t, 0.5)
    k = np.arange(2, 80)[:, None]
    a = np.sum((-1.0) ** (k + 1) * tt ** (k - 2) / k, axis=0)
    small = tt * np.exp(np.minimum(f, 0.0) - log_lam) * a  # (lambda - t) / lambda for t < 1/2
    big = (np.log1p(np.maximum(t, 0.5)) - np.maximum(t, 0.5)) / lam
    dd_log_lam = r * np.where(t < 0.5, small, big) / (1 + t)
    logp = y * log_lam - lam - scipy.special.gammaln(y + 1)
    return logp, y * r - np.exp(log_sig), y * dd_log_lam - np.exp(log_sig + log_sig_neg)


@pytest.mark.parametrize("y", [0.0, 1.0, 3.0, 30.0, 400.0])
def test_softplus_poisson_in_log_space_down_to_f_minus_700(y):
    """log lambda is computed in log space (DLM review, F7): no floor on lambda, so log p ~ y f + ...
    stays exact and concave for f << 0 (a floor lambda >= 1e-30 made log p flat, and the uPS tangent
    envelope no bound, below f = -69). Against the numpy reference above on f in [-700, 700]."""
    lik = PoissonSoftplusLikelihood()
    f = np.concatenate([np.linspace(-700, -40, 67), np.linspace(-40, 40, 321), np.linspace(40, 700, 67)])
    ref_lp, ref_d, ref_d2 = _np_softplus_poisson(y, f)
    yt, ft = torch.full((f.size,), y, dtype=torch.float64), torch.as_tensor(f)
    np.testing.assert_allclose(lik.log_prob(yt, ft).numpy(), ref_lp, rtol=1e-13, atol=1e-13)
    # d is a difference of terms up to y + 1 (zero at the mode): rounding of that size is allowed
    np.testing.assert_allclose(lik.dlog_prob(yt, ft).numpy(), ref_d, rtol=1e-12, atol=1e-14 * (1 + y))
    np.testing.assert_allclose(lik.d2log_prob(yt, ft).numpy(), ref_d2, rtol=1e-10, atol=0)
    for dtype in (torch.float64, torch.float32):  # concave in both precisions
        fd = torch.linspace(
            -700 if dtype == torch.float64 else -100, 700 if dtype == torch.float64 else 80, 20001, dtype=dtype
        )
        d2 = lik.d2log_prob(torch.full_like(fd, y), fd)
        assert torch.isfinite(d2).all() and (d2 <= 0).all(), dtype


def _grid_argmax(lik, y, lo, hi, n=400_001):
    f = torch.linspace(lo, hi, n, dtype=torch.float64)
    lp = lik.log_prob(torch.full_like(f, y), f).detach()
    i = int(torch.argmax(lp))
    return float(f[i]), float(lp[i]), (hi - lo) / (n - 1)


@pytest.mark.parametrize(
    "name,ys",
    [
        ("gaussian", [-2.3, 0.0, 4.1]),
        ("poisson_exp", [1.0, 2.0, 5.0, 17.0, 150.0]),
        ("poisson_softplus", [1.0, 2.0, 5.0, 17.0, 30.0, 150.0]),
    ],
)
def test_finite_mode_is_grid_argmax(name, ys):
    lik = LIKS[name]()
    for y in ys:
        mode = float(lik.mode(torch.tensor(y, dtype=torch.float64)))
        # an independent grid around a guess that does not use lik.mode
        if name == "gaussian":
            guess = y
        elif name == "poisson_exp":
            guess = np.log(y)
        else:
            guess = y if y >= 2 else 0.0
        fa, lpa, step = _grid_argmax(lik, y, guess - 4.0, guess + 4.0)
        assert abs(mode - fa) <= 2 * step, (y, mode, fa)
        lp_mode = lik.log_prob(torch.tensor(y, dtype=torch.float64), torch.tensor(mode, dtype=torch.float64)).item()
        assert lp_mode >= lpa - 1e-12


@pytest.mark.parametrize(
    "name,y,direction",
    [
        ("probit", 1.0, +1),
        ("probit", 0.0, -1),
        ("logit", 1.0, +1),
        ("logit", 0.0, -1),
        ("poisson_exp", 0.0, -1),
        ("poisson_softplus", 0.0, -1),
    ],
)
def test_infinite_mode_and_sup(name, y, direction):
    """When the supremum is approached only in the limit: mode is +-inf, log p is monotone towards
    it on a grid, and sup_log_prob is the limit log 1 = 0."""
    lik = LIKS[name]()
    yt = torch.tensor(y, dtype=torch.float64)
    assert float(lik.mode(yt)) == direction * np.inf
    f = torch.linspace(-30, 30, 6001, dtype=torch.float64)
    lp = lik.log_prob(yt.expand_as(f), f).detach().numpy()
    steps = np.diff(lp) * direction
    assert (steps >= 0).all()
    assert lp.max() < 0
    assert float(lik.sup_log_prob(yt)) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("name", ["poisson_exp", "poisson_softplus", "probit", "logit", "gaussian"])
def test_max_log_prob_on_interval_is_grid_max(name):
    """max_{f in [lo, hi]} log p(y|f) (used by the uPS rejection bound) against a dense grid, for
    intervals left of, containing and right of the mode."""
    lik = LIKS[name]()
    y = {"poisson_exp": 20.0, "poisson_softplus": 20.0, "probit": 1.0, "logit": 0.0, "gaussian": 1.5}[name]
    for lo, hi in [(-3.0, -1.0), (-1.0, 4.0), (2.0, 3.5), (3.2, 6.0)]:
        f = torch.linspace(lo, hi, 20001, dtype=torch.float64)
        grid_max = float(lik.log_prob(torch.full_like(f, y), f).detach().max())
        got = float(
            lik.max_log_prob(
                torch.tensor([y], dtype=torch.float64),
                torch.tensor([lo], dtype=torch.float64),
                torch.tensor([hi], dtype=torch.float64),
            ).detach()
        )
        assert got >= grid_max - 1e-12
        assert got == pytest.approx(grid_max, abs=1e-6)


@pytest.mark.parametrize(
    "name,bad",
    [
        ("probit", [0.0, 1.0, 2.0]),
        ("logit", [0.0, -1.0]),
        ("probit", [0.5]),
        ("poisson_exp", [0.0, 3.0, -1.0]),
        ("poisson_exp", [1.5]),
        ("poisson_softplus", [2.0, -1.0]),
        ("poisson_softplus", [1.5, 2.0]),
        ("gaussian", [0.1, float("nan")]),
        ("poisson_exp", [1.0, float("inf")]),
    ],
)
def test_validate_targets_rejects_bad(name, bad):
    with pytest.raises(DataError):
        LIKS[name]().validate_targets(torch.tensor(bad, dtype=torch.float64))


@pytest.mark.parametrize(
    "name,good",
    [
        ("probit", [0.0, 1.0, 1.0]),
        ("logit", [1.0, 0.0]),
        ("poisson_exp", [0.0, 3.0, 400.0]),
        ("poisson_softplus", [0.0, 1.0, 150.0]),
        ("gaussian", [-3.2, 0.0, 1e6]),
    ],
)
def test_validate_targets_accepts_good(name, good):
    assert (
        LIKS[name]().validate_targets(torch.tensor(good, dtype=torch.float64)) is None
    )  # raises DataError if rejected


def test_safe_cholesky_retries_jitter_then_fails_with_a_remedy():
    import torch

    from gpdlm_cli.exceptions import NumericalError
    from gpdlm_cli.models.linalg import safe_cholesky

    A = torch.ones(3, 3, dtype=torch.float64)  # rank 1: PSD, not PD
    L = safe_cholesky(A)  # rescued by jitter
    assert torch.allclose(L @ L.T, A, atol=1e-3)
    with pytest.raises(
        NumericalError, match="not positive definite even with jitter .* try fewer or better-spread inducing points"
    ):
        safe_cholesky(-torch.eye(3, dtype=torch.float64))
