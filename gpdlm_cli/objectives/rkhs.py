"""Stochastic marginal-likelihood objectives on a finite-dimensional RKHS (Shoham & Avron).

Symbols (paper Sec. 2.2-3): n data, d features, phi_i = phi(x_i), Z (n x d), s2 the noise,
w in R^d an auxiliary weight vector, F = Z^T Z + s2 I_d = sum_i F_i with
F_i = phi_i phi_i^T + (s2 / n) I, and

    g_i = (1/s2)(phi_i^T w - y_i)^2 + (1/n)||w||^2 + ((n - d)/n) log s2,
    l(theta) = sum_i g_i + log|F| = (1/s2)||Z w - y||^2 + ||w||^2 + log|F| + (n - d) log s2,

whose minimum over w is -2 log N(y | 0, Z Z^T + s2 I) - n log 2 pi (Thm B.1 and the
determinant lemma). The paper's typos are corrected here (see shared/notes/rkhs-spec.md, 1.2-1.5).

Every objective below returns a value on the *per-point NLML scale*, (1/2)(estimate of l/n) +
(1/2) log 2 pi, and a gradient that is (1/2n) times the paper's (n/|S|)-scaled step direction, so
learning rates carry across n, batch sizes and methods (AdaDelta and Adam hardly see the factor).

* ``BatchNLML`` -- BSGD (Chen et al., 2020; paper Sec. 4.2): the exact b x b NLML of the batch,
  biased for any b < n, on a finite feature map or on an exact kernel (the paper's Gaussian-kernel
  BSGD column). Optional nearest-neighbour batches (Chen et al.'s remedy).
* ``SCGD`` -- Sec. 3.2: the step uses a running estimate F~_t held constant (stop-gradient),
  then F~_{t+1} = (1 - b_t) F~_t + b_t (n/|S|) sum_S F_i(theta_t) (the step's batch, pre-step
  parameters: the paper's order). b_t = max(b_min, b0 (t + 1)^-b_decay).
* ``Minimax`` -- Sec. 3.1: the saddle point of Psi(zeta, B) = g + log|A| + mu <B, A - F> / ||A||
  with independent minibatches for the min step (zeta = (theta, w, A)) and the max step (B), the
  ascent in B expressed as descent on a sign-flipped surrogate so the shared trainer runs both.
  Its saddle is the NLML's only when the penalty is exact: ``exact_penalty_bound`` gives a mu that
  is provably enough, ``local_penalty_threshold`` the one that is necessary.
"""

from __future__ import annotations

import math

import torch

from ..exceptions import NumericalError
from ..models.bayesian_linear import LOG_2PI, cholesky_dxd, feature_statistics, nlml_from_statistics
from .base import Objective


