"""Poisson likelihoods p(y|f) = Poisson(y | lambda(f)) with lambda = exp(f) or softplus(f).

log p uses lgamma(y + 1) (not lgamma(y), a bug of the DLM paper's public demo that made y = 0 an
infinite loss)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Likelihood, _check_counts


class PoissonExpLikelihood(Likelihood):
    """lambda = exp(f). E_q[log p] = y mu - exp(mu + var/2) - lgamma(y+1) is closed form;
    log E_q[p] is not (DLM paper, Sec. 2): use quadrature (computed in log space) or sampling."""

    name = "poisson_exp"
    task = "count"

    def log_prob(self, y, f):
        return y * f - torch.exp(f) - torch.lgamma(y + 1)

    def dlog_prob(self, y, f):
        return y - torch.exp(f)

    def d2log_prob(self, y, f):
        return -torch.exp(f)

    def mode(self, y):
        return torch.log(y)  # -inf for y = 0: p(0|f) = exp(-e^f) increases to 1 as f -> -inf

    def mean(self, f):
        return torch.exp(f)

    def expected_log_prob_closed(self, y, mu, var):
        return y * mu - torch.exp(mu + 0.5 * var) - torch.lgamma(y + 1)

    def predictive_mean_closed(self, mu, var):
        return torch.exp(mu + 0.5 * var)

    def validate_targets(self, y):
        _check_counts(self.name, y)


class PoissonSoftplusLikelihood(Likelihood):
    """lambda = softplus(f) = log(1 + e^f): rates grow linearly, not exponentially, in f."""

    name = "poisson_softplus"
    task = "count"

    @staticmethod
    def _rate(f):
        return F.softplus(f).clamp_min(1e-30)

    def log_prob(self, y, f):
        lam = self._rate(f)
        return torch.xlogy(y, lam) - lam - torch.lgamma(y + 1)

    def dlog_prob(self, y, f):
        lam = self._rate(f)
        return (y / lam - 1) * torch.sigmoid(f)

    def d2log_prob(self, y, f):
        lam, s = self._rate(f), torch.sigmoid(f)
        return (y / lam - 1) * s * (1 - s) - y * s**2 / lam**2

    def mode(self, y):
        # softplus(f) = y  <=>  f = log(expm1(y)); -inf for y = 0
        return torch.where(y > 20, y, torch.log(torch.expm1(y)))

    def mean(self, f):
        return F.softplus(f)

    def validate_targets(self, y):
        _check_counts(self.name, y)
