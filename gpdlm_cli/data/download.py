"""Raw files: atomic downloads with SHA-256 verification, checksum bookkeeping, the offline message.

A download goes to ``<cache>/<dataset>/.<file>.part-<pid>``, is hashed while it streams, and is
renamed to its final name only when the SHA-256 matches the registry. A mismatch deletes the temp
file and raises a DataError that says so. Where the registry has no checksum (``sha256: null``:
nothing could be downloaded when the entry was written) the hash of the first fetch is recorded in
``<cache>/checksums.json`` and later verifications compare against that record.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..exceptions import DataError
from . import paths

CHUNK = 1 << 20
TIMEOUT_S = 30.0
USER_AGENT = "gpdlm-datasets/1 (+python urllib)"


@dataclass(frozen=True)
class FileSpec:
    """One raw file of a dataset: its name in the cache, where it comes from, its SHA-256."""

    filename: str
    url: str | None = None
    sha256: str | None = None


def file_path(dataset: str, spec: FileSpec) -> Path:
    """The exact place a (manually) downloaded file is picked up from."""
    return paths.cache_dir() / dataset / spec.filename


# ----- checksums -----------------------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _checksum_db_path() -> Path:
    return paths.cache_dir() / "checksums.json"


def _read_db() -> dict:
    p = _checksum_db_path()
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def _write_db(db: dict) -> None:
    p = _checksum_db_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".checksums-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(db, f, indent=1, sort_keys=True)
    paths.share_mode(tmp)
    os.replace(tmp, p)


def _db_key(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(paths.cache_dir()))
    except ValueError:
        return str(path.resolve())


def cached_checksum(path: Path) -> str:
    """SHA-256 of a file, memoised in checksums.json by (size, mtime) so big files hash once."""
    st = path.stat()
    db = _read_db()
    key = _db_key(path)
    rec = db.get(key)
    if rec and rec.get("size") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns:
        return rec["sha256"]
    digest = sha256_file(path)
    first = (rec or {}).get("first_fetch_sha256", digest)
    db[key] = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "first_fetch_sha256": first}
    _write_db(db)
    return digest


def recorded_checksum(path: Path) -> str | None:
    """The SHA-256 recorded when the file first entered the cache (for registry entries without one)."""
    rec = _read_db().get(_db_key(path))
    return rec.get("first_fetch_sha256") if rec else None


def _record(path: Path, digest: str) -> None:
    st = path.stat()
    db = _read_db()
    key = _db_key(path)
    first = db.get(key, {}).get("first_fetch_sha256", digest)
    db[key] = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "first_fetch_sha256": first}
    _write_db(db)


# ----- messages ------------------------------------------------------------------------------------
def offline_message(dataset: str, spec: FileSpec, path: Path, reason: str) -> str:
    url = spec.url or "(no public URL: the data must be supplied by the user)"
    return (
        f"dataset '{dataset}' is not cached and could not be downloaded ({reason}); "
        f"download {url} manually and save it as {path}"
    )


# ----- download ------------------------------------------------------------------------------------
def download(dataset: str, spec: FileSpec, *, timeout: float = TIMEOUT_S, force: bool = False) -> Path:
    """Fetch ``spec`` into the cache (atomic, verified) and return its final path.

    Raises DataError with the manual-download instruction when offline, when the server cannot be
    reached or answers with an error, and a DataError naming both hashes on a checksum mismatch."""
    dest = file_path(dataset, spec)
    if dest.exists() and not force:
        return dest
    if not spec.url:
        raise DataError(offline_message(dataset, spec, dest, "no download URL"))
    if paths.offline():
        raise DataError(offline_message(dataset, spec, dest, f"{paths.ENV_OFFLINE}=1"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.part-{os.getpid()}"
    h = hashlib.sha256()
    try:
        req = urllib.request.Request(spec.url, headers={"User-Agent": USER_AGENT})
        with urllib.request.urlopen(req, timeout=timeout) as resp, open(tmp, "wb") as out:
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                h.update(block)
                out.write(block)
    except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as e:
        tmp.unlink(missing_ok=True)
        reason = getattr(e, "reason", None) or e
        if isinstance(e, urllib.error.HTTPError):
            reason = f"HTTP {e.code} {e.reason}"
        raise DataError(offline_message(dataset, spec, dest, f"{type(e).__name__}: {reason}")) from None
    digest = h.hexdigest()
    if spec.sha256 and digest.lower() != spec.sha256.lower():
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"checksum mismatch for dataset '{dataset}' file {spec.filename} from {spec.url}: expected "
            f"sha256 {spec.sha256}, got {digest}; the downloaded temp file was deleted"
        )
    os.replace(tmp, dest)
    _record(dest, digest)
    return dest


def ensure_file(dataset: str, spec: FileSpec) -> Path:
    """The cached path of ``spec``, downloading it first if it is not there."""
    dest = file_path(dataset, spec)
    if dest.exists():
        return dest
    return download(dataset, spec)


@dataclass
class VerifyResult:
    dataset: str
    filename: str
    path: Path
    status: str  # ok | mismatch | missing | unknown-recorded | unknown
    detail: str = ""


def verify_file(dataset: str, spec: FileSpec) -> VerifyResult:
    """Check a cached file against the registry checksum (or the one recorded on first fetch)."""
    p = file_path(dataset, spec)
    if not p.exists():
        return VerifyResult(dataset, spec.filename, p, "missing", "not cached")
    digest = sha256_file(p)
    if spec.sha256:
        if digest.lower() == spec.sha256.lower():
            return VerifyResult(dataset, spec.filename, p, "ok", digest)
        return VerifyResult(dataset, spec.filename, p, "mismatch", f"expected {spec.sha256}, got {digest}")
    first = recorded_checksum(p)
    if first is None:
        _record(p, digest)
        return VerifyResult(dataset, spec.filename, p, "unknown",
                            f"checksum unknown, recorded on first fetch: {digest}")
    if first == digest:
        return VerifyResult(dataset, spec.filename, p, "unknown-recorded",
                            f"checksum unknown in the registry; matches the one recorded on first fetch ({digest})")
    return VerifyResult(dataset, spec.filename, p, "mismatch",
                        f"changed since first fetch: recorded {first}, now {digest}")


def copy_into_cache(dataset: str, spec: FileSpec, src: Path) -> Path:
    """Place a user-supplied file at its cache path (used by ``gpdlm datasets fetch --from``)."""
    dest = file_path(dataset, spec)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.part-{os.getpid()}"
    shutil.copyfile(src, tmp)
    digest = sha256_file(tmp)
    if spec.sha256 and digest != spec.sha256:
        tmp.unlink(missing_ok=True)
        raise DataError(f"checksum mismatch for {src}: expected sha256 {spec.sha256}, got {digest}")
    os.replace(tmp, dest)
    _record(dest, digest)
    return dest
