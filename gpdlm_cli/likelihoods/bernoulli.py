"""Binary likelihoods p(y|f) = sigma((2y-1) f) with a probit or a logistic link."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import LOGISTIC, NORMAL, Likelihood, TailForm, _check_binary

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class ProbitLikelihood(Likelihood):
    """p(y|f) = Phi((2y-1) f). Closed form (DLM paper, Sec. 2):
    log E_q[p(y|f)] = log Phi((2y-1) mu / sqrt(1 + var)). E_q[log p] needs quadrature."""

    name = "probit"
    task = "classification"

    @staticmethod
    def _inv_mills(z):
        """phi(z) / Phi(z), stable for very negative z."""
        return torch.exp(-0.5 * z**2 - _LOG_SQRT_2PI - torch.special.log_ndtr(z))

    def log_prob(self, y, f):
        return torch.special.log_ndtr((2 * y - 1) * f)

    def dlog_prob(self, y, f):
        s = 2 * y - 1
        return s * self._inv_mills(s * f)

    def d2log_prob(self, y, f):
        z = (2 * y - 1) * f
        r = self._inv_mills(z)
        return -r * (z + r)

    def log_prob_derivatives(self, y, f):
        s = 2 * y - 1
        z = s * f
        r = self._inv_mills(z)
        return s * r, -r * (z + r)

    def mode(self, y):
        return torch.where(y > 0.5, torch.inf, -torch.inf).to(y)

    def mean(self, f):
        return torch.special.ndtr(f)

    tail_noise = NORMAL

    def tail_forms(self, y):
        """p(y|f) = Phi(t f) = P(e > -t f), t = 2y - 1, e ~ N(0, 1)."""
        t = 2 * y - 1
        return [TailForm(torch.zeros_like(y), torch.zeros_like(y), -t, torch.ones_like(y, dtype=torch.bool))]

    def log_marginal_closed(self, y, mu, var):
        return torch.special.log_ndtr((2 * y - 1) * mu / torch.sqrt(1 + var))

    def predictive_mean_closed(self, mu, var):
        return torch.special.ndtr(mu / torch.sqrt(1 + var))

    def validate_targets(self, y):
        _check_binary(self.name, y)


class LogitLikelihood(Likelihood):
    """p(y|f) = sigmoid((2y-1) f). Neither log-expectation is closed form: quadrature or sampling."""

    name = "logit"
    task = "classification"

    def log_prob(self, y, f):
        return -F.softplus(-(2 * y - 1) * f)

    def dlog_prob(self, y, f):
        s = 2 * y - 1
        return s * torch.sigmoid(-s * f)

    def d2log_prob(self, y, f):
        p = torch.sigmoid(f)
        return -p * (1 - p)

    def log_prob_derivatives(self, y, f):
        p = torch.sigmoid(f)
        return y - p, -p * (1 - p)  # (2y - 1) sigmoid(-(2y - 1) f) = y - sigmoid(f) for y in {0, 1}

    def mode(self, y):
        return torch.where(y > 0.5, torch.inf, -torch.inf).to(y)

    def mean(self, f):
        return torch.sigmoid(f)

    tail_noise = LOGISTIC

    def tail_forms(self, y):
        """p(y|f) = sigmoid(t f) = P(e > -t f) = e^(t f) P(e > t f), t = 2y - 1, e logistic."""
        t, zero, every = 2 * y - 1, torch.zeros_like(y), torch.ones_like(y, dtype=torch.bool)
        return [TailForm(zero, zero, -t, every), TailForm(t, zero, t, every)]

    def validate_targets(self, y):
        _check_binary(self.name, y)
