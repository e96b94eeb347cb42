"""Gaussian likelihood p(y|f) = N(y | f, s2) with a learned noise variance s2."""

from __future__ import annotations

import gpytorch
import torch

from .base import LOG_SQRT_2PI, Likelihood


class GaussianLikelihood(Likelihood):
    """N(y | f, s2). Both log-expectations are closed form (DLM paper, Sec. 2):

    log E_q[p(y|f)] = log N(y | mu, var + s2)
    E_q[log p(y|f)] = log N(y | mu, s2) - var / (2 s2)

    The noise lives in a gpytorch GaussianLikelihood (``self.gp``) so exact GPs can share it.
    """

    name = "gaussian"
    task = "regression"

    def __init__(self, noise_init: float = 0.1, noise_min: float = 1e-6):
        super().__init__()
        self.gp = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=gpytorch.constraints.GreaterThan(noise_min))
        self.gp.noise = noise_init

    @property
    def noise(self) -> torch.Tensor:
        """s2: a scalar (0-dim) -- or, when the noise carries a leading batch dimension B (the members of
        ``sweep.batched_model``), B x 1, which broadcasts against the members' B x N values."""
        s2 = self.gp.noise
        return s2.squeeze(-1) if s2.dim() == 1 else s2

    def log_prob(self, y, f):
        s2 = self.noise
        return -LOG_SQRT_2PI - 0.5 * torch.log(s2) - 0.5 * (y - f) ** 2 / s2

    def dlog_prob(self, y, f):
        return (y - f) / self.noise

    def d2log_prob(self, y, f):
        return (-1.0 / self.noise).expand_as(f)

    def mode(self, y):
        return y

    def mean(self, f):
        return f

    def log_marginal_closed(self, y, mu, var):
        s = var + self.noise
        return -LOG_SQRT_2PI - 0.5 * torch.log(s) - 0.5 * (y - mu) ** 2 / s

    def expected_log_prob_closed(self, y, mu, var):
        s2 = self.noise
        return -LOG_SQRT_2PI - 0.5 * torch.log(s2) - 0.5 * ((y - mu) ** 2 + var) / s2

    def predictive_mean_closed(self, mu, var):
        return mu
