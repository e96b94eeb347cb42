"""The collapsed (beta-)ELBO of a sparse variational GP with a Gaussian likelihood (Titsias, 2009;
the DLM paper's SVGP baseline for regression, App. D: "we implement the collapsed forms").

For y_i ~ N(f_i, s2) and whitened q(u~) = N(m~, S~) (u = L u~, K_uu = L L^T), with A = L^{-1} K_uf
(M x N), r = y - mean(X) and the per-point conditional variances k_i = K_ii - Q_ii:

    sum_i E_q[log p(y_i|f_i)] = -N/2 log(2 pi s2) - ( |r - A^T m~|^2 + tr(A^T S~ A) + sum_i k_i ) / (2 s2)
    KL(q(u) || p(u))          = ( tr S~ + |m~|^2 - M - log|S~| ) / 2

The beta-ELBO  sum_i E_q[log p] - beta KL  is maximised over q(u) in closed form:

    m~* = (A A^T + beta s2 I)^{-1} A r,        S~* = (I + A A^T / (beta s2))^{-1}

(for beta = 1 this is Titsias' optimal q(u) and the value is his bound). The objective is
-(1/N) ELBO_beta(m~*, S~*) as a function of the hyperparameters (Z, kernel, mean, noise); by the
envelope theorem its gradient is the partial gradient at fixed q. Each evaluation also writes
(m~*, S~*) into the model's variational parameters, so ``model.marginals`` always predicts with the
optimal q(u) of the current hyperparameters. Full batch only: the optimal q(u) needs all of y.
"""

from __future__ import annotations

import math

import torch

from ..models.linalg import safe_cholesky
from .base import Objective


def optimal_whitened_q(A: torch.Tensor, r: torch.Tensor, noise: torch.Tensor, beta: float):
    """(m~*, chol S~*) and the pieces of the bound: returns m, L_S, and B = I + A A^T/(beta s2)."""
    M = A.shape[0]
    eye = torch.eye(M, dtype=A.dtype, device=A.device)
    B = eye + (A @ A.T) / (beta * noise)
    L_B = safe_cholesky(B, what="I + A A^T / (beta s2)")
    # m~* = (A A^T + beta s2 I)^{-1} A r = B^{-1} A r / (beta s2)
    m = torch.cholesky_solve((A @ r).unsqueeze(-1), L_B).squeeze(-1) / (beta * noise)
    # S~* = B^{-1}: its Cholesky factor is L_B^{-T} up to an orthogonal factor; use chol(B^{-1})
    S = torch.cholesky_inverse(L_B)
    L_S = safe_cholesky(0.5 * (S + S.T), what="S~*")
    return m, L_S, S, L_B


class CollapsedELBO(Objective):
    """-(1/N) max_q [ sum_i E_q[log N(y_i | f_i, s2)] - beta KL(q(u) || p(u)) ] for a
    ``SparseVariationalGP`` with a Gaussian likelihood (see the module docstring)."""

    name = "collapsed_elbo"

    def __init__(self, model, likelihood, num_data: int, beta: float = 1.0):
        super().__init__()
        self.model = model
        self.likelihood = likelihood
        self.num_data = num_data
        self.beta = beta

    def forward(self, x, y):
        model, beta = self.model, self.beta
        n = y.shape[0]
        noise = self.likelihood.noise
        A = model.interpolation(x).T  # L^{-1} K_uf  (M x N)
        r = y - model.prior_mean(x)
        kff = model.prior_variance(x)
        k = (kff - (A**2).sum(0)).clamp_min(0)
        m, L_S, S, L_B = optimal_whitened_q(A, r, noise, beta)
        resid = r - A.T @ m
        expected = (-0.5 * n * math.log(2 * math.pi) - 0.5 * n * torch.log(noise)
                    - ((resid**2).sum() + (A * (S @ A)).sum() + k.sum()) / (2 * noise))
        M = A.shape[0]
        logdet_S = -2 * torch.log(torch.diagonal(L_B)).sum()
        kl = 0.5 * (torch.diagonal(S).sum() + (m**2).sum() - M - logdet_S)
        # predict with the optimal q(u) of the current hyperparameters; marked set, so the model's
        # first prediction does not re-initialise it to the prior
        model.set_whitened_q(m.detach(), L_S.detach())
        return -(expected - beta * kl) / self.num_data

    @torch.no_grad()
    def refresh(self, x, y) -> None:
        """Write the optimal q(u) of the current hyperparameters (after the last optimiser step)."""
        self(x, y)


class RefreshOptimalQ:
    """Trainer hook: before each evaluation and at the end of the stage, q(u) is made optimal for the
    hyperparameters as they are *after* the last step (each forward writes the q(u) of the
    hyperparameters it was evaluated at, one step behind)."""

    def __init__(self, objective: CollapsedELBO, x, y):
        self.objective, self.x, self.y = objective, x, y

    def before_evaluate(self) -> None:
        self.objective.refresh(self.x, self.y)

    def training_end(self) -> None:
        self.objective.refresh(self.x, self.y)

    def checkpoint_state(self) -> dict:  # stateless: q(u) lives in the model's tensors
        return {}

    def load_checkpoint_state(self, state: dict) -> None:
        pass


__all__ = ["CollapsedELBO", "RefreshOptimalQ", "optimal_whitened_q"]
