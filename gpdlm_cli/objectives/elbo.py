"""(beta-)ELBO for sparse variational GPs (Hensman et al., 2015; DLM paper, Sec. 1-2)."""

from __future__ import annotations

from .base import SparseVariationalObjective


class ELBO(SparseVariationalObjective):
    """Negative (beta-)ELBO per datum:

        (1/N) [ sum_i E_{q(f_i)}[-log p(y_i|f_i)] + beta KL(q(u) || p(u)) ]

    beta = 1 is SVGP; other beta is beta-ELBO. Differs from ``DLM`` only in taking the log *inside*
    the expectation. E_q[log p] comes from the injected estimator (closed form, quadrature, or
    reparameterised Monte Carlo).
    """

    name = "elbo"

    def data_term(self, y, mu, var):
        return -self.estimator.expected_log_prob(self.likelihood, y, mu, var)
