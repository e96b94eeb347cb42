"""The papers' real data (issue 39): actuator, drives, gef_power, gef_wind, airline, abalone, thyroid
and blog, fetched from ../shared/datasets/mirror (offline) and checked against SHA256SUMS (read here,
not by gpdlm): shapes, first values, checksums; a corrupted copy is refused with one line."""

from __future__ import annotations

import hashlib
import io
import shutil

import numpy as np
import pytest

from gpdlm_cli.commands import datasets as cmd
from gpdlm_cli.data import get_dataset_info, load_table
from gpdlm_cli.data.catalog import with_files
from gpdlm_cli.exceptions import DataError

PAPER_SETS = ("actuator", "drives", "gef_power", "gef_wind", "airline", "abalone", "thyroid", "blog")


def run(argv):
    out = io.StringIO()
    return cmd.main(argv, out=out), out.getvalue()


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", PAPER_SETS)
def test_every_file_is_named_by_its_github_raw_url_with_the_mirrors_sha256(name, mirror_sums):
    info = get_dataset_info(name)
    assert info.source_kind == "download" and info.files
    for f in info.files:
        assert f.url.startswith("https://raw.githubusercontent.com/"), f.url
        assert f.sha256 == mirror_sums[f.url], f.filename
    assert info.checksums == "all"


def test_airline_names_the_40_parquet_parts_and_plane_data():
    files = get_dataset_info("airline").files
    parts = [f for f in files if f.filename.endswith(".parquet")]
    assert len(parts) == 40 and len(files) == 41
    assert [f.filename for f in parts[:2]] == ["2008-01-part-00000.parquet", "2008-01-part-00001.parquet"]
    assert sorted({f.filename[:7] for f in parts}) == ["2008-01", "2008-02", "2008-03", "2008-04"]
    assert files[-1].filename == "plane-data.csv"
    # the ASA CSV route stays, by name
    assert [f.filename for f in get_dataset_info("airline_asa").files] == ["2008.csv.bz2", "plane-data.csv"]


@pytest.mark.parametrize(
    "name,options,shape,x0,y0,n_test",
    [
        (
            "actuator",
            {"mode": "regression", "lag": 2},
            (1022, 2),
            [-0.0068164, -0.0068164],
            [-0.000262404, -0.000262404, -0.000262404],
            512,
        ),
        ("actuator", {}, (1014, 20), None, None, 512),  # autoregression, lag 10: as sysid_actuator
        (
            "drives",
            {"mode": "regression", "lag": 2},
            (498, 2),
            [1.0, 1.0],
            [0.0317460317, 0.0317460317, 0.2417582418],
            250,
        ),
        ("drives", {}, (490, 20), None, None, 250),
        ("abalone", {}, (4177, 9), [0.455, 0.365, 0.095, 0.514, 0.2245, 0.101], [15.0, 7.0, 9.0], None),
        ("thyroid", {}, (3772, 6), [0.73, 0.0006, 0.015, 0.12, 0.082, 0.146], [0.0, 0.0, 0.0], None),
    ],
)
def test_small_sets_load_from_the_mirror(mirror, private_cache, name, options, shape, x0, y0, n_test):
    t = load_table(name, **options)
    assert t.X.shape == shape
    if x0 is not None:
        np.testing.assert_allclose(t.X[0, : len(x0)], x0, rtol=1e-6)
        np.testing.assert_allclose(t.y[:3], y0, rtol=1e-6)
    assert (None if t.test_mask is None else int(t.test_mask.sum())) == n_test
    for f in get_dataset_info(name).files:  # the cached copies are the mirror's bytes
        assert sha(private_cache / name / f.filename) == f.sha256


def test_real_sysid_series_and_its_n_option(mirror):
    t = load_table("drives", n=200, mode="free_simulation", lag=10)
    assert t.X.shape == (190, 20) and int(t.test_mask.sum()) == 100  # first 200 steps, halves
    assert t.feature_names[0] == "voltage[t-0]" and t.feature_names[-1] == "speed[t-10]"
    with pytest.raises(DataError, match=r"option n=600 exceeds the 500 steps of the series"):
        load_table("drives", n=600)


@pytest.mark.slow
def test_blog_loads_from_the_github_rezip(mirror):
    t = load_table("blog")
    assert t.X.shape == (60021, 60)
    np.testing.assert_allclose(t.X[0, :4], [40.30467, 53.845657, 0.0, 401.0])
    np.testing.assert_allclose(t.y[:3], [1.0, 0.0, 0.0])


