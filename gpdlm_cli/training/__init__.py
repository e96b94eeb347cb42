"""Training: the one trainer every family uses -- optimisers (Adam, AdaDelta, SGD, L-BFGS), named
parameter groups, learning-rate schedules, budgets in iterations and epochs, stopping rules for
deterministic and stochastic objectives, best-iterate restoration, hooks, and the stage runner."""

from .loop import TrainerSettings, TrainResult, train
from .optim import OPTIMIZERS, SCHEDULES, Schedule, default_lr, make_optimizer
from .stages import FitResult, run_stages, stage_settings
from .stopping import STOP_RULES, BlockMeanRule, ConvergenceRule, NeverStop, make_rule

__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "STOP_RULES",
    "BlockMeanRule",
    "ConvergenceRule",
    "FitResult",
    "NeverStop",
    "Schedule",
    "TrainResult",
    "TrainerSettings",
    "default_lr",
    "make_optimizer",
    "make_rule",
    "run_stages",
    "stage_settings",
    "train",
]
