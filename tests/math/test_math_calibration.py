"""Calibration metrics (issue 22) on fixed predictive marginals, against scipy computations written
here: CRPS by numerical integration of (F(t) - 1[t >= y])^2, interval coverage from scipy's normal
and Poisson-mixture quantiles, MSLL, Brier score and expected calibration error by loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
import torch
from gpdlm_math_ref import make_gaussian_lik

from gpdlm_cli.likelihoods import PoissonExpLikelihood, ProbitLikelihood
from gpdlm_cli.metrics import metrics_from_marginals

rng = np.random.default_rng(7)
N = 40


def _metrics(lik, mu, var, y, **kw):
    t = lambda a: torch.as_tensor(np.asarray(a, float))  # noqa: E731
    return metrics_from_marginals(lik, t(mu), t(var), t(y), prefix="", **kw)


@pytest.mark.parametrize("y_std", [1.0, 3.0])
def test_regression_crps_coverage_and_msll(y_std):
    s2 = 0.3
    mu, var = rng.normal(size=N), rng.uniform(0.05, 1.0, N)
    y = mu + rng.normal(size=N) * np.sqrt(var + s2) * rng.uniform(0.3, 2.0, N)
    out = _metrics(make_gaussian_lik(s2), mu, var, y, y_std=y_std)
    sd = np.sqrt(var + s2)

    def crps(m, s, yi):  # int (F(t) - 1[t >= y])^2 dt, split at y
        F = scipy.stats.norm(m, s).cdf
        a = scipy.integrate.quad(lambda t: F(t) ** 2, m - 40 * s, yi, limit=200)[0]
        b = scipy.integrate.quad(lambda t: (1 - F(t)) ** 2, yi, m + 40 * s, limit=200)[0]
        return a + b

    ref_crps = np.mean([crps(m, s, yi) for m, s, yi in zip(mu, sd, y)]) * y_std
    assert out["crps"] == pytest.approx(ref_crps, rel=1e-7)
    for level in (50, 90, 95):
        lo, hi = scipy.stats.norm.interval(level / 100, loc=mu, scale=sd)
        assert out[f"coverage_{level}"] == pytest.approx(np.mean((y >= lo) & (y <= hi)), abs=1e-12)
    errs = [abs(out[f"coverage_{lv}"] - lv / 100) for lv in (50, 90, 95)]
    assert out["coverage_error"] == pytest.approx(np.mean(errs), abs=1e-12)
    nll_norm = -np.mean(scipy.stats.norm(mu, sd).logpdf(y))
    assert out["msll"] == pytest.approx(nll_norm - np.mean(-scipy.stats.norm(0, 1).logpdf(y)), rel=1e-10)


def test_classification_brier_and_ece():
    mu, var = rng.normal(size=200) * 2, rng.uniform(0.01, 2.0, 200)
    p = scipy.stats.norm.cdf(mu / np.sqrt(1 + var))
    y = (rng.uniform(size=200) < np.clip(p + 0.15, 0, 1)).astype(float)  # miscalibrated on purpose
    out = _metrics(ProbitLikelihood(), mu, var, y)
    assert out["brier"] == pytest.approx(np.mean((p - y) ** 2), rel=1e-10)
    conf = np.maximum(p, 1 - p)
    correct = ((p > 0.5) == (y == 1)).astype(float)
    ece = 0.0
    for b in range(10):
        lo, hi = 0.5 + b * 0.05, 0.5 + (b + 1) * 0.05
        sel = (conf >= lo) & ((conf < hi) if b < 9 else (conf <= hi))
        if sel.any():
            ece += sel.mean() * abs(correct[sel].mean() - conf[sel].mean())
    assert out["ece"] == pytest.approx(ece, abs=1e-10) and out["ece"] > 0.05


def test_count_coverage_of_the_poisson_mixture_intervals():
    mu, var = rng.normal(1.0, 0.8, N), rng.uniform(0.01, 1.5, N)
    y = rng.poisson(np.exp(mu + rng.normal(size=N) * np.sqrt(var))).astype(float)
    out = _metrics(PoissonExpLikelihood(), mu, var, y)
    x, w = np.polynomial.hermite.hermgauss(200)  # a dense, independent mixture CDF
    for level in (50, 90, 95):
        a = 1 - level / 100
        inside = []
        for m, v, yi in zip(mu, var, y):
            rates = np.exp(m + np.sqrt(2 * v) * x)
            F = lambda k: float(np.sum(w * scipy.stats.poisson.cdf(k, rates)) / math.sqrt(math.pi))  # noqa: E731
            k, lo = 0, None
            while True:  # the quantiles q(a/2), q(1 - a/2) of the mixture
                Fk = F(k)
                if lo is None and Fk >= a / 2:
                    lo = k
                if Fk >= 1 - a / 2:
                    hi = k
                    break
                k += 1
            inside.append(lo <= yi <= hi)
        assert out[f"coverage_{level}"] == pytest.approx(np.mean(inside), abs=1e-12), level


def test_sequence_models_report_the_mean_calibration_over_outputs():
    """The recurrent family's pooled metrics: each calibration metric is the mean over outputs."""
    from gpdlm_cli.metrics.simulation import CALIBRATION, scored

    mu = torch.as_tensor(rng.normal(size=(N, 2)))
    var = torch.as_tensor(rng.uniform(0.05, 1.0, (N, 2)))
    y = mu + torch.as_tensor(rng.normal(size=(N, 2)))
    liks = [make_gaussian_lik(0.2), make_gaussian_lik(0.5)]
    out = scored(mu, var, y, liks, [2.0, 3.0], "test_")
    per = [
        metrics_from_marginals(liks[k], mu[:, k], var[:, k], y[:, k], y_std=[2.0, 3.0][k], prefix="") for k in range(2)
    ]
    for k in CALIBRATION:
        assert out["test_" + k] == pytest.approx((per[0][k] + per[1][k]) / 2, rel=1e-12)
