"""Files that are written whole or not at all (standard library only: any layer may import it)."""

from __future__ import annotations

import os
from pathlib import Path


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


__all__ = ["write_atomic", "write_bytes_atomic"]
