"""Training: the one trainer every family uses -- optimisers (Adam, AdaDelta, SGD, L-BFGS), named
parameter groups, learning-rate schedules, budgets in iterations and epochs, stopping rules for
deterministic and stochastic objectives, best-iterate restoration, hooks, the stage loop, and the
loop's callbacks (``training.callbacks``)."""

from .callbacks import Callback, StageRun
from .loop import Loop, TrainerSettings, TrainResult, train
from .optim import OPTIMIZERS, SCHEDULES, Schedule, default_lr, make_optimizer
from .stages import FitResult, StageLoop, run_stages, stage_settings
from .stopping import STOP_RULES, BlockMeanRule, ConvergenceRule, NeverStop, make_rule

__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "STOP_RULES",
    "BlockMeanRule",
    "Callback",
    "ConvergenceRule",
    "FitResult",
    "Loop",
    "NeverStop",
    "Schedule",
    "StageLoop",
    "StageRun",
    "TrainResult",
    "TrainerSettings",
    "default_lr",
    "make_optimizer",
    "make_rule",
    "run_stages",
    "stage_settings",
    "train",
]
