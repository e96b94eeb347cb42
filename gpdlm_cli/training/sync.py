"""Counting host-device synchronisations: the check behind the loop's promise of no per-iteration sync.

``torch.cuda.set_sync_debug_mode("warn")`` makes every synchronising CUDA call (``.item()``,
``.tolist()``, a blocking device-to-host copy, ``nonzero``, ...) issue a warning; ``count_cuda_syncs``
records them with the gpdlm frame that caused each, so a benchmark or a test can say how many
syncs a training step costs and where they come from.
"""

from __future__ import annotations

import contextlib
import traceback
import warnings
from dataclasses import dataclass, field


@dataclass
class SyncLog:
    """The synchronisations seen inside ``count_cuda_syncs``: how many, and where (file:line in gpdlm)."""

    count: int = 0
    sites: dict[str, int] = field(default_factory=dict)

    def top(self, k: int = 5) -> list[tuple[str, int]]:
        return sorted(self.sites.items(), key=lambda kv: -kv[1])[:k]


def _gpdlm_frame(stack) -> str:
    for frame in reversed(stack):
        if "gpdlm_cli" in frame.filename and not frame.filename.endswith("sync.py"):
            return f"{frame.filename.split('gpdlm_cli/')[-1]}:{frame.lineno}"
    last = stack[-1] if stack else None
    return f"{last.filename}:{last.lineno}" if last else "?"


@contextlib.contextmanager
def count_cuda_syncs():
    """Yield a ``SyncLog`` that counts the CUDA synchronisations of the block (none on CPU)."""
    import torch

    log = SyncLog()
    if not torch.cuda.is_available():
        yield log
        return
    previous = torch.cuda.get_sync_debug_mode()
    original = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchronizing CUDA operation" in str(message):
            log.count += 1
            site = _gpdlm_frame(traceback.extract_stack()[:-1])
            log.sites[site] = log.sites.get(site, 0) + 1
        else:
            original(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield log
        finally:
            torch.cuda.set_sync_debug_mode(previous)
            warnings.showwarning = original


__all__ = ["SyncLog", "count_cuda_syncs"]
