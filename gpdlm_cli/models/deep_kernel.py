"""GPs with recurrent deep kernels (GP-LSTM paper, Eq. 7) and their network baselines.

``DeepKernelGP``: k~(x_bar, x_bar') = k(phi_W(x_bar), phi_W(x_bar')) with a stationary ARD base
kernel (RBF by default), zero mean and a Gaussian likelihood whose noise has a floor. Multi-output
targets are independent GPs -- each with its own kernel hyperparameters and noise -- that share one
network phi_W (Sec. 6: "independent GPs that shared a recurrent transformation"). The network may
run in float32; embeddings H = phi_W(X) are cast to float64 before any GP algebra.

Inference:

* ``exact``: dense Cholesky of K + s^2 I (gpytorch with ``max_cholesky_size`` above N, so it never
  switches to CG/Lanczos silently);
* ``kiss``: KISS-GP (Wilson and Nickisch 2015; paper Sec. 4.2, App. A) on a 1-3-D embedding:
  ``ScaleKernel(GridInterpolationKernel(base))`` -- the outputscale outside, so diag K = s_f^2
  (inside, gpytorch applies it once per grid dimension). The grid is *fixed* between refreshes and
  refitted by :meth:`DeepKernelGP.fit_grid` on the full training embedding (range plus a margin of
  ``grid_margin`` of the range and 2.01 cells each side), never per batch (gpytorch's
  ``ScaleToBounds`` would map one window to different coordinates in different batches).
  Embeddings outside the grid's interior are clamped into it at prediction time.

The NLML, per output k: -log N(y_k | 0, K_k(H) + s_k^2 I), summed over outputs; objectives divide
it by N (``gpdlm_cli.objectives.recurrent``).
"""

from __future__ import annotations

import gpytorch
import torch
from torch import nn

from ..features.recurrent import FeatureMap
from .linalg import safe_cholesky

_BIG = 10**9


class EmbeddingGP(gpytorch.models.ExactGP):
    """One output's GP on embeddings h (N, E): zero mean, ScaleKernel(base) or
    ScaleKernel(GridInterpolationKernel(base)). Used for predictions (gpytorch's prediction
    strategies, O(1) means for KISS; kept in eval mode between ``DeepKernelGP.condition`` calls so
    their caches survive); the NLML is computed directly from ``covar_module``, in any mode."""

    def __init__(self, base_kernel, likelihood, *, embed_dim: int, inference: str, grid_size: int):
        super().__init__(None, None, likelihood)
        self.mean_module = gpytorch.means.ZeroMean()
        inner = base_kernel
        if inference == "kiss":
            inner = gpytorch.kernels.GridInterpolationKernel(base_kernel, grid_size, num_dims=embed_dim,
                                                             grid_bounds=tuple((-1.0, 1.0) for _ in range(embed_dim)))
        self.covar_module = gpytorch.kernels.ScaleKernel(inner)

    def forward(self, h):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(h), self.covar_module(h))


def grid_from_embedding(h: torch.Tensor, grid_size: int, margin: float = 0.1) -> list[torch.Tensor]:
    """A regular grid per dimension covering [min - margin range, max + margin range] of ``h``
    with 2.01 more cells each side (cubic interpolation uses 4 points; points in the outer two
    cells would fall back to gpytorch's per-point boundary loop). Tensor ops only: no host sync."""
    lo, hi = h.min(0).values, h.max(0).values
    width = (hi - lo).clamp_min(1e-6)
    lo, hi = lo - margin * width, hi + margin * width
    cell = (hi - lo) / (grid_size - 1 - 4.02)
    steps = torch.arange(grid_size, dtype=h.dtype, device=h.device)
    return [lo[d] - 2.01 * cell[d] + cell[d] * steps for d in range(h.shape[1])]


