"""Collapsed sparse GPs for Gaussian regression: SGPR (Titsias, 2009) and FITC (Snelson and
Ghahramani, 2006), with the optimal q(u) integrated out analytically.

Both are N(y | 0, Q_ff + Lambda) with Q_ff = K_fu K_uu^{-1} K_uf:
* SGPR: Lambda = s2 I, and the bound subtracts tr(K_ff - Q_ff) / (2 s2);
* FITC: Lambda = diag(K_ff - Q_ff) + s2 I, no trace term (an approximate *model*, not a bound).
Each optimises its own objective (the DLM paper's demo reused Titsias hyperparameters for FITC).
Cost O(N M^2); full batch.
"""

from __future__ import annotations

import math

import torch

from .kernels import dense_covariance, diagonal_covariance
from .linalg import safe_cholesky, tri_solve


class CollapsedSparseGP(torch.nn.Module):
    """``kind='sgpr'`` (Titsias bound) or ``kind='fitc'`` (FITC marginal likelihood)."""

    def __init__(
        self,
        inducing_points,
        kernel,
        mean,
        likelihood,
        kind: str = "sgpr",
        learn_inducing: bool = True,
        jitter: float = 1e-6,
    ):
        super().__init__()
        assert kind in ("sgpr", "fitc")
        self.kind = kind
        self.covar_module = kernel
        self.mean_module = mean
        self.likelihood = likelihood  # a gpdlm GaussianLikelihood
        Z = inducing_points.clone()
        self.Z = torch.nn.Parameter(Z, requires_grad=learn_inducing)
        self.jitter = jitter
        self.train_x = None
        self.train_y = None

    def set_train_data(self, x, y):
        self.train_x, self.train_y = x, y

    def _factors(self, x, y):
        """L (chol K_uu), A = L^{-1} K_uf Lambda^{-1/2}, L_B (chol I + A A^T), Lambda, residual r."""
        Z, s2 = self.Z, self.likelihood.noise
        M = Z.shape[0]
        eye = torch.eye(M, dtype=Z.dtype, device=Z.device)
        Kuu = dense_covariance(self.covar_module, Z) + self.jitter * eye
        L = safe_cholesky(Kuu)
        V = tri_solve(L, dense_covariance(self.covar_module, Z, x))  # L^{-1} K_uf  (M x N)
        kff = diagonal_covariance(self.covar_module, x)
        qff = (V**2).sum(0)
        lam = s2 + ((kff - qff).clamp_min(0) if self.kind == "fitc" else torch.zeros_like(kff))
        A = V / lam.sqrt()
        LB = safe_cholesky(eye + A @ A.T, what="I + A A^T")
        r = y - self.mean_module(x)
        c = tri_solve(LB, A @ (r / lam.sqrt()).unsqueeze(-1)).squeeze(-1)
        return L, A, LB, lam, r, c, kff, qff

    def log_marginal(self, x, y) -> torch.Tensor:
        """SGPR: the Titsias lower bound; FITC: log N(y | 0, Q_ff + diag(K_ff - Q_ff) + s2 I)."""
        L, A, LB, lam, r, c, kff, qff = self._factors(x, y)
        n = y.shape[0]
        value = (
            -0.5 * n * math.log(2 * math.pi)
            - torch.log(torch.diagonal(LB)).sum()
            - 0.5 * torch.log(lam).sum()
            - 0.5 * (r**2 / lam).sum()
            + 0.5 * (c**2).sum()
        )
        if self.kind == "sgpr":
            value = value - 0.5 * (kff - qff).sum() / self.likelihood.noise
        return value

    def marginals(self, x_star):
        """Predictive mean and variance of the latent f at x_star (given the stored training data)."""
        L, A, LB, lam, r, c, kff, qff = self._factors(self.train_x, self.train_y)
        Vs = tri_solve(L, dense_covariance(self.covar_module, self.Z, x_star))  # L^{-1} K_u*
        W = tri_solve(LB, Vs)
        mean = self.mean_module(x_star) + W.T @ c
        kss = diagonal_covariance(self.covar_module, x_star)
        var = kss - (Vs**2).sum(0) + (W**2).sum(0)
        return mean, var.clamp_min(1e-12)
