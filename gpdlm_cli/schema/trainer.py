"""The ``trainer`` group's schema: every ``trainer.*`` key with its type, range and meaning
(conf/trainer/paper.yaml holds the defaults; docs/training.md the protocols)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..exceptions import ConfigError, UnsupportedCombination, param_error
from ..tracking.identity import RENAMED, renamed_message
from ..training import OPTIMIZERS, SCHEDULES, STOP_RULES
from ..validation import is_number
from .keys import choice, integer, mapping, real, text


def _scales_ok(scales) -> bool:
    return hasattr(scales, "items")


@dataclass(frozen=True)
class TrainerSpec:
    """The trainer settings of a run (``trainer.*``), validated."""

    protocol: str = choice(
        "paper",
        ("paper", "fast"),
        allowed="'paper' or 'fast' (or choose trainer=paper|fast)",
        help="paper | fast: fast trains deterministic full-batch stages with L-BFGS",
    )
    fast_window: int = integer(10, lo=2, context="protocol=fast", help="L-BFGS window of the fast protocol")
    fast_tol: float = real(
        1e-4,
        lo=0,
        hi=float("inf"),
        hi_open=True,
        context="protocol=fast",
        allowed="a finite float >= 0",
        help="fast protocol: stop when max - min of the loss over fast_window iterations <= fast_tol",
    )
    fast_grad_tol: float | None = real(
        1e-4,
        lo=0,
        hi=float("inf"),
        hi_open=True,
        null="no gradient test",
        context="protocol=fast",
        allowed="a finite float >= 0 or null (no gradient test)",
        help="fast protocol: and max |d loss / d theta| <= fast_grad_tol (null: no gradient test)",
    )
    fast_max_iters: int = integer(1000, lo=1, context="protocol=fast", help="L-BFGS iteration cap of the fast protocol")
    fast_adam_iters: int = integer(
        200,
        lo=0,
        context="protocol=fast",
        allowed="an integer >= 0 (0 = L-BFGS from the start)",
        help="fast protocol: first-order steps before a cold-started L-BFGS stage",
    )
    optimizer: str = choice("adam", OPTIMIZERS, help="L-BFGS: deterministic full-batch objectives only")
    lr: float | None = real(
        None,
        lo=0,
        lo_open=True,
        hi=float("inf"),
        hi_open=True,
        null=True,
        allowed="a finite float > 0 or null",
        help="null = default: adam 0.1 full batch / 1e-3 minibatch, adadelta 1, sgd 0.01, lbfgs 1",
    )
    lr_scale: dict | None = mapping(
        None,
        null=True,
        allowed="a mapping of parameter groups to factors, e.g. {kernel: 0.1}, or null",
        help="per parameter group, a multiplier of lr: trainer.lr_scale={kernel:0.1}",
    )
    momentum: float = real(0.0, lo=0, hi=1, hi_open=True, context="sgd", help="sgd momentum")
    rho: float = real(0.9, lo=0, hi=1, context="adadelta", help="adadelta rho")
    eps: float | None = real(
        None,
        lo=0,
        lo_open=True,
        null=True,
        allowed="a float in (0, inf) or null (the optimiser's default)",
        help="adam, adadelta: null = the optimiser's default (1e-8, 1e-6)",
    )
    lbfgs_history: int = integer(100, lo=1, context="lbfgs", help="lbfgs: curvature pairs kept")
    schedule: str = choice("constant", SCHEDULES, help="learning-rate schedule")
    step_epochs: int = integer(
        10, lo=1, when=("schedule", "step"), help="schedule=step: lr x step_factor every step_epochs epochs"
    )
    step_factor: float = real(
        0.5, lo=0, lo_open=True, hi=1, when=("schedule", "step"), help="schedule=step: the factor"
    )
    rm_t0: float = real(
        100.0,
        lo=0,
        lo_open=True,
        hi=float("inf"),
        hi_open=True,
        when=("schedule", "robbins_monro"),
        allowed="a finite float > 0",
        help="schedule=robbins_monro: lr_t = lr / (1 + t / rm_t0)^rm_kappa",
    )
    rm_kappa: float = real(0.6, lo=0.5, lo_open=True, hi=1, when=("schedule", "robbins_monro"), help="in (0.5, 1]")
    max_iters: int | None = integer(
        1000, lo=1, null=True, allowed="an integer >= 1", help="iteration cap per stage; null with max_epochs"
    )
    max_epochs: int | None = integer(None, lo=1, null=True, help="epoch cap (passes over the training set)")
    batch_size: int | None = integer(None, lo=1, null="full batch", help="null = full batch")
    stop_rule: str = choice("auto", STOP_RULES, help="auto (window if deterministic, block_mean if stochastic)")
    stop_window: int | None = integer(
        None,
        lo=0,
        null=True,
        allowed="an integer >= 0 (0 disables) or null",
        help="I; null = paper default: 50 regression, 20 classification/count (lbfgs: 10)",
    )
    stop_tol: float = real(
        1e-4, lo=0, allowed="a float >= 0", help="window: stop when max - min of the loss over I iterations <= tol"
    )
    check_every: int = integer(10, lo=1, allowed="a positive integer", help="iterations between convergence checks")
    checkpoint_every: int = integer(
        5, lo=0, allowed="an integer >= 0 (0 = no checkpoints)", help="evaluations between checkpoints; 0 = none"
    )
    checkpoint_minutes: float = real(
        10.0,
        lo=0,
        help="also a checkpoint after this many minutes without one (runs that evaluate rarely); 0 = after evaluations only",
    )
    eval_every: int = integer(50, lo=0, allowed="a positive integer", help="iterations between evaluations; 0 = none")
    eval_every_epochs: int | None = integer(None, lo=1, null=True, help="also evaluate every k epochs")
    keep_best: str | None = text(
        "auto",
        null=True,
        allowed="'auto', a metric name (e.g. val_nll) or null",
        help="restore the iterate with the best value of this metric; auto = the family's choice; null = last",
    )
    keep_best_mode: str = choice(
        "auto",
        ("auto", "min", "max"),
        allowed="'auto', 'min' or 'max'",
        help="auto: min unless the family says higher is better",
    )
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in self.extra:  # an old name (a preset, `+trainer.algorithm=...`): never silently ignored
            if f"trainer.{key}" in RENAMED:
                raise ConfigError(renamed_message(f"trainer.{key}", self.extra[key]))

    def check(self) -> None:
        """The rules that tie keys together."""
        if self.max_iters is None and self.max_epochs is None:
            raise param_error(
                "max_iters", "trainer", "an integer >= 1 (null only with trainer.max_epochs set)", self.max_iters
            )
        if self.optimizer == "lbfgs" and self.batch_size is not None:
            raise UnsupportedCombination(
                "trainer.optimizer=lbfgs needs a deterministic full-batch objective; set trainer.batch_size=null "
                "or use adam, adadelta or sgd for minibatch training"
            )
        scales = self.scales
        for name, v in scales.items():
            if not is_number(v) or v < 0 or v == float("inf"):
                raise param_error(f"lr_scale.{name}", "trainer", "a finite float >= 0", v)
        if self.optimizer == "lbfgs" and any(v != 1 for v in scales.values()):
            raise UnsupportedCombination(
                "trainer.optimizer=lbfgs has one step size for all parameters; remove trainer.lr_scale"
            )
        if self.keep_best not in (None, "auto") and not (self.eval_every or self.eval_every_epochs):
            raise UnsupportedCombination(
                "trainer.keep_best needs evaluations: set trainer.eval_every or trainer.eval_every_epochs"
            )

    @property
    def scales(self) -> dict[str, float]:
        """``lr_scale`` as {group: factor} ({} when null)."""
        return dict(self.lr_scale or {})


__all__ = ["TrainerSpec"]
