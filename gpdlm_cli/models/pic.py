"""PIC: the partially independent conditional approximation (Snelson & Ghahramani, AISTATS 2007)
with a Gaussian q(u), trained stochastically over its blocks (the PIC++ baseline of the sVBSSGP
paper's Table 1, after Hoang, Hoang & Low, ICML 2015).

**Prior.** Inducing inputs Z (M rows), K_uu = L L^T (+ jitter I), A_X = L^-1 K_uX, so that
Q_XX' = K_Xu K_uu^-1 K_uX' = A_X^T A_X'. The training rows are partitioned into blocks B_1..B_p
(the k-means cells). PIC keeps the exact covariance within each block and the low-rank Q across:

    p_PIC(y) = N(y | 0, Q_ff + blockdiag_k(K_kk - Q_kk) + s2 I),

which is the marginal of the generative model u ~ N(0, K_uu), y_k | u ~ N(K_ku K_uu^-1 u, Lambda_k)
independently over the blocks, with Lambda_k = K_kk - Q_kk + s2 I.

**Bound (the training objective).** q(u) is whitened: v = L^-1 u ~ N(m, S), S = R R^T (R
lower-triangular, free). Then

    L(q) = sum_k F_k(q) - KL(N(m, S) || N(0, I)),
    F_k(q) = E_q[log N(y_k | A_k^T v, Lambda_k)] = log N(y_k | A_k^T m, Lambda_k) - 1/2 tr(Lambda_k^-1 A_k^T S A_k),

and L(q) = log p_PIC(y) - KL(q(u) || p_PIC(u | y)) <= log p_PIC(y), with equality at the PIC
posterior q*(u) = p_PIC(u | y): maximising L over q and the hyperparameters (kernel, noise, Z)
maximises the PIC marginal likelihood. L is a *sum over blocks*, so with k uniform over the p
blocks, p F_k - KL is an unbiased estimate of L and of its gradient in every parameter. One step
costs O(M^3 + M^2 n_k + M n_k^2 + n_k^3) whatever N is. (Hoang, Hoang & Low 2015 -- not available
here -- derive their PIC++ from the same decomposition of the PIC likelihood over blocks given u;
they take natural-gradient steps in q, gpdlm takes Adam steps in the whitened (m, R), as its SVGP.)

**Predictive.** A test point x_* in block k (the cell of its nearest k-means centroid) joins that
block: given u, (f_*, y_k) are jointly Gaussian with Cov(f_*, y_k | u) = c^T, c = K_k* - Q_k*, so

    f_* | v, y_k ~ N(a_*^T v + c^T Lambda_k^-1 (y_k - A_k^T v), K_** - Q_** - c^T Lambda_k^-1 c),

and integrating v ~ N(m, S), with b = a_* - A_k Lambda_k^-1 c:

    mu_*  = b^T m + c^T Lambda_k^-1 y_k,
    var_* = K_** - Q_** - c^T Lambda_k^-1 c + b^T S b.

At q = q* this is PIC's predictive (Snelson & Ghahramani 2007, Sec. 3): the GP conditional of f_*
under the PIC prior with x_* added to block k. Limits: one block (p = 1) is the exact GP; blocks of
single rows make the prior FITC's; a test point in no block (an empty cell) gets b = a_* and no local
term: SVGP's predictive with this q, which is FITC's predictive when q is FITC's posterior.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .linalg import safe_cholesky, tri_solve


class PartiallyIndependentGP(torch.nn.Module):
    """PIC with q(u) = N(L m, L R R^T L^T) over M inducing values at Z; ``kernel`` a gpytorch
    kernel, ``likelihood`` a gpdlm GaussianLikelihood (its ``noise`` is s2).

    ``set_train_data(x, y, blocks, assign)``: the training rows, their blocks (a list of 1-D index
    tensors; empty ones allowed) and ``assign(x) -> block index per row`` for test points; then
    ``marginals(x)`` is the PIC predictive of f at the rows of x."""

    def __init__(
        self, inducing_points: torch.Tensor, kernel, likelihood, learn_inducing: bool = True, jitter: float = 1e-6
    ):
        super().__init__()
        M = inducing_points.shape[0]
        self.covar_module = kernel
        self.likelihood = likelihood
        self.Z = torch.nn.Parameter(inducing_points.clone(), requires_grad=learn_inducing)
        self.q_mean = torch.nn.Parameter(torch.zeros(M, dtype=inducing_points.dtype))
        self.q_chol = torch.nn.Parameter(torch.eye(M, dtype=inducing_points.dtype))  # its lower triangle is R
        self.jitter = jitter
        self.train_x: torch.Tensor | None = None
        self.train_y: torch.Tensor | None = None
        self.blocks: list[torch.Tensor] = []
        self.assign: Callable[[torch.Tensor], torch.Tensor] | None = None  # x -> the block label of each row

    # ----- q(u) --------------------------------------------------------------------------------
    @property
    def num_inducing(self) -> int:
        return self.Z.shape[0]

    def scale_tril(self) -> torch.Tensor:
        """R, with S = R R^T the whitened covariance of q."""
        return torch.tril(self.q_chol)

    def variational_parameters(self) -> list:
        return [self.q_mean, self.q_chol]

    def kl_divergence(self) -> torch.Tensor:
        """KL(N(m, R R^T) || N(0, I)) = (|R|_F^2 + |m|^2 - M - log det(R R^T)) / 2."""
        R = self.scale_tril()
        logdet = torch.log(torch.diagonal(R) ** 2).sum()
        return 0.5 * ((R**2).sum() + (self.q_mean**2).sum() - self.num_inducing - logdet)

    # ----- the blocks' terms -------------------------------------------------------------------
    def kuu_cholesky(self) -> torch.Tensor:
        Z = self.Z
        Kuu = self.covar_module(Z).to_dense() + self.jitter * torch.eye(Z.shape[0], dtype=Z.dtype, device=Z.device)
        return safe_cholesky(Kuu)

    def _block_factors(self, L, x):
        """A_k = L^-1 K_uk and the Cholesky factor of Lambda_k = K_kk - Q_kk + s2 I."""
        A = tri_solve(L, self.covar_module(self.Z, x).to_dense())
        eye = torch.eye(x.shape[0], dtype=x.dtype, device=x.device)
        lam = self.covar_module(x).to_dense() - A.transpose(-1, -2) @ A + self.likelihood.noise * eye
        return A, safe_cholesky(lam, what="Lambda_k = K_kk - Q_kk + s2 I")

    def block_term(self, x: torch.Tensor, y: torch.Tensor, L: torch.Tensor | None = None) -> torch.Tensor:
        """F_k = log N(y_k | A_k^T m, Lambda_k) - tr(Lambda_k^-1 A_k^T S A_k) / 2 for one block (x, y)."""
        L = self.kuu_cholesky() if L is None else L
        A, L_lam = self._block_factors(L, x)
        n = x.shape[0]
        alpha = tri_solve(L_lam, (y - A.transpose(-1, -2) @ self.q_mean).unsqueeze(-1))
        W = tri_solve(L_lam, A.transpose(-1, -2) @ self.scale_tril())  # tr(Lambda^-1 A^T R R^T A) = |W|_F^2
        return (
            -0.5 * n * math.log(2 * math.pi)
            - torch.log(torch.diagonal(L_lam)).sum()
            - 0.5 * (alpha**2).sum()
            - 0.5 * (W**2).sum()
        )

    def bound(self, x: torch.Tensor, y: torch.Tensor, blocks) -> torch.Tensor:
        """L(q) = sum_k F_k - KL over all (non-empty) blocks of the rows of x."""
        L = self.kuu_cholesky()
        total = sum(self.block_term(x[b], y[b], L) for b in blocks if b.numel() > 0)
        return total - self.kl_divergence()

    # ----- prediction --------------------------------------------------------------------------
    def set_train_data(
        self, x: torch.Tensor, y: torch.Tensor, blocks, assign: Callable[[torch.Tensor], torch.Tensor]
    ) -> None:
        self.train_x, self.train_y, self.blocks, self.assign = x, y, list(blocks), assign

    def predict(self, x_star: torch.Tensor, labels: torch.Tensor):
        """(mu, var) of f at the rows of x_star, row i in block ``labels[i]`` of the training data
        (a label outside 0..p-1, or an empty block: no local term, b = a_*)."""
        L = self.kuu_cholesky()
        R = self.scale_tril()
        mu = torch.empty(x_star.shape[0], dtype=x_star.dtype, device=x_star.device)
        var = torch.empty_like(mu)
        for k in torch.unique(labels).tolist():
            q = (labels == k).nonzero().squeeze(-1)
            xs = x_star[q]
            a = tri_solve(L, self.covar_module(self.Z, xs).to_dense())  # M x t
            kss = self.covar_module(xs, diag=True)
            rows = self.blocks[k] if 0 <= k < len(self.blocks) else None
            local_mu: torch.Tensor | float
            local_var: torch.Tensor | float
            if rows is None or rows.numel() == 0:
                b, local_mu, local_var = a, 0.0, 0.0
            else:
                assert self.train_x is not None and self.train_y is not None  # blocks come with the data
                xk, yk = self.train_x[rows], self.train_y[rows]
                A, L_lam = self._block_factors(L, xk)
                c = self.covar_module(xk, xs).to_dense() - A.transpose(-1, -2) @ a  # n_k x t: K_k* - Q_k*
                G = torch.cholesky_solve(c, L_lam)  # Lambda_k^-1 c
                b = a - A @ G
                local_mu = G.transpose(-1, -2) @ yk
                local_var = (c * G).sum(0)
            mu[q] = b.transpose(-1, -2) @ self.q_mean + local_mu
            var[q] = kss - (a**2).sum(0) - local_var + ((R.transpose(-1, -2) @ b) ** 2).sum(0)
        return mu, var.clamp_min(1e-12)

    def marginals(self, x: torch.Tensor):
        """The PIC predictive of f at the rows of x, each in the block ``assign`` gives it."""
        if self.train_x is None or self.assign is None:
            raise RuntimeError("PartiallyIndependentGP.marginals needs set_train_data first")
        return self.predict(x, self.assign(x))


__all__ = ["PartiallyIndependentGP"]
