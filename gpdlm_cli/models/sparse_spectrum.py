"""Sparse-spectrum GP models: the trigonometric features and three ways to treat the frequencies.

Notation (Hoang, Hoang & Low, AAAI 2017, Sec. 2; symbols as in ``shared/notes/svbssgp-spec.md``):
inputs x in R^d (standardised), m frequencies r_i in R^d in *cycles* per unit input,
theta = vec(r_1, ..., r_m) in R^{md}, signal variance s_s^2, noise variance s_n^2.

* Eq. (2): k(x, x') ~= (s_s^2 / m) sum_i cos(2 pi r_i^T (x - x')) = phi(x)^T Lambda phi(x'), with
  phi(x) = [cos(2 pi r_1^T x), sin(2 pi r_1^T x), ..., cos(2 pi r_m^T x), sin(2 pi r_m^T x)] (2m)
  and Lambda = (s_s^2 / m) I. With r_i ~ N(0, (4 pi^2 Delta)^-1) it is an unbiased estimate of the
  SE kernel with squared lengthscales Delta (eq. 1).
* Eq. (3): nuisance weights s ~ N(0, Lambda) with f = Phi^T s, so y | theta, s ~ N(Phi^T s, s_n^2 I).

Models:

* ``SSGP`` (Lazaro-Gredilla et al., 2010): point-estimate frequencies, exact marginal likelihood
  of the finite kernel in O(n m^2), global predictive.
* ``VSSGP`` (Gal & Turner, 2015, in this paper's cos/sin basis): factorised
  q(theta, s) = prod_i N(r_i | mu_i, diag sd_i^2) N(s | m_s, diag S); E[phi] and E[phi phi^T] are
  closed form, so the marginals of f = phi^T s (mean and variance) and the ELBO are analytic; its
  predictive is the gamma = 1 conditional.
* ``CollapsedVSSGP``: the same q over the frequencies with the optimal Gaussian q(s) integrated out
  (Gal & Turner's ``use_exact_A``): SSGP's marginal likelihood with Phi^T Phi -> E[Phi^T Phi] and
  Phi^T y -> E[Phi]^T y, minus KL(q(theta) || p(theta)).
* ``SpectralPosterior`` (sVBSSGP, Sec. 3.1): q(alpha) = N(b, M M^T) jointly over alpha = (theta, s),
  M lower-triangular with a positive diagonal; the analytic KL to p(alpha) = N(0, diag P),
  P = [Theta ... Theta, s_s^2/m ... s_s^2/m] with Theta = (2 pi l0)^-2 (prior lengthscale l0).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

TWO_PI = 2.0 * math.pi


def trig_features(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """phi_theta(x) of eq. (2), interleaved [cos, sin] per frequency.

    x: (n, d); freqs: (..., m, d) in cycles per unit input. Returns (..., n, 2m)."""
    u = TWO_PI * torch.matmul(x, freqs.transpose(-1, -2))
    return torch.stack((torch.cos(u), torch.sin(u)), dim=-1).flatten(-2)


def prior_frequency_sd(prior_lengthscale: float) -> float:
    """sd of each frequency coordinate under p(r) = N(0, (4 pi^2 l0^2)^-1 I) (eq. 1, Delta = l0^2 I)."""
    return 1.0 / (TWO_PI * prior_lengthscale)


def inv_softplus(v: torch.Tensor) -> torch.Tensor:
    """The softplus pre-image of v > 0 (stable for small and large v)."""
    return v + torch.log(-torch.expm1(-v))


def gaussian_kl_tril(b: torch.Tensor, M: torch.Tensor, prior_var: torch.Tensor) -> torch.Tensor:
    """KL(N(b, M M^T) || N(0, diag P)) for lower-triangular M with a positive diagonal:

    0.5 [ tr(P^-1 M M^T) + b^T P^-1 b - D + log|P| - 2 sum_j log M_jj ]   (Sec. 3.2, App. D;
    its gradient is the z-expectation of App. D's single-sample one)."""
    D = b.shape[-1]
    trace = ((M**2).sum(-1) / prior_var).sum()
    mahal = (b**2 / prior_var).sum()
    logdet_p = torch.log(prior_var).sum()
    logdet_q = 2.0 * torch.log(torch.diagonal(M)).sum()
    return 0.5 * (trace + mahal - D + logdet_p - logdet_q)


def diag_gaussian_kl(mean: torch.Tensor, var: torch.Tensor, prior_var) -> torch.Tensor:
    """KL(N(mean, diag var) || N(0, prior_var I)), summed over all entries."""
    return 0.5 * (var / prior_var + mean**2 / prior_var - 1.0 + torch.log(prior_var / var)).sum()


class _SignalVariance(torch.nn.Module):
    """s_s^2 = softplus(raw) (the kernel's signal variance), learned unless ``learn`` is false."""

    def __init__(self, signal_init: float, learn: bool):
        super().__init__()
        self.raw_signal = torch.nn.Parameter(
            inv_softplus(torch.tensor(float(signal_init), dtype=torch.float64)), requires_grad=learn
        )

    @property
    def signal_variance(self) -> torch.Tensor:
        return F.softplus(self.raw_signal)


class SSGP(_SignalVariance):
    """Sparse-spectrum GP with point-estimate frequencies (Lazaro-Gredilla et al., JMLR 2010).

    y ~ N(0, Phi Lambda Phi^T + s_n^2 I) with Phi = Phi_theta(X)^T (n x 2m). With
    A = Phi^T Phi + (s_n^2 m / s_s^2) I (2m x 2m), by Woodbury and the determinant lemma
      -log p(y) = [y^T y - y^T Phi A^-1 Phi^T y] / (2 s_n^2) + 0.5 log|A| + (n/2 - m) log s_n^2
                  + m log(s_s^2 / m) + (n/2) log 2 pi,
    and the latent predictive is N(phi_*^T A^-1 Phi^T y, s_n^2 phi_*^T A^-1 phi_*).

    Frequencies are learned as w (m x d) with r = w / (2 pi l0), so that the optimiser's steps are
    relative to the prior scale; they start at a prior draw (w ~ N(0, I))."""

    def __init__(
        self,
        num_frequencies: int,
        num_dims: int,
        likelihood,
        *,
        prior_lengthscale: float = 1.0,
        signal_init: float = 1.0,
        learn_signal: bool = True,
        generator: torch.Generator | None = None,
    ):
        super().__init__(signal_init, learn_signal)
        self.likelihood = likelihood
        self.freq_scale = prior_frequency_sd(prior_lengthscale)
        self.w = torch.nn.Parameter(torch.randn(num_frequencies, num_dims, generator=generator, dtype=torch.float64))
        self.x_train = self.y_train = None

    @property
    def num_frequencies(self) -> int:
        return self.w.shape[0]

    @property
    def frequencies(self) -> torch.Tensor:
        return self.w * self.freq_scale

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return trig_features(x, self.frequencies)

    def set_train_data(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x_train, self.y_train = x, y

    def _system(self, x, y):
        """Cholesky factor of A, Phi^T y and y^T y on (x, y)."""
        from .linalg import safe_cholesky

        m = self.num_frequencies
        noise = self.likelihood.noise
        phi = self.features(x)
        A = phi.T @ phi + (noise * m / self.signal_variance) * torch.eye(2 * m, dtype=x.dtype, device=x.device)
        return safe_cholesky(A, what="SSGP's A = Phi^T Phi + (s_n^2 m / s_s^2) I"), phi.T @ y, noise

    def neg_log_marginal(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """-log N(y | 0, Phi Lambda Phi^T + s_n^2 I), O(n m^2)."""
        n, m = x.shape[0], self.num_frequencies
        L, phty, noise = self._system(x, y)
        v = torch.linalg.solve_triangular(L, phty.unsqueeze(-1), upper=False).squeeze(-1)
        quad = (y @ y - v @ v) / noise
        logdet = (
            2.0 * torch.log(torch.diagonal(L)).sum()
            + (n - 2 * m) * torch.log(noise)
            + 2 * m * torch.log(self.signal_variance / m)
        )
        return 0.5 * (quad + logdet + n * math.log(2 * math.pi))

    def marginals(self, x: torch.Tensor):
        """The global latent predictive at x given all training data (Lazaro-Gredilla eq. 7)."""
        L, phty, noise = self._system(self.x_train, self.y_train)
        phs = self.features(x)
        weights = torch.cholesky_solve(phty.unsqueeze(-1), L).squeeze(-1)
        V = torch.linalg.solve_triangular(L, phs.T, upper=False)
        return phs @ weights, (noise * (V**2).sum(0)).clamp_min(0.0)


class _FrequencyPosterior(_SignalVariance):
    """Gal & Turner's factorised q over the m frequencies, shared by both VSSGP variants.

    Frequencies r = w / (2 pi l) with w ~ N(0, I) a priori and ARD lengthscales l (learned only with
    ``learn_lengthscale``: l and the means of q(w) are redundant scales); q(w_i) = N(mu_i, diag sd_i^2)
    independently. For u = 2 pi r_i^T x, u ~ N(a, v) with a = 2 pi E[r_i]^T x and
    v = 4 pi^2 sum_j Var(r_ij) x_j^2, so (Gaussian characteristic function)
      E cos u = e^{-v/2} cos a,  E sin u = e^{-v/2} sin a,
    and with E = 1 - e^{-v} (``-expm1(-v)``, no cancellation) the 2 x 2 covariance of (cos u, sin u) is
      Var cos u = E (2 sin^2 a + E cos 2a) / 2,  Var sin u = E (2 cos^2 a - E cos 2a) / 2,
      Cov(cos u, sin u) = -E (1 - E) sin 2a / 2
    (= E cos^2 u - (E cos u)^2 etc. with E cos^2 u = (1 + e^{-2v} cos 2a) / 2, E cos u sin u =
    e^{-2v} sin 2a / 2, written without the difference of moments that loses the small variances in
    float32); features of different frequencies are independent."""

    def __init__(
        self,
        num_frequencies: int,
        num_dims: int,
        *,
        prior_lengthscale: float = 1.0,
        signal_init: float = 1.0,
        learn_signal: bool = True,
        learn_lengthscale: bool = False,
        init_scale: float = 0.1,
        generator: torch.Generator | None = None,
    ):
        super().__init__(signal_init, learn_signal)
        m, d = num_frequencies, num_dims
        dt = torch.float64
        self.raw_lengthscale = torch.nn.Parameter(
            inv_softplus(torch.full((d,), float(prior_lengthscale), dtype=dt)), requires_grad=learn_lengthscale
        )
        self.w_mean = torch.nn.Parameter(torch.randn(m, d, generator=generator, dtype=dt))
        self.raw_w_sd = torch.nn.Parameter(inv_softplus(torch.full((m, d), float(init_scale), dtype=dt)))

    @property
    def num_frequencies(self) -> int:
        return self.w_mean.shape[0]

    @property
    def lengthscale(self) -> torch.Tensor:
        return F.softplus(self.raw_lengthscale)

    @property
    def freq_scale(self) -> torch.Tensor:
        return 1.0 / (TWO_PI * self.lengthscale)

    def feature_moments(self, x: torch.Tensor):
        """(E[phi] (n, 2m), E[phi^2] (n, 2m), C (n, m, 3) = (C_cc, C_cs, C_ss)) of the features."""
        scale = self.freq_scale
        mean = self.w_mean * scale
        var = (F.softplus(self.raw_w_sd) * scale) ** 2
        a = TWO_PI * x @ mean.T
        v = (TWO_PI**2) * (x**2) @ var.T
        e1 = torch.exp(-0.5 * v)
        E = -torch.expm1(-v)  # 1 - e^{-v}
        cos_a, sin_a = torch.cos(a), torch.sin(a)
        ec, es = e1 * cos_a, e1 * sin_a
        sin2, cos2 = sin_a**2, cos_a**2
        half_e_cos2a = 0.5 * E * (cos2 - sin2)
        c_cc = E * (sin2 + half_e_cos2a)
        c_ss = E * (cos2 - half_e_cos2a)
        c_cs = -E * e1**2 * sin_a * cos_a
        e_phi = torch.stack((ec, es), -1).flatten(-2)
        e_phi2 = torch.stack((ec**2 + c_cc, es**2 + c_ss), -1).flatten(-2)
        return e_phi, e_phi2, torch.stack((c_cc, c_cs, c_ss), -1)

    def kl_frequencies(self) -> torch.Tensor:
        """KL(q(w) || N(0, I)) (in prior units; invariant to the lengthscales)."""
        w_var = F.softplus(self.raw_w_sd) ** 2
        return diag_gaussian_kl(self.w_mean, w_var, torch.ones((), dtype=w_var.dtype, device=w_var.device))


def _pair_blocks(cov: torch.Tensor) -> torch.Tensor:
    """The (..., m, 2, 2) covariance blocks of the (cos, sin) pairs from C (..., m, 3)."""
    return torch.stack((cov[..., 0], cov[..., 1], cov[..., 1], cov[..., 2]), -1).unflatten(-1, (2, 2))


class VSSGP(_FrequencyPosterior):
    """Variational sparse-spectrum GP (Gal & Turner, ICML 2015) in this paper's cos/sin
    basis, mean-field variant: q(r_i) as in ``_FrequencyPosterior`` and q(s) = N(m_s, diag S) learned by
    gradient steps. The latent f = phi^T s has
      E f = E[phi]^T m_s,  Var f = sum_i [pair_i^T C_i pair_i] + sum_j E[phi_j^2] S_j,
    with C_i the 2 x 2 covariance of (cos u, sin u) and pair_i = (m_s,2i-1, m_s,2i): the ELBO's
    E_q[log N(y | f, s_n^2)] needs only these two moments, so ``marginals`` + ``kl_divergence``
    give the exact VSSGP bound through the standard ELBO objective (full batch or minibatches), and
    its predictive is the degenerate gamma = 1 conditional (Sec. 2, Remark 1) with moment-matched
    variance. ``CollapsedVSSGP`` replaces q(s) by its optimum (Gal & Turner's ``use_exact_A``).

    Differences from their code: one SE component (no spectral mixture, no per-feature shifts z_k)
    and cos/sin pairs instead of a cosine with a phase."""

    def __init__(
        self,
        num_frequencies: int,
        num_dims: int,
        *,
        prior_lengthscale: float = 1.0,
        signal_init: float = 1.0,
        learn_signal: bool = True,
        learn_lengthscale: bool = False,
        init_scale: float = 0.1,
        generator: torch.Generator | None = None,
    ):
        super().__init__(
            num_frequencies,
            num_dims,
            prior_lengthscale=prior_lengthscale,
            signal_init=signal_init,
            learn_signal=learn_signal,
            learn_lengthscale=learn_lengthscale,
            init_scale=init_scale,
            generator=generator,
        )
        m, dt = num_frequencies, torch.float64
        s_sd = math.sqrt(float(signal_init) / m)
        self.s_mean = torch.nn.Parameter(torch.zeros(2 * m, dtype=dt))
        self.raw_s_sd = torch.nn.Parameter(inv_softplus(torch.full((2 * m,), init_scale * s_sd, dtype=dt)))

    def variational_parameters(self) -> list:
        return [self.w_mean, self.raw_w_sd, self.s_mean, self.raw_s_sd]

    def marginals(self, x: torch.Tensor):
        e_phi, e_phi2, cov = self.feature_moments(x)
        m_pair = self.s_mean.view(-1, 2)
        S = F.softplus(self.raw_s_sd) ** 2
        mu = e_phi @ self.s_mean
        var = (
            cov[..., 0] * m_pair[:, 0] ** 2
            + 2 * cov[..., 1] * m_pair[:, 0] * m_pair[:, 1]
            + cov[..., 2] * m_pair[:, 1] ** 2
        ).sum(-1) + e_phi2 @ S
        return mu, var.clamp_min(0.0)

    def kl_divergence(self) -> torch.Tensor:
        m = self.num_frequencies
        kl_s = diag_gaussian_kl(self.s_mean, F.softplus(self.raw_s_sd) ** 2, self.signal_variance / m)
        return self.kl_frequencies() + kl_s


class CollapsedVSSGP(_FrequencyPosterior):
    """VSSGP with the optimal Gaussian q(s) (Gal & Turner, ICML 2015; their code's
    ``use_exact_A``): q(r_i) as in ``_FrequencyPosterior``, q(s) integrated out in closed form.

    With Phi the n x 2m feature matrix, for fixed q(r) E_q(r)[log N(y | Phi s, s_n^2 I)] is quadratic
    in s with Psi = E[Phi^T Phi] = E[Phi]^T E[Phi] + sum_rows blockdiag(C_i) (2m x 2m) in place of
    Phi^T Phi and E[Phi]^T y in place of Phi^T y, so the optimal q(s) = N(A^-1 E[Phi]^T y, s_n^2 A^-1) with
    A = Psi + (s_n^2 m / s_s^2) I, and the bound is SSGP's marginal likelihood with those two
    substitutions, minus KL(q(w) || p(w)):
      L = -[y^T y - c^T c] / (2 s_n^2) - 0.5 log|A| - (n/2 - m) log s_n^2 - m log(s_s^2 / m)
          - (n/2) log 2 pi - KL(q(w) || p(w)),      c = L_A^-1 E[Phi]^T y,  A = L_A L_A^T.
    Full batch (log|A| does not split over rows) and deterministic: L-BFGS works. The predictive is
    the gamma = 1 conditional averaged over q(r) q(s): for phi_* independent of s ~ N(mu_s, Sigma),
      E f_* = E[phi_*]^T mu_s,
      Var f_* = sum_i pair_i^T C_*i pair_i + E[phi_*]^T Sigma E[phi_*] + sum_i tr(C_*i Sigma_ii),
    pair_i the (cos, sin) entries of mu_s and Sigma_ii the matching 2 x 2 block of Sigma."""

    def __init__(
        self,
        num_frequencies: int,
        num_dims: int,
        likelihood,
        *,
        prior_lengthscale: float = 1.0,
        signal_init: float = 1.0,
        learn_signal: bool = True,
        learn_lengthscale: bool = False,
        init_scale: float = 0.1,
        generator: torch.Generator | None = None,
    ):
        super().__init__(
            num_frequencies,
            num_dims,
            prior_lengthscale=prior_lengthscale,
            signal_init=signal_init,
            learn_signal=learn_signal,
            learn_lengthscale=learn_lengthscale,
            init_scale=init_scale,
            generator=generator,
        )
        self.likelihood = likelihood
        self.x_train = self.y_train = None

    def variational_parameters(self) -> list:
        return [self.w_mean, self.raw_w_sd]

    def set_train_data(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x_train, self.y_train = x, y

    def _system(self, x, y):
        """(Cholesky factor of A, E[Phi]^T y, s_n^2) on (x, y)."""
        m = self.num_frequencies
        noise = self.likelihood.noise
        e_phi, _, cov = self.feature_moments(x)
        eye = torch.eye(m, dtype=x.dtype, device=x.device)
        psi = e_phi.T @ e_phi + torch.einsum("iab,ij->iajb", _pair_blocks(cov.sum(0)), eye).reshape(2 * m, 2 * m)
        A = psi + (noise * m / self.signal_variance) * torch.eye(2 * m, dtype=x.dtype, device=x.device)
        L, info = torch.linalg.cholesky_ex(A)
        if bool(info.any()):  # A >= (s_n^2 m / s_s^2) I > 0: only a non-finite parameter gets here
            from ..exceptions import NumericalError

            raise NumericalError(
                "VSSGP's A = E[Phi^T Phi] + (s_n^2 m / s_s^2) I is not positive definite "
                "(non-finite parameters?); try a smaller trainer.lr or dtype=float64"
            )
        return L, e_phi.T @ y, noise

    def neg_log_marginal(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """-L, the negative collapsed bound on (x, y) (all the training data)."""
        n, m = x.shape[0], self.num_frequencies
        L, ety, noise = self._system(x, y)
        c = torch.linalg.solve_triangular(L, ety.unsqueeze(-1), upper=False).squeeze(-1)
        quad = (y @ y - c @ c) / noise
        logdet = (
            2.0 * torch.log(torch.diagonal(L)).sum()
            + (n - 2 * m) * torch.log(noise)
            + 2 * m * torch.log(self.signal_variance / m)
        )
        return 0.5 * (quad + logdet + n * math.log(2 * math.pi)) + self.kl_frequencies()

    def weight_posterior(self):
        """(mu_s, Sigma) of the optimal q(s) on the training data."""
        L, ety, noise = self._system(self.x_train, self.y_train)
        return torch.cholesky_solve(ety.unsqueeze(-1), L).squeeze(-1), noise * torch.cholesky_inverse(L)

    def marginals(self, x: torch.Tensor):
        mu_s, Sigma = self.weight_posterior()
        e_phi, _, cov = self.feature_moments(x)
        m = self.num_frequencies
        pair = mu_s.view(m, 2)
        blocks = Sigma.view(m, 2, m, 2).diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # (m, 2, 2): Sigma_ii
        C = _pair_blocks(cov)  # (n, m, 2, 2)
        var = (
            torch.einsum("ma,nmab,mb->n", pair, C, pair)
            + ((e_phi @ Sigma) * e_phi).sum(-1)
            + torch.einsum("nmab,mba->n", C, blocks)
        )
        return e_phi @ mu_s, var.clamp_min(0.0)


class SpectralPosterior(_SignalVariance):
    """sVBSSGP's variational posterior q(alpha) = N(b, M M^T), alpha = vec(theta, s) in R^D,
    D = m d + 2m (Sec. 3.1, Lemma 1 with psi = N(0, I)): alpha = M z + b, z ~ N(0, I).

    M = diag(softplus(raw_diag)) + strictly-lower(offdiag * mask); ``cov``: ``full`` (the paper's
    joint q), ``block`` (one lower-triangular block per frequency r_i and one for s: frequencies
    independent of each other and of s; for large D) or ``diag`` (mean field). The off-diagonal
    entries are a parameter of their own so the trainer can give them a smaller learning rate
    (a full M under Adam otherwise random-walks: spec note, finding 4).

    Initialisation: b_theta at a prior draw, b_s = 0, diag(M) = ``init_scale`` x the prior sd,
    off-diagonal 0 (spec note, Sec. 6: the posterior is concentrated; start small)."""

    def __init__(
        self,
        num_frequencies: int,
        num_dims: int,
        *,
        prior_lengthscale: float = 1.0,
        signal_init: float = 1.0,
        learn_signal: bool = True,
        init_scale: float = 0.01,
        cov: str = "full",
        generator: torch.Generator | None = None,
    ):
        super().__init__(signal_init, learn_signal)
        m, d = num_frequencies, num_dims
        self.m, self.d = m, d
        self.D = m * d + 2 * m
        dt = torch.float64
        self.theta_prior_var = prior_frequency_sd(prior_lengthscale) ** 2
        theta0 = torch.randn(m * d, generator=generator, dtype=dt) * math.sqrt(self.theta_prior_var)
        self.b = torch.nn.Parameter(torch.cat([theta0, torch.zeros(2 * m, dtype=dt)]))
        prior_sd = self.prior_variance().detach().sqrt()
        self.raw_diag = torch.nn.Parameter(inv_softplus(init_scale * prior_sd))
        self.cov = cov
        if cov == "diag":
            self.offdiag = None
        else:
            mask = torch.tril(torch.ones(self.D, self.D, dtype=dt), -1)
            if cov == "block":
                group = torch.cat([torch.arange(m).repeat_interleave(d), torch.full((2 * m,), m)])
                mask = mask * (group[:, None] == group[None, :]).to(dt)
            self.register_buffer("mask", mask)
            self.offdiag = torch.nn.Parameter(torch.zeros(self.D, self.D, dtype=dt))

    def prior_variance(self) -> torch.Tensor:
        """diag P of p(alpha) = N(0, blkdiag[Theta, Lambda])."""
        md, m2 = self.m * self.d, 2 * self.m
        theta = torch.full((md,), self.theta_prior_var, dtype=self.raw_signal.dtype, device=self.raw_signal.device)
        return torch.cat([theta, (self.signal_variance / self.m).expand(m2)])

    def scale_tril(self) -> torch.Tensor:
        """M (D x D, lower-triangular, positive diagonal)."""
        M = torch.diag(F.softplus(self.raw_diag))
        if self.offdiag is not None:
            M = M + self.offdiag * self.mask
        return M

    def kl_divergence(self) -> torch.Tensor:
        return gaussian_kl_tril(self.b, self.scale_tril(), self.prior_variance())

    def split(self, alpha: torch.Tensor):
        """(theta as (..., m, d), s as (..., 2m)) of alpha (..., D)."""
        md = self.m * self.d
        return alpha[..., :md].unflatten(-1, (self.m, self.d)), alpha[..., md:]

    def sample(self, z: torch.Tensor) -> torch.Tensor:
        """alpha = M z + b for z (..., D)."""
        return self.b + z @ self.scale_tril().T


__all__ = [
    "SSGP",
    "CollapsedVSSGP",
    "SpectralPosterior",
    "VSSGP",
    "diag_gaussian_kl",
    "gaussian_kl_tril",
    "inv_softplus",
    "prior_frequency_sd",
    "trig_features",
]
