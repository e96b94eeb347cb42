"""Log-loss Direct Loss Minimization (DLM paper, Sec. 1-2)."""

from __future__ import annotations

from .base import SparseVariationalObjective


class DLM(SparseVariationalObjective):
    """Log-loss DLM per datum:

        (1/N) [ sum_i -log E_{q(f_i)}[p(y_i|f_i)] + beta KL(q(u) || p(u)) ]

    the log predictive loss of the Bayesian predictor q(y_i) plus a KL regulariser. Its sibling
    ``ELBO`` uses E_q[-log p] instead. The injected estimator decides how the gradient of the
    log-expectation is computed: exact (Gaussian, probit), quadrature, bMC, smooth-bMC or uPS.
    """

    name = "dlm"

    def data_term(self, y, mu, var):
        return -self.estimator.log_marginal(self.likelihood, y, mu, var)
