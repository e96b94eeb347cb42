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
  ``ScaleKernel(GridInterpolationKernelInOrder(base))`` -- K ~ s_f^2 W K_UU W^T with the outputscale
  outside, so diag K = s_f^2 (inside, gpytorch applies it once per grid dimension), and K_UU's
  Kronecker factors in the order of the interpolation indices (gpytorch's own ``GridKernel``
  reverses them, which with linear_operator >= 0.6 swaps the dimensions in 2-3-D; a check at build
  time compares a small KISS block with the dense kernel). The grid is *fixed* between refreshes
  and refitted by :meth:`DeepKernelGP.fit_grid` on the full training embedding (range plus a margin
  of ``grid_margin`` of the range and 2.01 cells each side), never per batch (gpytorch's
  ``ScaleToBounds`` would map one window to different coordinates in different batches).
  Embeddings outside the grid's interior are clamped into it at prediction time. Below
  ``kiss_dense_below`` training windows the KISS matrix is formed densely
  (:meth:`GridInterpolationKernelInOrder.dense`, O(E n^2 m)) and factorised by Cholesky, as exact
  inference: deterministic, at exact inference's cost. From there on, CG and stochastic Lanczos on
  the structured operator with the pivoted-Cholesky preconditioner (a stochastic estimate; the
  trainer seeds its probes), and predictions from gpytorch's mean cache and LOVE variances.

