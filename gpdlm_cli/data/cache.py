"""The parsed-table cache: a Table saved as an uncompressed ``.npz`` after its first parse.

The key is the SHA-256 of (dataset name, loader version, loader options, SHA-256 of every input
file), so a changed raw file, a new loader version or different options never reuse a stale table.
Writes are atomic (temp file + rename); a corrupt or unreadable cache entry is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from . import paths
from .table import Table


def cache_key(name: str, version: int | str, options: dict, file_checksums: list[str]) -> str:
    payload = json.dumps(
        {"name": name, "version": str(version), "options": options, "files": list(file_checksums)},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def parsed_path(name: str, key: str) -> Path:
    return paths.cache_dir() / "parsed" / f"{name}-{key[:20]}.npz"


def save_table(table: Table, path: Path) -> None:
    meta = {
        "name": table.name,
        "task": table.task,
        "feature_names": list(table.feature_names),
        "target_name": table.target_name,
        "notes": list(table.notes),
    }
    arrays = {
        "X": np.ascontiguousarray(table.X),
        "y": np.ascontiguousarray(table.y),
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
    }
    if table.test_mask is not None:
        arrays["test_mask"] = np.asarray(table.test_mask, dtype=bool)
    if table.test_masks is not None:
        arrays["test_masks"] = np.asarray(table.test_masks, dtype=bool)
    _write_npz(path, arrays)


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as an uncompressed ``.npz`` at ``path``, atomically (a temp file beside it, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".npz")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]  # mypy matches **arrays to savez's allow_pickle: bool
        paths.share_mode(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_cached_table(path: Path) -> Table | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            mask = z["test_mask"] if "test_mask" in z.files else None
            masks = z["test_masks"] if "test_masks" in z.files else None
            return Table(
                meta["name"],
                meta["task"],
                z["X"],
                z["y"],
                meta["feature_names"],
                meta["target_name"],
                meta["notes"] + ["loaded from the parsed-table cache"],
                test_mask=mask,
                test_masks=masks,
            )
    except Exception:  # a truncated/corrupt entry: rebuild it
        return None


def save_frame(df, path: Path) -> None:
    """A DataFrame of numeric columns (each keeps its dtype; the column order is kept) as an ``.npz``: a stage
    of a loader that several option sets share (``data.airline``: the 2008 flights before the target is
    chosen)."""
    columns = [str(c) for c in df.columns]
    arrays = {f"c{i}": np.ascontiguousarray(df[c].to_numpy()) for i, c in enumerate(df.columns)}
    arrays["meta"] = np.frombuffer(json.dumps({"columns": columns}).encode(), dtype=np.uint8)
    _write_npz(path, arrays)


def load_cached_frame(path: Path):
    """The DataFrame ``save_frame`` wrote at ``path``; None if there is none or it cannot be read (rebuilt)."""
    if not path.is_file():
        return None
    import pandas as pd

    try:
        with np.load(path, allow_pickle=False) as z:
            columns = json.loads(bytes(z["meta"]).decode())["columns"]
            return pd.DataFrame({c: z[f"c{i}"] for i, c in enumerate(columns)})
    except Exception:  # a truncated/corrupt entry: rebuild it
        return None