# ----- closed forms (also the anchors of the tests) -------------------------------------------------
def feature_nlml(Z: torch.Tensor, y: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """Per-point -log N(y | 0, Z Z^T + s2 I_n) by the d x d form (differentiable; O(n d^2 + d^3))."""
    nlml, _, _ = nlml_from_statistics(Z.T @ Z, Z.T @ y, y @ y, Z.shape[0], s2)
    return nlml


def dxd_objective(Z: torch.Tensor, y: torch.Tensor, w: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """The paper's l(theta) (Sec. 2.2) = (1/s2)||Z w - y||^2 + ||w||^2 + log|F| + (n - d) log s2."""
    n, d = Z.shape
    F = Z.T @ Z + s2 * torch.eye(d, dtype=Z.dtype, device=Z.device)
    L = torch.linalg.cholesky(F)
    return (
        (Z @ w - y).square().sum() / s2 + w.square().sum() + 2 * torch.log(L.diagonal()).sum() + (n - d) * torch.log(s2)
    )


def batch_nlml(Z_S: torch.Tensor, y_S: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """Per-point -log N(y_S | 0, Z_S Z_S^T + s2 I_b) by the b x b Cholesky (O(b^3 + b^2 d)).
    Batched over leading dimensions; a failed factorisation gives NaN (s2 > 0 keeps it PD)."""
    return covariance_nlml(Z_S @ Z_S.transpose(-1, -2), y_S, s2)


def covariance_nlml(K_S: torch.Tensor, y_S: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """Per-point -log N(y_S | 0, K_S + s2 I_b) for a batch's kernel matrix K_S (a finite map's
    Z_S Z_S^T, or an exact kernel's k(g(x_S), g(x_S))), by the b x b Cholesky (O(b^3)). Batched over
    leading dimensions; a failed factorisation gives NaN (s2 > 0 keeps it PD)."""
    b = K_S.shape[-2]
    K = K_S + s2 * torch.eye(b, dtype=K_S.dtype, device=K_S.device)
    L, _ = torch.linalg.cholesky_ex(K)
    a = torch.linalg.solve_triangular(L, y_S.unsqueeze(-1), upper=False).squeeze(-1)
    return 0.5 * (a.square().sum(-1) + 2 * torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1)) / b + 0.5 * LOG_2PI


def step_weight(t: int, b0: float, decay: float, floor: float) -> float:
    """SCGD's averaging weight b_t = max(floor, b0 (t + 1)^-decay) after step t = 1, 2, ... (paper:
    b0 = 0.9, decay = 0; Wang et al.'s rate needs decay 1/2). The shift t + 1 counts F~_0 =
    F(theta_0) as the first term of the average: with b0 = 1 and decay = 1, F~_t is the plain mean
    of F(theta_0) and the t batch estimates; with t^-decay, b_1 = b0 = 1 would discard F~_0 after
    one step (at d = 64, b = 16 the log-det gradient of step 2 was 77x too large)."""
    return max(floor, b0 * (t + 1) ** (-decay))


def local_penalty_threshold(F: torch.Tensor) -> float:
    """||F|| ||F^-1|| (Frobenius): the smallest mu for which A = F is a *local* minimiser of
    log|A| + mu ||A - F|| / ||A|| (one-sided slope along D: <F^-1, D> + mu ||D|| / ||F||, most
    negative at D = -F^-1 / ||F^-1||). Necessary for an exact penalty when lambda_min(F) > s2 (then
    that direction is feasible); not sufficient: log|A| is concave, and clamping F's lowest
    eigenvalues to s2 can beat A = F at this mu (docs/rkhs.md)."""
    F = F.detach()
    L = torch.linalg.cholesky(F)
    return float(torch.linalg.norm(F) * torch.linalg.norm(torch.cholesky_inverse(L)))


def exact_penalty_bound(F: torch.Tensor, s2) -> float:
    """A penalty weight that makes MINIMAX exact: for mu >= ||F|| ||c|| + L,

        log|A| + mu ||A - F|| / ||A|| >= log|F|   for every symmetric A >= s2 I,

    so min over A (and max over ||B|| <= 1) of Psi is g + log|F| = l(theta), and the saddle's theta
    is the NLML's stationary point. Here lambda_j are F's eigenvalues, c_j = log(lambda_j / s2) /
    (lambda_j - s2) (-> 1/s2 as lambda_j -> s2) and L = sum_j log(lambda_j / s2) = log|F| - d log s2.

    Proof. log|A| and ||A|| depend only on A's eigenvalues a, and ||A - F|| >= ||a - lambda|| with both
    sorted (Hoffman-Wielandt), so it suffices to take a_j >= s2 against lambda_j. Write a = lambda - delta
    + u with delta, u >= 0 the decreases and increases. Concavity of log on [s2, lambda_j] gives
    log(a_j / lambda_j) >= -c_j delta_j, so log|A| - log|F| >= -||c|| ||delta|| and also >= -L. With
    tau = L / (||F|| ||c||): if ||u|| <= tau ||F||, then ||A|| <= (1 + tau) ||F|| and the penalty is
    >= mu ||delta|| / ((1 + tau) ||F||) >= ||c|| ||delta||; otherwise ||A - F|| / ||A|| >= ||u|| /
    (||F|| + ||u||) > tau / (1 + tau) and the penalty is > L. In both cases, mu >= (1 + tau) ||F|| ||c||
    = ||F|| ||c|| + L. []

    The bound is >= ``local_penalty_threshold`` (c_j >= 1/lambda_j), typically by a factor of a few
    (x log x / (x - 1) per eigenvalue, x = lambda_j / s2). O(d^3) (one eigvalsh)."""
    return float(_exact_penalty_bound(F, s2))


def _exact_penalty_bound(F: torch.Tensor, s2) -> torch.Tensor:
    """``exact_penalty_bound`` as a 0-dim tensor on F's device (no host read)."""
    F = F.detach()
    s2 = torch.as_tensor(s2, dtype=F.dtype, device=F.device).detach()
    lam = torch.linalg.eigvalsh(F)
    excess = (lam - s2).clamp_min(0) / s2  # x - 1 >= 0
    log_ratio = torch.log1p(excess)
    small = excess < 1e-8
    c = torch.where(small, 1 - excess / 2, log_ratio / torch.where(small, torch.ones_like(excess), excess)) / s2
    return torch.linalg.norm(F) * torch.linalg.norm(c) + log_ratio.sum()


# ----- BSGD -----------------------------------------------------------------------------------------
class NearestNeighbourBatches:
    """Chen et al.'s minibatches: the batch is a random centre and its b - 1 nearest neighbours in
    input space (scikit-learn's tree, queried on the host: one host transfer per step)."""

    def __init__(self, x: torch.Tensor):
        from sklearn.neighbors import NearestNeighbors

        self.x_host = x.detach().cpu().numpy()
        self.tree = NearestNeighbors().fit(self.x_host)
        self.device = x.device

    def __call__(self, centre: int, b: int) -> torch.Tensor:
        _, idx = self.tree.kneighbors(self.x_host[centre : centre + 1], n_neighbors=b)
        return torch.as_tensor(idx[0], device=self.device)


class BatchNLML(Objective):
    """BSGD: minimise the exact per-point NLML of each minibatch,

        (1/2b) [ y_S^T (K_SS + s2 I_b)^-1 y_S + log|K_SS + s2 I_b| ] + (1/2) log 2 pi,

    with K_SS = ``model.prior_covariance(x_S)``: Z_S Z_S^T for a finite feature map
    (``BayesianLinearGP``), k(g(x_S), g(x_S)) for an exact kernel (``ExactKernelGP``, e.g. the
    Gaussian kernel on network features of the paper's Tables 3 and 5). As Chen et al.'s and the
    authors' code do (not the paper's "sum of F_i" form, which differs in the scale of ||w||^2,
    (n - d) log s2 and s2 I). Its expectation over batches is not the full NLML, so its fixed point
    depends on b. With ``nearest`` (a ``NearestNeighbourBatches``) the trainer's batch is replaced by
    the first index's nearest neighbours (``wants_index``)."""

    name = "bsgd"

    def __init__(self, model, nearest: NearestNeighbourBatches | None = None):
        super().__init__()
        self.model = model
        self.nearest = nearest

    def forward(self, x, y, index=None):
        if self.nearest is not None and index is not None:
            index = self.nearest(int(index[0]), x.shape[0])
            x, y = self.model.x_train[index], self.model.y_train[index]
        value = covariance_nlml(self.model.prior_covariance(x), y.to(torch.float64), self.model.noise)
        if x.device.type == "cpu" and not bool(torch.isfinite(value)):
            raise NumericalError(
                f"the {x.shape[0]} x {x.shape[0]} batch covariance of model=bsgd is not positive "
                f"definite; raise the noise floor or lower the learning rate"
            )
        return value


# ----- SCGD -----------------------------------------------------------------------------------------
class _SCGDStep(torch.autograd.Function):
    """SCGD's per-step loss and its gradients in closed form (``SCGD.reference_step`` in autograd).

    Inputs: phi (b x d), w (d), s2 (0-dim), y (b), L = chol(F~) (held constant), n. With r = phi w - y
    and P = F~^-1:

        value = (1/2) [ r^T r / (b s2) + w^T w / n + ((n - d)/n) log s2 + log|F~| / n + log 2 pi ],
        d/dphi = r w^T / (b s2) + phi P / b,     d/dw = phi^T r / (b s2) + w / n,
        d/ds2 = (1/2) [ -r^T r / (b s2^2) + (n - d) / (n s2) + tr(P) / n ],

    where phi P / b and tr(P) / n are the gradients of the stop-gradient term <P, sum_S F_i> / (2 b)
    (it adds 0 to the value). Returns (value, F_batch) with F_batch = (n/b) phi^T phi + s2 I (no
    gradient): the batch estimate SCGD's ``after_step`` averages into F~."""

    @staticmethod
    def forward(ctx, phi, w, s2, y, L, n):
        b, d = phi.shape
        P = torch.cholesky_inverse(L)
        r = phi @ w - y
        rr = r @ r
        bs2 = b * s2
        value = 0.5 * (
            rr / bs2 + (w @ w) / n + ((n - d) / n) * torch.log(s2) + 2 * torch.log(L.diagonal()).sum() / n + LOG_2PI
        )
        F_batch = (phi.T @ phi).mul_(n / b)
        F_batch.diagonal().add_(s2)
        ctx.save_for_backward(phi, w, s2, r, rr, P)
        ctx.consts = (b, d, n)
        ctx.mark_non_differentiable(F_batch)
        return value, F_batch

    @staticmethod
    def backward(ctx, grad_value, grad_F_batch):
        phi, w, s2, r, rr, P = ctx.saved_tensors
        b, d, n = ctx.consts
        r_scaled = r / (b * s2)
        d_phi = torch.outer(r_scaled, w).addmm_(phi, P, alpha=1.0 / b)
        d_w = torch.addmv(w, phi.T, r_scaled, beta=1.0 / n)
        d_s2 = 0.5 * ((n - d) / (n * s2) + P.diagonal().sum() / n - rr / (b * s2 * s2))
        return d_phi * grad_value, d_w * grad_value, d_s2 * grad_value, None, None, None


class SCGD(Objective):
    """Stochastic compositional gradient descent on l = g + log|F| (paper Sec. 3.2, Wang et al. 2017).

    Step t (value on the per-point NLML scale, gradient = (1/2n) x the paper's step direction):

        (1/|S|) sum_{i in S} [ g_i(theta) + <F~_t^-1, F_i(theta)> ] / 2,   F~_t constant,

    i.e. d/dphi_i = 2 F~^-1 phi_i / |S| and d/ds2 = tr(F~^-1) / n through F_i; then ``after_step``
    refreshes F~_{t+1} = (1 - b_t) F~_t + b_t ((n/|S|) Z_S^T Z_S + s2 I) with the batch's
    features at the pre-step parameters. F~_0 = F(theta_0) from one full pass and w_0 = the ridge
    solve F(theta_0)^-1 Z^T y (``initialise``). F~ and w are float64; F~ stays SPD (a convex
    combination of SPD matrices, b_t in (0, 1]). The reported value is (1/2)[(1/|S|) sum g_i +
    log|F~_t|/n + log 2 pi], an estimate of the per-point l/n at the current w.

    ``fused`` (default) computes the value and its gradients in one ``_SCGDStep`` (closed forms: about
    15 tensor operations forward and backward instead of ~150 autograd nodes); ``fused=False`` runs
    ``reference_step``, the same loss in autograd, which the tests compare it with.

    The direction is conditionally unbiased for grad g + <F~_t^-1, grad F>; with F~ = F exactly it
    is unbiased for grad l. A constant b_t (the paper's 0.9) keeps F~ noisy and biases the fixed
    point; a decaying b_t (default (t + 1)^-1/2) does not (docs/rkhs.md). Wang et al.'s convergence
    theorem (their Thm 8, quoted in Sec. 3.2) also needs theta's step a_t to decay faster than b_t
    (a_t / b_t -> 0: a_t = t^-3/4 with b_t = t^-1/2, i.e. ``trainer.schedule=robbins_monro
    trainer.rm_kappa=0.75``); a constant learning rate is outside it.
    """

    name = "scgd"

    def __init__(
        self, model, num_data: int, b0: float = 1.0, b_decay: float = 0.5, b_min: float = 0.0, fused: bool = True
    ):
        super().__init__()
        self.fused = bool(fused)
        d = model.num_features
        device = model.x_train.device
        self.model = model
        self.num_data = int(num_data)
        self.b0, self.b_decay, self.b_min = float(b0), float(b_decay), float(b_min)
        self.w = torch.nn.Parameter(torch.zeros(d, dtype=torch.float64, device=device))
        self.register_buffer("F_tilde", torch.eye(d, dtype=torch.float64, device=device))
        self._F_batch = None
        self.last_weight = float("nan")

    @torch.no_grad()
    def initialise(self) -> None:
        """F~_0 = F(theta_0) and w_0 = F(theta_0)^-1 Z^T y (one full pass)."""
        post = self.model.posterior()
        self.F_tilde.copy_(post.F)
        self.w.copy_(post.w)

    def forward(self, x, y):
        phi = self.model.features(x)
        y = y.to(torch.float64)
        if not self.fused:
            return self.reference_step(phi, y)
        L = cholesky_dxd(self.F_tilde, self.model.chol_log, what="F~ (SCGD)")
        value, self._F_batch = _SCGDStep.apply(phi, self.w, self.model.noise, y, L, self.num_data)
        return value

    def reference_step(self, phi, y):
        """The step's loss written out in autograd (the specification ``_SCGDStep`` is tested against)."""
        s2 = self.model.noise
        n, (b, d) = self.num_data, phi.shape
        L = cholesky_dxd(self.F_tilde, self.model.chol_log, what="F~ (SCGD)")
        F_inv = torch.cholesky_inverse(L)
        g = ((phi @ self.w - y).square().sum() / s2) / b + self.w.square().sum() / n + (n - d) / n * torch.log(s2)
        inner = ((phi @ F_inv) * phi).sum() / b + s2 * F_inv.diagonal().sum() / n
        with torch.no_grad():
            eye = torch.eye(d, dtype=phi.dtype, device=phi.device)
            self._F_batch = (n / b) * (phi.T @ phi) + s2 * eye
        logdet = 2 * torch.log(L.diagonal()).sum()
        return 0.5 * (g + logdet.detach() / n + LOG_2PI) + 0.5 * (inner - inner.detach())

    @torch.no_grad()
    def after_step(self, iteration: int, epoch: int) -> None:
        """F~_{t+1} = (1 - b_t) F~_t + b_t (n/|S|) sum_S F_i(theta_t)."""
        if self._F_batch is None:
            return
        self.last_weight = step_weight(iteration, self.b0, self.b_decay, self.b_min)
        self.F_tilde.lerp_(self._F_batch, self.last_weight)
        self._F_batch = None

    def checkpoint_state(self) -> dict:  # F~ is a buffer (saved with the modules)
        return {"last_weight": float(self.last_weight)}

    def load_checkpoint_state(self, state: dict) -> None:
        self.last_weight = float(state["last_weight"])

    @torch.no_grad()
    def tracking_gap(self) -> float:
        """||F~ - F|| / ||F|| (Frobenius) against the full-data F at the current parameters."""
        F = self.model.full_F()
        return float(torch.linalg.norm(self.F_tilde - F) / torch.linalg.norm(F))


# ----- MINIMAX --------------------------------------------------------------------------------------
class _MinimaxStep(torch.autograd.Function):
    """MINIMAX's per-step loss and its gradients in closed form (``Minimax.reference_step`` in autograd).

    Inputs: phi (b x d, the min step's batch), w, s2, M, B, y, C (A = C S C^T, S = sym(M)), phi_bar (the
    max step's batch, no gradient), mu, n, and the objective (for its Cholesky log). With r = phi w - y,
    ||A|| Frobenius, Q = <B, A> - (n/b) sum_i phi_i^T B phi_i - s2 tr B and kappa = mu / (n ||A||):

        value = (1/2) [ r^T r / (b s2) + w^T w / n + ((n - d)/n) log s2 + (log|A| + mu Q / ||A||) / n + log 2 pi ],
        d/dw = phi^T r / (b s2) + w / n,    d/dphi = r w^T / (b s2) - (kappa n / 2b) phi (B + B^T),
        d/ds2 = (1/2) [ -r^T r / (b s2^2) + (n - d) / (n s2) - kappa tr B ],
        d/dM = sym(C^T G C),  G = A^-1 / (2n) + (kappa / 2) (B - Q A / ||A||^2),
        d/dB = -(kappa / 2) (A - (n/b) phi_bar^T phi_bar - s2 I)   (the max step: descent on -Psi in B)."""

    @staticmethod
    def forward(ctx, phi, w, s2, M, B, y, C, phi_bar, mu, n, objective):
        b, d = phi.shape
        S = 0.5 * (M + M.T)
        A = C @ S @ C.T
        LA = cholesky_dxd(A, objective.model.chol_log, what="A (MINIMAX)")
        norm_A = torch.linalg.norm(A)
        r = phi @ w - y
        rr = r @ r
        Bs = B + B.T
        phi_Bs = phi @ Bs
        trace_B = B.diagonal().sum()
        Q = (B * A).sum() - ((n / b) * 0.5 * (phi_Bs * phi).sum() + s2 * trace_B)
        value = 0.5 * (
            rr / (b * s2)
            + (w @ w) / n
            + ((n - d) / n) * torch.log(s2)
            + (2 * torch.log(LA.diagonal()).sum() + mu * Q / norm_A) / n
            + LOG_2PI
        )
        ctx.save_for_backward(phi, w, s2, C, A, LA, B, r, rr, phi_Bs, trace_B, Q, norm_A, phi_bar)
        ctx.consts = (b, d, n, mu)
        return value

    @staticmethod
    def backward(ctx, grad_value):
        phi, w, s2, C, A, LA, B, r, rr, phi_Bs, trace_B, Q, norm_A, phi_bar = ctx.saved_tensors
        b, d, n, mu = ctx.consts
        kappa = mu / (n * norm_A)
        r_scaled = r / (b * s2)
        d_w = torch.addmv(w, phi.T, r_scaled, beta=1.0 / n)
        d_phi = torch.outer(r_scaled, w) - (kappa * (n / (2 * b))) * phi_Bs
        d_s2 = 0.5 * ((n - d) / (n * s2) - rr / (b * s2 * s2) - kappa * trace_B)
        G = torch.cholesky_inverse(LA).mul_(0.5 / n) + (0.5 * kappa) * (B - (Q / norm_A.square()) * A)
        dS = C.T @ (G @ C)
        d_M = 0.5 * (dS + dS.T)
        F_bar = (phi_bar.T @ phi_bar).mul_(n / b)
        F_bar.diagonal().add_(s2)
        d_B = (-0.5 * kappa) * (A - F_bar)
        g = grad_value
        return d_phi * g, d_w * g, d_s2 * g, d_M * g, d_B * g, None, None, None, None, None, None


class Minimax(Objective):
    """The penalised saddle point of paper Sec. 3.1, with zeta = (theta, w, A):

        Psi(zeta, B) = g(theta) + log|A| + mu <B, A - F(theta)> / ||A||,   ||B||_F <= 1,  A >= s2 I,

    = sum_i psi_i with psi_i = g_i + (1/n) log|A| + mu <B, A/n - F_i> / ||A||. One trainer step:

    * min step on the trainer's batch S: (n/|S|) sum_S psi_i(zeta, B_t) / n with B detached,
      i.e. (1/|S|) sum_S g_i + [log|A| + mu (<B,A> - (n/|S|) sum_S phi_i^T B phi_i - s2 tr B)/||A||]/n;
    * max step on an independent batch S-bar (uniform with replacement, drawn from this objective's
      own seeded generator): the same penalty at zeta_t detached, with its B-gradient reversed, so
      that descent is the ascent B + b mu (A - (n/|S|) sum_Sbar F_i) / ||A|| (times 1/2n). The B step
      uses zeta_t (simultaneous), where the paper uses zeta_{t+1}; both estimators are unbiased
      for grad Psi at fixed (zeta, B) and independent of each other;
    * ``after_step``: the projections -- A onto {A >= s2 I} (symmetrise, eigenvalue clamp at s2;
      skipped on CPU when a Cholesky of A - s2 I shows A feasible), B onto the unit Frobenius ball
      (kept symmetric; B_0 = 0), and w onto the box |w_j| <= ``w_max`` if given (the paper's
      zeta <= zeta_max; its s2 >= s2_min is the likelihood's noise floor, a softplus constraint).

    ``fused`` (default) computes both steps' value and gradients in one ``_MinimaxStep`` (closed forms);
    ``fused=False`` runs ``reference_step``, the same loss in autograd, which the tests compare it with.

    A is parameterised as A = C sym(M) C^T with C = chol(F(theta_0)) fixed (``precondition``), so
    M starts at I and per-coordinate optimisers see O(1) entries although A's eigenvalues span
    orders of magnitude.

    The penalty is exact (min_A max_B Psi = l(theta)) only for a large enough mu: mu >= ||F|| ||F^-1||
    (>= d; ``local_penalty_threshold``) is necessary and only locally sufficient; mu >=
    ``exact_penalty_bound(F, s2)`` is sufficient. With ``exact=True`` (gpdlm's default) mu is raised
    to that bound of the current F at ``initialise`` and whenever the schedule below runs; with
    ``exact=False`` mu = ``mu`` grows only by ``mu_growth`` every ``mu_every_epochs`` epochs up to
    ``mu_max`` (``epoch_start``; the paper's mu = 1 fixed is inexact: its saddle is not the NLML's).
    ``mu_max`` caps both.
    """

    name = "minimax"

    def __init__(
        self,
        model,
        num_data: int,
        mu: float = 1.0,
        mu_growth: float = 1.0,
        mu_every_epochs: int = 1,
        mu_max: float = math.inf,
        precondition: bool = True,
        seed: int = 0,
        w_max: float | None = None,
        exact: bool = False,
        fused: bool = True,
    ):
        super().__init__()
        self.fused = bool(fused)
        d = model.num_features
        device = model.x_train.device
        f64 = dict(dtype=torch.float64, device=device)
        self.model = model
        self.num_data = int(num_data)
        self.mu0 = self.mu = self.mu_schedule = float(mu)
        self.mu_growth, self.mu_every_epochs, self.mu_max = float(mu_growth), int(mu_every_epochs), float(mu_max)
        self.exact = bool(exact)
        self.precondition = bool(precondition)
        self.w_max = None if w_max is None else float(w_max)
        self.w = torch.nn.Parameter(torch.zeros(d, **f64))
        self.M = torch.nn.Parameter(torch.eye(d, **f64))
        self.B = torch.nn.Parameter(torch.zeros(d, d, **f64))
        self.register_buffer("C", torch.eye(d, **f64))
        self.generator = torch.Generator(device=device).manual_seed(int(seed))
        self.projections = 0

    def A(self) -> torch.Tensor:
        """A = C sym(M) C^T."""
        return self.C @ (0.5 * (self.M + self.M.T)) @ self.C.T

    @torch.no_grad()
    def initialise(self) -> None:
        """w_0 = ridge solve, A_0 = F(theta_0) (M_0 = I with preconditioning), B_0 = 0, mu = mu0
        (with ``exact``: raised to ``exact_penalty_bound`` of F(theta_0), at most mu_max)."""
        post = self.model.posterior()
        self.w.copy_(post.w)
        if self.precondition:
            self.C.copy_(post.L)
            self.M.copy_(torch.eye(self.M.shape[0], dtype=self.M.dtype, device=self.M.device))
        else:
            self.M.copy_(post.F)
        self.B.zero_()
        self.mu = self.mu_schedule = self.mu0
        if self.exact:
            self.mu = float(self.exact_mu(self.mu0))

    def penalty(self, A, B, phi, s2, n: int):
        """mu <B, A - (n/b) sum_S F_i> / ||A|| for the rows phi of a batch S."""
        b = phi.shape[0]
        F_term = (n / b) * ((phi @ B) * phi).sum() + s2 * B.diagonal().sum()
        return self.mu * ((B * A).sum() - F_term) / torch.linalg.norm(A)

    def sample_dual_batch(self, b: int) -> torch.Tensor:
        """S-bar: b indices uniform with replacement, from this objective's generator."""
        n = self.num_data
        return torch.randint(n, (b,), generator=self.generator, device=self.generator.device).to(
            self.model.x_train.device
        )

    def forward(self, x, y):
        model, n = self.model, self.num_data
        phi = model.features(x)
        y = y.to(torch.float64)
        b = phi.shape[0]
        if b >= n:
            phi_bar = phi.detach()
        else:
            with torch.no_grad():
                phi_bar = model.features(model.x_train[self.sample_dual_batch(b)])
        if not self.fused:
            return self.reference_step(phi, y, phi_bar)
        return _MinimaxStep.apply(phi, self.w, model.noise, self.M, self.B, y, self.C, phi_bar, self.mu, n, self)

    def reference_step(self, phi, y, phi_bar):
        """The step's loss written out in autograd (the specification ``_MinimaxStep`` is tested against)."""
        model, n = self.model, self.num_data
        s2 = model.noise
        b, d = phi.shape
        A = self.A()
        LA = cholesky_dxd(A, model.chol_log, what="A (MINIMAX)")
        logdet_A = 2 * torch.log(LA.diagonal()).sum()
        g = ((phi @ self.w - y).square().sum() / s2) / b + self.w.square().sum() / n + (n - d) / n * torch.log(s2)
        psi = g + (logdet_A + self.penalty(A, self.B.detach(), phi, s2, n)) / n
        # the max step: an independent batch, zeta held fixed, the B-gradient reversed
        dual = self.penalty(A.detach(), self.B, phi_bar, s2.detach(), n) / n
        return 0.5 * (psi + LOG_2PI) - 0.5 * (dual - dual.detach())

    @torch.no_grad()
    def after_step(self, iteration: int, epoch: int) -> None:
        self.project()

    def checkpoint_state(self) -> dict:
        """The penalty schedule, the projection count and the dual batches' generator."""
        return {
            "mu": self.mu,
            "mu_schedule": self.mu_schedule,
            "projections": self.projections,
            "generator": self.generator.get_state(),
        }

    def load_checkpoint_state(self, state: dict) -> None:
        mu = state["mu"]
        self.mu = mu.to(self.w.device) if isinstance(mu, torch.Tensor) else mu
        self.mu_schedule, self.projections = state["mu_schedule"], int(state["projections"])
        self.generator.set_state(state["generator"])

    @torch.no_grad()
    def project(self) -> None:
        """A onto {A >= s2 I} (eigenvalue clamp, in A's coordinates), B onto ||B||_F <= 1, both
        symmetric; w onto |w_j| <= w_max."""
        s2 = self.model.noise
        d = self.M.shape[0]
        eye = torch.eye(d, dtype=self.M.dtype, device=self.M.device)
        self.M.copy_(0.5 * (self.M + self.M.T))
        A = self.A()
        A = 0.5 * (A + A.T)
        feasible = False
        if A.device.type == "cpu":  # a cheap test first; on accelerators always project (no host sync)
            feasible = int(torch.linalg.cholesky_ex(A - (1 - 1e-9) * s2 * eye)[1]) == 0
        if not feasible:
            lam, V = torch.linalg.eigh(A)
            A = (V * lam.clamp_min(s2)) @ V.T
            Cinv_A = torch.linalg.solve_triangular(self.C, A, upper=False)
            M = torch.linalg.solve_triangular(self.C, Cinv_A.T, upper=False)
            self.M.copy_(0.5 * (M + M.T))
            self.projections += 1
        self.B.copy_(0.5 * (self.B + self.B.T))
        self.B.div_(torch.linalg.norm(self.B).clamp_min(1.0))
        if self.w_max is not None:
            self.w.clamp_(-self.w_max, self.w_max)

    def epoch_start(self, epoch: int) -> None:
        """The outer penalty schedule, every mu_every_epochs epochs: mu_k = min(mu_max, mu_growth^k mu0),
        and with ``exact`` mu_k = min(mu_max, max(mu_growth^k mu0, exact_penalty_bound(F(theta)))) (one
        full-data pass, shared with an evaluation at the same parameters; one eigvalsh): the bound of
        the current F, so mu follows it down as well as up."""
        if epoch > 0 and epoch % self.mu_every_epochs == 0:
            self.mu_schedule = min(self.mu_max, self.mu_schedule * self.mu_growth)
            self.mu = self.exact_mu(self.mu_schedule) if self.exact else self.mu_schedule

    @torch.no_grad()
    def exact_mu(self, floor: float):
        """min(mu_max, max(floor, exact_penalty_bound(F(theta)))): a float on CPU (F from the model's
        cached posterior), a device tensor on accelerators (F from a fresh streamed pass: the posterior
        reads its NLML to the host), so the update needs no host sync there."""
        model = self.model
        if model.x_train.device.type == "cpu":
            F = model.full_F()
        else:
            ztz, _, _ = feature_statistics(model.features, model.x_train, model.y_train, model.block_rows)
            F = ztz + model.noise.detach() * torch.eye(ztz.shape[0], dtype=ztz.dtype, device=ztz.device)
        mu = _exact_penalty_bound(F, model.noise).clamp(min=floor, max=self.mu_max)
        return float(mu) if mu.device.type == "cpu" else mu

    @torch.no_grad()
    def exact_bound(self) -> float:
        """``exact_penalty_bound`` of the full-data F at the current parameters."""
        return exact_penalty_bound(self.model.full_F(), self.model.noise)

    @torch.no_grad()
    def local_threshold(self) -> float:
        """``local_penalty_threshold`` of the full-data F at the current parameters."""
        return local_penalty_threshold(self.model.full_F())

    @torch.no_grad()
    def penalty_gap(self) -> float:
        """||A - F|| / ||F|| (Frobenius) against the full-data F at the current parameters."""
        F = self.model.full_F()
        return float(torch.linalg.norm(self.A() - F) / torch.linalg.norm(F))


__all__ = [
    "BatchNLML",
    "Minimax",
    "NearestNeighbourBatches",
    "SCGD",
    "batch_nlml",
    "covariance_nlml",
    "dxd_objective",
    "exact_penalty_bound",
    "feature_nlml",
    "local_penalty_threshold",
    "step_weight",
]
