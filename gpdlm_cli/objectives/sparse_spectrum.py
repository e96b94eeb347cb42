"""Sparse-spectrum objectives: SSGP's marginal likelihood, VSSGP's collapsed bound and sVBSSGP's
doubly stochastic bound."""

from __future__ import annotations

import math

import torch

from ..models.sparse_spectrum import trig_features
from .base import Objective


class SSGPMarginalLikelihood(Objective):
    """-(1/n) log N(y | 0, Phi Lambda Phi^T + s_n^2 I) of an ``SSGP`` (full batch, O(n m^2))."""

    name = "ssgp"

    def __init__(self, model, num_data: int):
        super().__init__()
        self.model = model
        self.num_data = num_data

    def forward(self, x, y):
        return self.model.neg_log_marginal(x, y) / self.num_data


class CollapsedVSSGPBound(SSGPMarginalLikelihood):
    """-(1/n) L of a ``CollapsedVSSGP``: VSSGP's bound with the optimal q(s) (full batch, O(n m^2))."""

    name = "vssgp_collapsed"


class SVBSSGPBound(Objective):
    """The unbiased doubly stochastic estimate of -L / n, sVBSSGP's negative ELBO per datum.

    L(q) = E_q[log p(y | alpha)] - KL(q(alpha) || p(alpha)) (Sec. 3.2) with, by Lemma 2,
    log p(y | alpha) = -||y - Phi^T s||^2 / (2 s_n^2) - (n/2) log(2 pi s_n^2) = sum_i over blocks of
    the same expression on (X_i, y_i) (Theorem 1). One step uses one block (or a minibatch) and
    ``z_samples`` draws of z ~ N(0, I) (App. G, eq. 22 with a = 1, b = z_samples):

      -L~ / n = -[ scale * mean_j log p(y_i | alpha_j) - KL ] / n,   alpha_j = M z_j + b,

    with ``scale`` = p for a fixed partition of p blocks drawn uniformly (E_i[p F_i] = sum_i F_i),
    or n / |batch| for a uniformly random minibatch (random equal-size blocks); both unbiased.
    The KL is analytic (its gradient is the z-mean of App. D's single-sample gradient).

    ``rao_blackwell``: with M lower-triangular and alpha ordered (theta, s), s | z_theta ~
    N(mu_s, M_ss M_ss^T) with mu_s = b_s + M_s,theta z_theta, so
      E_s ||y_i - Phi_i^T s||^2 = ||y_i - Phi_i^T mu_s||^2 + ||Phi_i^T M_ss||_F^2
    exactly: only theta is sampled (same expectation, lower variance). Otherwise (the paper as
    written) s is sampled too.
    """

    name = "svbssgp"

    def __init__(
        self,
        posterior,
        likelihood,
        num_data: int,
        *,
        z_samples: int = 1,
        rao_blackwell: bool = True,
        scale: float | None = None,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.posterior = posterior
        self.likelihood = likelihood
        self.num_data = num_data
        self.z_samples = z_samples
        self.rao_blackwell = rao_blackwell
        self.scale = scale
        self.generator = generator
        self.features = trig_features  # the only call that reads the block's rows

    @property
    def z_dim(self) -> int:
        q = self.posterior
        return q.m * q.d if self.rao_blackwell else q.D

    def draw_z(self, num: int) -> torch.Tensor:
        b = self.posterior.b
        device = self.generator.device if self.generator is not None else b.device
        return torch.randn(num, self.z_dim, generator=self.generator, dtype=b.dtype, device=device)

    def block_log_likelihood(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(y_i | alpha_j) on the block (x, y) for each z_j (rows of z): shape (S,).
        With ``rao_blackwell``, z holds z_theta only and the value is E_s[log p(y_i | theta_j, s)]."""
        q = self.posterior
        md = q.m * q.d
        M = q.scale_tril()
        noise = self.likelihood.noise
        if self.rao_blackwell:
            theta = q.b[:md] + z @ M[:md, :md].T
            mu_s = q.b[md:] + z @ M[md:, :md].T
            phi = self.features(x, theta.unflatten(-1, (q.m, q.d)))
            resid = y - (phi @ mu_s.unsqueeze(-1)).squeeze(-1)
            sq = (resid**2).sum(-1) + ((phi @ M[md:, md:]) ** 2).sum((-1, -2))
        else:
            theta, s = q.split(q.b + z @ M.T)
            phi = self.features(x, theta)
            sq = ((y - (phi @ s.unsqueeze(-1)).squeeze(-1)) ** 2).sum(-1)
        return -0.5 * sq / noise - 0.5 * x.shape[0] * torch.log(2 * math.pi * noise)

    def forward(self, x, y):
        ll = self.block_log_likelihood(x, y, self.draw_z(self.z_samples)).mean()
        scale = self.scale if self.scale is not None else self.num_data / x.shape[0]
        return -(scale * ll - self.posterior.kl_divergence()) / self.num_data

    @torch.no_grad()
    def elbo_per_datum(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, chunk: int = 8192) -> float:
        """L / n on all of (x, y) for the given z samples (a Monte Carlo estimate over z only)."""
        ll = sum(self.block_log_likelihood(x[i : i + chunk], y[i : i + chunk], z) for i in range(0, x.shape[0], chunk))
        return float((ll.mean() - self.posterior.kl_divergence()) / x.shape[0])


__all__ = ["SSGPMarginalLikelihood", "SVBSSGPBound"]
