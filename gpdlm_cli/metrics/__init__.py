"""Metrics: predictive NLL, RMSE/MSE, error, MRE, and the gradient-bias statistics of `gpdlm bias`."""

from .bias import condition_statistics, coordinate_bias, gradient_statistics
from .predictive import PREDICTIVE_METRICS, metrics_from_marginals, predictive_marginals, predictive_metrics

__all__ = [
    "PREDICTIVE_METRICS",
    "condition_statistics",
    "coordinate_bias",
    "gradient_statistics",
    "metrics_from_marginals",
    "predictive_marginals",
    "predictive_metrics",
]
