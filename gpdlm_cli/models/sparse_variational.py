"""Sparse variational GP: q(u) = N(m, V) over M inducing values, q(f_i) = N(mu_i, var_i).

Built on gpytorch's whitened ``VariationalStrategy`` (Hensman et al., 2015): the free parameters
are m~ = L^{-1} m and S = L^{-1} V L^{-T} with K_uu = L L^T, so KL(q(u)||p(u)) and the marginals
mu_i = K_iu K_uu^{-1} m, var_i = K_ii + K_iu K_uu^{-1} (V - K_uu) K_uu^{-1} K_ui (DLM paper, Sec. 2)
are the same functions of (m, V) as in the unwhitened form. SVGP, beta-ELBO, DLM and square-loss
DLM all share this model; only the objective differs.
"""

from __future__ import annotations

import gpytorch
import torch

from .kernels import dense_covariance, diagonal_covariance
from .linalg import safe_cholesky, tri_solve, whitened_gram, whitened_marginal_updates


class SparseVariationalGP(gpytorch.models.ApproximateGP):
    """q(u) over inducing inputs Z (M x D); ``marginals(x)`` returns (mu, var) of q(f(x))."""

    def __init__(self, inducing_points: torch.Tensor, kernel, mean, learn_inducing: bool = True, jitter: float = 1e-6):
        M = inducing_points.shape[-2]
        q_u = gpytorch.variational.CholeskyVariationalDistribution(M, dtype=inducing_points.dtype)
        strategy = gpytorch.variational.VariationalStrategy(
            self, inducing_points, q_u, learn_inducing_locations=learn_inducing, jitter_val=jitter
        )
        super().__init__(strategy)
        # L_S enters only through .tril(): L-BFGS moves its lower triangle alone (training.lbfgs)
        q_u.chol_variational_covar.free_entries = torch.ones(M, M, dtype=torch.bool).tril()
        self.mean_module = mean
        self.covar_module = kernel
        self.jitter = jitter

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    # ----- what objectives and metrics use ------------------------------------------------------
    def marginals(self, x: torch.Tensor):
        """Mean and variance of q(f_i) at each row of x (only the diagonal is ever formed).

        Whitened (Hensman et al., 2015), with K_uu + jitter I = L L^T, A = L^{-1} K_ux, q(u~) = N(m~, S),
        S = L_S L_S^T:  mu = m(x) + A^T m~,  var_i = K_ii + jitter - |A_i|^2 + |L_S^T A_i|^2.
        The same numbers as gpytorch's ``VariationalStrategy`` (to ~1e-13 in float64, tested), written
        directly in torch: no linear-operator objects, distributions or settings on the hot path, and
        the kernel matrices of ``kernels.dense_covariance`` (``benchmarks/bench_training.py`` measures
        the difference)."""
        self._ensure_initialised()
        Z = self.inducing_points
        L = self._kuu_cholesky(Z)
        m, L_S = self.q_u.variational_mean, self.q_u.chol_variational_covar.tril()
        eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        # gpytorch's fused update (its backward costs two O(M^2 N) products instead of four), in K_ux's layout
        dmu, dvar = whitened_marginal_updates(L, dense_covariance(self.covar_module, Z, x), L_S @ L_S.mT - eye, m)
        return self.mean_module(x) + dmu, diagonal_covariance(self.covar_module, x) + self.jitter + dvar

    def _kuu_cholesky(self, Z: torch.Tensor) -> torch.Tensor:
        Kuu = dense_covariance(self.covar_module, Z)
        eye = torch.eye(Z.shape[-2], dtype=Kuu.dtype, device=Kuu.device)
        from linear_operator.utils.errors import NotPSDError

        from ..exceptions import NumericalError

        try:
            return safe_cholesky(Kuu + self.jitter * eye)  # checked on the CPU only (no sync on a GPU)
        except NumericalError as e:  # as gpytorch's path raised it: the trainer reports the first NaN loss, if any
            raise NotPSDError(str(e)) from None

    def _ensure_initialised(self) -> None:
        """gpytorch initialises q(u) at the first call (m~ = prior mean + mean_init_std * N(0, I)
        noise, L_S = chol of the prior covariance: 0 and I, whitened); so does this path, with the
        noise drawn from the CPU's generator and moved, so that a run on CUDA starts where the same
        run on the CPU does (gpytorch draws it with ``randn_like`` on the model's device, another
        stream: a GPU run then started elsewhere and ended elsewhere). On the CPU these are gpytorch's
        numbers bit for bit. The flag is read from the device once, not at every step."""
        if getattr(self, "_q_ready", False):
            return
        strategy = self.variational_strategy
        if not bool(strategy.variational_params_initialized.item()):
            q, prior = self.q_u, strategy.prior_distribution
            with torch.no_grad():
                mean = q.variational_mean
                noise = torch.randn_like(
                    prior.mean, device="cpu"
                )  # gpytorch's draw, from the CPU's stream on every device
                mean.copy_(prior.mean)
                mean.add_(noise.to(mean.device), alpha=q.mean_init_std)
                q.chol_variational_covar.copy_(prior.lazy_covariance_matrix.cholesky().to_dense())
            strategy.variational_params_initialized.fill_(1)
        self._q_ready = True

    def prior_mean(self, x: torch.Tensor) -> torch.Tensor:
        """m(x), the GP's prior mean at each row of x."""
        return self.mean_module(x)

    def prior_variance(self, x: torch.Tensor) -> torch.Tensor:
        """K_ii, the prior variance at each row of x (the kernel's diagonal)."""
        return diagonal_covariance(self.covar_module, x)

    def kl_divergence(self) -> torch.Tensor:
        """KL(q(u) || p(u)) = KL(N(m~, S) || N(0, I)) = (tr S + |m~|^2 - M - log det S) / 2 (whitened),
        with tr S = |L_S|_F^2 and log det S = 2 sum_j log |(L_S)_jj|."""
        self._ensure_initialised()
        m, L_S = self.q_u.variational_mean, self.q_u.chol_variational_covar.tril()
        logdet = 2 * L_S.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)
        return 0.5 * ((L_S * L_S).sum((-2, -1)) + (m * m).sum(-1) - m.shape[-1] - logdet)

    @property
    def inducing_points(self) -> torch.Tensor:
        return self.variational_strategy.inducing_points

    @property
    def q_u(self):
        return self.variational_strategy._variational_distribution

    def whitened_mean(self) -> torch.Tensor:
        """m~ = L^{-1} m, so m^T K_uu^{-1} m = |m~|^2."""
        return self.q_u.variational_mean

    @torch.no_grad()
    def set_whitened_q(self, mean: torch.Tensor, chol_covar: torch.Tensor) -> None:
        """Write q(u~) = N(m~, L_S L_S^T) and mark it set, so the next prediction does not
        re-initialise it to the prior (gpytorch initialises q(u) at its first call otherwise)."""
        self.q_u.variational_mean.copy_(mean)
        self.q_u.chol_variational_covar.copy_(chol_covar)
        self.variational_strategy.variational_params_initialized.fill_(1)

    def variational_parameters(self):
        return list(self.q_u.parameters())

    def hyperparameters(self):
        ids = {id(p) for p in self.variational_parameters()}
        return [p for p in self.parameters() if id(p) not in ids]

    def reset_variational(self, covariance_scale: float = 1.0) -> None:
        """q(u) back to its start: m~ = 0, S = scale * I (scale 1 means V = K_uu, the prior)."""
        with torch.no_grad():
            self.q_u.variational_mean.zero_()
            self.q_u.chol_variational_covar.copy_(
                torch.eye(self.q_u.chol_variational_covar.shape[-1]) * covariance_scale**0.5
            )
        self.variational_strategy.variational_params_initialized.fill_(1)

    def whitened_gram(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(A A^T, A r) for A = L^{-1} K_ux (M x N) and an N-vector r, without A in the autograd graph
        (``linalg.whitened_gram``): what the collapsed bound needs, at a third of autograd's cost."""
        Z = self.inducing_points
        return whitened_gram(self._kuu_cholesky(Z), dense_covariance(self.covar_module, Z, x), r)

    def interpolation(self, x: torch.Tensor) -> torch.Tensor:
        """B = K_xu L^{-T} (N x M): mu = mean(x) + B m~ in whitened coordinates."""
        Z = self.inducing_points
        return tri_solve(self._kuu_cholesky(Z), dense_covariance(self.covar_module, Z, x)).transpose(-1, -2)
