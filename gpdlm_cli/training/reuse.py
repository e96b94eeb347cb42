"""Work shared across the jobs of a sweep (issue 21): stage results reused from a content-addressed
cache, and warm starts along a beta path.

* ``StageCache`` -- a stage the family marks ``shareable`` (its result does not depend on the swept
  ``objective.beta``: the fixed variants' SVGP stage) is trained once per *key*, a hash of everything
  that determines it (the caller passes the resolved config without ``objective.beta`` and the
  bookkeeping keys, plus gpdlm's version). Its end state -- every module's parameters and buffers,
  the batch-order generator and the estimator's generator -- is written atomically to
  ``<dir>/<key>-<stage>.pt`` (a temporary file renamed into place, so parallel jobs on a shared disk
  never read a partial file; two jobs that race both compute the same bytes). A later job with the
  same key loads it and skips the stage: its results are bit-identical to training the stage again.
  Files are read with ``torch.load(weights_only=True)``.
* ``WarmStart`` -- in one process, jobs that differ only in ``objective.beta`` share a *path key*:
  each iterative stage starts from the state the same stage ended in for the previous beta of the
  path (the last job of that key in this process), instead of from the family's initialisation.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..files import write_bytes_atomic


def module_state(modules) -> dict[str, torch.Tensor]:
    out, seen = {}, set()
    for i, m in enumerate(modules):
        for name, t in list(m.named_parameters()) + list(m.named_buffers()):
            if id(t) in seen:
                continue
            seen.add(id(t))
            out[f"{i}.{name}"] = t.detach().cpu().clone()
    return out


def loadmodule_state(modules, state: dict[str, torch.Tensor]) -> None:
    seen = set()
    with torch.no_grad():
        for i, m in enumerate(modules):
            for name, t in list(m.named_parameters()) + list(m.named_buffers()):
                if id(t) in seen:
                    continue
                seen.add(id(t))
                key = f"{i}.{name}"
                if key not in state or state[key].shape != t.shape:
                    raise KeyError(key)
                t.copy_(state[key].to(device=t.device, dtype=t.dtype))


@dataclass
class CachedStage:
    """What a restored stage brings besides its end state: every training loss (its learning curve,
    the fast protocol's first-order start included) and whether its stopping rule ended it."""

    losses: list[float]
    converged: bool


class StageCache:
    """Trained end states of shareable stages, on disk under ``directory`` (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike, key: str):
        self.directory, self.key = Path(directory), key
        self.reused: list[str] = []

    def path(self, stage_name: str) -> Path:
        return self.directory / f"{self.key}-{stage_name}.pt"

    def load(self, stage_name: str, modules, generators=()) -> CachedStage | None:
        """Restore the stage's end state if cached and return its learning curve and convergence,
        else leave everything as it is and return None."""
        p = self.path(stage_name)
        if not p.exists():
            return None
        try:
            blob = torch.load(p, map_location="cpu", weights_only=True)
            converged = bool(blob["converged"])
            loadmodule_state(modules, blob["modules"])
            for g, s in zip(generators, blob["generators"]):
                if g is not None and s is not None:
                    g.set_state(s)
            losses = [float(v) for v in blob["losses"].tolist()]
        except Exception:  # unreadable or from another layout: train the stage instead
            return None
        self.reused.append(f"{stage_name}:{self.key}")
        return CachedStage(losses, converged)

    def save(self, stage_name: str, modules, generators=(), losses=(), *, converged: bool = True) -> None:
        blob = {
            "modules": module_state(modules),
            "losses": torch.tensor(list(losses), dtype=torch.float64),
            "converged": bool(converged),
            "generators": [g.get_state() if g is not None else None for g in generators],
        }
        buf = io.BytesIO()
        torch.save(blob, buf)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(self.path(stage_name), buf.getvalue())
        except OSError:  # a cache that cannot be written costs time, never a result
            pass


# path key -> {stage name: (beta, state)}: the end states of the last job of each beta path
_WARM: dict[str, dict[str, tuple[float, dict]]] = {}


class WarmStart:
    """Start each iterative stage where the same stage of the previous job on this path ended."""

    def __init__(self, path_key: str, beta: float):
        self.path_key, self.beta = path_key, float(beta)
        self.started_from: float | None = None

    def restore(self, stage_name: str, modules) -> bool:
        """Load the stage's end state from the previous job of the path; whether there was one."""
        entry = _WARM.get(self.path_key, {}).get(stage_name)
        if entry is None:
            return False
        beta, state = entry
        try:
            loadmodule_state(modules, state)
        except KeyError:
            return False
        self.started_from = beta
        return True

    def save(self, stage_name: str, modules) -> None:
        _WARM.setdefault(self.path_key, {})[stage_name] = (self.beta, module_state(modules))


def clear_warm_starts() -> None:
    _WARM.clear()


__all__ = ["CachedStage", "StageCache", "WarmStart", "clear_warm_starts"]
