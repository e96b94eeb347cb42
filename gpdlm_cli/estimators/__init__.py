"""Estimators of log E_q[p(y|f)] (DLM) and E_q[log p(y|f)] (ELBO): one module each."""

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
