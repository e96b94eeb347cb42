"""Checkpoints that resume a run exactly (issue 22).

A checkpoint (``checkpoint.pt`` in the run's output folder, written atomically) holds the whole
training state at an iteration boundary: the loop's state (``training.loop.Loop.state``: iteration,
losses, batch permutation, optimiser state, best-iterate snapshot, time spent, hooks' and callbacks' states), the
stage in progress and what the finished stages produced (``FitResult``), every module's parameters
and buffers, every random generator (batch order, the estimator's, torch's global one), the learning
curves logged so far, and the config hash and MLflow run it belongs to. Written after every
``every``-th evaluation, after ``minutes`` of wall time without one (``trainer.checkpoint_minutes``: a run
that evaluates rarely or never, a PIC++ job of an hour, still leaves one), and when the run is stopped from outside (SIGTERM, SIGHUP, Ctrl-C, submitit's
SIGUSR2 preemption), and once more when training is complete (``save_complete``: every stage done,
before the slow finalisation), so that a run stopped while it evaluates and saves its results
resumes without training. Its SHA-256 is recorded in ``checkpoint.pt.sha256`` (``files.write_verified``)
and checked when it is read. Read with ``torch.load(weights_only=True)``.

A stage is checkpointed only when each of its hooks can save its own state (``checkpoint_state`` /
``load_checkpoint_state``); every family's hooks can (the recurrent family's kernel refresh, epoch timer,
evaluation schedule, own-rollout feedback, fixed theta-stage embedding and dropout-mask generator too). The
states of the hooks of every stage begun so far are saved as well (``stage_hooks``), so a hook shared with
the family's diagnostics keeps its state when a later stage or a complete checkpoint is resumed.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..exceptions import GpdlmError
from ..files import ChecksumMismatch, sidecar, verify_sha256, write_verified

FILE = "checkpoint.pt"
FORMAT = 1


class CheckpointError(GpdlmError):
    """A checkpoint that exists but cannot be trusted (its bytes do not match their SHA-256)."""


class Checkpointer:
    """Writes the run's checkpoints (driven by ``callbacks.Checkpointing``); ``state`` (a loaded checkpoint)
    makes the stage loop resume.

    ``on_failure(error, iteration)`` is called once, at the first checkpoint that cannot be written
    (a full disk): the run goes on, and says so (``run.train``: a log line, a tag, the report)."""

    def __init__(
        self,
        path: str | os.PathLike,
        every: int,
        run_state: Callable[[], dict],
        state: dict | None = None,
        on_failure: Callable[[OSError, int | None], None] | None = None,
        minutes: float = 0.0,
    ):
        self.path, self.every, self.run_state = Path(path), int(every), run_state
        self.seconds = 60.0 * float(minutes)  # 0: checkpoints after evaluations only
        self.saved_at = time.monotonic()  # the last write (or attempt), or the start
        self.state = state  # the checkpoint to resume from (consumed by callbacks.Checkpointing)
        self.stage = 0  # the stage in progress (set by callbacks.Checkpointing)
        self.fit = None  # the stage loop's FitResult so far
        self.evaluations = 0
        self.writes = 0
        self.on_failure = on_failure
        self.failures = 0  # checkpoints that could not be written
        self.last_written: int | None = None  # the iteration of the last checkpoint written (None: none yet)
        # ((stage, position, type name), hook): the checkpointable hooks of every stage begun so far, each once
        self.hooks: list[tuple[tuple[int, int, str], Any]] = []  # (set by callbacks.Checkpointing)

    def after_evaluation(self, loop_state: Callable[[], dict]) -> None:
        self.evaluations += 1
        if self.every > 0 and self.evaluations % self.every == 0:
            self.save(loop_state())

    def after_step(self, loop_state: Callable[[], dict]) -> None:
        """A checkpoint when ``minutes`` have passed since the last one (at an iteration boundary)."""
        if self.seconds > 0 and time.monotonic() - self.saved_at >= self.seconds:
            self.save(loop_state())

    def save_complete(self, fit, n_stages: int) -> None:
        """The checkpoint of a finished training (every stage done): ``stage`` past the last one, the
        final ``FitResult``, no loop state. Resuming from it trains nothing."""
        self.stage, self.fit = int(n_stages), fit
        self.save(None, complete=True)

    def save(self, loop_state: dict | None, complete: bool = False) -> None:
        from .reuse import module_state

        f = self.fit
        blob = {
            "format": FORMAT,
            "stage": self.stage,
            "loop": loop_state,
            "complete": bool(complete),
            "fit": None
            if f is None
            else {
                "iterations": f.iterations,
                "train_seconds": f.train_seconds,
                "epochs": f.epochs,
                "converged": f.converged,
                "best_iteration": f.best_iteration,
                "stop_rules": list(f.stop_rules),
                "optimizers": list(f.optimizers),
                "losses": torch.tensor(f.losses, dtype=torch.float64),
                "iter_ms": list(getattr(f, "stage_iter_ms", [])),
                "lbfgs_budget_hit": list(f.lbfgs_budget_hit),
                "stage_final_loss": dict(f.stage_final_loss),
                "stage_log": list(getattr(f, "stage_log", [])),
                **({"grad_max_abs": float(f.grad_max_abs)} if getattr(f, "grad_max_abs", None) is not None else {}),
            },
            "stage_hooks": [
                {"stage": i, "position": j, "type": kind, "state": h.checkpoint_state()}
                for (i, j, kind), h in self.hooks
            ],
            **self.run_state(),
        }
        blob["modules"] = module_state(blob.pop("modules_list"))
        blob["generators"] = [g.get_state() if g is not None else None for g in blob.pop("generator_list")]
        blob["torch_rng"] = torch.get_rng_state()
        buf = io.BytesIO()
        torch.save(blob, buf)
        from ..signals import deferred_signals

        self.saved_at = time.monotonic()  # a failed write is not retried every step
        try:
            with deferred_signals(user_signals=True):  # a second Ctrl-C stops after the write, not inside it
                write_verified(self.path, buf.getvalue())
            self.writes += 1
            self.last_written = int(f.iterations) if f is not None else None
            if loop_state is not None and "it" in loop_state:  # the stage's own count, after the earlier stages'
                self.last_written = (int(f.iterations) if f is not None else 0) + int(loop_state["it"])
        except OSError as e:  # a checkpoint that cannot be written costs a restart, never the run
            self.failures += 1
            if self.failures == 1 and self.on_failure is not None:
                self.on_failure(e, self.last_written)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        sidecar(self.path).unlink(missing_ok=True)


def read_checkpoint(path: str | os.PathLike, strict: bool = False, fmt: int = FORMAT) -> dict | None:
    """The checkpoint at ``path``, or None when there is none, it cannot be read or its ``format`` is not
    ``fmt`` (a batched group's checkpoints have their own). A checkpoint whose bytes do not match their
    recorded SHA-256 is None too, or, with ``strict``, a one-line ``CheckpointError`` (``gpdlm resume``
    says so rather than restart silently)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        verify_sha256(path)
    except ChecksumMismatch as e:
        if strict:
            raise CheckpointError(f"{e}; delete it (and {sidecar(path).name}) to start the run afresh") from None
        return None
    except OSError:
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None
    return blob if isinstance(blob, dict) and blob.get("format") == fmt else None


def checkpoint_step(state: dict) -> int:
    """The iteration a checkpoint was written at: the finished stages' iterations plus the stage in
    progress's own count (``Checkpointer.last_written`` of the run that wrote it)."""
    fit, loop = state.get("fit"), state.get("loop")
    done = int(fit["iterations"]) if fit is not None else 0
    return done + (int(loop["it"]) if isinstance(loop, dict) and "it" in loop else 0)


def restore_run_state(state: dict, modules, generators) -> None:
    """Parameters, buffers and random generators as the checkpoint saved them."""
    from .reuse import loadmodule_state

    loadmodule_state(modules, state["modules"])
    for g, s in zip(generators, state["generators"]):
        if g is not None and s is not None:
            g.set_state(s)
    torch.set_rng_state(state["torch_rng"])


__all__ = ["FILE", "CheckpointError", "Checkpointer", "checkpoint_step", "read_checkpoint", "restore_run_state"]
