"""predictive_metrics on a stub model with fixed marginals, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch
from gpdlm_math_ref import make_gaussian_lik, quad_expectation, quad_log_marginal

from gpdlm_cli.likelihoods import (
    LogitLikelihood,
    PoissonExpLikelihood,
    PoissonSoftplusLikelihood,
    ProbitLikelihood,
)
from gpdlm_cli.metrics import predictive_metrics


class StubModel:
    """marginals(x) returns fixed (mu, var) rows indexed by x[:, 0]."""

    def __init__(self, mu, var):
        self.mu = torch.as_tensor(np.asarray(mu, float))
        self.var = torch.as_tensor(np.asarray(var, float))

    def marginals(self, x):
        idx = x[:, 0].long()
        return self.mu[idx], self.var[idx]


def _run(lik, mu, var, y, **kw):
    x = torch.arange(len(y), dtype=torch.float64).unsqueeze(-1)
    return predictive_metrics(StubModel(mu, var), lik, x, torch.as_tensor(np.asarray(y, float)), **kw)


MU = [0.3, -1.2, 2.0, 0.05]
VAR = [0.5, 0.1, 1.5, 0.02]


@pytest.mark.parametrize("y_std", [1.0, 2.5])
def test_gaussian_metrics(y_std):
    s2 = 0.2
    y = np.array([0.1, -0.7, 3.1, 0.0])
    mu, var = np.array(MU), np.array(VAR)
    out = _run(make_gaussian_lik(s2), mu, var, y, y_std=y_std, prefix="test_")
    nll_norm = np.mean(0.5 * np.log(2 * np.pi * (var + s2)) + 0.5 * (y - mu) ** 2 / (var + s2))
    mse_norm = np.mean((y - mu) ** 2)  # (0.04 + 0.25 + 1.21 + 0.0025) / 4
    assert mse_norm == pytest.approx(1.5025 / 4)
    assert out["test_nll_norm"] == pytest.approx(nll_norm, rel=1e-12)
    assert out["test_nll"] == pytest.approx(nll_norm + math.log(y_std), rel=1e-12)
    assert out["test_mse"] == pytest.approx(mse_norm * y_std**2, rel=1e-12)
    assert out["test_rmse"] == pytest.approx(math.sqrt(mse_norm) * y_std, rel=1e-12)
    assert out["test_rmse_norm"] == pytest.approx(math.sqrt(mse_norm), rel=1e-12)
    assert set(out) == {
        "test_nll",
        "test_nll_norm",
        "test_mse",
        "test_rmse",
        "test_rmse_norm",
        "test_msll",
        "test_crps",
        "test_coverage_50",
        "test_coverage_90",
        "test_coverage_95",
        "test_coverage_error",
    }


def test_probit_metrics():
    y = np.array([1.0, 1.0, 1.0, 0.0])  # E[y] > 0.5 iff mu > 0: predictions 1, 0, 1, 1 -> 2 errors
    mu, var = np.array(MU), np.array(VAR)
    out = _run(ProbitLikelihood(), mu, var, y, prefix="")
    nll = -np.mean(scipy.stats.norm.logcdf((2 * y - 1) * mu / np.sqrt(1 + var)))
    assert out["nll"] == pytest.approx(nll, rel=1e-12)
    assert out["error"] == pytest.approx(0.5)
    assert set(out) == {"nll", "error", "brier", "ece"}


def test_logit_metrics():
    y = np.array([0.0, 0.0, 1.0, 1.0])  # predictions 1, 0, 1, 1 -> 1 error
    mu, var = np.array(MU), np.array(VAR)
    out = _run(LogitLikelihood(), mu, var, y)
    nll = -np.mean([quad_log_marginal("logit", yi, mi, vi) for yi, mi, vi in zip(y, mu, var)])
    assert out["test_nll"] == pytest.approx(nll, rel=1e-9)
    assert out["test_error"] == pytest.approx(0.25)


def test_poisson_exp_metrics():
    y = np.array([0.0, 1.0, 9.0, 2.0])
    mu, var = np.array(MU), np.array(VAR)
    out = _run(PoissonExpLikelihood(), mu, var, y)
    y_hat = np.exp(mu + var / 2)
    mre = np.mean(np.abs(y_hat - y) / np.maximum(1.0, y))
    rmse = np.sqrt(np.mean((y_hat - y) ** 2))
    nll = -np.mean([quad_log_marginal("poisson_exp", yi, mi, vi) for yi, mi, vi in zip(y, mu, var)])
    assert out["test_mre"] == pytest.approx(mre, rel=1e-12)
    assert out["test_rmse"] == pytest.approx(rmse, rel=1e-12)
    assert out["test_nll"] == pytest.approx(nll, rel=1e-9)
    # y = 0 is divided by 1, not 0
    assert np.isfinite(out["test_mre"])
    assert set(out) == {
        "test_nll",
        "test_mre",
        "test_rmse",
        "test_coverage_50",
        "test_coverage_90",
        "test_coverage_95",
        "test_coverage_error",
    }


def test_poisson_softplus_metrics():
    """No closed-form E[y] here: E_q[softplus(f)] by quadrature, compared against scipy quad."""
    y = np.array([0.0, 1.0, 9.0, 2.0])
    mu, var = np.array(MU), np.array(VAR)
    out = _run(PoissonSoftplusLikelihood(), mu, var, y)
    y_hat = np.array([quad_expectation(lambda f: float(np.logaddexp(0.0, f)), m, v) for m, v in zip(mu, var)])
    mre = np.mean(np.abs(y_hat - y) / np.maximum(1.0, y))
    nll = -np.mean([quad_log_marginal("poisson_softplus", yi, mi, vi) for yi, mi, vi in zip(y, mu, var)])
    assert out["test_mre"] == pytest.approx(mre, rel=1e-9)
    assert out["test_rmse"] == pytest.approx(np.sqrt(np.mean((y_hat - y) ** 2)), rel=1e-9)
    assert out["test_nll"] == pytest.approx(nll, rel=1e-9)


def test_empty_test_set_gives_no_metrics():
    x = torch.zeros(0, 1, dtype=torch.float64)
    assert predictive_metrics(StubModel([], []), ProbitLikelihood(), x, torch.zeros(0)) == {}
