"""One scaler for every split (gpdlm_cli/data/scaling.py): per-output target statistics, per-column
features for random and published-mask splits, per-channel features for chronological splits --
each checked against numpy written here -- and the explicit loader list of the registry."""

from __future__ import annotations

import types

import numpy as np
import pytest

from gpdlm_cli.data import Table, make_splits
from gpdlm_cli.data.catalog import collect_loaders, loader
from gpdlm_cli.exceptions import DataError


def _multi_output_table(n=400, seed=0, test_mask=None, task="regression"):
    rng = np.random.default_rng(seed)
    X = rng.normal(loc=[1.0, -2.0, 4.0], scale=[0.5, 3.0, 2.0], size=(n, 3))
    Y = np.column_stack([10 + 3 * X[:, 0] + rng.normal(size=n), -50 + 0.1 * rng.normal(size=n)])
    return Table("multi", task, X, Y, ["a", "b", "c"], "u,v", test_mask=test_mask)


def test_random_split_of_a_multi_output_table_scales_each_output_with_its_own_statistics():
    t = _multi_output_table()
    s = make_splits(t, seed=3)
    tr = s.indices["train"]
    mean, std = t.y[tr].mean(0), t.y[tr].std(0)  # per output: the scales differ by ~30x
    assert s.y_mean.shape == s.y_std.shape == (2,)
    np.testing.assert_allclose(s.y_mean, mean, rtol=1e-12)
    np.testing.assert_allclose(s.y_std, std, rtol=1e-12)
    np.testing.assert_allclose(s.y_train.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(s.y_train.std(0), 1, rtol=1e-12)
    np.testing.assert_allclose(s.y_test, (t.y[s.indices["test"]] - mean) / std, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.X_val, (t.X[s.indices["val"]] - t.X[tr].mean(0)) / t.X[tr].std(0), rtol=1e-12)


def test_single_output_split_keeps_float_target_statistics():
    t = _multi_output_table()
    t1 = Table("single", "regression", t.X, t.y[:, 0].copy(), t.feature_names, "u")
    s = make_splits(t1, seed=3)
    tr = s.indices["train"]
    assert isinstance(s.y_mean, float) and isinstance(s.y_std, float)
    assert s.y_mean == float(t1.y[tr].mean()) and s.y_std == float(t1.y[tr].std())
    assert np.array_equal(s.y_train, (t1.y[tr] - float(t1.y[tr].mean())) / float(t1.y[tr].std()))


def test_chronological_split_scales_features_per_channel_and_past_outputs_like_the_output():
    rng = np.random.default_rng(1)
    n = 300
    names = ["u[t-0]", "u[t-1]", "y[t-1]", "y[t-2]", "w"]
    X = np.column_stack(
        [rng.normal(2, 3, n), rng.normal(2, 3, n), rng.normal(7, 2, n), rng.normal(7, 2, n), rng.normal(-1, 0.1, n)]
    )
    y = rng.normal(7, 2, n)
    mask = np.arange(n) >= 240
    t = Table("seq", "sequence", X, y, names, "y", test_mask=mask)
    s = make_splits(t, seed=0, val_fraction=0.25)
    tr = s.indices["train"]
    assert np.array_equal(tr, np.arange(180)) and np.array_equal(s.indices["val"], np.arange(180, 240))
    u = X[np.ix_(tr, [0, 1])]
    ym, ys = y[tr].mean(), y[tr].std()
    np.testing.assert_allclose(s.x_mean, [u.mean(), u.mean(), ym, ym, X[tr, 4].mean()], rtol=1e-12)
    np.testing.assert_allclose(s.x_std, [u.std(), u.std(), ys, ys, X[tr, 4].std()], rtol=1e-12)
    assert s.y_mean == pytest.approx(ym, rel=1e-12) and s.y_std == pytest.approx(ys, rel=1e-12)


def test_constant_training_target_is_a_one_line_error():
    t = _multi_output_table()
    t.y[:, 1] = 5.0
    with pytest.raises(DataError, match="a training target is constant"):
        make_splits(t, seed=0)


def test_collect_loaders_finds_marked_functions_and_rejects_a_key_defined_twice():
    a, b = types.ModuleType("a"), types.ModuleType("b")
    a.load = loader("k")(lambda info: None)
    a.reexport = a.load  # the same function under two names is one loader
    b.load = loader("k")(lambda info: None)
    assert list(collect_loaders((a,))) == ["k"]
    with pytest.raises(DataError, match="loader 'k' is defined twice"):
        collect_loaders((a, b))


def test_every_registry_entry_names_a_loader_of_the_listed_modules():
    from gpdlm_cli.data import registry

    infos = registry.all_datasets()
    keys = {spec.key for spec in registry.LOADERS.values()}
    assert {i.loader_key for i in infos.values()} <= keys
    assert keys == set(collect_loaders(registry.LOADER_MODULES))
