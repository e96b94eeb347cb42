"""Running a family's protocol: its stages in order, one ``train`` call per iterative stage.

Each iterative stage gets the run's ``TrainerSettings`` updated with the stage's own ``overrides``,
its named parameter groups, its hooks and its stochastic flag; step numbers continue across stages
so learning curves of multi-stage protocols (SVGP then DLM) read left to right. With
``keep_best``, each stage ends on its own best iterate (a ``keep_start`` stage: its starting point included).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from .callbacks import StageRun, standard
from .loop import Loop, TrainerSettings, iteration_cap, steps_per_epoch
from .optim import Schedule
from .stopping import ConvergenceRule


@dataclass
class FitResult:
    iterations: int = 0
    train_seconds: float = 0.0
    iter_ms: float = 0.0
    converged: bool = True
    epochs: float = 0.0
    best_iteration: int | None = None
    stop_rules: list[str] = field(default_factory=list)
    optimizers: list[str] = field(default_factory=list)  # per iterative stage
    reused: list[str] = field(default_factory=list)  # stages restored from the stage cache ("name:key")
    warm_started_from: float | None = None  # the beta whose end state this run started from
    stage_iter_ms: list[float] = field(default_factory=list)  # per finished stage (a checkpoint's copy)
    grad_max_abs: float | None = None  # max_i |d loss / d theta_i| at the end of the last stage with a gradient test
    lbfgs_budget_hit: list[str] = field(default_factory=list)  # L-BFGS stages its budget stopped before its tests held
    stage_final_loss: dict[str, float] = field(default_factory=dict)  # per iterative stage, its last loss (per datum)
    losses: list[float] = field(default_factory=list)
    stage_log: list[str] = field(default_factory=list)  # per stage, how it was trained and why it stopped (gpdlm.log)

    def add(self, result) -> None:
        """Count one ``train`` call (a ``TrainResult``): its iterations, time, epochs and losses."""
        self.iterations += result.iterations
        self.train_seconds += result.train_seconds
        self.epochs += result.epochs
        self.losses.extend(result.losses)

    def add_stage(self, name: str, s: TrainerSettings, run) -> None:
        """Record a trained stage (``run``: its ``callbacks.StageRun``, trained under settings ``s``)."""
        result, first = run.result, run.first
        self.add(result)
        if self.losses:
            self.stage_final_loss[name] = float(self.losses[-1])
        self.stage_iter_ms.append(result.iter_ms)
        self.converged = self.converged and result.converged
        self.stop_rules.append(result.stop_rule)
        self.optimizers.append(
            f"{name}:{first.optimizer}{first.iterations}+{result.optimizer}"
            if first is not None
            else f"{name}:{result.optimizer}"
        )
        if result.best_iteration is not None:
            self.best_iteration = result.best_iteration
        if result.grad_max_abs is not None:
            self.grad_max_abs = result.grad_max_abs
        if result.optimizer == "lbfgs" and not result.converged:
            self.lbfgs_budget_hit.append(name)
        self.stage_log.append(stage_line(name, s, result, first, run.warmed, run.resume is not None))

    def add_restored(self, name: str, cached, key: str) -> None:
        """Record a stage restored from the stage cache (``reuse.CachedStage``): its curve, no time spent."""
        self.iterations += len(cached.losses)
        self.losses.extend(cached.losses)
        if cached.losses:
            self.stage_final_loss[name] = float(cached.losses[-1])
        self.converged = self.converged and cached.converged
        self.stage_log.append(
            f"stage {name}: restored from the stage cache ({key}; "
            f"{len(cached.losses)} iterations, {'converged' if cached.converged else 'not converged'})"
        )

    def load(self, f: dict) -> None:
        """Continue from the ``fit`` part of a checkpoint (``checkpoint.Checkpointer.save``)."""
        self.iterations, self.train_seconds, self.epochs = (
            int(f["iterations"]),
            float(f["train_seconds"]),
            float(f["epochs"]),
        )
        self.converged, self.best_iteration = bool(f["converged"]), f["best_iteration"]
        self.stop_rules, self.optimizers = list(f["stop_rules"]), list(f["optimizers"])
        self.lbfgs_budget_hit = list(f.get("lbfgs_budget_hit", []))
        self.stage_final_loss = dict(f.get("stage_final_loss", {}))
        self.stage_log = list(f.get("stage_log", []))
        self.losses, self.stage_iter_ms = [float(v) for v in f["losses"].tolist()], list(f["iter_ms"])
        if f.get("grad_max_abs") is not None:
            self.grad_max_abs = float(f["grad_max_abs"])


def stage_settings(settings: TrainerSettings, stage, n: int | None = None) -> TrainerSettings:
    """The run's settings with the stage's overrides and its default lr_scale (config wins).

    With ``settings.protocol == "fast"``, a stage the family marks ``lbfgs_ok`` that is deterministic
    (no sampling estimator, no fixed blocks) and sees the full batch of its ``n`` rows is trained by
    L-BFGS (strong-Wolfe line search, step 1) until the loss moves by at most ``fast_tol`` per datum
    over ``fast_window`` iterations *and* the largest component of its gradient is at most
    ``fast_grad_tol`` (per datum; ``None``: no gradient test), or for ``fast_max_iters`` iterations:
    the same objective as the paper's first-order protocol, minimised to a tighter tolerance in far
    fewer iterations (docs/training.md "Fast protocol"); ``run_stages`` first gives such a stage, when it starts
    cold, ``fast_adam_iters`` steps of the paper's optimiser (``first_order_prefix``). Every other
    stage keeps the paper's optimiser, schedule and stopping rule."""
    changes = dict(stage.overrides)
    defaults = getattr(stage, "lr_scale", None)
    if defaults:
        changes["lr_scale"] = {**defaults, **changes.get("lr_scale", settings.lr_scale)}
    s = dataclasses.replace(settings, **changes) if changes else settings
    if s.protocol == "fast" and uses_lbfgs(stage, s, n):
        s = dataclasses.replace(
            s,
            optimizer="lbfgs",
            lr=1.0,
            lr_scale={},
            schedule=Schedule(),
            max_iters=min(s.max_iters, s.fast_max_iters) if s.max_iters is not None else s.fast_max_iters,
            optimizer_options={"lbfgs_history": s.optimizer_options.get("lbfgs_history", 100)},
            stop=ConvergenceRule(window=s.fast_window, tol=s.fast_tol),
            stop_rule="window",
            grad_tol=s.fast_grad_tol,
        )
    return s


