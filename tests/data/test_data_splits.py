"""Split sizes, no overlap, standardisation with training statistics only, paper presets, and
each bad input as a clear one-line DataError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpdlm_cli.data import Table, load_table, make_splits, table_from_frame
from gpdlm_cli.exceptions import ConfigError, DataError

FIXTURES = Path(__file__).parent / "fixtures"


def toy_table(n=1000, task="regression", seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(loc=[5.0, -3.0], scale=[2.0, 0.5], size=(n, 2))
    y = (X[:, 0] > 5).astype(float) if task == "classification" else 3 * X[:, 0] + rng.normal(size=n) + 10
    return Table("toy", task, X, y, ["a", "b"], "y")


def all_idx(s):
    return [s.indices[k] for k in ("train", "val", "test")]


def test_regression_protocol_67_8_25_sizes_and_no_overlap():
    t = toy_table(1000)
    s = make_splits(t, seed=0)  # defaults: the DLM regression protocol
    assert (s.X_train.shape[0], s.X_val.shape[0], s.X_test.shape[0]) == (670, 80, 250)
    tr, va, te = all_idx(s)
    assert not (set(tr) & set(va)) and not (set(tr) & set(te)) and not (set(va) & set(te))
    assert len(set(tr) | set(va) | set(te)) == 1000


def test_standardisation_uses_training_statistics_only():
    t = toy_table(1000)
    s = make_splits(t, seed=1)
    tr, va, te = all_idx(s)
    np.testing.assert_allclose(s.x_mean, t.X[tr].mean(0))
    np.testing.assert_allclose(s.x_std, t.X[tr].std(0))
    np.testing.assert_allclose(s.X_train.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(s.X_train.std(0), 1, atol=1e-12)
    np.testing.assert_allclose(s.X_test, (t.X[te] - t.X[tr].mean(0)) / t.X[tr].std(0))
    np.testing.assert_allclose(s.X_val, (t.X[va] - t.X[tr].mean(0)) / t.X[tr].std(0))
    assert s.y_mean == pytest.approx(t.y[tr].mean()) and s.y_std == pytest.approx(t.y[tr].std())
    np.testing.assert_allclose(s.y_test * s.y_std + s.y_mean, t.y[te])  # back to original units
    assert not np.allclose(s.X_test.mean(0), 0, atol=1e-3)  # the test set was not re-centred


def test_seeds_give_different_shuffles_and_the_same_seed_the_same():
    t = toy_table(300)
    a, b, c = make_splits(t, seed=0), make_splits(t, seed=0), make_splits(t, seed=1)
    np.testing.assert_array_equal(a.indices["test"], b.indices["test"])
    assert set(a.indices["test"]) != set(c.indices["test"])


def test_classification_protocol_train_size_10pct_val_up_to_1000_test():
    t = toy_table(5000, "classification")
    s = make_splits(t, seed=0, val_fraction=0.1, test_fraction=0.0, train_size=2000, test_size=1000)
    assert (s.n_train, s.X_val.shape[0], s.X_test.shape[0]) == (2000, 500, 1000)
    assert s.y_mean == 0 and s.y_std == 1  # labels are not standardised
    small = toy_table(2500, "classification")
    s = make_splits(small, seed=0, val_fraction=0.1, test_fraction=0.0, train_size=2000, test_size=1000)
    assert (s.n_train, s.X_val.shape[0], s.X_test.shape[0]) == (2000, 250, 250)  # "up to" 1000 test
    assert any("test set reduced" in n for n in s.notes)


def test_fixed_test_size_and_95_5():
    t = toy_table(20000)
    s = make_splits(t, seed=0, val_fraction=0.08, test_fraction=0.0, test_size=10000)  # song-like
    assert s.X_test.shape[0] == 10000
    s = make_splits(t, seed=0, val_fraction=0.01, test_fraction=0.05)
    assert (s.n_train, s.X_val.shape[0], s.X_test.shape[0]) == (18800, 200, 1000)


def test_training_size_larger_than_the_data_is_a_one_line_error():
    t = toy_table(1000)
    with pytest.raises(DataError) as e:
        make_splits(t, seed=0, val_fraction=0.1, test_fraction=0.25, train_size=5000)
    assert "train_size=5000" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="val_fraction"):
        make_splits(t, seed=0, val_fraction=1.5)
    with pytest.raises(ConfigError, match="train_size"):
        make_splits(t, seed=0, train_size=2.5)


def test_test_mask_fixes_the_test_rows():
    t = toy_table(100)
    t.test_mask = np.arange(100) >= 80
    s = make_splits(t, seed=0, val_fraction=0.1, test_fraction=0.5)
    assert sorted(s.indices["test"]) == list(range(80, 100))
    assert max(s.indices["train"]) < 80 and max(s.indices["val"]) < 80 and s.X_val.shape[0] == 8
    s = make_splits(t, seed=0, val_fraction=0.1, test_size=5)
    assert s.X_test.shape[0] == 5 and min(s.indices["test"]) >= 80


def test_paper_presets_on_real_offline_data():
    cls = load_table("twonorm")
    s = make_splits(cls, seed=0, val_fraction=0.1, test_fraction=0.0, train_size=2000, test_size=1000)
    assert (s.n_train, s.X_val.shape[0], s.X_test.shape[0]) == (2000, 740, 1000)
    reg = load_table("concrete")
    s = make_splits(reg, seed=3)
    assert (s.n_train, s.X_val.shape[0], s.X_test.shape[0]) == (690, 82, 258)


# ----- bad input ---------------------------------------------------------------------------------------
def frame(**cols):
    return pd.DataFrame(cols)


def one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_missing_values_drop_with_count_or_fail(caplog):
    df = frame(a=[1.0, np.nan, 3.0, 4.0], y=[1.0, 2.0, np.nan, 4.0])
    with caplog.at_level("INFO", logger="gpdlm.data"):
        t = table_from_frame(df, name="m", task="regression", target="y", missing="drop")
    assert t.n == 2 and t.notes == ["dropped 2 of 4 rows with missing values"]
    assert "dropped 2 of 4 rows" in caplog.text
    with pytest.raises(DataError) as e:
        table_from_frame(df, name="m", task="regression", target="y", missing="error")
    assert "2 rows with missing values" in one_line(e)
    with pytest.raises(DataError, match="'drop' or 'error'"):
        table_from_frame(df, name="m", task="regression", target="y", missing="impute")


def test_non_numeric_undeclared_column_names_file_and_column():
    path = str(FIXTURES / "small.csv")
    with pytest.raises(DataError) as e:
        load_table("csv", path=path, target="y")
    msg = one_line(e)
    assert path in msg and "'color'" in msg and "not declared categorical" in msg


def test_a_stray_text_cell_is_named_by_row_and_value_before_suggesting_categorical():
    """One typo ('1,5' in an otherwise numeric column) is a data error, not a categorical column."""
    df = frame(a=[1.0, 2.0, 3.0, 4.0], y=[1.0, 2.0, 3.0, 4.0])
    df["a"] = df["a"].astype(object)
    df.loc[2, "a"] = "1,5"
    with pytest.raises(DataError) as e:
        table_from_frame(df, name="m", task="regression", target="y")
    msg = one_line(e)
    assert (
        "column 'a' has the non-numeric value '1,5' in row 2 (1 such cell); fix the data, or declare 'a' categorical"
        in msg
    )
    df = frame(a=[1.0, 2.0, 3.0, 4.0], y=[1.0, 2.0, 3.0, 4.0])
    df["y"] = df["y"].astype(object)
    df.loc[0, "y"] = "n/a"
    df.loc[3, "y"] = "?"
    with pytest.raises(DataError) as e:
        table_from_frame(df, name="m", task="regression", target="y")
    assert "column 'y' has the non-numeric value 'n/a' in row 0 (2 such cells); fix the data" in one_line(e)


def test_empty_table_constant_target_labels_and_counts():
    with pytest.raises(DataError, match="is empty"):
        table_from_frame(frame(a=[], y=[]), name="e", task="regression", target="y")
    with pytest.raises(DataError, match="empty after dropping"):
        table_from_frame(frame(a=[np.nan], y=[1.0]), name="e", task="regression", target="y")
    with pytest.raises(DataError) as e:
        table_from_frame(frame(a=[1.0, 2.0], y=[3.0, 3.0]), name="c", task="regression", target="y")
    assert "constant" in one_line(e)
    with pytest.raises(DataError) as e:
        table_from_frame(frame(a=[1.0, 2.0, 3.0], y=[0, 1, 2]), name="l", task="classification", target="y")
    assert "labels must be in {0, 1}" in one_line(e)
    t = table_from_frame(
        frame(a=[1.0, 2.0], y=[-1, 1]), name="l", task="classification", target="y", label_map={-1: 0, 1: 1}
    )
    assert list(t.y) == [0, 1]
    for bad in ([0, -1, 2], [0, 1.5, 2]):
        with pytest.raises(DataError) as e:
            table_from_frame(frame(a=[1.0, 2.0, 3.0], y=bad), name="n", task="count", target="y")
        assert "non-negative integers" in one_line(e)


def test_bad_csv_options_and_unknown_options(tmp_path):
    p = tmp_path / "labels.csv"
    p.write_text("a,y\n1,yes\n2,no\n3,yes\n")
    t = load_table("csv", path=str(p), target="y", task="classification", label_map={"yes": 1, "no": 0})
    assert list(t.y) == [1, 0, 1]
    with pytest.raises(DataError, match="labels must be in"):
        load_table("csv", path=str(p), target="y", task="classification", label_map={"yes": 1, "no": 2})
    with pytest.raises(DataError, match="does not exist"):
        load_table("csv", path=str(tmp_path / "nope.csv"), target="y")
    with pytest.raises(DataError, match="has no option 'lagg'"):
        load_table("chicago", lagg=3)
    with pytest.raises(DataError, match="no target column 'z'"):
        load_table("csv", path=str(p), target="z")
    with pytest.raises(DataError, match="unknown dataset 'nope'"):
        load_table("nope")
