"""The raw-file checksum record (``<cache>/checksums.json``) is read-modify-written whole; two processes sharing
a cache (a joblib sweep's two workers) lost one another's entries -- among them first-fetch records, the only
thing that vouches for a file the registry has no checksum for. The update is now under a file lock."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest

from gpdlm_cli.data import download

FILES = 40


def _record_many(cache: str, who: int, start) -> None:
    os.environ["GPDLM_DATA"] = cache
    files = []
    for i in range(FILES):
        f = download.paths.cache_dir() / f"w{who}" / f"f{i}.bin"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(f"{who}-{i}".encode())
        files.append(f)
    start.wait()  # both processes update the record at once
    for i, f in enumerate(files):
        download._record(f, f"{who:02d}{i:062d}", fetched=True)


@pytest.mark.skipif(download.fcntl is None, reason="no fcntl: the record is updated unlocked")
def test_two_processes_recording_at_once_lose_no_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("GPDLM_DATA", str(tmp_path))
    ctx = mp.get_context("fork")
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_record_many, args=(str(tmp_path), w, start)) for w in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = json.loads((tmp_path / "checksums.json").read_text())
    want = {f"w{w}/f{i}.bin": f"{w:02d}{i:062d}" for w in (0, 1) for i in range(FILES)}
    assert {k: v["first_fetch_sha256"] for k, v in db.items()} == want
    assert all(v["sha256"] == v["first_fetch_sha256"] for v in db.values())


def test_an_unchanged_record_is_not_written_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GPDLM_DATA", str(tmp_path))
    f = tmp_path / "x" / "a.bin"
    f.parent.mkdir()
    f.write_bytes(b"abc")
    digest = download.cached_checksum(f)
    assert digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # SHA-256("abc")
    db = tmp_path / "checksums.json"
    mtime = db.stat().st_mtime_ns
    os.utime(db, ns=(mtime - 10**9, mtime - 10**9))
    assert download.cached_checksum(f) == digest
    assert db.stat().st_mtime_ns == mtime - 10**9  # memoised: neither hashed nor written again
