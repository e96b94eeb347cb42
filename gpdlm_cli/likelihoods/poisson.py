"""Poisson likelihoods p(y|f) = Poisson(y | lambda(f)) with lambda = exp(f) or softplus(f).

log p uses lgamma(y + 1) (not lgamma(y), a bug of the DLM paper's public demo that made y = 0 an
infinite loss)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import GUMBEL_MIN, LOGISTIC, Likelihood, TailForm, _check_counts


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

    def log_prob_derivatives(self, y, f):
        rate = torch.exp(f)
        return y - rate, -rate

    def mode(self, y):
        return torch.log(y)  # -inf for y = 0: p(0|f) = exp(-e^f) increases to 1 as f -> -inf

    def mean(self, f):
        return torch.exp(f)

    tail_noise = GUMBEL_MIN

    def tail_forms(self, y):
        """p(y|f) = exp(y f - lgamma(y + 1)) exp(-e^f), and exp(-e^f) = P(e > f) for a Gumbel-min e."""
        return [TailForm(y, -torch.lgamma(y + 1), torch.ones_like(y), torch.ones_like(y, dtype=torch.bool))]

    def expected_log_prob_closed(self, y, mu, var):
        return y * mu - torch.exp(mu + 0.5 * var) - torch.lgamma(y + 1)

    def predictive_mean_closed(self, mu, var):
        return torch.exp(mu + 0.5 * var)

    def validate_targets(self, y):
        _check_counts(self.name, y)


class PoissonSoftplusLikelihood(Likelihood):
    """lambda = softplus(f) = log(1 + e^f): rates grow linearly, not exponentially, in f.

    log lambda is computed in log space, log softplus(f) = f - e^f/2 + O(e^2f) for f << 0, so
    log p(y|f) = y log lambda - lambda - lgamma(y + 1) stays exact (about y f) and concave however
    negative f is; clamping lambda at a floor instead makes log p flat, hence non-concave, below
    the floor, and a concavity-based rejection envelope is then no upper bound (DLM review, F7).
    The derivatives use r = sigmoid(f)/lambda = exp(log sigmoid(f) - log lambda):

        d/df log p   = y r - sigmoid(f)
        d2/df2 log p = y r (1 - sigmoid(f) - r) - sigmoid(f) (1 - sigmoid(f)),

    where 1 - sigmoid(f) - r = -t/2 + 7t^2/12 - 5t^3/8 + 469t^4/720 - ... (t = e^f) is summed as a
    series for f < -8 instead of being left to cancel (both terms tend to 1).
    """

    name = "poisson_softplus"
    task = "count"

    _TAIL = -20.0  # below: log softplus(f) = f - e^f/2, error < e^(2f)/4 < 1e-18
    _SERIES = -8.0  # below: the series of 1 - sigmoid - r, truncation error < 1e-14 relative

    @staticmethod
    def _rate(f):
        return F.softplus(f, threshold=40.0)  # torch's default threshold 20 is 2e-9 off at f = 20

    @classmethod
    def _log_rate(cls, f):
        tail = f - 0.5 * torch.exp(f.clamp_max(cls._TAIL))
        body = torch.log(cls._rate(f.clamp_min(cls._TAIL)))
        return torch.where(f < cls._TAIL, tail, body)

    def log_prob(self, y, f):
        return y * self._log_rate(f) - self._rate(f) - torch.lgamma(y + 1)

    def _pieces(self, f):
        """sigmoid(f), 1 - sigmoid(f), r = sigmoid(f) / softplus(f) and 1 - sigmoid(f) - r."""
        sig, sig_neg = torch.sigmoid(f), torch.sigmoid(-f)
        r = torch.exp(F.logsigmoid(f) - self._log_rate(f))
        t = torch.exp(f.clamp_max(self._SERIES))
        series = t * (-0.5 + t * (7.0 / 12.0 + t * (-5.0 / 8.0 + t * (469.0 / 720.0))))
        return sig, sig_neg, r, torch.where(f < self._SERIES, series, sig_neg - r)

    def dlog_prob(self, y, f):
        sig, _, r, _ = self._pieces(f)
        return y * r - sig

    def d2log_prob(self, y, f):
        sig, sig_neg, r, gap = self._pieces(f)
        return y * r * gap - sig * sig_neg

    def log_prob_derivatives(self, y, f):
        sig, sig_neg, r, gap = self._pieces(f)
        return y * r - sig, y * r * gap - sig * sig_neg

    def mode(self, y):
        # softplus(f) = y  <=>  f = log(expm1(y)); -inf for y = 0
        return torch.where(y > 20, y, torch.log(torch.expm1(y)))

    def mean(self, f):
        return self._rate(f)

    tail_noise = LOGISTIC

    def tail_forms(self, y):
        """For y = 0 only: p(0|f) = exp(-softplus(f)) = sigmoid(-f) = P(e > f) = e^-f P(e > -f), e
        logistic (no tail form for y >= 1: the rate grows linearly, p(y|f) has no exponential wall)."""
        zero, one, is_zero = torch.zeros_like(y), torch.ones_like(y), y == 0
        return [TailForm(zero, zero, one, is_zero), TailForm(-one, zero, -one, is_zero)]

    def validate_targets(self, y):
        _check_counts(self.name, y)
