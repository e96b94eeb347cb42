"""Checkpoints that resume a run exactly (issue 22).

A checkpoint (``checkpoint.pt`` in the run's output folder, written atomically) holds the whole
training state at an iteration boundary: the loop's state (``training.loop.train``: iteration,
losses, batch permutation, optimiser state, best-iterate snapshot, time spent, hooks' states), the
stage in progress and what the finished stages produced (``FitResult``), every module's parameters
and buffers, every random generator (batch order, the estimator's, torch's global one), the learning
curves logged so far, and the config hash and MLflow run it belongs to. Written after every
``every``-th evaluation and when the run is stopped from outside (SIGTERM, SIGHUP, Ctrl-C, submitit's
SIGUSR2 preemption). Read with ``torch.load(weights_only=True)``.

A stage is checkpointed only when each of its hooks can save its own state (``checkpoint_state`` /
``load_checkpoint_state``); the recurrent family's refresh hooks cannot yet, so its networks' stages
resume from the last checkpoint of an earlier stage (or from the start).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Callable

import torch

from ..files import write_bytes_atomic

FILE = "checkpoint.pt"
FORMAT = 1


class Checkpointer:
    """Writes the run's checkpoints; ``state`` (a loaded checkpoint) makes ``run_stages`` resume."""

    def __init__(self, path: str | os.PathLike, every: int, run_state: Callable[[], dict], state: dict | None = None):
        self.path, self.every, self.run_state = Path(path), int(every), run_state
        self.state = state  # the checkpoint to resume from (consumed by run_stages)
        self.stage = 0  # the stage in progress (set by run_stages)
        self.fit = None  # run_stages' FitResult so far
        self.evaluations = 0
        self.writes = 0

    def after_evaluation(self, loop_state: Callable[[], dict]) -> None:
        self.evaluations += 1
        if self.every > 0 and self.evaluations % self.every == 0:
            self.save(loop_state())

    def save(self, loop_state: dict) -> None:
        from .reuse import module_state

        f = self.fit
        blob = {
            "format": FORMAT, "stage": self.stage, "loop": loop_state,
            "fit": None if f is None else {
                "iterations": f.iterations, "train_seconds": f.train_seconds, "epochs": f.epochs,
                "converged": f.converged, "best_iteration": f.best_iteration, "stop_rules": list(f.stop_rules),
                "optimizers": list(f.optimizers), "losses": torch.tensor(f.losses, dtype=torch.float64),
                "iter_ms": list(getattr(f, "stage_iter_ms", [])), "lbfgs_budget_hit": list(f.lbfgs_budget_hit),
                "stage_final_loss": dict(f.stage_final_loss), "stage_log": list(getattr(f, "stage_log", [])),
            },
            **self.run_state(),
        }
        blob["modules"] = module_state(blob.pop("modules_list"))
        blob["generators"] = [g.get_state() if g is not None else None for g in blob.pop("generator_list")]
        blob["torch_rng"] = torch.get_rng_state()
        buf = io.BytesIO()
        torch.save(blob, buf)
        try:
            write_bytes_atomic(self.path, buf.getvalue())
            self.writes += 1
        except OSError:  # a checkpoint that cannot be written costs a restart, never the run
            pass

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def read_checkpoint(path: str | os.PathLike) -> dict | None:
    """The checkpoint at ``path``, or None when there is none or it cannot be read."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None
    return blob if blob.get("format") == FORMAT else None


def restore_run_state(state: dict, modules, generators) -> None:
    """Parameters, buffers and random generators as the checkpoint saved them."""
    from .reuse import loadmodule_state

    loadmodule_state(modules, state["modules"])
    for g, s in zip(generators, state["generators"]):
        if g is not None and s is not None:
            g.set_state(s)
    torch.set_rng_state(state["torch_rng"])


__all__ = ["FILE", "Checkpointer", "read_checkpoint", "restore_run_state"]
