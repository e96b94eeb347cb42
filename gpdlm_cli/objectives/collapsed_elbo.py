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


def collapsed_bound(
    A: torch.Tensor,
    r: torch.Tensor,
    k: torch.Tensor,
    noise: torch.Tensor,
    beta,
    L_B: torch.Tensor,
    AAt: torch.Tensor | None = None,
):
    """The beta-ELBO at its optimal q(u) (module docstring), batched over leading dimensions.

    A: L^{-1} K_uf (... x M x N); r: y - mean (... x N); k: K_ii - Q_ii (... x N); noise, beta: s2 and beta
    (scalars or ...); L_B: the Cholesky factor of B = I + A A^T / (beta s2); ``AAt``: A A^T if the caller
    has it. Returns (sum_i E_q[log N(y_i | f_i, s2)] - beta KL, m~* = B^{-1} A r / (beta s2), S~* = B^{-1}),
    through ``collapsed_bound_from_gram``. The batched trainer (``sweep.batched_model``) evaluates it."""
    AAt = A @ A.mT if AAt is None else AAt
    Ar = (A @ r.unsqueeze(-1)).squeeze(-1)
    return collapsed_bound_from_gram(AAt, Ar, (r * r).sum(-1), k.sum(-1), r.shape[-1], noise, beta, L_B)


def collapsed_bound_from_gram(
    AAt: torch.Tensor,
    Ar: torch.Tensor,
    rr: torch.Tensor,
    k_sum: torch.Tensor,
    n: int,
    noise: torch.Tensor,
    beta,
    L_B: torch.Tensor,
):
    """``collapsed_bound`` from the M x M and M-sized statistics of the data alone: A A^T, A r, |r|^2 and
    sum_i (K_ii - Q_ii) over n points. With m~* and S~* = B^{-1},

        |r - A^T m~*|^2 = |r|^2 - 2 m~*^T A r + m~*^T A A^T m~*,     tr(A^T S~* A) = sum(S~* o A A^T),

    so after the O(M^2 N) statistics (``models.linalg.whitened_gram``) everything costs O(M^3)."""
    M = AAt.shape[-1]
    bs2 = torch.as_tensor(beta * noise)
    m = torch.cholesky_solve(Ar.unsqueeze(-1), L_B).squeeze(-1) / bs2[..., None]
    S = torch.cholesky_inverse(L_B)
    rss = rr - 2 * (m * Ar).sum(-1) + (m * (AAt @ m.unsqueeze(-1)).squeeze(-1)).sum(-1)
    trace = (S * AAt).sum((-2, -1))  # tr(A^T S~ A)
    expected = -0.5 * n * math.log(2 * math.pi) - 0.5 * n * torch.log(noise) - (rss + trace + k_sum) / (2 * noise)
    logdet_S = -2 * torch.log(torch.diagonal(L_B, dim1=-2, dim2=-1)).sum(-1)
    kl = 0.5 * (torch.diagonal(S, dim1=-2, dim2=-1).sum(-1) + (m**2).sum(-1) - M - logdet_S)
    return expected - beta * kl, m, S


class CollapsedELBO(Objective):
    """-(1/N) max_q [ sum_i E_q[log N(y_i | f_i, s2)] - beta KL(q(u) || p(u)) ] for a
    ``SparseVariationalGP`` with a Gaussian likelihood (see the module docstring).

    Batched over leading dimensions as well: for a model whose parameters carry a leading batch
    dimension B (one member per row: ``sweep.batched_model``), x B x N x D, y B x N and ``beta`` a
    float or a B-vector, it returns the B members' losses."""

    name = "collapsed_elbo"

    def __init__(self, model, likelihood, num_data: int, beta: float = 1.0):
        super().__init__()
        self.model = model
        self.likelihood = likelihood
        self.num_data = num_data
        self.beta = beta

    def forward(self, x, y):
        model, beta = self.model, self.beta
        noise = self.likelihood.noise.reshape(y.shape[:-1])  # s2: a scalar, or one per member of a batch
        r = y - model.prior_mean(x)
        AAt, Ar = model.whitened_gram(x, r)  # A = L^{-1} K_uf (M x N) is never formed in autograd's graph
        # sum_i (K_ii - Q_ii) = tr K_ff - tr(A A^T): Q_ii = |A_i|^2
        k_sum = model.prior_variance(x).sum(-1) - torch.diagonal(AAt, dim1=-2, dim2=-1).sum(-1)
        eye = torch.eye(AAt.shape[-1], dtype=AAt.dtype, device=AAt.device)
        bs2 = beta * noise
        L_B = safe_cholesky(eye + AAt / bs2[..., None, None], what="I + A A^T / (beta s2)")
        value, m, S = collapsed_bound_from_gram(AAt, Ar, (r * r).sum(-1), k_sum, y.shape[-1], noise, beta, L_B)
        # S~* = B^{-1}: its Cholesky factor; predict with the optimal q(u) of the current hyperparameters,
        # marked set, so the model's first prediction does not re-initialise it to the prior
        L_S = safe_cholesky(0.5 * (S + S.mT), what="S~*")
        model.set_whitened_q(m.detach(), L_S.detach())
        return -value / self.num_data

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


__all__ = ["CollapsedELBO", "RefreshOptimalQ", "collapsed_bound", "collapsed_bound_from_gram"]
