"""Anchors for the AIMPEAK-like report (``metrics.anchors``) against a direct numpy computation, and
the generator's held-out splits (``data.aimpeak.holdout_mask``; issue 40)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpdlm_cli.data.aimpeak import holdout_mask
from gpdlm_cli.metrics.anchors import anchor_rmse


def toy(seed=0, groups=12, slots=10):
    rng = np.random.default_rng(seed)
    static = rng.normal(size=(groups, 2)) * [3.0, 0.5]
    rows = [(g, t) for g in range(groups) for t in range(1, slots + 1)]
    x = np.array([[*static[g], t] for g, t in rows])
    y = np.array([np.sin(t / 3 + g) * 5 + g for g, t in rows]) + rng.normal(0, 0.1, len(rows))
    test = rng.random(len(rows)) < 0.2
    test[:slots] = True  # group 0 has no training rows: its test rows fall back to 2-NN
    return x[~test], y[~test], x[test], y[test]


def direct(xtr, ytr, xte, yte):
    mu, sd = xtr.mean(0), xtr.std(0)
    a, b = (xtr - mu) / sd, (xte - mu) / sd
    knn = np.array([ytr[np.argsort(((a - r) ** 2).sum(1), kind="stable")[:2]].mean() for r in b])
    nb, adj = knn.copy(), 0
    for j, r in enumerate(xte):
        same = np.flatnonzero((xtr[:, :2] == r[:2]).all(1))
        if same.size == 0:
            continue
        t = xtr[same, 2]
        lo, hi = same[t < r[2]], same[t > r[2]]
        picks = ([lo[np.argmax(xtr[lo, 2])]] if lo.size else []) + ([hi[np.argmin(xtr[hi, 2])]] if hi.size else [])
        nb[j] = ytr[picks].mean()
        adj += int(lo.size > 0 and hi.size > 0 and xtr[lo, 2].max() == r[2] - 1 and xtr[hi, 2].min() == r[2] + 1)
    rmse = lambda p: math.sqrt(np.mean((p - yte) ** 2))  # noqa: E731
    return {
        "constant": rmse(np.full_like(yte, ytr.mean())),
        "knn2": rmse(knn),
        "neighbours": rmse(nb),
        "adjacent_share": adj / yte.size,
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_anchors_equal_a_direct_numpy_computation(seed):
    xtr, ytr, xte, yte = toy(seed)
    got = anchor_rmse(xtr, ytr, xte, yte, group_cols=(0, 1), time_col=2)
    want = direct(xtr, ytr, xte, yte)
    assert got == pytest.approx(want, rel=1e-12)
    assert 0 < got["adjacent_share"] < 1 and got["neighbours"] < got["knn2"] < got["constant"]
    assert set(anchor_rmse(xtr, ytr, xte, yte)) == {"constant", "knn2"}  # no groups: no neighbours


def test_held_out_segments_and_slot_windows():
    segment = np.repeat(np.arange(100), 54)
    slot = np.tile(np.arange(1, 55), 100)
    assert holdout_mask(segment, slot, "random", 0.05, 0) is None
    seg = holdout_mask(segment, slot, "segments", 0.05, 0)
    held = np.unique(segment[seg])
    assert held.size == 5 and seg.sum() == 5 * 54  # whole segments
    assert not np.isin(segment[~seg], held).any()
    win = holdout_mask(segment, slot, "slots", 0.05, 0)
    assert win.sum() == 100 * 3  # ceil(0.05 * 54) = 3 consecutive slots in every segment
    for s in range(100):
        t = slot[(segment == s) & win]
        assert list(t) == list(range(t[0], t[0] + 3)) and 1 <= t[0] <= 52
    assert np.array_equal(win, holdout_mask(segment, slot, "slots", 0.05, 0))  # fixed by holdout_seed
    assert not np.array_equal(win, holdout_mask(segment, slot, "slots", 0.05, 1))


def test_bad_holdout_options_are_one_line_config_errors():
    from types import SimpleNamespace

    from gpdlm_cli.data.aimpeak import load_aimpeak
    from gpdlm_cli.exceptions import ConfigError
    from gpdlm_cli.schema import DatasetSpec, parse

    with pytest.raises(
        ConfigError,
        match=r"^the 'holdout' parameter of dataset=aimpeak must be one of random, segments, slots; got 'time' instead$",
    ):
        parse({"name": "aimpeak", "n_segments": 8, "holdout": "time"}, DatasetSpec, "dataset")
    with pytest.raises(ConfigError, match=r"must be a float in \(0, 1\); got 1.5 instead$"):
        parse({"name": "aimpeak", "holdout": "slots", "holdout_fraction": 1.5}, DatasetSpec, "dataset")
    info = SimpleNamespace(name="aimpeak")
    table = load_aimpeak(info, n_segments=8, holdout="segments", holdout_fraction=0.25)
    assert table.test_mask.sum() == 2 * 54
