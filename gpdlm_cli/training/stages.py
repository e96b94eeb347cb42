"""Running a family's protocol: its stages in order, one ``train`` call per iterative stage.

Each iterative stage gets the run's ``TrainerSettings`` updated with the stage's own ``overrides``,
its named parameter groups, its hooks and its stochastic flag; step numbers continue across stages
so learning curves of multi-stage protocols (SVGP then DLM) read left to right. With
``keep_best``, each stage ends on its own best iterate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from .loop import TrainerSettings, train
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
) -> FitResult:
    """Run the stages in order. ``cache`` (``reuse.StageCache``): restore a ``shareable`` stage's end
    state instead of training it when a job with the same key has trained it (and store it after
    training otherwise), with the random ``generators`` (batch order, estimator) it leaves behind;
    ``warm`` (``reuse.WarmStart``): start each iterative stage where it ended on the previous beta.
    ``checkpoint`` (``checkpoint.Checkpointer``): write checkpoints during training; when it holds a
    loaded checkpoint, skip the stages it finished (running only their ``prepare``, for its side
    effects), restore the saved tensors and generators, and continue the stage in progress exactly."""
    from .checkpoint import restore_run_state

    out = FitResult()
    iter_ms = []
    modules = list(modules)
    generators = [generator, *generators]
    state = checkpoint.state if checkpoint is not None else None
    start = int(state["stage"]) if state is not None else 0
    if state is not None and state.get("fit"):
        f = state["fit"]
        out.iterations, out.train_seconds, out.epochs = (
            int(f["iterations"]),
            float(f["train_seconds"]),
            float(f["epochs"]),
        )
        out.converged, out.best_iteration = bool(f["converged"]), f["best_iteration"]
        out.stop_rules, out.optimizers = list(f["stop_rules"]), list(f["optimizers"])
        out.lbfgs_budget_hit = list(f.get("lbfgs_budget_hit", []))
        out.stage_final_loss = dict(f.get("stage_final_loss", {}))
        out.stage_log = list(f.get("stage_log", []))
        out.losses, iter_ms = [float(v) for v in f["losses"].tolist()], list(f["iter_ms"])
        if f.get("grad_max_abs") is not None:
            out.grad_max_abs = float(f["grad_max_abs"])
    for i, stage in enumerate(stages):
        if checkpoint is not None:
            checkpoint.stage, checkpoint.fit = i, out
            out.stage_iter_ms = iter_ms
        if stage.prepare:
            stage.prepare()
        if i < start:  # finished before the checkpoint: its results are in the restored tensors
            continue
        resuming = state is not None and i == start
        if resuming:
            restore_run_state(state, modules, generators)
        if stage.solve:
            stage.solve(x, y)
            out.stage_log.append(f"stage {stage.name}: solved in closed form")
            continue
        shared = cache is not None and getattr(stage, "shareable", False) and not resuming
        cached = cache.load(stage.name, modules, generators) if shared else None
        if cached is not None:  # the stage's end state, learning curve and convergence; no time spent
            out.reused.append(cache.reused[-1])
            if log_steps is not None and cached.losses:
                log_steps({"train_loss": [(out.iterations + i + 1, v) for i, v in enumerate(cached.losses)]})
            out.iterations += len(cached.losses)
            out.losses.extend(cached.losses)
            if cached.losses:
                out.stage_final_loss[stage.name] = float(cached.losses[-1])
            out.converged = out.converged and cached.converged
            out.stage_log.append(
                f"stage {stage.name}: restored from the stage cache ({cache.reused[-1]}; "
                f"{len(cached.losses)} iterations, {'converged' if cached.converged else 'not converged'})"
            )
            continue
        warmed = warm.restore(stage.name, modules) if warm is not None and not resuming else False
        s = stage_settings(settings, stage, x.shape[0])
        prefix = None if (warmed or resuming) else first_order_prefix(settings, stage, x.shape[0])
        if prefix is not None:  # fast protocol, cold start: the paper's optimiser picks the basin
            first = train(
                stage.objective,
                stage.groups or stage.params,
                x,
                y,
                prefix,
                generator=generator,
                log_steps=log_steps,
                step_offset=out.iterations,
                desc=f"{stage.name} (first-order start)",
                stochastic=stage.stochastic,
                hooks=stage.hooks,
                modules=modules,
                wants_index=stage.wants_index,
            )
            out.add(first)
        result = train(
            stage.objective,
            stage.groups or stage.params,
            x,
            y,
            s,
            generator=generator,
            evaluate=evaluate if (s.eval_every or s.eval_every_epochs) else None,
            log_steps=log_steps,
            step_offset=out.iterations,
            desc=stage.name,
            stochastic=stage.stochastic,
            hooks=stage.hooks,
            modules=modules,
            wants_index=stage.wants_index,
            blocks=getattr(stage, "blocks", None),
            checkpoint=checkpoint,
            resume=state["loop"] if resuming else None,
        )
        out.add(result)
        if out.losses:
            out.stage_final_loss[stage.name] = float(out.losses[-1])
        iter_ms.append(result.iter_ms)
        out.converged = out.converged and result.converged
        out.stop_rules.append(result.stop_rule)
        out.optimizers.append(
            f"{stage.name}:{first.optimizer}{first.iterations}+{result.optimizer}"
            if prefix is not None
            else f"{stage.name}:{result.optimizer}"
        )
        if result.best_iteration is not None:
            out.best_iteration = result.best_iteration
        if result.grad_max_abs is not None:
            out.grad_max_abs = result.grad_max_abs
        if result.optimizer == "lbfgs" and not result.converged:
            out.lbfgs_budget_hit.append(stage.name)
        out.stage_log.append(stage_line(stage.name, s, result, first if prefix is not None else None, warmed, resuming))
        if shared:
            cache.save(
                stage.name,
                modules,
                generators,
                (first.losses if prefix is not None else []) + result.losses,
                converged=result.converged,
            )
        if warm is not None:
            warm.save(stage.name, modules)
    if state is not None and start >= len(stages):  # a complete checkpoint: nothing left to train
        restore_run_state(state, modules, generators)
    if warm is not None:
        out.warm_started_from = warm.started_from
    out.iter_ms = float(sorted(iter_ms)[len(iter_ms) // 2]) if iter_ms else 0.0
    return out


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


__all__ = ["FitResult", "stage_line", "first_order_prefix", "run_stages", "stage_settings", "uses_lbfgs"]
