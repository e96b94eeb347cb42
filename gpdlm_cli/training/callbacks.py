"""The training loop's callbacks: everything around the optimisation that is not the optimisation.

The loop (``training.loop.Loop``) owns stages, steps, stopping and evaluation; what it does besides is a
``Callback`` on its list, called at fixed points (docs/training.md, "The loop and its callbacks"):

* ``on_start(loop)`` -- before the first stage (``Loop.fit``);
* ``on_stage_start(loop, run)`` -- a family stage begins, after its ``prepare``: ``run`` (``StageRun``) says
  what will happen to it, and a callback may change that (skip it, resume it, restore it, warm-start it);
* ``on_train_start(loop)`` / ``on_train_end(loop, result)`` -- one call of the step loop begins / ends
  (a stage's training; the fast protocol's first-order start is a call of its own);
* ``on_step(loop)`` -- at the end of every iteration, after its stopping test and its evaluation (if due);
* ``on_evaluate(loop, metrics)`` -- a periodic evaluation happened (its metrics at step ``loop.step``);
* ``on_final_evaluate(loop, metrics)`` -- with ``keep_best``, the call's final iterate was evaluated (at step
  ``loop.step``, before the best iterate is restored): a point of the learning curves like any evaluation,
  but not a periodic one (no checkpoint is written for it);
* ``on_stage_end(loop, run)`` -- a family stage ended (``run.result``: its ``TrainResult``, None if not trained);
* ``on_end(loop, fit)`` -- every stage is done (``fit``: the ``FitResult``);
* ``on_exception(loop, error)`` -- the step loop is left by an exception (a kill, a numerical failure);
  the exception goes on after every callback had it.

A callback that keeps state across a checkpoint gives it with ``state()`` (a dict merged into the loop's
state) and takes it back with ``load_state(state)``. Callbacks run in list order; no hook may read a
device tensor per iteration (training/sync.py): what they read, they read where the loop already syncs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


@dataclass
class StageRun:
    """What happens to one family stage, decided by the loop and its callbacks in ``on_stage_start``.

    ``skip``: finished before a checkpoint (nothing to do); ``resume``: the loop state to continue from;
    ``restored``: the stage cache's ``CachedStage`` (the stage is not trained); ``warmed``: started where the
    previous beta ended; ``result``: the main ``TrainResult`` and ``first``: the fast protocol's first-order
    start's, once trained."""

    index: int
    stage: Any  # a family's ``methods.base.Stage`` (a layer above: not imported here)
    skip: bool = False
    resume: dict | None = None
    restored: Any = None  # reuse.CachedStage
    warmed: bool = False
    shared: bool = False
    result: Any = None  # loop.TrainResult
    first: Any = None

    @property
    def trained(self) -> bool:
        return self.result is not None


class Callback:
    """A callback of the training loop: every hook does nothing unless overridden (see the module docstring)."""

    def on_start(self, loop) -> None: ...

    def on_stage_start(self, loop, run: StageRun) -> None: ...

    def on_train_start(self, loop) -> None: ...

    def on_step(self, loop) -> None: ...

    def on_evaluate(self, loop, metrics: dict) -> None: ...

    def on_final_evaluate(self, loop, metrics: dict) -> None: ...

    def on_train_end(self, loop, result) -> None: ...

    def on_stage_end(self, loop, run: StageRun) -> None: ...

    def on_end(self, loop, fit) -> None: ...

    def on_exception(self, loop, error: BaseException) -> None: ...

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None: ...


class StepLog(Callback):
    """Tracking: the step metrics (``train_loss`` per iteration, each evaluation's metrics, the final iterate's
    under ``keep_best`` too) handed to ``log_steps`` in batches -- at every evaluation and when a call of the step loop ends or fails -- so the
    losses, kept on the device, are read once per batch (``state``: how many were handed over)."""

    def __init__(self, log_steps):
        self.log_steps = log_steps
        self.flushed = 0
        self.pending: dict[str, list[tuple[int, float]]] = {}

    def on_train_start(self, loop) -> None:
        self.flushed, self.pending = 0, {}

    def on_evaluate(self, loop, metrics: dict) -> None:
        for k, v in metrics.items():
            self.pending.setdefault(k, []).append((loop.step, v))
        self.flush(loop)

    def on_final_evaluate(self, loop, metrics: dict) -> None:
        self.on_evaluate(loop, metrics)

    def on_train_end(self, loop, result) -> None:
        self.flush(loop)

    def on_exception(self, loop, error) -> None:
        try:  # keep the learning curve so far (interrupted or failed runs)
            self.flush(loop)
        except Exception:
            pass

    def flush(self, loop) -> None:
        if loop.it > self.flushed:
            vals = loop.losses[self.flushed : loop.it].tolist()
            start = loop.step_offset + self.flushed + 1
            self.pending.setdefault("train_loss", []).extend((start + i, v) for i, v in enumerate(vals))
            self.flushed = loop.it
        if self.log_steps and self.pending:
            self.log_steps(dict(self.pending))
        self.pending.clear()

    def state(self) -> dict:
        return {"flushed": self.flushed}

    def load_state(self, state: dict) -> None:
        self.flushed = int(state["flushed"])