@pytest.mark.slow
def test_gef_power_is_the_summed_load_of_38070_complete_hours(mirror):
    one = load_table("gef_power", mode="regression", lag=1, gaps="join")
    assert one.X.shape == (38069, 11)  # 38,070 complete hours, one lag
    np.testing.assert_allclose(one.X[0, :4], [46.0, 36.0, 42.0, 43.0])
    np.testing.assert_allclose(one.y[:3], [1351507.0, 1315742.0, 1308023.0])
    t = load_table("gef_power")  # lag 48, autoregression, windows inside the 9 complete stretches
    assert t.X.shape == (38070 - 9 * 48, 48 * 11 + 48) and int(t.test_mask.sum()) == 9518
    assert load_table("gef_power", gaps="join").X.shape == (38070 - 48, 576)


@pytest.mark.slow
def test_gef_wind_has_the_papers_130963_windows_of_16_inputs(mirror):
    t = load_table("gef_wind", lag_step=48)  # one input tap + one past power: 16 + 1 columns
    assert t.X.shape == (130963, 17) == (7 * (18757 - 48), 17)
    assert t.feature_names[:4] == ["u_1[t-0]", "v_1[t-0]", "ws_1[t-0]", "wd_1[t-0]"]


def test_gef_wind_first_hours_and_farms(mirror):
    t = load_table("gef_wind", mode="regression", lag=1, n=100, farms=[1])
    assert t.X.shape == (99, 16)
    # hour 01 of farm 1: the newest issue (2009-07-01 00:00, 1 hour ahead) as in the file
    np.testing.assert_allclose(t.X[0, :4], [2.34, -0.79, 2.47, 108.68])
    np.testing.assert_allclose(t.y[:3], [0.085, 0.02, 0.06])
    assert load_table("gef_wind", mode="regression", lag=1, n=100, farms=[1, 2]).X.shape == (198, 16)
    from gpdlm_cli.exceptions import ConfigError
    from gpdlm_cli.schema import DatasetSpec, parse

    with pytest.raises(ConfigError, match=r"'farms' parameter of dataset=gef_wind must be a non-empty list of farm"):
        parse({"name": "gef_wind", "farms": [8]}, DatasetSpec, "dataset")
    with pytest.raises(ConfigError, match=r"'gaps' parameter of dataset=gef_wind must be one of split, join"):
        parse({"name": "gef_wind", "gaps": "fill"}, DatasetSpec, "dataset")


def test_airline_parquet_route_on_one_part(mirror, registry_guard):
    """The parquet reader + build_airline_asa on the first January part (65,391 flights) and plane-data."""
    info = get_dataset_info("airline")
    small = with_files(info, (info.files[0], info.files[-1]))
    registry_guard.register(small)
    t = load_table("airline", target="delay", use_cache=False)
    assert t.task == "regression" and t.X.shape[1] == 8 and 50000 < t.n < 65391
    np.testing.assert_allclose(t.X[0], [1, 3, 4, 10, 116, 810, 1331, 1203])  # Jan 3, Thu, 10 y, 22:11, 20:03
    assert t.y[0] == -14.0


@pytest.mark.slow
def test_airline_from_the_mirror_is_the_papers_2055733_flights(mirror):
    """The 40 parquet parts + plane-data.csv (~3 s to build 2M rows on one core; then the parsed cache)."""
    t = load_table("airline")
    assert t.X.shape == (2055733, 8) and t.task == "classification"
    assert abs(t.y.mean() - 0.4760642554) < 1e-9
    r = load_table("airline", target="delay")
    assert r.X.shape == (2055733, 8) and r.y[0] == -14.0


@pytest.mark.parametrize(
    "name,file",
    [
        ("actuator", "actuator.mat"),
        ("drives", "drive.mat"),
        ("gef_power", "Load_history.csv.zip"),
        ("gef_wind", "windforecasts_wf3.csv.zip"),
        ("abalone", "abalone.data"),
        ("thyroid", "ann-train.data"),
        ("blog", "BlogFeedback.zip"),
        ("airline", "plane-data.csv"),
        ("airline", "2008-04-part-00009.parquet"),
    ],
)
def test_a_corrupted_mirror_copy_is_refused_with_one_line(mirror_root, private_cache, tmp_path, capsys, name, file):
    info = get_dataset_info(name)
    bad = tmp_path / "mirror"
    spec = next(f for f in info.files if f.filename == file)
    rel = spec.url.removeprefix("https://")
    (bad / rel).parent.mkdir(parents=True)
    data = bytearray((mirror_root / rel).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / rel).write_bytes(bytes(data))
    only = with_files(info, (spec,))
    from gpdlm_cli.data.download import download

    with pytest.raises(DataError) as e:
        download(name, only.files[0], mirror=bad)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(f"checksum mismatch for dataset '{name}' file {file} from ")
    assert not (private_cache / name / file).exists()


