"""Files that are written whole or not at all (standard library only: any layer may import it)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

SHA_SUFFIX = ".sha256"  # the sidecar beside a verified file: ``model.pt.sha256``


def write_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temp file renamed over it: a full disk or a kill leaves
    the old file or none, never half of one (the temp file is removed on failure)."""
    return write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path, data: bytes) -> Path:
    """``write_atomic`` for bytes (saved models, checkpoints, cached stages)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


class ChecksumMismatch(ValueError):
    """A verified file's bytes are not those that were written (flipped bytes, a foreign file)."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    """SHA-256 (hex) of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sidecar(path) -> Path:
    path = Path(path)
    return path.with_name(path.name + SHA_SUFFIX)


def write_verified(path, data: bytes) -> str:
    """``write_bytes_atomic`` with the SHA-256 of ``data`` in the sidecar ``<path>.sha256``; returns
    the digest. The sidecar is written first and keeps the previous digest on its second line, so a
    kill between the two writes leaves an old file that still verifies; a file whose bytes match
    neither line fails ``verify_sha256``."""
    path = Path(path)
    digest = sha256_bytes(data)
    previous = []
    try:
        previous = sidecar(path).read_text().split()[:1]
    except OSError:
        pass
    write_atomic(sidecar(path), "\n".join([digest] + [d for d in previous if d != digest]) + "\n")
    write_bytes_atomic(path, data)
    return digest


def verify_sha256(path) -> str | None:
    """The SHA-256 of ``path`` when its sidecar lists it; None when there is no sidecar (a file
    written before gpdlm recorded checksums); ``ChecksumMismatch`` when it lists other digests."""
    path = Path(path)
    try:
        expected = sidecar(path).read_text().split()
    except FileNotFoundError:
        return None
    digest = sha256_file(path)
    if digest not in expected:
        raise ChecksumMismatch(
            f"{path} does not match its recorded SHA-256 (expected {expected[0][:12]}..., got "
            f"{digest[:12]}...): altered, corrupted or copied from another run"
        )
    return digest


def remove_stale_temporaries(folder) -> list[Path]:
    """Remove the ``.<name>.tmp-<pid>`` files of ``write_bytes_atomic`` left in ``folder`` by a
    process that no longer exists (SIGKILL mid-write); returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = list(Path(folder).glob(".*.tmp-*"))
    except OSError:
        return removed
    for f in candidates:
        pid = f.name.rsplit(".tmp-", 1)[-1]
        if not pid.isdigit() or _pid_alive(int(pid)):
            continue
        try:
            f.unlink()
            removed.append(f)
        except OSError:
            pass
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


class FolderBusy(RuntimeError):
    """Another live process holds a run folder's lock."""


LOCK_FILE = ".gpdlm.lock"


@contextlib.contextmanager
def folder_lock(folder):
    """Hold an exclusive ``flock`` on ``<folder>/.gpdlm.lock`` (holding this process's PID) while a
    process trains into the folder; ``FolderBusy`` (with the holder's PID) when another live process
    holds it. The lock dies with its process, whatever kills it. A no-op where ``fcntl`` is missing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path = Path(folder) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise FolderBusy(holder or "?") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def folder_holder(folder) -> str | None:
    """The PID of the live process that trains into ``folder`` (its lock is held), else None."""
    try:
        with folder_lock(folder):
            return None
    except FolderBusy as e:
        return str(e)
    except OSError:
        return None


__all__ = [
    "ChecksumMismatch",
    "FolderBusy",
    "folder_holder",
    "folder_lock",
    "remove_stale_temporaries",
    "sha256_file",
    "verify_sha256",
    "write_atomic",
    "write_bytes_atomic",
    "write_verified",
]
