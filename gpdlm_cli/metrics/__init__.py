"""Metrics: predictive NLL, RMSE/MSE, error, MRE (and, from the estimators issue, bias statistics)."""

from .predictive import predictive_marginals, predictive_metrics

__all__ = ["predictive_marginals", "predictive_metrics"]
