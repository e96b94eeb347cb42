"""Generators follow their definitions and are deterministic per seed."""

from __future__ import annotations

import numpy as np
import pytest

from gpdlm_cli.data import load_table
from gpdlm_cli.data.aimpeak import generate as aimpeak_generate
from gpdlm_cli.data.driving import simulate_trip
from gpdlm_cli.data.generators import banana, ringnorm, twonorm
from gpdlm_cli.exceptions import DataError

D = 20


def class_stats(X, y, label):
    Z = X[y == label]
    return Z.shape[0], Z.mean(0), np.cov(Z, rowvar=False)


def test_twonorm_matches_breimans_definition():
    t = load_table("twonorm")
    assert t.X.shape == (7400, D) and set(np.unique(t.y)) == {0.0, 1.0}
    a = 2 / np.sqrt(D)
    for label, mu in ((1, a), (0, -a)):
        n, m, C = class_stats(t.X, t.y, label)
        assert abs(n - 3700) < 4 * np.sqrt(7400 * 0.25)  # priors 1/2
        se = 1 / np.sqrt(n)
        assert np.max(np.abs(m - mu)) < 4.5 * se  # every coordinate of the mean is +-a
        assert np.max(np.abs(np.diag(C) - 1)) < 4.5 * np.sqrt(2 / n)  # unit variances
        off = C[~np.eye(D, dtype=bool)]
        assert np.max(np.abs(off)) < 5 * se  # identity covariance


def test_ringnorm_matches_breimans_definition():
    t = load_table("ringnorm")
    assert t.X.shape == (7400, D)
    a = 1 / np.sqrt(D)
    n, m, C = class_stats(t.X, t.y, 1)  # class 1: N(0, 4I)
    assert np.max(np.abs(m)) < 4.5 * 2 / np.sqrt(n)
    assert np.max(np.abs(np.diag(C) - 4)) < 4.5 * 4 * np.sqrt(2 / n)
    assert np.max(np.abs(C[~np.eye(D, dtype=bool)])) < 5 * 4 / np.sqrt(n)
    n, m, C = class_stats(t.X, t.y, 0)  # class 2: N(a, I)
    assert np.max(np.abs(m - a)) < 4.5 / np.sqrt(n)
    assert np.max(np.abs(np.diag(C) - 1)) < 4.5 * np.sqrt(2 / n)
    assert np.max(np.abs(C[~np.eye(D, dtype=bool)])) < 5 / np.sqrt(n)


def test_banana_shapes():
    X, y = banana(20000, 1.0, seed=3)
    r1 = np.hypot(*X[y == 1].T)  # class 1: radius 5 arc around the origin (+ unit noise)
    c2 = X[y == 0] + 3.75  # class 2: radius 5 arc around (-3.75, -3.75)
    r2 = np.hypot(*c2.T)
    assert abs(np.median(r1) - 5) < 0.3 and abs(np.median(r2) - 5) < 0.3
    assert abs(y.mean() - 0.5) < 0.02
    t = load_table("banana")
    assert t.X.shape == (5300, 2)


@pytest.mark.parametrize("gen", [twonorm, ringnorm])
def test_generators_are_deterministic_per_seed(gen):
    X1, y1 = gen(500, 20, seed=7)
    X2, y2 = gen(500, 20, seed=7)
    X3, _ = gen(500, 20, seed=8)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.allclose(X1, X3)
    assert load_table("twonorm", n=300, seed=1).fingerprint() == load_table("twonorm", n=300, seed=1).fingerprint()
    assert load_table("twonorm", n=300, seed=1).fingerprint() != load_table("twonorm", n=300, seed=2).fingerprint()


def test_generator_options_are_checked():
    from gpdlm_cli.exceptions import ConfigError
    from gpdlm_cli.schema import DatasetSpec, parse

    with pytest.raises(ConfigError, match="^the 'n' parameter of dataset=ringnorm must be an integer >= 2; got -5"):
        parse({"name": "ringnorm", "n": -5}, DatasetSpec, "dataset")
    with pytest.raises(DataError, match="has no option 'dims'"):
        load_table("twonorm", dims=3)