def test_a_corrupted_cached_copy_is_refused_with_one_line(mirror, private_cache):
    load_table("drives")
    cached = private_cache / "drives" / "drive.mat"
    data = bytearray(cached.read_bytes())
    data[100] ^= 0xFF
    cached.write_bytes(bytes(data))
    with pytest.raises(DataError) as e:
        load_table("drives")
    msg = str(e.value)
    assert "\n" not in msg and "does not match its registry SHA-256" in msg
    assert "gpdlm datasets fetch drives --force" in msg


def test_fetch_command_copies_and_verifies_a_paper_set(mirror_root, private_cache, capsys):
    code, out = run(["fetch", "drives", "thyroid", "--mirror", str(mirror_root), "--parse"])
    assert code == 0, capsys.readouterr().err
    assert "drives: drive.mat ok (sha256 47d0825678d8" in out and "parsed 490 rows x 20 inputs" in out
    assert "thyroid: parsed 3,772 rows x 6 inputs" in out
    shutil.rmtree(private_cache / "thyroid")
    code, out = run(["verify", "drives"])
    assert code == 0 and "drives/drive.mat: ok" in out


def test_list_says_the_paper_sets_load_offline_from_the_mirror_verified(mirror, capsys):
    code, out = run(["list", "--offline"])
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip() and "datasets;" not in line}
    for name in PAPER_SETS:  # columns: name task size(3 tokens) source offline verified splits paperM
        assert rows[name][-4:-2] == ["mirror", "yes"], (name, rows[name])
    assert rows["airline"][2:5] == ["2,055,733", "x", "8"] and rows["gef_wind"][2:5] == ["130,963", "x", "816"]
    assert "airline_asa" not in rows and "cadata" not in rows  # not in the mirror: not offline


def test_the_airline_frame_is_cached_once_for_every_target(mirror_root, private_cache, monkeypatch):
    """The 2008 flights before the target is chosen (``parquet_asa_frame``) are cached by the files' SHA-256 and
    ``months``: a second option set reads no parquet part, gets the same frame (values, NaN, dtypes, column
    order) and so the same table as from a fresh parse; other months are another entry; a damaged entry is
    rebuilt. Two of the 40 parts (month 1 and month 4), so it runs in the fast lane."""
    import pandas as pd

    from gpdlm_cli.data import airline, cache

    parts = [sorted(mirror_root.rglob(f"month={m}/*.parquet"))[0] for m in (1, 4)]
    planes = next(mirror_root.rglob("plane-data.csv"))
    fresh = airline.build_airline_asa(
        airline.read_parquet_flights(parts), airline.read_numeric(planes, dtype=str), year=2008, months=(1, 2, 3, 4)
    )
    assert fresh["plane_age"].isna().any() and sorted(fresh["Month"].unique()) == [1.0, 4.0]
    first = airline.parquet_asa_frame("airline", parts, planes, (1, 2, 3, 4))
    entries = sorted((private_cache / "parsed").glob("airline-asa-frame-*.npz"))
    assert len(entries) == 1

    def no_read(_paths):
        raise AssertionError("read the parquet parts again")

    read = airline.read_parquet_flights
    monkeypatch.setattr(airline, "read_parquet_flights", no_read)
    again = airline.parquet_asa_frame("airline", parts, planes, (1, 2, 3, 4))
    for frame in (first, again):
        pd.testing.assert_frame_equal(frame, fresh, check_exact=True)
    for target in ("delay", "delayed"):
        a = airline.finish_airline(again, name="airline", target=target, missing="drop", source="")
        b = airline.finish_airline(fresh, name="airline", target=target, missing="drop", source="")
        assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y) and a.notes == b.notes
    monkeypatch.setattr(airline, "read_parquet_flights", read)
    jan = airline.parquet_asa_frame("airline", parts, planes, (1,))  # other months: another entry
    assert sorted(jan["Month"].unique()) == [1.0] and len(list((private_cache / "parsed").glob("airline-asa-*"))) == 2
    entries[0].write_bytes(entries[0].read_bytes()[:1000])  # truncated: rebuilt, not read
    assert cache.load_cached_frame(entries[0]) is None
    pd.testing.assert_frame_equal(airline.parquet_asa_frame("airline", parts, planes, (1, 2, 3, 4)), fresh)
    pd.testing.assert_frame_equal(cache.load_cached_frame(entries[0]), fresh)
