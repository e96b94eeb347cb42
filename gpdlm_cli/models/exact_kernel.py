"""The exact GP with a kernel that has no finite feature map, on network features: the model of
Shoham & Avron's BSGD column in the Gaussian-kernel tables (Sec. 5, Tables 3 and 5).

With z = g(x) the input map (``features=nn``: the paper's 2 x 128 ReLU network) and k an exact
stationary kernel on z (``kernel=rbf``: k(z, z') = s exp(-||z - z'||^2 / (2 ell^2)), the paper's
Gaussian kernel k'_u with u_1 = ell, u_2 = s), the model is y = h(g(x)) + eps, h ~ GP(0, k),
eps ~ N(0, s2). Its full-data quantities are the standard dense ones (Rasmussen & Williams,
Alg. 2.1), with K = k(Z, Z) + s2 I_n = L L^T over the conditioning rows:

    NLML / n = [ ||L^-1 y||^2 / 2 + sum_i log L_ii ] / n + (1/2) log 2 pi,
    mean(x_*) = k_*^T alpha,  alpha = K^-1 y,     var(x_*) = k(x_*, x_*) - ||L^-1 k_*||^2,

O(n^3) time per evaluation and, on the CPU, n^2 doubles of memory: K is built block of rows by block of rows
straight into one n x n buffer and factorised in place by LAPACK (``kernel_cholesky``; torch's own Cholesky
keeps K and L, 2 n^2, as it still does on accelerators). ``posterior_bytes`` says what an evaluation needs,
so a run can be refused before training (methods/rkhs.py, ``model.posterior_memory_gb``). The conditioning rows
are every training row when n <= ``max_rows``; above it a fixed random subset of ``max_rows`` rows
drawn once from ``seed`` (subset of data: Rasmussen & Williams, Sec. 8.3.1): the exact GP of that
subset, an approximation of the full posterior that keeps the model (only fewer data), so its NLML is
the per-point NLML of the subset and its predictive the subset's. ``exact`` says which.

``prior_covariance(x)`` is the b x b kernel matrix of a batch, differentiable in the network and
kernel parameters: what BSGD's exact minibatch NLML needs (``objectives.rkhs.BatchNLML``).
The full-data posterior is recomputed only when a parameter or buffer has changed since the last one
(torch's in-place version counters, as in ``BayesianLinearGP``). All GP algebra is float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .bayesian_linear import LOG_2PI, CholeskyLog, kernel_cholesky, posterior_bytes


@dataclass
class ExactPosterior:
    """The dense posterior at one parameter state."""

    z: torch.Tensor  # g(x) of the conditioning rows (n_c x d_z)
    L: torch.Tensor  # chol(k(Z, Z) + s2 I)
    alpha: torch.Tensor  # (K + s2 I)^-1 y
    s2: torch.Tensor
    nlml: float  # per-point, standardised targets, over the conditioning rows


class ExactKernelGP(torch.nn.Module):
    """y = h(g(x)) + eps, h ~ GP(0, kernel): the exact GP on an input map's outputs (see the module
    docstring). ``kernel`` is a gpytorch kernel module (e.g. ``ScaleKernel(RBFKernel())``, float64),
    ``likelihood`` gpdlm's ``GaussianLikelihood`` (s2 = its noise)."""

    def __init__(
        self,
        input_map: torch.nn.Module,
        kernel: torch.nn.Module,
        likelihood,
        x_train: torch.Tensor,
        y_train: torch.Tensor,
        *,
        block_rows: int = 4096,
        max_rows: int | None = None,
        seed: int = 0,
    ):
        super().__init__()
        self.input_map = input_map
        self.kernel = kernel
        self.likelihood = likelihood
        self.block_rows = int(block_rows)
        self.max_rows = None if max_rows is None else int(max_rows)
        self.seed = int(seed)
        self.chol_log = CholeskyLog()
        self.set_train_data(x_train, y_train)

    def set_train_data(self, x: torch.Tensor, y: torch.Tensor) -> None:
        # plain attributes, not buffers: keep_best snapshots must not copy the data
        self.x_train, self.y_train = x, y
        n = int(x.shape[0])
        self.rows = None
        if self.max_rows is not None and n > self.max_rows:
            gen = torch.Generator().manual_seed(self.seed)
            self.rows = torch.randperm(n, generator=gen)[: self.max_rows].sort().values.to(x.device)
        self._post: ExactPosterior | None = None
        self._key: tuple | None = None

    @property
    def num_data(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def exact(self) -> bool:
        """Whether the full-data posterior conditions on every training row (else a subset of data)."""
        return self.rows is None

    @property
    def posterior_rows(self) -> int:
        """How many training rows the full-data posterior conditions on."""
        return self.num_data if self.rows is None else int(self.rows.shape[0])

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """z = g(x) in float64."""
        return self.input_map(x).to(torch.float64)

    def covariance(self, z1: torch.Tensor, z2: torch.Tensor | None = None) -> torch.Tensor:
        """k(z1, z2) as a dense float64 matrix (z2 = z1 if None)."""
        return self.kernel(z1, z1 if z2 is None else z2).to_dense()

    def prior_covariance(self, x: torch.Tensor) -> torch.Tensor:
        """k(g(x), g(x)) of a batch (b x b, differentiable): BSGD's batch covariance without the noise."""
        z = self.inputs(x)
        return self.covariance(z)

    @property
    def noise(self) -> torch.Tensor:
        """s2 in float64 (a scalar tensor)."""
        return self.likelihood.noise.to(torch.float64).reshape(())

    def _state_key(self):
        return tuple((id(t), t._version) for t in list(self.parameters()) + list(self.buffers()))

    @torch.no_grad()
    def posterior(self) -> ExactPosterior:
        key = self._state_key()
        if self._post is not None and key == self._key:
            return self._post
        x, y = self.x_train, self.y_train
        if self.rows is not None:
            x, y = x[self.rows], y[self.rows]
        B = self.block_rows
        z = torch.cat([self.inputs(x[i : i + B]) for i in range(0, x.shape[0], B)])
        n = z.shape[0]
        s2 = self.noise
        L = kernel_cholesky(self.covariance, z, s2, block_rows=B, log=self.chol_log, what="K + s2 I (the exact kernel)")
        a = torch.linalg.solve_triangular(L, y.to(torch.float64).unsqueeze(-1), upper=False)
        alpha = torch.linalg.solve_triangular(L.T, a, upper=True).squeeze(-1)
        nlml = 0.5 * (a.square().sum() + 2 * torch.log(L.diagonal()).sum()) / n + 0.5 * LOG_2PI
        self._post, self._key = ExactPosterior(z=z, L=L, alpha=alpha, s2=s2, nlml=float(nlml)), key
        return self._post

    def nlml(self) -> float:
        """Per-point NLML of the standardised targets (with (1/2) log 2 pi) over the conditioning rows."""
        return self.posterior().nlml

    @torch.no_grad()
    def marginals(self, x: torch.Tensor):
        """(mean, var) of the latent h(g(x)) at each row of x, in blocks of ``block_rows``."""
        post = self.posterior()
        means, variances = [], []
        for i in range(0, x.shape[0], self.block_rows):
            zs = self.inputs(x[i : i + self.block_rows])
            k_star = self.covariance(post.z, zs)  # n_c x b
            means.append(k_star.T @ post.alpha)
            v = torch.linalg.solve_triangular(post.L, k_star, upper=False)
            variances.append(self.kernel(zs, diag=True).to(torch.float64) - v.square().sum(0))
        mean, var = torch.cat(means), torch.cat(variances)
        return mean.to(x.dtype), var.clamp_min(1e-300).to(x.dtype)


__all__ = ["ExactKernelGP", "ExactPosterior", "kernel_cholesky", "posterior_bytes"]  # the last two: re-exported
