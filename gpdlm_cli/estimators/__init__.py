"""Estimators of log E_q[p(y|f)] (DLM) and E_q[log p(y|f)] (ELBO): one module each."""

from .auto import AutoEstimator
from .base import Estimator
from .exact import ExactEstimator
from .quadrature import QuadratureEstimator

__all__ = ["AutoEstimator", "Estimator", "ExactEstimator", "QuadratureEstimator"]
