"""Raw files: atomic downloads with SHA-256 verification, checksum bookkeeping, the offline message.

Every raw file enters the cache through ``store``: it goes to ``<cache>/<dataset>/.<file>.part-<pid>``,
is hashed while it streams, and is renamed to its final name only when the SHA-256 matches the
registry. A mismatch deletes the temp file (and any folder made for it) and raises a DataError that
says so. The bytes come from the network, or from a local mirror laid out by URL
(``<mirror>/<host>/<path>``; ``GPDLM_DATA_MIRROR`` or ``gpdlm datasets fetch --mirror``). Where the registry has no checksum (``sha256: null``:
nothing could be downloaded when the entry was written) the hash of the first fetch is recorded in
``<cache>/checksums.json`` and later verifications compare against that record; such a fetch is
a console warning, since nothing vouches for those bytes.

A cached file is verified again before it is parsed (``ensure_file`` -> ``check_cached``): against
the registry's SHA-256 (a file without one: a warning when it differs from its first-fetch
record), hashed once per file version -- the record
keeps the size, mtime, inode and ctime the hash belongs to (``_stat_record``), so an unchanged file
is not hashed again, and any edit -- even one of the same size whose mtime was set back, which
still moves the ctime -- is hashed again. A file
that fails (truncated, altered) is refused with one line naming ``gpdlm datasets fetch NAME
--force``; its hash is never recorded, and the parsed tables of that dataset are deleted. The parsed
tables are keyed by the raw files' SHA-256 (``cache.cache_key``) and are also deleted when a file is
fetched again over a cached one (``fetch --force``) and when ``gpdlm datasets verify`` finds a mismatch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

try:
    import fcntl
except ImportError:  # Windows: the checksum record is updated unlocked
    fcntl = None  # type: ignore[assignment]

from ..exceptions import DataError
from ..files import sha256_file
from . import paths

log = logging.getLogger("gpdlm.data")

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
# sha256_file: files.sha256_file (one reader for data files, saved models and checkpoints)
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


@contextlib.contextmanager
def _updating_db() -> Iterator[dict]:
    """The checksum record, read and written back under an exclusive lock on ``<cache>/.checksums.lock``:
    two processes sharing a cache (the two workers of a joblib sweep, the test suite's xdist workers) each
    read-modify-write the whole record, and without the lock the later write drops the other's entry -- a lost
    first-fetch record of a file the registry has no checksum for is a file nothing vouches for any more.
    Where ``fcntl`` is missing (Windows) the update is unlocked, as before."""
    p = _checksum_db_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p.parent / ".checksums.lock", "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            db = _read_db()
            before = json.dumps(db, sort_keys=True)
            yield db
            if json.dumps(db, sort_keys=True) != before:
                _write_db(db)
        finally:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _stat_record(st) -> dict:
    """What a memoised hash belongs to: size, mtime, inode and ctime of the file."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "ctime_ns": st.st_ctime_ns}


def _same_version(rec: dict | None, st) -> TypeGuard[dict]:
    """The memoised hash ``rec`` still describes the file with stat ``st`` (a record written before
    the inode and ctime were kept never matches: hashed once more)."""
    if not rec:
        return False
    return all(rec.get(k) == v for k, v in _stat_record(st).items())


def _db_key(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(paths.cache_dir()))
    except ValueError:
        return str(path.resolve())


def cached_checksum(path: Path) -> str:
    """SHA-256 of a file, memoised in checksums.json by (size, mtime) so big files hash once."""
    st = path.stat()
    key = _db_key(path)
    rec = _read_db().get(key)
    if _same_version(rec, st) and rec.get("sha256"):
        return rec["sha256"]
    digest = sha256_file(path)  # outside the lock: a big file hashes for seconds
    _record(path, digest, st=st)  # the stat from before the hash: an edit while hashing is hashed again
    return digest


def recorded_checksum(path: Path) -> str | None:
    """The SHA-256 recorded when the file first entered the cache (for registry entries without one)."""
    rec = _read_db().get(_db_key(path))
    return rec.get("first_fetch_sha256") if rec else None


def _record(path: Path, digest: str, fetched: bool = False, st=None) -> None:
    """Memoise a verified hash of ``path`` (with its size and mtime: ``st``, default its stat now); ``fetched``:
    it was just fetched, so it is also the new first-fetch record."""
    st = st or path.stat()
    key = _db_key(path)
    with _updating_db() as db:
        first = digest if fetched else db.get(key, {}).get("first_fetch_sha256", digest)
        db[key] = {"sha256": digest, **_stat_record(st), "first_fetch_sha256": first}


def _forget(path: Path) -> None:
    """Drop the memoised hash of ``path`` (it failed its check): keep only its first-fetch record."""
    key = _db_key(path)
    with _updating_db() as db:
        rec = db.get(key)
        if rec and "sha256" in rec:
            first = rec.get("first_fetch_sha256")
            if first:
                db[key] = {"first_fetch_sha256": first}
            else:
                del db[key]


def invalidate_parsed(dataset: str) -> list[Path]:
    """Delete the parsed tables of ``dataset`` (``<cache>/parsed/<dataset>-*.npz``): one may have been
    built from a raw file that has since failed its check. Returns the files removed."""
    gone = []
    for p in (paths.cache_dir() / "parsed").glob(f"{dataset}-*.npz"):
        try:
            p.unlink()
            gone.append(p)
        except OSError:
            pass
    return gone


def refetch_hint(dataset: str, spec: FileSpec) -> str:
    if spec.url:
        return f"run `gpdlm datasets fetch {dataset} --force` to fetch it again"
    return f"replace it with the original file (see `gpdlm datasets info {dataset}`)"


def check_cached(dataset: str, spec: FileSpec, path: Path | None = None) -> str:
    """The SHA-256 of a cached raw file, verified before it is used against the registry's hash.
    Hashed once per file version: a record whose size and mtime match the file and whose hash is
    the expected one is trusted. A mismatch is a DataError naming the refetch command; the failed
    hash is not recorded and the dataset's parsed tables are deleted. A file the registry has no
    hash for is trusted with a console warning when it is first seen, and again when it differs
    from the first-fetch record (a manual replacement: it becomes the new record)."""
    path = file_path(dataset, spec) if path is None else Path(path)
    st = path.stat()
    rec = _read_db().get(_db_key(path)) or {}
    expected = (spec.sha256 or "").lower() or None
    if rec.get("sha256") and _same_version(rec, st) and (expected is None or rec["sha256"] == expected):
        return rec["sha256"]
    digest = sha256_file(path)
    if expected is not None and digest != expected:
        _forget(path)
        invalidate_parsed(dataset)
        raise DataError(
            f"dataset '{dataset}': the cached file {path} ({st.st_size} bytes) does not match its registry SHA-256 "
            f"(expected {expected[:12]}..., got {digest[:12]}...: truncated or altered); {refetch_hint(dataset, spec)}"
        )
    first = rec.get("first_fetch_sha256")
    if expected is None and first is None:
        warn_unchecked(dataset, spec, digest, str(path))
    elif (
        expected is None and first is not None and digest != first
    ):  # no registry hash: a replaced file is used, loudly
        log.warning(
            "dataset '%s': %s changed since it was first fetched (recorded sha256 %s, now %s) and the "
            "registry has no checksum to tell which is right; using the new file",
            dataset,
            path,
            first[:12],
            digest[:12],
        )
    _record(path, digest, fetched=expected is None and digest != first)
    return digest


def warn_unchecked(dataset: str, spec: FileSpec, digest: str, origin: str) -> None:
    """A console warning: a raw file that no registry checksum vouches for entered use."""
    plain = ", fetched over plain http" if origin.startswith("http://") else ""
    log.warning(
        "dataset '%s': %s (from %s%s) has no SHA-256 in the registry; trusting it on first use and "
        "recording sha256 %s (compare it with a published checksum if you can)",
        dataset,
        spec.filename,
        origin,
        plain,
        digest,
    )


# ----- messages ------------------------------------------------------------------------------------
def offline_message(dataset: str, spec: FileSpec, path: Path, reason: str) -> str:
    url = spec.url or "(no public URL: the data must be supplied by the user)"
    return (
        f"dataset '{dataset}' is not cached and could not be downloaded ({reason}); "
        f"download {url} manually and save it as {path}"
    )


# ----- mirror --------------------------------------------------------------------------------------
def resolve_mirror(mirror: str | Path | None = None) -> Path | None:
    """The mirror to read from: ``mirror`` if given, else ``$GPDLM_DATA_MIRROR``, else None (network).

    A mirror that is not an existing directory is a one-line DataError (nothing is touched)."""
    where = "--mirror"
    if mirror is None or str(mirror) == "":
        mirror, where = paths.mirror_dir(), paths.ENV_MIRROR
    if mirror is None:
        return None
    m = Path(mirror).expanduser()
    if not m.is_dir():
        raise DataError(f"the data mirror {m} ({where}) does not exist or is not a directory")
    return m.resolve()


def mirror_path(mirror: Path, url: str) -> Path:
    """Where ``url`` lies in a mirror: ``<mirror>/<host>/<path of the URL>``."""
    u = urllib.parse.urlsplit(url)
    parts = [p for p in u.path.split("/") if p]
    if not u.netloc or not parts or any(p in (".", "..") for p in parts):
        raise DataError(f"cannot map the URL {url!r} into a mirror (it needs a host and a file path)")
    return Path(mirror, u.netloc, *parts)


# ----- the one way a raw file enters the cache -----------------------------------------------------
def _new_dirs(folder: Path) -> list[Path]:
    """The folders ``folder.mkdir(parents=True)`` would create, deepest first."""
    out = []
    while not folder.exists():
        out.append(folder)
        folder = folder.parent
    return out


def store(dataset: str, spec: FileSpec, open_source, origin: str) -> Path:
    """Stream ``open_source()`` (a binary file-like context manager) into the cache atomically.

    The bytes go to ``<cache>/<dataset>/.<file>.part-<pid>`` and are hashed on the way; only when
    the SHA-256 matches the registry (or the registry has none) is the temp file renamed to its
    final name and the hash recorded. On any failure the temp file and any folder created for it
    are removed, so a failed download, mirror copy or user copy leaves the cache as it was.
    OSError from ``open_source`` propagates (callers word it); a mismatch is a DataError."""
    dest = file_path(dataset, spec)
    replaced = dest.exists()
    created = _new_dirs(dest.parent)
    tmp = dest.parent / f".{dest.name}.part-{os.getpid()}"
    h = hashlib.sha256()
    ok = False
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open_source() as src, open(tmp, "wb") as out:
            while True:
                block = src.read(CHUNK)
                if not block:
                    break
                h.update(block)
                out.write(block)
        digest = h.hexdigest()
        if spec.sha256 and digest.lower() != spec.sha256.lower():
            raise DataError(
                f"checksum mismatch for dataset '{dataset}' file {spec.filename} from {origin}: expected "
                f"sha256 {spec.sha256}, got {digest}; the file was refused and the cache left as it was"
            )
        os.replace(tmp, dest)
        _record(dest, digest, fetched=True)
        if replaced:  # `fetch --force`: a table parsed from the old bytes must never be used again
            invalidate_parsed(dataset)
        if not spec.sha256:
            warn_unchecked(dataset, spec, digest, origin)
        ok = True
        return dest
    finally:
        if not ok:
            tmp.unlink(missing_ok=True)
            for folder in created:  # deepest first; only folders this call made and left empty
                try:
                    folder.rmdir()
                except OSError:
                    break


# ----- download ------------------------------------------------------------------------------------
def download(
    dataset: str, spec: FileSpec, *, timeout: float = TIMEOUT_S, force: bool = False, mirror: str | Path | None = None
) -> Path:
    """Fetch ``spec`` into the cache (atomic, verified) and return its final path.

    With a mirror (``mirror`` or ``$GPDLM_DATA_MIRROR``) the file is read from
    ``<mirror>/<host>/<path of its URL>`` instead of the network (also under ``GPDLM_OFFLINE=1``);
    a file missing there is a one-line DataError naming the path looked for. Without one, raises
    DataError with the manual-download instruction when offline, when the server cannot be reached
    or answers with an error. A checksum mismatch is a DataError naming both hashes."""
    dest = file_path(dataset, spec)
    if dest.exists() and not force:
        return dest
    if not spec.url:
        raise DataError(offline_message(dataset, spec, dest, "no download URL"))
    mdir = resolve_mirror(mirror)
    if mdir is not None:
        src = mirror_path(mdir, spec.url)
        if not src.is_file():
            raise DataError(
                f"dataset '{dataset}': file {spec.filename} is not in the data mirror {mdir}: looked for {src}"
            )
        try:
            return store(dataset, spec, lambda: open(src, "rb"), str(src))
        except OSError as e:
            raise DataError(f"dataset '{dataset}': cannot copy {src} into the cache: {e}") from None
    if paths.offline():
        raise DataError(offline_message(dataset, spec, dest, f"{paths.ENV_OFFLINE}=1"))

    def open_url():
        req = urllib.request.Request(spec.url, headers={"User-Agent": USER_AGENT})
        return urllib.request.urlopen(req, timeout=timeout)

    try:
        return store(dataset, spec, open_url, spec.url)
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        if isinstance(e, urllib.error.HTTPError):
            reason = f"HTTP {e.code} {e.reason}"
        raise DataError(offline_message(dataset, spec, dest, f"{type(e).__name__}: {reason}")) from None


def ensure_file(dataset: str, spec: FileSpec) -> Path:
    """The cached path of ``spec``, downloading it first if it is not there; a cached file is
    verified first (``check_cached``: once per file version)."""
    dest = file_path(dataset, spec)
    if dest.exists():
        check_cached(dataset, spec, dest)
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
        _forget(p)
        invalidate_parsed(dataset)  # a table parsed from these bytes must not outlive the failed check
        return VerifyResult(dataset, spec.filename, p, "mismatch", f"expected {spec.sha256}, got {digest}")
    first = recorded_checksum(p)
    if first is None:
        _record(p, digest)
        return VerifyResult(
            dataset, spec.filename, p, "unknown", f"checksum unknown, recorded on first fetch: {digest}"
        )
    if first == digest:
        return VerifyResult(
            dataset,
            spec.filename,
            p,
            "unknown-recorded",
            f"checksum unknown in the registry; matches the one recorded on first fetch ({digest})",
        )
    invalidate_parsed(dataset)
    return VerifyResult(
        dataset, spec.filename, p, "mismatch", f"changed since first fetch: recorded {first}, now {digest}"
    )
