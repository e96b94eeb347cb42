"""Data errors that say what is wrong (issue 26, findings 4 and 7): a non-finite CSV cell names its
column and row; a one-row CSV, a directory as dataset.path and train_size=0 say so; dropping more
than half of the rows for missing values is a console warning (also when the table comes from the
parsed cache)."""

from __future__ import annotations

import logging

import pytest

from gpdlm_cli.data import load_table, make_splits
from gpdlm_cli.exceptions import DataError


def write_csv(path, rows, header="a,b,y"):
    path.write_text(header + "\n" + "\n".join(",".join(str(v) for v in r) for r in rows) + "\n")
    return path


def rows(n=30):
    return [[i, (i * 7) % 5, 0.5 * i + (i % 3)] for i in range(n)]


def load_csv(path, **kw):
    return load_table("csv", path=str(path), target="y", task="regression", **kw)


def test_a_non_finite_cell_names_its_column_and_row(tmp_path):
    data = rows()
    data[12][1] = "inf"
    data[20][1] = "-inf"
    with pytest.raises(DataError) as e:
        load_csv(write_csv(tmp_path / "inf.csv", data))
    msg = str(e.value)
    assert "\n" not in msg
    assert "column 'b' has the non-finite value inf in row 12 (2 such cells)" in msg
    data = rows()
    data[3][2] = "-inf"  # in the target
    with pytest.raises(DataError, match="column 'y' has the non-finite value -inf in row 3 "):
        load_csv(write_csv(tmp_path / "inf_y.csv", data))


def test_a_one_row_csv_says_it_has_one_row(tmp_path):
    with pytest.raises(DataError) as e:
        load_csv(write_csv(tmp_path / "one.csv", [[1, 2, -0.84]]))
    assert str(e.value).endswith("has only 1 row; a model needs at least 2 rows to learn from")
    with pytest.raises(DataError) as e:  # a constant target: the value as a number, not a numpy repr
        load_csv(write_csv(tmp_path / "const.csv", [[i, i, -0.84] for i in range(5)]))
    assert "target 'y' is constant (-0.84 in all 5 rows)" in str(e.value) and "np.float64" not in str(e.value)


def test_a_directory_as_dataset_path_is_not_called_missing(tmp_path):
    with pytest.raises(DataError) as e:
        load_csv(tmp_path)
    assert str(e.value) == f"dataset 'csv': dataset.path={tmp_path} is a directory, not a file"


def test_train_size_zero_asks_for_two_rows(tmp_path):
    table = load_csv(write_csv(tmp_path / "ok.csv", rows(40)))
    for size in (0, 1):
        with pytest.raises(DataError) as e:
            make_splits(table, seed=0, train_size=size)
        assert str(e.value).startswith(f"dataset.split.train_size={size}: a training set needs at least 2 rows")
    with pytest.raises(DataError, match="train_size=500 but dataset 'csv' has only 27 rows left"):
        make_splits(table, seed=0, train_size=500)


def test_dropping_more_than_half_the_rows_is_a_console_warning(tmp_path, caplog):
    data = rows(30)
    for r in data[:20]:
        r[0] = ""  # 20 of 30 rows miss a value
    path = write_csv(tmp_path / "nan.csv", data)
    for source in ("first parse", "parsed cache"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="gpdlm.data"):
            t = load_csv(path)
        assert t.n == 10
        (rec,) = [r for r in caplog.records if "dropped" in r.getMessage()]
        assert rec.levelno == logging.WARNING, source
        assert "dropped 20 of 30 rows with missing values" in rec.getMessage()
    assert "loaded from the parsed-table cache" in t.notes
    data = rows(30)
    data[0][0] = ""  # 1 of 30: the log only
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gpdlm.data"):
        load_csv(write_csv(tmp_path / "few.csv", data))
    (rec,) = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert rec.levelno == logging.INFO
