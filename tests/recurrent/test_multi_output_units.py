"""A multi-output run's metrics in target units: ``evaluator(method, data, y_std)`` gets one sd per output
(``DataSplits.y_std``, an array for a table of several outputs, e.g. driving's 14 lanes) and every output's
errors and NLL are put back into target units with its own sd -- checked against numpy on a tiny problem."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.metrics.simulation import SequenceEvaluation, scored, simulation_metrics
from gpdlm_cli.run.train import evaluator

SDS = np.array([2.0, 5.0])  # the two outputs' target sds: output 1's errors count 2.5x output 0's
NOISE = (0.04, 0.25)


class Stub:
    """A 'sequence model' whose rows are its own predictions: row = (mu_0, mu_1, var_0, var_1)."""

    def condition(self, x, y):
        pass

    def marginals_all(self, x):
        return x[:, :2], x[:, 2:]

    def means(self, x):
        return x[:, :2]


def _split(seed: int, n: int = 7):
    rng = np.random.default_rng(seed)
    mu, var, y = rng.normal(size=(n, 2)), rng.uniform(0.1, 0.5, size=(n, 2)), rng.normal(size=(n, 2))
    return mu, var, y


def _numpy_metrics(mu, var, y, sds, noise):
    """Per output k in target units (sd s_k), then pooled as ``scored`` documents: means over outputs."""
    s2 = var + np.asarray(noise)
    nll_norm = (0.5 * np.log(2 * np.pi * s2) + 0.5 * (y - mu) ** 2 / s2).mean(0)  # per output
    mse = ((mu - y) ** 2).mean(0) * sds**2
    z = (y - mu) / np.sqrt(s2)
    from scipy.stats import norm

    crps = (np.sqrt(s2) * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))).mean(0) * sds
    return {
        "nll": float(np.mean(nll_norm + np.log(sds))),
        "nll_norm": float(np.mean(nll_norm)),
        "mse": float(np.mean(mse)),
        "rmse": float(np.sqrt(np.mean(mse))),
        "rmse_norm": float(np.sqrt(np.mean(((mu - y) ** 2).mean(0)))),
        "crps": float(np.mean(crps)),
    }


def test_a_two_output_runs_metrics_use_each_outputs_own_sd():
    likelihoods = [GaussianLikelihood(noise_init=s, noise_min=1e-6).to(torch.float64) for s in NOISE]
    noise = [float(lik.noise.detach()) for lik in likelihoods]  # as stored (float32 at initialisation)
    assert noise == pytest.approx(NOISE, rel=1e-6)
    (vm, vv, vy), (tm, tv, ty) = _split(0), _split(1)
    t = torch.as_tensor
    data = SimpleNamespace(x_val=t(np.hstack([vm, vv])), y_val=t(vy), x_test=t(np.hstack([tm, tv])), y_test=t(ty))
    evaluation = SequenceEvaluation(Stub(), None, None, likelihoods, mode="one_step", feedback=None, horizons=[])
    method = SimpleNamespace(evaluate=evaluation.evaluate, monitors={}, model=None, likelihood=None)
    got = evaluator(method, data, SDS)()
    for prefix, (m, v, y) in (("val_", (vm, vv, vy)), ("test_", (tm, tv, ty))):
        want = _numpy_metrics(m, v, y, SDS, noise)
        for key, value in want.items():
            assert got[prefix + key] == pytest.approx(value, rel=1e-10), prefix + key
    # not one pooled sd: the mean sd (3.5) or the first output's (2) give other numbers
    for wrong in (np.full(2, SDS.mean()), np.full(2, SDS[0])):
        assert got["test_rmse"] != pytest.approx(_numpy_metrics(tm, tv, ty, wrong, noise)["rmse"], rel=1e-3)
    assert got["test_nll"] != pytest.approx(_numpy_metrics(tm, tv, ty, np.full(2, SDS.mean()), noise)["nll"], rel=1e-3)


def test_horizon_rmse_of_two_outputs_scales_each_outputs_errors_by_its_sd():
    """``sim_rmse_h<k>``: the errors of the k-step rollouts (starts, k, outputs) x each output's sd, pooled."""
    n, reach = 6, 3
    rng = np.random.default_rng(2)
    y = rng.normal(size=(n, 2))
    ahead = rng.normal(size=(n, reach, 2))
    mu, var = torch.as_tensor(y + 0.1), torch.full((n, 2), 0.2, dtype=torch.float64)
    likelihoods = [GaussianLikelihood(noise_init=s).to(torch.float64) for s in NOISE]
    out = simulation_metrics(mu, var, torch.as_tensor(y), likelihoods, SDS, "test_", [1, 3], torch.as_tensor(ahead))
    for h in (1, 3):
        starts = np.arange(n - h + 1)
        truth = y[starts[:, None] + np.arange(h)[None, :]]
        err = (ahead[: n - h + 1, :h] - truth) * SDS
        assert out[f"test_sim_rmse_h{h}"] == pytest.approx(math.sqrt(np.mean(err**2)), rel=1e-12)
        # standardised: the same errors without the sds, pooled the same way
        assert out[f"test_sim_rmse_h{h}_norm"] == pytest.approx(math.sqrt(np.mean((err / SDS) ** 2)), rel=1e-12)
    assert out["test_sim_rmse"] == pytest.approx(math.sqrt(np.mean((0.1 * SDS) ** 2)), rel=1e-10)
    assert out["test_sim_rmse_norm"] == pytest.approx(0.1, rel=1e-10)


def test_one_sd_for_several_outputs_is_every_outputs_sd_and_a_wrong_count_is_refused():
    """A float (one output's, or a table not standardised) applies to every output; an array must have
    one sd per output: a shorter or longer one is a programming error, not a silent mix-up."""
    mu, var, y = (torch.as_tensor(a) for a in _split(3))
    likelihoods = [GaussianLikelihood(noise_init=s).to(torch.float64) for s in NOISE]
    as_float = scored(mu, var, y, likelihoods, 2.0, "test_")
    as_array = scored(mu, var, y, likelihoods, np.array([2.0, 2.0]), "test_")
    assert as_float == pytest.approx(as_array, rel=1e-14)
    for bad in (np.array([2.0]), np.array([2.0, 5.0, 1.0])):
        with pytest.raises(ValueError, match=r"one target sd per output: 2 outputs, got \d"):
            scored(mu, var, y, likelihoods, bad, "test_")