The NLML, per output k: -log N(y_k | 0, K_k(H) + s_k^2 I), summed over outputs; objectives divide
it by N (``gpdlm_cli.objectives.recurrent``).
"""

from __future__ import annotations

import contextlib
from typing import cast

import gpytorch
import torch
from gpytorch.utils.interpolation import Interpolation
from linear_operator import to_linear_operator
from linear_operator.operators import KroneckerProductLinearOperator, ToeplitzLinearOperator
from torch import nn

from ..features.recurrent import FeatureMap
from ..likelihoods import GaussianLikelihood
from .linalg import safe_cholesky

_BIG = 10**9
#: KISS: training sets of fewer windows are evaluated densely (``model.gp.kiss_dense_below``)
KISS_DENSE_BELOW = 2000
# KISS predictions on the structured operator: gpytorch's defaults (CG to a relative residual of 1e-2
# for the mean cache, a LOVE rank of 100) left mean errors of 3e-2 and variance errors of 2e-3 against
# the exact GP at 2,500 windows (anisotropic 2-D, 100^2 grid); these give 4e-5 and 5e-7 (issue 19).
_PRED_CG_TOL = 1e-6
_LOVE_RANK = 300


class GridInterpolationKernelInOrder(gpytorch.kernels.GridInterpolationKernel):
    """KISS-GP's K_XX ~ W K_UU W^T (Wilson and Nickisch 2015, Eq. 5) on a regular grid U = U_0 x ... x
    U_{E-1}, with the Kronecker factors of K_UU in the order of the interpolation weights W.

    gpytorch's ``GridInterpolationKernel`` numbers the grid points row-major (dimension 0 slowest:
    index = sum_d i_d prod_{d' > d} m_{d'}), so K_UU = K_0 (x) K_1 (x) ... (x) K_{E-1} with
    (K_d)_{ab} = k((u_{d,a} - u_{d,b}) e_d), the base kernel along dimension d alone (a product of 1-D
    kernels; for an RBF this is the RBF itself, for a Matern the product of 1-D Materns). gpytorch's
    ``GridKernel`` passes the factors reversed ("legacy" order: (A, B, C) meant C (x) B (x) A), but
    linear_operator >= 0.6 builds the standard A (x) B: in 2-3-D the lengthscales then act on the
    wrong dimensions (issue 19). This class builds K_UU itself, in interpolation order; each factor is
    Toeplitz (a regular grid, a stationary kernel). :func:`check_kiss_kronecker_order` verifies the
    whole construction against the dense kernel when a model is built."""

    def _inducing_forward(self, last_dim_is_batch, **params):
        if last_dim_is_batch:
            raise NotImplementedError("GridInterpolationKernelInOrder does not support last_dim_is_batch")
        if not self.training and hasattr(self, "_cached_kernel_mat"):
            return self._cached_kernel_mat  # predictions: K_UU once per condition (fit_grid clears it)
        grid = self.grid
        origin = torch.stack([g[0] for g in grid])[None]  # (1, E): the first grid point
        factors = []
        for d, g in enumerate(grid):
            along = origin.expand(g.shape[0], -1).clone()
            along[:, d] = g  # the grid line through the origin along dimension d
            column = self.base_kernel(origin, along, **params).to_dense()[0]  # k((u_{d,a} - u_{d,0}) e_d)
            factors.append(ToeplitzLinearOperator(column))
        covar = factors[0] if len(factors) == 1 else KroneckerProductLinearOperator(*factors)
        if not self.training:
            self._cached_kernel_mat = covar
        return covar

    #: the training matrix W K_UU W^T as ``kiss_operator.FactoredKissOperator`` (structure-aware entries for
    #: the preconditioner; issue 41); False: gpytorch's InterpolatedLinearOperator (the benchmark's reference)
    factored = True

    def forward(self, x1, x2, diag=False, last_dim_is_batch=False, **params):
        """In training mode, K(h, h): the structure-aware operator (same matrix); otherwise gpytorch's."""
        if self.factored and self.training and not diag and not last_dim_is_batch and x1.ndim == 2:
            if x1 is x2 or (x1.shape == x2.shape and torch.equal(x1, x2)):
                return self.factored_operator(x1)
        return super().forward(x1, x2, diag=diag, last_dim_is_batch=last_dim_is_batch, **params)

    def factored_operator(self, x: torch.Tensor):
        """W K_UU W^T at points ``x`` (n, E) as a :class:`~gpdlm_cli.models.kiss_operator.FactoredKissOperator`."""
        from .kiss_operator import FactoredKissOperator

        interp = Interpolation()
        idx, val, factors = [], [], []
        for d, column in enumerate(self._factor_columns()):
            i, v = interp.interpolate([self.grid[d]], x[:, d : d + 1])
            idx.append(i.detach())
            val.append(v)
            steps = torch.arange(column.shape[0], device=column.device)
            factors.append(column[(steps[:, None] - steps[None]).abs()])
        return FactoredKissOperator(torch.stack(val), torch.stack(idx), *factors)

    def _factor_columns(self) -> list[torch.Tensor]:
        """The first column of every K_d (as in :meth:`_inducing_forward`)."""
        op = self._inducing_forward(last_dim_is_batch=False)
        ops = [op] if isinstance(op, ToeplitzLinearOperator) else op.linear_ops
        return [t.column for t in ops]

    def dense(self, x1: torch.Tensor, x2: torch.Tensor | None = None, *, diag: bool = False) -> torch.Tensor:
        """The KISS kernel matrix W_1 K_UU W_2^T as a dense tensor (n1, n2) (its diagonal (n1,) if
        ``diag``), exactly the matrix the structured operator represents: the cubic interpolation
        weights are a tensor product over the dimensions and K_UU a Kronecker product, so
        W_1 K_UU W_2^T = prod_d (W_{1,d} K_d W_{2,d}^T) (elementwise), with W_{i,d} the (n_i, m_d)
        weights along dimension d (4 per row): O(E n1 n2 m) time, O(n1 n2 + n m) memory, no n m^E
        term. Differentiable in x1, x2 (through the weights) and the base kernel's hyperparameters."""
        interp = Interpolation()
        out: torch.Tensor | None = None
        for d, column in enumerate(self._factor_columns()):
            m = column.shape[0]
            steps = torch.arange(m, device=column.device)
            Kd = column[(steps[:, None] - steps[None]).abs()]  # the Toeplitz factor, (m, m)

            def weights(x, d=d, m=m):  # W_d: (n, m), the 4 cubic-interpolation weights of each row scattered
                idx, val = interp.interpolate([self.grid[d]], x[:, d : d + 1])
                return torch.zeros(x.shape[0], m, dtype=val.dtype, device=val.device).scatter_add(1, idx, val)

            w1 = weights(x1)
            left = w1 @ Kd  # (n1, m): W_{1,d} K_d
            if diag:
                fd = (left * w1).sum(-1)
            else:
                fd = left @ (w1 if x2 is None else weights(x2)).T  # (n1, n2): W_{1,d} K_d W_{2,d}^T
            out = fd if out is None else out * fd
        if out is None:  # no dimension: not a kernel this class builds
            raise ValueError("GridInterpolationKernelInOrder.dense needs at least one grid dimension")
        return out


