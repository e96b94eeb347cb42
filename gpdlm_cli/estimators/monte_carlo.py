"""Reparameterised Monte Carlo estimators: biased MC (bMC) and smooth-bMC (DLM paper, Sec. 4, App. B).

With f_l = mu + sqrt(var) eps_l, eps_l ~ N(0, 1) i.i.d. (l = 1..L):

* bMC:        log E_q[p(y|f)]  ~  log (1/L) sum_l p(y|f_l) = logsumexp_l log p(y|f_l) - log L
* smooth-bMC: log E_q[p(y|f)]  ~  log( (1/L) sum_l p(y|f_l) + nu )
                              = logaddexp( logsumexp_l log p(y|f_l) - log L, log nu )

Autograd of the bMC value is the ratio estimator  sum_l d/dtheta p(y|f_l) / sum_l p(y|f_l)  of eqs.
(7)-(8) (in its reparameterised form: the var-gradient is  sum_l p'(f_l) eps_l / (2 sqrt(var)) / sum_l p
rather than the Price/Bonnet form with p'', equal in expectation). It is biased for finite L because
the expectation of a ratio is not the ratio of expectations; the bias is O(1/L).

smooth-bMC adds nu to the *average* likelihood in the denominator (App. B, with the averaged form of
w_t; the paper uses nu = 1e-4), so its gradient is

    (1/L) sum_l p'(f_l) / ((1/L) sum_l p(y|f_l) + nu)  =  bMC gradient * m / (m + nu),  m = mean_l p,

bounded even when every sample has negligible likelihood. nu = 0 reproduces bMC exactly (same
samples at the same seed). Note nu is in the units of p(y|f) (a density for Gaussian y).

``expected_log_prob`` (the ELBO term) is the unbiased reparameterised average  mean_l log p(y|f_l)
for both estimators.
"""

from __future__ import annotations

import math

import torch

from .base import Estimator


class RandomStream:
    """An estimator's own random stream: a ``torch.Generator`` reset by ``seed(seed, device)`` and
    re-created with the same seed when asked for another device. Before any ``seed`` call it is
    seeded once from torch's global generator."""

    def __init__(self):
        self._seed: int | None = None
        self._generator: torch.Generator | None = None

    def seed(self, seed: int, device) -> None:
        self._seed = int(seed)
        self._generator = torch.Generator(device=torch.device(device)).manual_seed(self._seed)

    def generator(self, device) -> torch.Generator:
        device = torch.device(device)
        g = self._generator
        if g is None or g.device.type != device.type:
            if self._seed is None:
                self._seed = int(torch.randint(0, 2**62, (1,)).item())
            g = self._generator = torch.Generator(device=device).manual_seed(self._seed)
        return g


class BMCEstimator(Estimator):
    """Biased Monte Carlo with ``num_samples`` reparameterised samples of q(f) per point.

    The estimator owns its random stream (``RandomStream``): ``seed(seed, device)`` resets it, so
    runs are reproducible independently of global seeding.
    """

    name = "bmc"
    stochastic = True

    def __init__(self, num_samples: int = 10):
        self.num_samples = int(num_samples)
        self.random = RandomStream()

    def seed(self, seed: int, device) -> None:
        self.random.seed(seed, device)

    def standard_normal(self, like: torch.Tensor) -> torch.Tensor:
        """eps of shape like.shape + (L,), from the estimator's own generator."""
        gen = self.random.generator(like.device)
        return torch.randn((*like.shape, self.num_samples), generator=gen, dtype=like.dtype, device=like.device)

    def log_prob_samples(self, lik, y, mu, var) -> torch.Tensor:
        """log p(y|f_l) at f_l = mu + sqrt(var) eps_l, shape (..., L), differentiable in mu, var."""
        f = mu.unsqueeze(-1) + torch.sqrt(var).unsqueeze(-1) * self.standard_normal(mu)
        return lik.log_prob(y.unsqueeze(-1), f)

    # ----- the two quantities -------------------------------------------------------------------
    def log_marginal(self, lik, y, mu, var):
        return torch.logsumexp(self.log_prob_samples(lik, y, mu, var), dim=-1) - math.log(self.num_samples)

    def expected_log_prob(self, lik, y, mu, var):
        return self.log_prob_samples(lik, y, mu, var).mean(-1)


class SmoothBMCEstimator(BMCEstimator):
    """smooth-bMC: the bMC average likelihood plus ``nu`` in the denominator (App. B), in log space."""

    name = "smooth_bmc"

    def __init__(self, num_samples: int = 10, nu: float = 1e-4):
        super().__init__(num_samples)
        self.nu = float(nu)

    def log_marginal(self, lik, y, mu, var):
        out = super().log_marginal(lik, y, mu, var)
        if self.nu == 0.0:
            return out
        return torch.logaddexp(out, torch.full_like(out, math.log(self.nu)))
