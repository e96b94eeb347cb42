"""Gauss-Hermite quadrature of log-expectations, computed in log space.

log E_q[p(y|f)] is evaluated as a logsumexp over nodes, never as the log of a sum of
probabilities, so a Poisson count in the hundreds does not underflow to -inf (gpytorch's
``log_marginal`` does). With ``adaptive=True`` the nodes are centred at the mode of the tilted
density q(f) p(y|f) and scaled by its Laplace width (``tilted_mode.tilted_laplace``: a bracketed,
safeguarded Newton iteration that converges at any variance of q), so a likelihood much narrower
than q -- large counts, confident classes -- is still resolved:

    log E_q[p] = log int N(f|c,s2) [q(f) p(y|f) / N(f|c,s2)] df
               ~ logsumexp_k( log w_k/sqrt(pi) + log q(f_k) + log p(y|f_k) - log N(f_k|c,s2) )

with f_k = c + sqrt(2 s2) x_k. The centre (c, s2) is held fixed (detached) when differentiating:
the identity holds for any fixed centre, so autograd of this expression is the gradient of the
quadrature rule itself.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from ..exceptions import param_error
from .base import Estimator
from .tilted_mode import TiltedLaplace, tilted_laplace  # noqa: F401  (re-exported)

_LOG_SQRT_PI = 0.5 * math.log(math.pi)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@functools.lru_cache(maxsize=64)
def _gauss_hermite(num_nodes: int, dtype: torch.dtype, device: torch.device):
    x, w = np.polynomial.hermite.hermgauss(num_nodes)
    x = torch.as_tensor(x, dtype=dtype, device=device)
    logw = torch.as_tensor(np.log(w), dtype=dtype, device=device) - _LOG_SQRT_PI
    return x, logw


def gauss_hermite(num_nodes: int, like: torch.Tensor):
    """Nodes x_k and log weights log(w_k / sqrt(pi)) for E_{N(0,1/2)}-style integrals (cached per
    dtype and device: computing them costs ~1 ms, more than the quadrature itself)."""
    return _gauss_hermite(num_nodes, like.dtype, like.device)


def log_normal(f, mu, var):
    return -_LOG_SQRT_2PI - 0.5 * torch.log(var) - 0.5 * (f - mu) ** 2 / var


class QuadratureEstimator(Estimator):
    """Gauss-Hermite with ``num_nodes`` nodes; ``adaptive`` centres the nodes on the tilted density.

    ``newton_iters`` is the mode finder's budget before a point counts as unconverged and is finished
    by its bracketed bisection fallback; ``statistics()`` reports ``quadrature_unconverged``, the number
    of such point evaluations since construction (or ``reset_statistics``)."""

    name = "quadrature"

    def __init__(self, num_nodes: int = 20, adaptive: bool = True, newton_iters: int = 16):
        if not isinstance(num_nodes, int) or num_nodes < 1:
            raise param_error("num_nodes", "estimator=quadrature", "an integer >= 1", num_nodes)
        if isinstance(newton_iters, bool) or not isinstance(newton_iters, int) or newton_iters < 1:
            raise param_error("newton_iters", "estimator=quadrature", "an integer >= 1", newton_iters)
        self.num_nodes = num_nodes
        self.adaptive = adaptive
        self.newton_iters = newton_iters
        self.reset_statistics()

    def reset_statistics(self):
        self._centred = 0  # points centred by the mode finder
        self._unconverged = 0  # of which needed the bisection fallback (a device tensor once used)

    def statistics(self):
        if not self._centred:
            return {}
        return {"quadrature_unconverged": int(self._unconverged)}

    def centre(self, lik, y, mu, var):
        """(c, s2) of the tilted density, with the statistics updated (no host synchronisation)."""
        c, s2, unconverged = tilted_laplace(lik, y, mu, var, self.newton_iters)
        self._centred += c.numel()
        self._unconverged = self._unconverged + unconverged
        return c, s2

    def log_marginal(self, lik, y, mu, var):
        x, logw = gauss_hermite(self.num_nodes, mu)
        if self.adaptive:
            c, s2 = self.centre(lik, y, mu, var)
            f = c.unsqueeze(-1) + torch.sqrt(2 * s2).unsqueeze(-1) * x
            log_proposal = -_LOG_SQRT_2PI - 0.5 * torch.log(s2).unsqueeze(-1) - x**2
            terms = (
                log_normal(f, mu.unsqueeze(-1), var.unsqueeze(-1))
                + lik.log_prob(y.unsqueeze(-1), f)
                - log_proposal
            )
        else:
            f = mu.unsqueeze(-1) + torch.sqrt(2 * var).unsqueeze(-1) * x
            terms = lik.log_prob(y.unsqueeze(-1), f)
        return torch.logsumexp(terms + logw, dim=-1)

    def expected_log_prob(self, lik, y, mu, var):
        x, logw = gauss_hermite(self.num_nodes, mu)
        f = mu.unsqueeze(-1) + torch.sqrt(2 * var).unsqueeze(-1) * x
        return (lik.log_prob(y.unsqueeze(-1), f) * logw.exp()).sum(-1)

    def expectation(self, fn, mu, var):
        """E_{N(f|mu,var)}[fn(f)] (e.g. the predictive mean E[y] = E_q[E[y|f]])."""
        x, logw = gauss_hermite(self.num_nodes, mu)
        f = mu.unsqueeze(-1) + torch.sqrt(2 * var).unsqueeze(-1) * x
        return (fn(f) * logw.exp()).sum(-1)