# ----- aimpeak ---------------------------------------------------------------------------------------
def test_aimpeak_shape_inputs_and_ranges():
    t = load_table("aimpeak")
    assert t.X.shape == (41850, 5) and t.feature_names == ["length", "lanes", "speed_limit", "direction", "time_slot"]
    col = {c: t.X[:, i] for i, c in enumerate(t.feature_names)}
    assert set(np.unique(col["time_slot"])) == set(range(1, 55))
    assert set(np.unique(col["lanes"])) <= {1, 2, 3, 4, 5}
    assert set(np.unique(col["speed_limit"])) <= {40, 50, 60, 70, 80, 90}
    assert 0 <= col["direction"].min() and col["direction"].max() < 360
    assert 30 < col["length"].min() and col["length"].max() < 700
    assert 3 <= t.y.min() and t.y.max() <= 1.1 * 90 and np.isfinite(t.y).all()
    assert len(np.unique(t.X[:, :4], axis=0)) == 775  # 775 distinct segments


def test_aimpeak_speeds_are_spatially_correlated_and_peak_in_the_rush():
    df, A = aimpeak_generate(775, 54, seed=0)
    S = df.pivot(index="segment", columns="time_slot", values="speed").to_numpy()
    lim = df.groupby("segment")["speed_limit"].first().to_numpy()
    r = S.mean(1) / lim
    i, j = A.nonzero()
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 775, 4000), rng.integers(0, 775, 4000)
    assert np.corrcoef(r[i], r[j])[0, 1] > 0.4  # neighbours along the network
    assert abs(np.corrcoef(r[a], r[b])[0, 1]) < 0.1  # random pairs
    by_slot = S.mean(0)
    assert by_slot.argmin() in range(15, 30)  # slowest around 08:15-09:25
    assert by_slot[0] - by_slot.min() > 8  # km/h slower in the peak


def test_aimpeak_seeded_and_sized_by_config():
    a = load_table("aimpeak", n_segments=50, n_slots=6, seed=3)
    b = load_table("aimpeak", n_segments=50, n_slots=6, seed=3)
    c = load_table("aimpeak", n_segments=50, n_slots=6, seed=4)
    assert a.X.shape == (300, 5)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


# ----- driving ---------------------------------------------------------------------------------------
def test_driving_simulator_is_deterministic_and_physical():
    a, b = simulate_trip(30.0, seed=5), simulate_trip(30.0, seed=5)
    assert len(a) == 3000  # 10 ms steps
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
    assert not np.allclose(a["speed"], simulate_trip(30.0, seed=6)["speed"])
    assert (a["true_speed"] >= 0).all() and a["true_speed"].max() < 40
    np.testing.assert_allclose(np.diff(a["time_s"]), 0.01)
    # the lane boundaries are a lane width apart at the car
    np.testing.assert_allclose((a["lane_left_y0"] - a["lane_right_y0"]).mean(), 3.7, atol=0.05)
    # the heading integrates the yaw rate; the gyro and the compass measure them with small noise
    h = a["true_heading"].to_numpy()
    np.testing.assert_allclose(np.diff(h), a["true_yaw_rate"].to_numpy()[1:] * 0.01, atol=1e-12)
    assert np.std(a["gyro_z"] - a["true_yaw_rate"]) < 0.01
    compass = np.arctan2(a["compass_y"], a["compass_x"]).to_numpy()
    assert np.max(np.abs(np.angle(np.exp(1j * (compass - h))))) < 0.15


def test_driving_tasks_have_separate_train_and_test_trips():
    t = load_table("driving", task="yaw", train_minutes=1.0, test_minutes=0.5, lag=32, lag_step=8, stride=20)
    assert t.task == "sequence" and t.target_name == "gyro_z"
    assert t.feature_names[:2] == ["speed[t-0]", "steering[t-0]"] and t.X.shape[1] == 2 * 4
    n_train = (6000 - 32 + 19) // 20
    n_test = (3000 - 32 + 19) // 20
    assert t.test_mask.sum() == n_test and (~t.test_mask).sum() == n_train
    lead = load_table("driving", task="lead", train_minutes=0.5, test_minutes=0.5, lag=16, lag_step=4, stride=50)
    assert "lead_x[t-1]" in lead.feature_names and "lead_y[t-1]" in lead.feature_names  # autoregressive
    assert "lead_x[t-0]" not in lead.feature_names
    with pytest.raises(DataError, match="task must be one of"):
        load_table("driving", task="fly")