def stage_cap(s: TrainerSettings, stage, n: int) -> int:
    """The iteration cap of ``stage`` trained with its settings ``s`` (``stage_settings``) on ``n`` rows, as
    its loop computes it (``loop.iteration_cap``: an epoch of a stage with fixed ``blocks`` is one step a
    block); one epoch where neither ``max_iters`` nor ``max_epochs`` is set (a stage its stopping rule ends)."""
    blocks = getattr(stage, "blocks", None)
    cap = iteration_cap(s, n, blocks)
    return int(cap) if cap != float("inf") else steps_per_epoch(n, s.batch_size, blocks)


def first_order_prefix(settings: TrainerSettings, stage, n: int | None) -> TrainerSettings | None:
    """The fast protocol's first-order start of an L-BFGS stage: ``fast_adam_iters`` steps of the paper
    protocol's optimiser, learning rates and schedule, with no stopping rule (None when there are none).

    From the initial state, L-BFGS and the paper's Adam can end in different local optima of the same
    objective (SVGP on pol, n = 500, beta = 0.031: 0.0919 against Adam's 0.0746 per datum, at any
    L-BFGS tolerance); a few hundred Adam steps first let the paper's own path pick the basin and
    L-BFGS converge in it (docs/performance.md: measured on real study jobs)."""
    s = stage_settings(settings, stage, n)
    if settings.protocol != "fast" or s.optimizer != "lbfgs" or settings.fast_adam_iters <= 0:
        return None
    p = stage_settings(dataclasses.replace(settings, protocol="paper"), stage, n)
    budget = settings.fast_adam_iters if p.max_iters is None else min(settings.fast_adam_iters, p.max_iters)
    return dataclasses.replace(
        p, max_iters=budget, max_epochs=None, stop_rule="none", keep_best=None, eval_every=0, eval_every_epochs=None
    )


def uses_lbfgs(stage, settings: TrainerSettings, n: int | None) -> bool:
    """Whether the fast protocol trains ``stage`` with L-BFGS (see ``stage_settings``)."""
    full_batch = settings.batch_size is None or (n is not None and settings.batch_size >= n)
    return (
        bool(getattr(stage, "lbfgs_ok", False))
        and not stage.stochastic
        and stage.solve is None
        and getattr(stage, "blocks", None) is None
        and full_batch
    )


