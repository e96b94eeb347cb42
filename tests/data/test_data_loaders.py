"""Loader round trips: offline real data, the download formats on small fixtures placed where a
manual download is picked up, the parsed-table cache."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from gpdlm_cli.data import get_dataset_info, load_table, register
from gpdlm_cli.data.download import file_path
from gpdlm_cli.exceptions import DataError

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _restore_registry(registry_guard):
    """``place`` re-registers entries; each test starts from the real registry."""


def place(name: str, fixture: str, index: int = 0):
    """Copy a fixture to the cache path of the dataset's index-th file (a 'manual download'). The
    fixture stands in for the real file, so the entry is re-registered without its SHA-256s (the
    cached copy is checked against them before use)."""
    info = get_dataset_info(name)
    if any(f.sha256 for f in info.files):
        from dataclasses import replace

        info = register(replace(info, files=tuple(replace(f, sha256=None) for f in info.files)))
    dest = file_path(name, info.files[index])
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / fixture, dest)
    return dest


# ----- offline real data -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, n, d, task",
    [
        ("concrete", 1030, 8, "regression"),
        ("boston", 506, 13, "regression"),
        ("diabetes", 442, 10, "regression"),
        ("breast_cancer", 569, 30, "classification"),
        ("doctor_visits", 19609, 9, "count"),
        ("doctor_visits_aer", 5190, 11, "count"),
    ],
)
def test_offline_tables(name, n, d, task):
    t = load_table(name)
    assert (t.n, t.X.shape[1], t.task) == (n, d, task)
    assert np.isfinite(t.X).all() and np.isfinite(t.y).all()
    info = get_dataset_info(name)
    assert info.size == (n, d) and info.offline


def test_aer_doctor_visits_dummy_codes_yes_no_columns():
    t = load_table("doctor_visits_aer")
    dummies = [c for c in t.feature_names if c.startswith(("gender_", "private_", "lchronic_"))]
    assert dummies == ["gender_male", "private_yes", "lchronic_yes"]  # L-1 = 1 column per yes/no factor
    assert set(np.unique(t.X[:, t.feature_names.index("gender_male")])) == {0.0, 1.0}
    assert (t.y >= 0).all() and (t.y == np.round(t.y)).all()


@pytest.fixture(scope="module")
def nyc():
    """Both airline_nyc targets, parsed once for the module (no cache involved)."""
    return load_table("airline_nyc", use_cache=False), load_table("airline_nyc", use_cache=False, target="delayed")


HENSMAN = ["Month", "DayofMonth", "DayOfWeek", "plane_age", "AirTime", "Distance", "ArrTime", "DepTime"]


def test_airline_nyc_has_the_8_hensman_features_with_plausible_ranges(nyc):
    t = nyc[0]
    assert t.feature_names == HENSMAN and t.task == "regression" and t.target_name == "ArrDelay"
    assert 250_000 < t.n < 336_776  # cancelled flights and planes without a build year dropped
    assert any("dropped" in s for s in t.notes)
    assert not np.isnan(t.X).any() and not np.isnan(t.y).any()
    col = {c: t.X[:, i] for i, c in enumerate(HENSMAN)}
    assert col["Month"].min() == 1 and col["Month"].max() == 12
    assert col["DayofMonth"].min() == 1 and col["DayofMonth"].max() == 31
    assert set(np.unique(col["DayOfWeek"])) == set(range(1, 8))
    assert 0 <= col["plane_age"].min() and col["plane_age"].max() < 70
    assert 15 <= col["AirTime"].min() and col["AirTime"].max() <= 700  # minutes
    assert 80 <= col["Distance"].min() and col["Distance"].max() <= 5000  # miles (EWR-HNL 4983)
    for c in ("ArrTime", "DepTime"):
        assert 0 <= col[c].min() and col[c].max() < 1440  # minutes after midnight
    assert -100 < np.median(t.y) < 30 and t.y.min() > -120 and t.y.max() < 1500
    # 2013-01-01 was a Tuesday (ASA day of week 2)
    jan1 = (col["Month"] == 1) & (col["DayofMonth"] == 1)
    assert set(np.unique(col["DayOfWeek"][jan1])) == {2}


def test_airline_nyc_classification_and_bad_target_option(nyc):
    reg, cls = nyc
    assert cls.task == "classification" and set(np.unique(cls.y)) == {0.0, 1.0}
    np.testing.assert_array_equal(cls.y, (reg.y > 0).astype(float))
    assert 0.3 < cls.y.mean() < 0.5  # about 40% of NYC flights arrived late in 2013
    with pytest.raises(DataError, match="target must be 'delay'"):
        load_table("airline_nyc", target="late")


def test_parsed_table_cache_second_load_is_fast_and_identical(private_cache):
    t0 = time.perf_counter()
    first = load_table("airline_nyc")
    parse = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = load_table("airline_nyc")
    cached = time.perf_counter() - t0
    assert "loaded from the parsed-table cache" in second.notes
    np.testing.assert_array_equal(first.X, second.X)
    np.testing.assert_array_equal(first.y, second.y)
    assert first.feature_names == second.feature_names and first.fingerprint() == second.fingerprint()
    assert list((private_cache / "parsed").glob("airline_nyc-*.npz"))
    assert cached * 5 < parse  # the benchmark (benchmarks/bench_data.py) shows >= 10x


def test_parsed_cache_is_keyed_by_file_checksum(private_cache):
    dest = place("pol", "uci_data.csv.gz")
    place("pol", "uci_test_mask.csv.gz", 1)
    a = load_table("pol")
    assert a.n == 3 and "loaded from the parsed-table cache" not in a.notes
    assert "loaded from the parsed-table cache" in load_table("pol").notes
    # a changed raw file is parsed again
    import gzip

    with gzip.open(dest, "wt") as f:
        f.write("1,2,9.5\n2,1,4.5\n3,5,1.5\n7,7,7.5\n")
    with pytest.raises(DataError, match="expected 4 rows .one per data row. of 0/1 test-mask columns"):
        load_table("pol")  # the masks no longer fit the data
    with gzip.open(file_path("pol", get_dataset_info("pol").files[1]), "wt") as f:
        f.write("1,0,0,0,0,0,0,0,0,0\n0,1,1,1,1,1,1,1,1,1\n0,0,0,0,0,0,0,0,0,0\n0,0,0,0,0,0,0,0,0,0\n")
    b = load_table("pol")
    assert b.n == 4 and "loaded from the parsed-table cache" not in b.notes
    assert b.test_masks.shape == (4, 10) and b.test_masks[:, 0].tolist() == [True, False, False, False]
    assert load_table("pol").test_masks[:, 1].tolist() == [False, True, False, False]  # cached with the masks
    # a corrupt cache entry is ignored and rebuilt
    for p in (private_cache / "parsed").glob("pol-*.npz"):
        p.write_bytes(b"garbage")
    assert load_table("pol").n == 4


# ----- download formats on fixtures ---------------------------------------------------------------------
def test_uci_datasets_format_round_trip():
    place("kin40k", "uci_data.csv.gz")
    place("kin40k", "uci_test_mask.csv.gz", 1)
    t = load_table("kin40k")
    np.testing.assert_array_equal(t.X, [[1, 2], [2, 1], [3, 5]])
    np.testing.assert_array_equal(t.y, [3.5, 4.5, 1.5])
    assert t.feature_names == ["x1", "x2"] and t.task == "regression"
    np.testing.assert_array_equal(t.test_masks[:, :3], [[0, 1, 0], [1, 0, 0], [0, 1, 1]])


def test_gal_uci_format_uses_the_index_files():
    for i, f in enumerate(("gal_data.txt", "gal_index_features.txt", "gal_index_target.txt")):
        place("kin8nm", f, i)
    t = load_table("kin8nm")
    np.testing.assert_array_equal(t.X, [[1, 2, 0.5], [2, 1, 1.5], [3, 0.5, 2.5], [4, 3, 3.5]])
    np.testing.assert_array_equal(t.y, [10, 20, 30, 40])


def test_concrete_download_alternative_reads_the_benchmark_copy():
    info = get_dataset_info("concrete")
    fixtures = ("gal_data.txt", "gal_index_features.txt", "gal_index_target.txt", "gal_test_mask.csv.gz")
    assert [f.filename for f in info.alt_files] == [
        "data.txt",
        "index_features.txt",
        "index_target.txt",
        "test_mask.csv.gz",
    ]
    from dataclasses import replace

    info = register(replace(info, alt_files=tuple(replace(f, sha256=None) for f in info.alt_files)))  # fixtures
    for f, fx in zip(info.alt_files, fixtures):
        dest = file_path("concrete", f)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIXTURES / fx, dest)
    t = load_table("concrete", source="download")
    assert t.n == 4 and t.test_masks[:, 5].tolist() == [False, True, False, False]  # mask k tests row k % 4
    package = load_table("concrete")
    assert package.n == 1030 and package.test_masks is None
    from gpdlm_cli.exceptions import ConfigError
    from gpdlm_cli.schema import DatasetSpec, parse

    with pytest.raises(
        ConfigError, match="^the 'source' parameter of dataset=concrete must be one of package, download"
    ):
        parse({"name": "concrete", "source": "web"}, DatasetSpec, "dataset")


def test_libsvm_round_trip():
    place("cadata", "small.libsvm")
    t = load_table("cadata")
    assert t.X.shape == (4, 3) and t.feature_names == ["x1", "x2", "x3"]  # 3 columns in the fixture
    np.testing.assert_allclose(t.X[1], [0.2, 0.0, 5.0])
    np.testing.assert_array_equal(t.y, [3.5, 1.5, 2.5, 4.0])


def test_abalone_dummy_codes_sex_and_counts_rings():
    place("abalone", "abalone.data")
    t = load_table("abalone")
    assert t.task == "count" and t.X.shape == (5, 9)  # 7 measurements + 2 dummies for M/F/I
    assert [c for c in t.feature_names if c.startswith("sex_")] == ["sex_I", "sex_M"]
    np.testing.assert_array_equal(t.y, [15, 7, 9, 7, 8])


def test_thyroid_keeps_six_continuous_inputs_and_maps_classes():
    place("thyroid", "ann-train.data")
    t = load_table("thyroid")
    assert t.feature_names == ["age", "TSH", "T3", "TT4", "T4U", "FTI"]
    np.testing.assert_array_equal(t.y, [0, 0, 1, 1])  # class 3 = normal -> 0
    np.testing.assert_allclose(t.X[0], [0.73, 0.0006, 0.015, 0.12, 0.082, 0.146])


def test_user_csv_round_trip_with_categorical(tmp_path):
    t = load_table("csv", path=str(FIXTURES / "small.csv"), target="y", categorical=["color"])
    assert t.feature_names == ["a", "b", "color_green", "color_red"]
    np.testing.assert_array_equal(t.X[0], [1, 2, 0, 1])
    np.testing.assert_array_equal(t.y, [0.5, 1.5, 2.5, 3.0, 4.5, 5.0])


def test_peds_user_path_message_names_where_to_put_the_file(private_cache):
    with pytest.raises(DataError) as e:
        load_table("peds1_dir1")
    msg = str(e.value)
    assert "peds1_dir1" in msg and "visal.cs.cityu.edu.hk" in msg
    assert str(private_cache / "peds1_dir1" / "peds1_dir1.csv") in msg


def test_airline_loader_reads_a_hensman_format_csv(tmp_path):
    p = tmp_path / "hensman.csv"
    p.write_text(
        "Month,DayofMonth,DayOfWeek,plane_age,AirTime,Distance,ArrTime,DepTime,ArrDelay\n"
        "1,3,4,10,120,800,1530,1300,-5\n2,14,4,3,60,300,0930,0815,25\n3,1,6,,90,500,2400,2210,12\n"
    )
    t = load_table("airline", path=str(p))
    assert t.feature_names == HENSMAN and t.task == "classification" and t.n == 2  # 1 row lacks plane_age
    np.testing.assert_array_equal(t.y, [0, 1])
    np.testing.assert_array_equal(t.X[:, 6], [15 * 60 + 30, 9 * 60 + 30])  # hhmm -> minutes
    r = load_table("airline", path=str(p), target="delay", clock="hhmm")
    assert r.task == "regression" and list(r.y) == [-5, 25]


def test_airline_loader_builds_from_raw_asa_rows(tmp_path):
    p = tmp_path / "2008.csv"
    p.write_text(
        "Year,Month,DayofMonth,DayOfWeek,DepTime,ArrTime,TailNum,AirTime,ArrDelay,Distance\n"
        "2008,1,3,4,1300,1530,N1,120,-5,800\n2008,5,3,6,1300,1530,N1,120,7,800\n2008,2,9,6,815,930,N2,60,25,300\n"
    )
    planes = tmp_path / "plane-data.csv"
    planes.write_text("tailnum,type,year\nN1,Corporation,1998\nN2,Corporation,2005\n")
    t = load_table("airline", path=str(p), planes_path=str(planes), target="delay")
    assert t.n == 2  # May is outside Hensman's Jan-Apr
    np.testing.assert_array_equal(t.X[:, HENSMAN.index("plane_age")], [10, 3])
