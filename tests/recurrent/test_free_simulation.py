"""Free simulation over time-ordered windows: the single rollout from the first window and the
k-step-ahead rollouts from every start, against a system whose errors are known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpdlm_cli.data.sequences import make_windows, window_names
from gpdlm_cli.features.recurrent import WindowLayout
from gpdlm_cli.metrics.simulation import rollouts, simulate

from ..conftest import ar1_series


def one_step(bias):
    """The true one-step model plus a constant bias: rows (u[t-0], u[t-1], y[t-1], y[t-2])."""

    def predict(rows):
        mu = 0.5 * rows[:, 2] + rows[:, 0] + bias
        return mu[:, None], torch.full_like(mu[:, None], 0.01)

    return predict


def test_rollouts_accumulate_a_one_step_bias_geometrically():
    """A one-step bias b of y_t = 0.5 y_{t-1} + u_t grows to b (1 + 0.5 + ... + 0.5^(k-1)) at the
    k-th simulated step, from any start; ``sim_rmse_h<k>`` pools the first k steps of every start."""
    u, y = ar1_series(80)
    X, Y, _ = make_windows(u, y, 2, "free_simulation")
    layout = WindowLayout.from_names(window_names(["u"], "y", 2, "free_simulation"), ["y"])
    x = torch.as_tensor(X)
    mu, _ = simulate(one_step(0.0), x, layout.feedback)
    np.testing.assert_allclose(mu[:, 0].numpy(), Y, atol=1e-12)  # the true model reproduces the series
    mu, _ = simulate(one_step(0.1), x, layout.feedback)
    k = np.arange(1, len(Y) + 1)
    np.testing.assert_allclose(mu[:, 0].numpy() - Y, 0.1 * (1 - 0.5**k) / 0.5, atol=1e-12)
    ahead = rollouts(one_step(0.1), x, layout.feedback, 6)[:, :, 0].numpy()
    for h in range(1, 7):  # every start: the k-th step is off by 0.1 (1 + 0.5 + ... + 0.5^(k-1))
        np.testing.assert_allclose(ahead[: len(Y) - h + 1, h - 1] - Y[h - 1 :], 0.1 * (1 - 0.5**h) / 0.5, atol=1e-12)
    assert np.isnan(ahead[-1, 1])


def test_horizon_rmse_pools_the_first_k_steps_of_every_start():
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.metrics.simulation import simulation_metrics

    u, y = ar1_series(80)
    X, Y, _ = make_windows(u, y, 2, "free_simulation")
    layout = WindowLayout.from_names(window_names(["u"], "y", 2, "free_simulation"), ["y"])
    x, yt = torch.as_tensor(X), torch.as_tensor(Y)
    mu, var = simulate(one_step(0.1), x, layout.feedback)
    ahead = rollouts(one_step(0.1), x, layout.feedback, 10)
    m = simulation_metrics(mu, var, yt, [GaussianLikelihood(noise_init=0.01)], 2.0, "test_", [1, 3, 10], ahead)
    bias = 0.1 * (1 - 0.5 ** np.arange(1, 11)) / 0.5  # the error at steps 1..10 from any start
    for k in (1, 3, 10):  # target units: errors x y_std = 2
        assert m[f"test_sim_rmse_h{k}"] == pytest.approx(2 * np.sqrt(np.mean(bias[:k] ** 2)), rel=1e-10)
        assert m[f"test_sim_rmse_h{k}_norm"] == pytest.approx(np.sqrt(np.mean(bias[:k] ** 2)), rel=1e-10)
    full = 0.1 * (1 - 0.5 ** np.arange(1, len(Y) + 1)) / 0.5
    assert m["test_sim_rmse"] == pytest.approx(2 * np.sqrt(np.mean(full**2)), rel=1e-10)
    assert m["test_sim_rmse_norm"] == pytest.approx(np.sqrt(np.mean(full**2)), rel=1e-10)


def test_free_simulation_of_every_lane_output_feeds_every_output_back():
    """driving task=lanes with dataset.output=all: no past column stays ground truth (every series is
    an output and fed back), so free simulation is accepted; with one output it is refused
    (test_bad_input)."""
    from gpdlm_cli import build

    from ..conftest import compose

    cfg = compose(
        [
            "model=lstm",
            "dataset=driving",
            "dataset.task=lanes",
            "dataset.output=all",
            "dataset.mode=free_simulation",
            "dataset.stride=1",
            "dataset.train_minutes=0.2",
            "dataset.test_minutes=0.2",
            "dataset.lag=16",
            "dataset.lag_step=4",
            "progress=false",
            "tracking.enabled=false",
        ]
    )
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    build.build_method(cfg, data, splits.task)
    layout = WindowLayout.from_names(list(data.feature_names), list(data.target_names))
    assert len(layout.feedback) == 14 and all(layout.feedback)
    assert set(layout.channels) - set(data.target_names) == {
        n.split("[")[0] for n in data.feature_names if n.endswith("[t-0]")
    }  # only inputs are left