_CHECKED_DIMS: set[int] = set()


def check_kiss_kronecker_order(embed_dim: int) -> float:
    """Build-time guard of :class:`GridInterpolationKernelInOrder`: a small KISS block against the
    dense kernel it approximates (an ARD RBF with lengthscales 0.4, 1, 2 on a box with ranges in
    ratio 1 : 2 : 4, 16 points, a 24-point grid per dimension), evaluated as training evaluates it
    (the structured operator times the identity). The interpolation error is 4e-4 (2-D) and 5e-4
    (3-D) here; every other order of the Kronecker factors gives 0.095 to 0.26. Both operators are checked:
    training's ``kiss_operator.FactoredKissOperator`` and gpytorch's interpolated one (predictions). Raises
    ``NumericalError`` above 0.01 (a gpytorch or linear_operator that changed either convention);
    returns the max error. Runs once per process and dimension (milliseconds)."""
    from ..exceptions import NumericalError

    if embed_dim < 2 or embed_dim in _CHECKED_DIMS:
        return 0.0
    E, m, n = embed_dim, 24, 16
    ell = torch.tensor([0.4, 1.0, 2.0][:E], dtype=torch.float64)
    span = torch.tensor([1.0, 2.0, 4.0][:E], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(n, E, generator=g, dtype=torch.float64) * 2 - 1) * span
    base = gpytorch.kernels.RBFKernel(ard_num_dims=E).to(torch.float64)
    base.lengthscale = ell
    kernel = GridInterpolationKernelInOrder(base, m, num_dims=E, grid_bounds=tuple((-1.0, 1.0) for _ in range(E)))
    kernel.to(torch.float64)
    kernel.update_grid(grid_from_embedding(x, m, 0.0))
    with torch.no_grad():
        d = x / ell
        dense = torch.exp(-0.5 * (d[:, None] - d[None]).pow(2).sum(-1))
        err = 0.0
        for mode in (kernel.train, kernel.eval):  # training: FactoredKissOperator; predictions: gpytorch's operator
            mode()
            kiss = kernel(x, x).matmul(torch.eye(n, dtype=torch.float64))
            err = max(err, float((kiss - dense).abs().max()))
    if not err <= 0.01:
        import linear_operator

        raise NumericalError(
            f"KISS-GP self-check failed in {E}-D: max |W K_UU W^T - K| = {err:.3g} on a small grid (expected < 1e-3): "
            f"gpytorch {gpytorch.__version__} / linear_operator {linear_operator.__version__} order the Kronecker "
            f"factors or the interpolation indices differently from what gpdlm_cli.models.deep_kernel."
            f"GridInterpolationKernelInOrder assumes"
        )
    _CHECKED_DIMS.add(E)
    return err


