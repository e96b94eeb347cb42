"""Training: the optimisation loop and the stopping rule."""

from .loop import TrainerSettings, TrainResult, default_lr, train
from .stopping import ConvergenceRule

__all__ = ["ConvergenceRule", "TrainResult", "TrainerSettings", "default_lr", "train"]
