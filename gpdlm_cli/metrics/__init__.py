"""Metrics: predictive NLL, RMSE/MSE, error, MRE, and the gradient-bias statistics of `gpdlm bias`."""

from .bias import condition_statistics, coordinate_bias, gradient_statistics
from .predictive import PREDICTIVE_METRICS, predictive_marginals, predictive_metrics

__all__ = ["PREDICTIVE_METRICS", "condition_statistics", "coordinate_bias", "gradient_statistics", "predictive_marginals", "predictive_metrics"]