class EmbeddingGP(gpytorch.models.ExactGP):
    """One output's GP on embeddings h (N, E): zero mean, ScaleKernel(base) or
    ScaleKernel(GridInterpolationKernelInOrder(base)). Used for predictions (gpytorch's prediction
    strategies, O(1) means for KISS; kept in eval mode between ``DeepKernelGP.condition`` calls so
    their caches survive); the NLML is computed directly from ``covar_module``, in any mode."""

    covar_module: gpytorch.kernels.ScaleKernel

    def __init__(self, base_kernel, likelihood, *, embed_dim: int, inference: str, grid_size: int):
        super().__init__(None, None, likelihood)
        self.mean_module = gpytorch.means.ZeroMean()
        inner = base_kernel
        if inference == "kiss":
            inner = GridInterpolationKernelInOrder(
                base_kernel, grid_size, num_dims=embed_dim, grid_bounds=tuple((-1.0, 1.0) for _ in range(embed_dim))
            )
        self.covar_module = gpytorch.kernels.ScaleKernel(inner)

    @property
    def kiss_kernel(self) -> GridInterpolationKernelInOrder:
        """The grid-interpolation kernel inside ``covar_module`` (KISS inference only)."""
        inner = self.covar_module.base_kernel
        if not isinstance(inner, GridInterpolationKernelInOrder):
            raise TypeError("EmbeddingGP.kiss_kernel: this GP does not use KISS inference")
        return inner

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

    def __init__(
        self,
        network: FeatureMap,
        base_kernels: list,
        likelihoods: list,
        *,
        inference: str = "exact",
        grid_size: int = 100,
        grid_margin: float = 0.1,
        gp_dtype: torch.dtype = torch.float64,
        kiss_dense_below: int = KISS_DENSE_BELOW,
    ):
        super().__init__()
        self.network = network
        self.likelihoods = nn.ModuleList(likelihoods)
        self.inference, self.grid_size, self.grid_margin = inference, grid_size, grid_margin
        self.kiss_dense_below = kiss_dense_below
        E = network.head.out_features
        if inference == "kiss":
            check_kiss_kronecker_order(E)
        self.gps = nn.ModuleList(
            EmbeddingGP(k, lik.gp, embed_dim=E, inference=inference, grid_size=grid_size)
            for k, lik in zip(base_kernels, likelihoods)
        )
        self.gps.to(gp_dtype)
        self.likelihoods.to(gp_dtype)
        self.gp_dtype = gp_dtype
        self._train_h: torch.Tensor | None = None  # the embedding the prediction caches were built on
        self._exact: list[
            tuple[torch.Tensor, torch.Tensor]
        ] = []  # dense inference (exact, or KISS below kiss_dense_below): (Cholesky factor, alpha) per output

    @property
    def outputs(self) -> list[EmbeddingGP]:
        """The per-output GPs (``gps``), typed."""
        return [cast(EmbeddingGP, gp) for gp in self.gps]

    @property
    def output_likelihoods(self) -> list[GaussianLikelihood]:
        """The per-output likelihoods (``likelihoods``), typed."""
        return [cast(GaussianLikelihood, lik) for lik in self.likelihoods]

    # ----- parameters --------------------------------------------------------------------------------
    def groups(self) -> dict[str, list]:
        return {
            "network": list(self.network.parameters()),
            "kernel": [p for gp in self.outputs for p in gp.covar_module.parameters()],
            "likelihood": [p for lik in self.likelihoods for p in lik.parameters()],
        }

    @property
    def num_outputs(self) -> int:
        return len(self.gps)

    # ----- the embedding ------------------------------------------------------------------------------
    def embed(
        self,
        x: torch.Tensor,
        *,
        train: bool = False,
        generator: torch.Generator | None = None,
        masks: dict | None = None,
    ) -> torch.Tensor:
        """H = phi_W(x) in the GP's dtype (dropout only if ``train`` or with given ``masks``)."""
        return self.network(x, train=train, generator=generator, masks=masks).to(self.gp_dtype)

    def fit_grid(self, h: torch.Tensor) -> None:
        """KISS: refit every output's grid on the full training embedding ``h`` (a refresh)."""
        if self.inference != "kiss":
            return
        grid = grid_from_embedding(h.detach(), self.grid_size, self.grid_margin)
        for gp in self.outputs:
            gik = gp.kiss_kernel
            gik.update_grid(grid)
            gik.grid_bounds = tuple((float("nan"), float("nan")) for _ in grid)  # not used: the grid is fixed

    def is_dense(self, n: int) -> bool:
        """Whether a GP on ``n`` training windows is evaluated densely (Cholesky): exact inference,
        or KISS below ``kiss_dense_below`` windows."""
        return self.inference == "exact" or n < self.kiss_dense_below

    def settings(self, n: int):
        """gpytorch settings: dense Cholesky whenever :meth:`is_dense`; otherwise (KISS, n >=
        ``kiss_dense_below``) CG and stochastic Lanczos on the structured operator, never densified
        by gpytorch (it would form W K_UU W^T below 800 points through an n x m^E product), with the
        pivoted-Cholesky preconditioner at every size (linear_operator skips it below 2,000 rows, and
        then with gpytorch's training defaults -- CG tolerance 1, 10 probes, 20 Lanczos steps -- the
        NLML moves by +-0.01 between probe draws and dL/dh is mostly noise; issue 19)."""
        if self.is_dense(n):
            return gpytorch.settings.max_cholesky_size(_BIG)
        stack = contextlib.ExitStack()
        stack.enter_context(gpytorch.settings.max_cholesky_size(0))
        stack.enter_context(gpytorch.settings.min_preconditioning_size(0))
        return stack

    def covariance(
        self, k: int, h1: torch.Tensor, h2: torch.Tensor | None = None, *, diag: bool = False
    ) -> torch.Tensor:
        """Output k's prior covariance K_k(h1, h2) as a dense tensor (the KISS kernel for KISS)."""
        gp = self.outputs[k]
        cov = gp.covar_module
        if self.inference == "exact":
            return cov(h1, h2, diag=diag) if diag else cov(h1, h2).to_dense()
        return cov.outputscale * gp.kiss_kernel.dense(h1, h2, diag=diag)

    # ----- the marginal likelihood --------------------------------------------------------------------
    def nlml(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """sum_k -log N(y_k | 0, K_k(h) + s_k^2 I): ``h`` (N, E) float64, ``y`` (N,) or (N, d)."""
        y = y.to(self.gp_dtype)
        y = y[:, None] if y.ndim == 1 else y
        total = h.new_zeros(())
        dense = self.is_dense(h.shape[0])
        with self.settings(h.shape[0]):
            for k, (gp, lik) in enumerate(zip(self.outputs, self.output_likelihoods)):
                was = gp.covar_module.training
                gp.covar_module.train()  # in eval mode gpytorch's GridKernel reuses a cached K_UU (and its graph)
                try:
                    if dense and self.inference == "kiss":
                        cov = to_linear_operator(self.covariance(k, h))  # W K_UU W^T formed densely
                    else:
                        cov = gp.covar_module(h)
                    prior = gpytorch.distributions.MultivariateNormal(h.new_zeros(h.shape[0]), cov)
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
        for k, (gp, lik) in enumerate(zip(self.outputs, self.output_likelihoods)):
            gp.set_train_data(h, y[:, k].contiguous(), strict=False)
            gp.eval()  # stays in eval mode: ExactGP.train() would drop the caches built by the next prediction
            if self.is_dense(h.shape[0]):  # dense: L L^T = K + s^2 I, alpha = (K + s^2 I)^-1 y
                K = self.covariance(k, h)
                L = safe_cholesky(
                    K + lik.noise * torch.eye(h.shape[0], dtype=h.dtype, device=h.device), what="K + s^2 I"
                )
                self._exact.append((L, torch.cholesky_solve(y[:, k : k + 1], L)))
        self._train_h = h

    def _clamp(self, h: torch.Tensor) -> torch.Tensor:
        if self.inference != "kiss":
            return h
        grid = self.outputs[0].kiss_kernel.grid
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
        if self._exact:  # dense: mu = K_*n alpha, var = k_** - |L^-1 K_n*|^2
            for k, (L, alpha) in enumerate(self._exact):
                Ks = self.covariance(k, h, self._train_h)
                v = torch.linalg.solve_triangular(L, Ks.T, upper=False)
                mus.append((Ks @ alpha)[:, 0])
                vs.append((self.covariance(k, h, diag=True) - v.pow(2).sum(0)).clamp_min(1e-12))
            return torch.stack(mus, 1), torch.stack(vs, 1)
        for gp in self.gps:  # KISS on the structured operator: gpytorch's mean cache and LOVE variances
            with (
                self.settings(self._train_h.shape[0]),
                gpytorch.settings.fast_pred_var(True),
                gpytorch.settings.eval_cg_tolerance(_PRED_CG_TOL),
                gpytorch.settings.max_root_decomposition_size(_LOVE_RANK),
                torch.random.fork_rng(devices=[]),
            ):
                torch.manual_seed(0)  # LOVE draws its probe vector from the global generator: fixed here
                f = gp(h)
                mus.append(f.mean)
                vs.append(f.variance.clamp_min(1e-12))
        return torch.stack(mus, 1), torch.stack(vs, 1)

    @torch.no_grad()
    def means(self, x: torch.Tensor) -> torch.Tensor:
        """Latent predictive means (n, d) at windows ``x`` (after :meth:`condition`), without the
        variances: what a free-simulation rollout feeds back (dense: K_*n alpha, O(n) per window)."""
        if not self._exact:
            return self.marginals_all(x)[0]
        h = self._clamp(self.embed(x))
        return torch.stack(
            [(self.covariance(k, h, self._train_h) @ alpha)[:, 0] for k, (_, alpha) in enumerate(self._exact)], 1
        )

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

    def predict(
        self, x: torch.Tensor, *, train: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        return self.network(x, train=train, generator=generator)

    @torch.no_grad()
    def condition(self, x_train: torch.Tensor, y_train: torch.Tensor) -> None:
        """The predictive noise s_k^2 of every output: its mean squared residual on the training windows."""
        resid = self.predict(x_train).to(y_train.dtype) - (y_train[:, None] if y_train.ndim == 1 else y_train)
        for k, lik in enumerate(self.likelihoods):
            cast(GaussianLikelihood, lik).gp.noise = resid[:, k].pow(2).mean().clamp_min(1e-8)

    @torch.no_grad()
    def marginals_all(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.predict(x).to(x.dtype)
        return mu, torch.full_like(mu, 1e-12)

    @torch.no_grad()
    def means(self, x: torch.Tensor) -> torch.Tensor:
        return self.predict(x).to(x.dtype)

    def marginals(self, x):
        mu, var = self.marginals_all(x)
        return mu[:, 0], var[:, 0]


class Pretrainer(nn.Module):
    """The matching network baseline of a GP's network for ``model.init=pretrained`` (GP-LSTM paper,
    Sec. 5.2.3): the ``network`` body (shared, so its trained recurrent layers are kept) plus its own
    linear head to ``num_outputs`` outputs, trained with MSE."""

    def __init__(self, network: FeatureMap, num_outputs: int):
        super().__init__()
        self.network = network
        self.head = torch.nn.Linear(network.head.in_features, num_outputs).to(network.dtype)

    def forward(self, x, *, train=False, generator=None):
        return self.head(self.network.hidden(x, train=train, generator=generator))


__all__ = [
    "KISS_DENSE_BELOW",
    "DeepKernelGP",
    "EmbeddingGP",
    "GridInterpolationKernelInOrder",
    "NetworkRegressor",
    "Pretrainer",
    "check_kiss_kronecker_order",
    "grid_from_embedding",
]
