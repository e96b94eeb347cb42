"""Closed-form log-expectations, where the likelihood has them."""

from __future__ import annotations

from ..exceptions import UnsupportedCombination
from .base import Estimator

_CLOSED = {
    "log_marginal": "log_marginal_closed",
    "expected_log_prob": "expected_log_prob_closed",
}


class ExactEstimator(Estimator):
    """Exact log E_q[p] (Gaussian, probit) and E_q[log p] (Gaussian, Poisson with exp link)."""

    name = "exact"

    def check(self, lik, quantity):
        import torch

        p = next(iter(lik.parameters()), None) if isinstance(lik, torch.nn.Module) else None
        z = (
            torch.zeros(1) if p is None else torch.zeros(1, dtype=p.dtype, device=p.device)
        )  # on the likelihood's device
        if getattr(lik, _CLOSED[quantity])(z, z, z + 1) is None:
            valid = "quadrature, bmc, smooth_bmc, ups" if quantity == "log_marginal" else "quadrature, bmc"
            what = "log E_q[p(y|f)]" if quantity == "log_marginal" else "E_q[log p(y|f)]"
            raise UnsupportedCombination(
                f"estimator=exact has no closed form of {what} for likelihood={lik.name}; "
                f"choose estimator=auto or one of: {valid}"
            )

    def log_marginal(self, lik, y, mu, var):
        return lik.log_marginal_closed(y, mu, var)

    def expected_log_prob(self, lik, y, mu, var):
        return lik.expected_log_prob_closed(y, mu, var)