class Progress(Callback):
    """A tqdm bar per call of the step loop (``trainer.progress``, only on a terminal), updated where the
    loop reads its losses (every ``check_every`` iterations)."""

    def __init__(self):
        self.bar = None

    def on_train_start(self, loop) -> None:
        if loop.settings.progress and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=loop.cap, desc=loop.desc, leave=False, dynamic_ncols=True)

    def on_step(self, loop) -> None:
        if self.bar is not None and loop.checked:
            self.bar.n = loop.it
            self.bar.set_postfix(loss=f"{loop.losses[loop.it - 1].item():.4f}", refresh=False)
            self.bar.refresh()

    def on_train_end(self, loop, result) -> None:
        self.close()

    def on_exception(self, loop, error) -> None:
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Signals(Callback):
    """Termination signals (SIGTERM, SIGINT, SIGHUP, submitit's SIGUSR1/2) wait for the end of the iteration
    in progress (``deferred_signals``): held from the start of an iteration to its ``on_step`` -- this
    callback comes last on the list -- so a checkpoint always holds a whole number of steps. The block is
    ``interruptible``: a second Ctrl-C (SIGTERM, SIGHUP) stops at once, mid-step, and then no checkpoint is
    written (``Checkpointing.on_exception``): the last one is kept."""

    def __init__(self):
        self.held = None

    def hold(self) -> None:
        from ..signals import deferred_signals

        self.held = deferred_signals(user_signals=True, interruptible=True)
        self.held.__enter__()

    def release(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.__exit__(None, None, None)  # a signal that arrived meanwhile is raised from here

    def on_train_start(self, loop) -> None:
        if loop.it < loop.cap:
            self.hold()

    def on_step(self, loop) -> None:
        self.release()
        if not loop.done:
            self.hold()

    def on_train_end(self, loop, result) -> None:
        self.release()

    def on_exception(self, loop, error) -> None:
        self.release()


class Checkpointing(Callback):
    """Checkpoints (``checkpoint.Checkpointer``): after every ``every``-th evaluation, after ``minutes`` of
    wall time without one, and when the run is stopped from outside, the loop's state; once training is complete, a complete checkpoint. When the
    checkpointer holds a loaded checkpoint, the stages it finished are skipped, the stage in progress
    resumes exactly, and a complete one trains nothing.

    Every checkpoint also holds the states of the hooks of every stage begun so far (each hook once,
    those with ``checkpoint_state``; ``Checkpointer.hooks``): a hook a finished stage shares with the
    family's diagnostics (the recurrent family's kernel refresh counts, its time per epoch) keeps its state
    when the run resumes in a later stage or from a complete checkpoint."""

    def __init__(self, checkpointer):
        self.ck = checkpointer
        self.state_ = checkpointer.state
        self.start = int(self.state_["stage"]) if self.state_ is not None else 0
        self.ck.hooks = []

    def on_start(self, loop) -> None:
        if self.state_ is not None and self.state_.get("fit"):
            loop.fit_result.load(self.state_["fit"])

    def on_stage_start(self, loop, run: StageRun) -> None:
        self.ck.stage, self.ck.fit = run.index, loop.fit_result
        for j, h in enumerate(run.stage.hooks):
            if hasattr(h, "checkpoint_state") and all(h is not k for _, k in self.ck.hooks):
                self.ck.hooks.append(((run.index, j, type(h).__name__), h))
        if run.index < self.start:
            run.skip = True
        elif self.state_ is not None and run.index == self.start:
            self._restore(loop)
            run.resume = self.state_["loop"]

    def _restore(self, loop) -> None:
        """The checkpoint's tensors, generators and hook states (after the skipped stages' ``prepare``)."""
        from .checkpoint import restore_run_state

        restore_run_state(self.state_, loop.modules, loop.generators)
        hooks = dict(self.ck.hooks)  # (stage, position, type) -> hook: a hook the run no longer has is passed over
        for entry in self.state_.get("stage_hooks") or []:
            h = hooks.get((int(entry["stage"]), int(entry["position"]), str(entry["type"])))
            if h is not None:
                h.load_checkpoint_state(entry["state"])

    def on_evaluate(self, loop, metrics: dict) -> None:
        if loop.checkpointable:
            self.ck.after_evaluation(loop.state)

    def on_step(self, loop) -> None:
        if loop.checkpointable:
            self.ck.after_step(loop.state)

    def on_exception(self, loop, error) -> None:
        from ..signals import LAST_CHECKPOINT, killed_reason, stopped_mid_step

        if stopped_mid_step(error):  # a second Ctrl-C in the middle of a step: the last checkpoint stays
            setattr(error, LAST_CHECKPOINT, self.ck.last_written)
        elif loop.checkpointable and killed_reason(error):  # stopped from outside between two iterations
            self.ck.save(loop.state())

    def on_end(self, loop, fit) -> None:
        if self.state_ is not None and self.start >= loop.n_stages:  # a complete checkpoint: nothing trained
            self._restore(loop)
        if not (self.state_ or {}).get("complete"):  # a stop from here on resumes without training
            self.ck.save_complete(fit, loop.n_stages)


class StageSharing(Callback):
    """The stage cache (``reuse.StageCache``): a ``shareable`` stage another job with the same key trained is
    restored instead of trained (with the random generators it leaves behind), else stored once trained."""

    def __init__(self, cache, log_steps=None):
        self.cache, self.log_steps = cache, log_steps

    def on_stage_start(self, loop, run: StageRun) -> None:
        if run.skip or run.resume is not None or run.stage.solve or not getattr(run.stage, "shareable", False):
            return
        run.shared = True
        run.restored = cached = self.cache.load(run.stage.name, loop.modules, loop.generators)
        if cached is not None:  # its learning curve, as if trained here
            loop.fit_result.reused.append(self.cache.reused[-1])
            if self.log_steps is not None and cached.losses:
                start = loop.fit_result.iterations + 1
                self.log_steps({"train_loss": [(start + i, v) for i, v in enumerate(cached.losses)]})

    def on_stage_end(self, loop, run: StageRun) -> None:
        if run.shared and run.trained:
            losses = (run.first.losses if run.first is not None else []) + run.result.losses
            self.cache.save(run.stage.name, loop.modules, loop.generators, losses, converged=run.result.converged)


class WarmStarts(Callback):
    """Warm-started beta paths (``reuse.WarmStart``): each trained stage starts where the same stage ended
    for the previous beta of the path, and leaves its end state to the next."""

    def __init__(self, warm):
        self.warm = warm

    def on_stage_start(self, loop, run: StageRun) -> None:
        if not (run.skip or run.resume is not None or run.stage.solve or run.restored is not None):
            run.warmed = self.warm.restore(run.stage.name, loop.modules)

    def on_stage_end(self, loop, run: StageRun) -> None:
        if run.trained:
            self.warm.save(run.stage.name, loop.modules)

    def on_end(self, loop, fit) -> None:
        fit.warm_started_from = self.warm.started_from


def standard(log_steps=None, *, checkpoint=None, cache=None, warm=None, extra=()) -> list[Callback]:
    """The callbacks of a run, in their order: step metrics to ``log_steps``, checkpoints (``checkpoint``: a
    ``Checkpointer``), the stage cache (``cache``: a ``StageCache``), warm starts (``warm``: a ``WarmStart``),
    the progress bar, the ``extra`` callbacks, and last the deferred signals."""
    out: list[Callback] = [StepLog(log_steps)]
    if checkpoint is not None:
        out.append(Checkpointing(checkpoint))
    if cache is not None:
        out.append(StageSharing(cache, log_steps))
    if warm is not None:
        out.append(WarmStarts(warm))
    return [*out, Progress(), *extra, Signals()]


__all__ = [
    "Callback",
    "Checkpointing",
    "Progress",
    "Signals",
    "StageRun",
    "StageSharing",
    "StepLog",
    "WarmStarts",
    "standard",
]
