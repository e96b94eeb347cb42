"""Running a family's protocol: its stages in order, one ``train`` call per iterative stage.

Each iterative stage gets the run's ``TrainerSettings`` updated with the stage's own ``overrides``,
its named parameter groups, its hooks and its stochastic flag; step numbers continue across stages
so learning curves of multi-stage protocols (SVGP then DLM) read left to right. With
``keep_best``, each stage ends on its own best iterate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from .loop import TrainerSettings, train


@dataclass
class FitResult:
    iterations: int = 0
    train_seconds: float = 0.0
    iter_ms: float = 0.0
    converged: bool = True
    epochs: float = 0.0
    best_iteration: int | None = None
    stop_rules: list[str] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def stage_settings(settings: TrainerSettings, stage) -> TrainerSettings:
    """The run's settings with the stage's overrides and its default lr_scale (config wins)."""
    changes = dict(stage.overrides)
    defaults = getattr(stage, "lr_scale", None)
    if defaults:
        changes["lr_scale"] = {**defaults, **changes.get("lr_scale", settings.lr_scale)}
    return dataclasses.replace(settings, **changes) if changes else settings


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
) -> FitResult:
    out = FitResult()
    iter_ms = []
    modules = list(modules)
    for stage in stages:
        if stage.prepare:
            stage.prepare()
        if stage.solve:
            stage.solve(x, y)
            continue
        s = stage_settings(settings, stage)
        result = train(
            stage.objective, stage.groups or stage.params, x, y, s, generator=generator,
            evaluate=evaluate if (s.eval_every or s.eval_every_epochs) else None, log_steps=log_steps,
            step_offset=out.iterations, desc=stage.name, stochastic=stage.stochastic, hooks=stage.hooks,
            modules=modules, wants_index=stage.wants_index, blocks=getattr(stage, "blocks", None),
        )
        out.iterations += result.iterations
        out.train_seconds += result.train_seconds
        out.epochs += result.epochs
        iter_ms.append(result.iter_ms)
        out.converged = out.converged and result.converged
        out.stop_rules.append(result.stop_rule)
        out.losses.extend(result.losses)
        if result.best_iteration is not None:
            out.best_iteration = result.best_iteration
    out.iter_ms = float(sorted(iter_ms)[len(iter_ms) // 2]) if iter_ms else 0.0
    return out


__all__ = ["FitResult", "run_stages", "stage_settings"]
