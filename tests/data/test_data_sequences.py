"""The window builder (regression / autoregression / free simulation) and sequence datasets."""

from __future__ import annotations

import numpy as np
import pytest

from gpdlm_cli.data import load_table, make_splits, make_windows
from gpdlm_cli.data.sequences import window_names
from gpdlm_cli.exceptions import DataError
from tests.conftest import ar1_series


def test_window_layout_regression_and_autoregression():
    u = np.arange(10.0)[:, None] * np.array([1.0, 100.0])  # two input channels
    y = np.arange(10.0) + 0.5
    X, Y, t = make_windows(u, y, lag=3, mode="regression")
    assert X.shape == (7, 6) and list(t) == list(range(3, 10))
    np.testing.assert_array_equal(X[0], [3, 300, 2, 200, 1, 100])  # u_t, u_{t-1}, u_{t-2}
    np.testing.assert_array_equal(Y, y[3:])
    X, Y, _ = make_windows(u, y, lag=3, mode="autoregression")
    np.testing.assert_array_equal(X[0], [3, 300, 2, 200, 1, 100, 2.5, 1.5, 0.5])  # + y_{t-1..t-3}
    assert window_names(["a", "b"], "y", 3, "autoregression")[-3:] == ["y[t-1]", "y[t-2]", "y[t-3]"]
    X, _, t = make_windows(u, y, lag=4, mode="regression", lag_step=2, stride=3)
    assert list(t) == [4, 7] and X.shape == (2, 4)
    np.testing.assert_array_equal(X[0], [4, 400, 2, 200])


def _rollout(predict, X, lag):
    """The family's free simulation (``metrics.simulation.simulate``) of a one-output numpy model on
    free-simulation windows: the past-target columns are overwritten by the model's own predictions."""
    import torch

    from gpdlm_cli.features.recurrent import WindowLayout
    from gpdlm_cli.metrics.simulation import simulate

    layout = WindowLayout.from_names(window_names(["u"], "y", lag, "free_simulation"), ["y"])

    def batch(rows):
        mu = torch.as_tensor(predict(rows.numpy()))[:, None]
        return mu, torch.zeros_like(mu)

    return simulate(batch, torch.as_tensor(X), layout.feedback)[0][:, 0].numpy()


def test_free_simulation_with_the_true_model_reproduces_the_series():
    u, y = ar1_series(60)
    lag = 2
    X, Y, _ = make_windows(u, y, lag, "free_simulation")
    names = window_names(["u"], "y", lag, "free_simulation")
    iu, iy = names.index("u[t-0]"), names.index("y[t-1]")

    def exact(rows):
        return 0.5 * rows[:, iy] + rows[:, iu]

    np.testing.assert_allclose(exact(X), Y)  # one-step (teacher forced) predictions are exact
    np.testing.assert_allclose(_rollout(exact, X, lag), y[lag:], atol=1e-12)


def test_free_simulation_feeds_back_its_own_errors():
    u, y = ar1_series(200)
    lag = 1
    X, Y, _ = make_windows(u, y, lag, "free_simulation")
    biased = lambda rows: 0.5 * rows[:, 1] + rows[:, 0] + 0.1  # noqa: E731  (a constant one-step bias)
    one_step_err = np.abs(biased(X) - Y)
    sim_err = np.abs(_rollout(biased, X, lag) - y[lag:])
    np.testing.assert_allclose(one_step_err, 0.1)
    assert sim_err[-50:].mean() == pytest.approx(0.2, abs=1e-9)  # 0.1 / (1 - 0.5): errors accumulate


def test_window_errors():
    u, y = ar1_series(20)
    with pytest.raises(DataError, match="window mode"):
        make_windows(u, y, 3, "teleport")
    with pytest.raises(DataError, match="too short"):
        make_windows(u, y, 25)
    with pytest.raises(DataError, match="lag must be an integer"):
        make_windows(u, y, 0)


def test_sysid_sequences_split_in_time():
    t = load_table("sysid_actuator")
    assert t.task == "sequence" and t.X.shape == (1014, 20)
    assert t.test_mask.sum() == 512 and (~t.test_mask).sum() == 502  # windows: 512 - lag
    d = load_table("sysid_drives", mode="regression", lag=32)
    assert d.X.shape[1] == 32 and d.test_mask.sum() == 250
    assert (d.y > -0.5).all()  # |belt speed| + small noise
    a2 = load_table("sysid_actuator", seed=1)
    assert a2.fingerprint() != t.fingerprint() and load_table("sysid_actuator").fingerprint() == t.fingerprint()


def test_chicago_is_real_data_with_a_chronological_test_part():
    t = load_table("chicago")
    assert t.task == "sequence" and t.target_name == "ridership"
    assert t.X.shape[1] == 7 * 14 + 7  # 14 inputs x 7 days + 7 past ridership values
    assert not np.isnan(t.X).any()
    assert 0 < t.y.min() and t.y.max() < 30  # thousands of entries a day
    assert t.test_mask[-1] and not t.test_mask[0]
    n_test = int(t.test_mask.sum())
    assert t.test_mask[-n_test:].all()  # the test part is the last block of days
    s = make_splits(t, seed=0, val_fraction=0.1, test_fraction=0.0)
    assert s.X_test.shape[0] == n_test
    assert set(s.indices["test"]) == set(np.flatnonzero(t.test_mask))