class StageLoop(Loop):
    """The loop over a family's stages (``methods.base.Stage``), each trained by ``Loop.train``: step
    numbers continue across stages, so learning curves of multi-stage protocols (SVGP then DLM) read left
    to right. Callbacks decide in ``on_stage_start`` what happens to a stage (``callbacks.StageRun``):
    skipped (finished before a checkpoint), resumed, restored from the stage cache, warm-started."""

    def fit(self, stages) -> FitResult:
        """Run the stages in order; the ``FitResult`` of all of them."""
        self.fit_result = fit = FitResult()
        self.n_stages = len(stages)
        self.notify("on_start")
        for i, stage in enumerate(stages):
            run = StageRun(i, stage)
            if stage.prepare:
                stage.prepare()
            self.notify("on_stage_start", run)
            if run.skip:  # finished before the checkpoint: its results are in the restored tensors
                continue
            if stage.solve:
                stage.solve(self.x, self.y)
                fit.stage_log.append(f"stage {stage.name}: solved in closed form")
            elif run.restored is not None:
                fit.add_restored(stage.name, run.restored, self.fit_result.reused[-1])
            else:
                self._train_stage(run)
            self.notify("on_stage_end", run)
        self.notify("on_end", fit)
        ms = fit.stage_iter_ms
        fit.iter_ms = float(sorted(ms)[len(ms) // 2]) if ms else 0.0
        return fit

    def _train_stage(self, run: StageRun) -> None:
        """A stage's training: under the fast protocol from a cold start, first the paper's optimiser
        (``first_order_prefix``), then the stage's own settings (``stage_settings``)."""
        stage, fit, n = run.stage, self.fit_result, self.x.shape[0]
        s = stage_settings(self.run_settings, stage, n)
        cold = not (run.warmed or run.resume is not None)
        prefix = first_order_prefix(self.run_settings, stage, n) if cold else None
        common = {"stochastic": stage.stochastic, "hooks": stage.hooks, "wants_index": stage.wants_index}
        params = stage.groups or stage.params
        if prefix is not None:  # fast protocol, cold start: the paper's optimiser picks the basin
            desc = f"{stage.name} (first-order start)"
            run.first = self.train(
                stage.objective, params, prefix, step_offset=fit.iterations, desc=desc, checkpoint=False, **common
            )
            fit.add(run.first)
        keep_start = bool(getattr(stage, "keep_start", False) and s.keep_best and self.evaluate_fn is not None)
        evaluate = self.evaluate_fn if (s.eval_every or s.eval_every_epochs or keep_start) else None
        run.result = self.train(
            stage.objective,
            params,
            s,
            evaluate=evaluate,
            step_offset=fit.iterations,
            desc=stage.name,
            blocks=getattr(stage, "blocks", None),
            resume=run.resume,
            consider_start=keep_start,
            **common,
        )
        fit.add_stage(stage.name, s, run)


def run_stages(
    stages,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainerSettings,
    *,
    generator: torch.Generator,
    evaluate: Callable[[], dict[str, float]] | None = None,
    log_steps: Callable | None = None,
    modules: Iterable[torch.nn.Module] = (),
    cache=None,
    warm=None,
    generators: Iterable[torch.Generator | None] = (),
    checkpoint=None,
    callbacks: Iterable = (),
) -> FitResult:
    """Run the stages in order (``StageLoop`` with ``callbacks.standard``). ``cache`` (``reuse.StageCache``):
    restore a ``shareable`` stage's end state instead of training it when a job with the same key has
    trained it (and store it after training otherwise), with the random ``generators`` (batch order,
    estimator) it leaves behind; ``warm`` (``reuse.WarmStart``): start each iterative stage where it ended
    on the previous beta. ``checkpoint`` (``checkpoint.Checkpointer``): write checkpoints during training
    and a complete one at its end; when it holds a loaded checkpoint, skip the stages it finished (running
    only their ``prepare``, for its side effects), restore the saved tensors and generators, and continue
    the stage in progress exactly. ``callbacks``: more callbacks (``training.callbacks``)."""
    cbs = standard(log_steps, checkpoint=checkpoint, cache=cache, warm=warm, extra=callbacks)
    loop = StageLoop(
        x, y, settings, generator=generator, evaluate=evaluate, callbacks=cbs, modules=modules, generators=generators
    )
    return loop.fit(stages)


def stage_line(name: str, s: TrainerSettings, result, first=None, warmed: bool = False, resuming: bool = False) -> str:
    """One line for gpdlm.log: a trained stage's protocol (optimiser, lr, caps, batch, stopping rule)
    and how it ended (iterations, converged or stopped at its cap, final loss)."""
    rule = (
        result.stop_rule
        if result.stop_rule in ("none", "")
        else (
            f"{result.stop_rule} rule (window {s.stop.window}, tol {s.stop.tol:g})"
            if hasattr(s.stop, "window")
            else result.stop_rule
        )
    )
    start = f"{first.optimizer} x {first.iterations} first-order steps, then " if first is not None else ""
    how = ("resumed from a checkpoint; " if resuming else "") + (
        "warm-started from the previous beta; " if warmed else ""
    )
    end = (
        "converged: its stopping rule held"
        if result.converged
        else "stopped at its iteration cap before its stopping rule held"
        if result.stop_rule != "none"
        else "ran its full budget (no stopping rule)"
    )
    loss = f", final loss {result.losses[-1]:.6g} per datum" if result.losses else ""
    caps = f"max_iters {s.max_iters}" + (f", max_epochs {s.max_epochs}" if s.max_epochs else "")
    return (
        f"stage {name}: {how}{start}{result.optimizer} lr {s.lr:g}, batch {s.batch_size or 'full'}, {caps}, "
        f"stopping {rule}; {result.iterations} iterations, {end}{loss}"
    )


__all__ = [
    "FitResult",
    "StageLoop",
    "first_order_prefix",
    "run_stages",
    "stage_cap",
    "stage_line",
    "stage_settings",
    "uses_lbfgs",
]
