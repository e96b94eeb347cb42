"""Run-records files (``gpdlm export``) read and verified, and the runs they record as FINISHED.

The format is ``analysis.export``'s (gzip-compressed JSON lines: a header ``{"format": "gpdlm-runs",
"version": 1, ...}``, one line per run, a trailer with the SHA-256 of every line before it). Reading it
lives here, in the tracking layer, because a sweep asks it too: ``sweep.finished_from`` names files whose
FINISHED runs count as finished for ``sweep.skip_finished`` -- a study continued on a machine whose store
is new, from the run records an earlier session committed (``finished_config_hashes``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

from ..exceptions import GpdlmError

FORMAT = "gpdlm-runs"
VERSION = 1
HASH_TAG = "gpdlm.config_hash"


class RecordsError(GpdlmError, ValueError):
    """A run-records file that is missing, truncated, changed or foreign: one line, exit code 2."""


def read_verified(path: str | os.PathLike) -> tuple[dict, list[dict], str]:
    """``(header, run entries, SHA-256)`` of a run-records file, after checking its format, version,
    checksum and run count (``RecordsError`` otherwise: never a silently different set of runs)."""
    path = Path(path)
    if not path.is_file():
        raise RecordsError(f"{path}: no such file")
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise RecordsError(f"{path}: not a gzip-compressed run-records file ({e})") from None
    lines = raw.splitlines(keepends=True)
    try:
        header = json.loads(lines[0]) if lines else {}
    except ValueError:
        header = {}
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordsError(f"{path}: not a gpdlm run-records file (no '{FORMAT}' header)")
    if header.get("version") != VERSION:
        raise RecordsError(
            f"{path}: run-records format version {header.get('version')}; this gpdlm reads version {VERSION}"
        )
    try:
        trailer = json.loads(lines[-1]) if len(lines) > 1 else {}
    except ValueError:
        trailer = {}
    if "sha256" not in trailer:
        raise RecordsError(f"{path}: truncated (no checksum line at the end)")
    digest = hashlib.sha256(b"".join(lines[:-1])).hexdigest()
    if digest != trailer["sha256"]:
        raise RecordsError(
            f"{path}: SHA-256 mismatch (file {trailer['sha256'][:12]}..., content {digest[:12]}...): "
            f"the file was changed or damaged"
        )
    entries = [json.loads(ln) for ln in lines[1:-1]]
    if len(entries) != header.get("n_runs") or len(entries) != trailer.get("n_runs"):
        raise RecordsError(f"{path}: {len(entries)} runs, the header says {header.get('n_runs')}")
    return header, entries, digest


_FINISHED: dict[tuple, dict[str, tuple]] = {}  # (path, size, mtime_ns, experiment) -> {hash: (start, metrics)}
_READ: dict[tuple, tuple[dict, list[dict]]] = {}  # (path, size, mtime_ns) -> (header, run entries)


def read_cached(path, what: str = "") -> tuple[Path, tuple, dict, list[dict]]:
    """``(resolved path, (path, size, mtime) key, header, run entries)`` of a run-records file, read and verified
    (``read_verified``) once per process while the file is unchanged; ``what`` prefixes the missing-file error."""
    path = Path(str(path)).expanduser().resolve()
    if not path.is_file():
        raise RecordsError(f"{what}{path}: no such file")
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _READ:
        header, entries, _ = read_verified(path)
        _READ[key] = (header, entries)
    return (path, key, *_READ[key])


def _finished(paths, experiment: str) -> dict[str, tuple]:
    """``{config hash: (start_time, final metrics)}`` of the latest FINISHED run of each config hash of
    ``experiment`` in the files ``paths``; each file read and verified once per process."""
    found: dict[str, tuple] = {}
    for p in paths:
        path, file_key, header, entries = read_cached(p, "sweep.finished_from: ")
        key = (*file_key, experiment)
        if key not in _FINISHED:
            mine = [e for e in entries if e.get("experiment") == experiment]
            if not mine:
                have = ", ".join(map(str, header.get("experiments", []))) or "(none)"
                raise RecordsError(
                    f"sweep.finished_from: {path} records no run of experiment '{experiment}' "
                    f"(tracking.experiment); its experiments: {have}"
                )
            runs: dict[str, tuple] = {}
            for e in mine:
                h = e.get("tags", {}).get(HASH_TAG)
                if e.get("status") == "FINISHED" and h:
                    item = (e.get("start_time") or 0, dict(e.get("metrics", {})))
                    if str(h) not in runs or item[0] >= runs[str(h)][0]:
                        runs[str(h)] = item
            _FINISHED[key] = runs
        for h, item in _FINISHED[key].items():
            if h not in found or item[0] >= found[h][0]:
                found[h] = item
    return found


def finished_config_hashes(paths, experiment: str) -> frozenset[str]:
    """The config hashes (tag ``gpdlm.config_hash``) of the FINISHED runs of ``experiment`` recorded in the
    run-records files ``paths``, each file verified (``read_verified``). A file that records no run of
    ``experiment`` is an error: it names the experiments it has (a study continued under another
    ``tracking.experiment`` would otherwise train everything again, silently)."""
    return frozenset(_finished(paths, experiment))


def recorded_metrics(paths, experiment: str, hashes) -> dict | None:
    """The final metrics of the latest FINISHED run recorded in ``paths`` with one of ``hashes`` (the
    versions of a config hash), None when there is none: what a job skipped for it answers its sweeper."""
    runs = _finished(paths, experiment)
    hits = [runs[h] for h in ((hashes,) if isinstance(hashes, str) else hashes) if h in runs]
    if not hits:
        return None
    return {k: float(v) for k, v in max(hits, key=lambda item: item[0])[1].items() if v is not None}
