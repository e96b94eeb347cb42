"""``estimator=auto``: the closed form where one exists, else Gauss-Hermite quadrature."""

from __future__ import annotations

from .base import Estimator
from .exact import ExactEstimator
from .quadrature import QuadratureEstimator


class AutoEstimator(Estimator):
    """Per quantity and likelihood: exact if closed form, otherwise quadrature."""

    name = "auto"

    def __init__(self, num_nodes: int = 20, adaptive: bool = True):
        self.exact = ExactEstimator()
        self.quadrature = QuadratureEstimator(num_nodes=num_nodes, adaptive=adaptive)

    def log_marginal(self, lik, y, mu, var):
        out = lik.log_marginal_closed(y, mu, var)
        return out if out is not None else self.quadrature.log_marginal(lik, y, mu, var)

    def expected_log_prob(self, lik, y, mu, var):
        out = lik.expected_log_prob_closed(y, mu, var)
        return out if out is not None else self.quadrature.expected_log_prob(lik, y, mu, var)

    def statistics(self):
        return self.quadrature.statistics()