class DeepKernelGP(nn.Module):
    """phi_W (``network``) + one ``EmbeddingGP`` and gpdlm ``GaussianLikelihood`` per output.

    Parameter groups: ``network`` (W: recurrent layers and projection), ``kernel`` (lengthscales,
    outputscales), ``likelihood`` (noises)."""

    def __init__(self, network: FeatureMap, base_kernels: list, likelihoods: list, *, inference: str = "exact",
                 grid_size: int = 100, grid_margin: float = 0.1, gp_dtype: torch.dtype = torch.float64,
                 kiss_dense_below: int = 0):
        super().__init__()
        self.network = network
        self.likelihoods = nn.ModuleList(likelihoods)
        self.inference, self.grid_size, self.grid_margin = inference, grid_size, grid_margin
        self.kiss_dense_below = kiss_dense_below
        E = network.head.out_features
        self.gps = nn.ModuleList(
            EmbeddingGP(k, lik.gp, embed_dim=E, inference=inference, grid_size=grid_size)
            for k, lik in zip(base_kernels, likelihoods))
        self.gps.to(gp_dtype)
        self.likelihoods.to(gp_dtype)
        self.gp_dtype = gp_dtype
        self._train_h = None  # the embedding the prediction caches were built on
        self._exact = []  # exact inference: (Cholesky factor, alpha) per output

    # ----- parameters --------------------------------------------------------------------------------
    def groups(self) -> dict[str, list]:
        return {"network": list(self.network.parameters()),
                "kernel": [p for gp in self.gps for p in gp.covar_module.parameters()],
                "likelihood": [p for lik in self.likelihoods for p in lik.parameters()]}

    @property
    def num_outputs(self) -> int:
        return len(self.gps)

    # ----- the embedding ------------------------------------------------------------------------------
    def embed(self, x: torch.Tensor, *, train: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
        """H = phi_W(x) in the GP's dtype (dropout only if ``train``)."""
        return self.network(x, train=train, generator=generator).to(self.gp_dtype)

    def fit_grid(self, h: torch.Tensor) -> None:
        """KISS: refit every output's grid on the full training embedding ``h`` (a refresh)."""
        if self.inference != "kiss":
            return
        grid = grid_from_embedding(h.detach(), self.grid_size, self.grid_margin)
        for gp in self.gps:
            gik = gp.covar_module.base_kernel
            gik.update_grid(grid)
            gik.grid_bounds = tuple((float("nan"), float("nan")) for _ in grid)  # not used: the grid is fixed

    def settings(self, n: int):
        """gpytorch settings: dense Cholesky for exact inference at any n; KISS always through CG and
        stochastic Lanczos on the structured operator (gpytorch would densify W K_UU W^T below 800
        points, O(n m^E) memory and time for m^E grid points), unless ``kiss_dense_below`` > n."""
        if self.inference == "exact":
            return gpytorch.settings.max_cholesky_size(_BIG)
        return gpytorch.settings.max_cholesky_size(self.kiss_dense_below)

    # ----- the marginal likelihood --------------------------------------------------------------------
    def nlml(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """sum_k -log N(y_k | 0, K_k(h) + s_k^2 I): ``h`` (N, E) float64, ``y`` (N,) or (N, d)."""
        y = y.to(self.gp_dtype)
        y = y[:, None] if y.ndim == 1 else y
        total = h.new_zeros(())
        with self.settings(h.shape[0]):
            for k, (gp, lik) in enumerate(zip(self.gps, self.likelihoods)):
                was = gp.covar_module.training
                gp.covar_module.train()  # in eval mode gpytorch's GridKernel reuses a cached K_UU (and its graph)
                try:
                    prior = gpytorch.distributions.MultivariateNormal(h.new_zeros(h.shape[0]), gp.covar_module(h))
                    total = total - lik.gp(prior).log_prob(y[:, k])
                finally:
                    gp.covar_module.train(was)
        return total

    # ----- predictions --------------------------------------------------------------------------------
    @torch.no_grad()
    def condition(self, x_train: torch.Tensor, y_train: torch.Tensor) -> None:
        """Embed the training windows (no dropout) and reset every output's prediction caches
        (gpytorch keeps stale caches when parameters change in eval mode: issue #1556)."""
        h = self.embed(x_train)
        self.fit_grid(h)
        y = y_train.to(self.gp_dtype)
        y = y[:, None] if y.ndim == 1 else y
        self._exact = []
        for k, (gp, lik) in enumerate(zip(self.gps, self.likelihoods)):
            gp.set_train_data(h, y[:, k].contiguous(), strict=False)
            gp.eval()  # stays in eval mode: ExactGP.train() would drop the caches built by the next prediction
            if self.inference == "exact":  # dense: L L^T = K + s^2 I, alpha = (K + s^2 I)^-1 y
                K = gp.covar_module(h).to_dense()
                L = safe_cholesky(K + lik.noise * torch.eye(h.shape[0], dtype=h.dtype, device=h.device), what="K + s^2 I")
                self._exact.append((L, torch.cholesky_solve(y[:, k:k + 1], L)))
        self._train_h = h

    def _clamp(self, h: torch.Tensor) -> torch.Tensor:
        if self.inference != "kiss":
            return h
        grid = self.gps[0].covar_module.base_kernel.grid
        lo = torch.stack([g[2] for g in grid]) + 0.01 * torch.stack([g[1] - g[0] for g in grid])
        hi = torch.stack([g[-3] for g in grid]) - 0.01 * torch.stack([g[1] - g[0] for g in grid])
        return torch.maximum(torch.minimum(h, hi), lo)

    @torch.no_grad()
    def marginals_all(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Latent predictive means and variances (n, d) at windows ``x`` (after :meth:`condition`)."""
        if self._train_h is None:
            raise RuntimeError("call condition(x_train, y_train) before predicting")
        h = self._clamp(self.embed(x))
        mus, vs = [], []
        if self.inference == "exact":  # mu = K_*n alpha, var = k_** - |L^-1 K_n*|^2
            for gp, (L, alpha) in zip(self.gps, self._exact):
                Ks = gp.covar_module(h, self._train_h).to_dense()
                v = torch.linalg.solve_triangular(L, Ks.T, upper=False)
                mus.append((Ks @ alpha)[:, 0])
                vs.append((gp.covar_module(h, diag=True) - v.pow(2).sum(0)).clamp_min(1e-12))
            return torch.stack(mus, 1), torch.stack(vs, 1)
        for gp in self.gps:
            with self.settings(self._train_h.shape[0]), gpytorch.settings.fast_pred_var(self.inference == "kiss"):
                f = gp(h)
                mus.append(f.mean)
                vs.append(f.variance.clamp_min(1e-12))
        return torch.stack(mus, 1), torch.stack(vs, 1)

    def marginals(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``marginals`` protocol for the first (or only) output."""
        mu, var = self.marginals_all(x)
        return mu[:, 0], var[:, 0]


class NetworkRegressor(nn.Module):
    """A network baseline (LSTM, GRU, RNN, NARX with linear outputs; App. E) trained with MSE. Its
    predictive distribution, for NLL only, is N(f(x), s_k^2) with s_k^2 the mean squared training
    residual of output k (fitted after training): latent variance 0."""

    def __init__(self, network: FeatureMap, likelihoods: list):
        super().__init__()
        self.network = network
        self.likelihoods = nn.ModuleList(likelihoods)

    def groups(self) -> dict[str, list]:
        return {"network": list(self.network.parameters())}

    @property
    def num_outputs(self) -> int:
        return len(self.likelihoods)

    def predict(self, x: torch.Tensor, *, train: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.network(x, train=train, generator=generator)

    def condition(self, x_train: torch.Tensor, y_train: torch.Tensor) -> None:
        pass

    @torch.no_grad()
    def marginals_all(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.predict(x).to(x.dtype)
        return mu, torch.full_like(mu, 1e-12)

    def marginals(self, x):
        mu, var = self.marginals_all(x)
        return mu[:, 0], var[:, 0]


__all__ = ["DeepKernelGP", "EmbeddingGP", "NetworkRegressor", "grid_from_embedding"]
