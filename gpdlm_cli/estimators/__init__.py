"""Estimators of log E_q[p(y|f)] (DLM) and E_q[log p(y|f)] (ELBO): one module each.

The types and ranges of their constructor arguments, as a config sets them, are declared once in the
config schema (``schema.options.ESTIMATOR_OPTIONS``) and checked there, before any training."""

from .auto import AutoEstimator
from .base import Estimator
from .exact import ExactEstimator
from .monte_carlo import BMCEstimator, SmoothBMCEstimator
from .product_sampling import UPSEstimator
from .quadrature import QuadratureEstimator

__all__ = [
    "AutoEstimator",
    "BMCEstimator",
    "Estimator",
    "ExactEstimator",
    "QuadratureEstimator",
    "SmoothBMCEstimator",
    "UPSEstimator",
]
