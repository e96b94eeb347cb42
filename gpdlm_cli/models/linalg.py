"""Dense linear algebra shared by the collapsed and closed-form computations."""

from __future__ import annotations

import torch

from ..exceptions import NumericalError


def safe_cholesky(
    A: torch.Tensor, jitter: float = 1e-6, max_tries: int = 4, what: str = "K_uu", check: bool | None = None
):
    """Cholesky factor of A, adding jitter * mean(diag) (x10 per retry) if A is not PD.

    Raises NumericalError with a remedy after ``max_tries`` retries. ``check=False`` reads nothing
    back from the device (no host-device sync, for GPU hot paths): a failed factor becomes NaN,
    which the trainer's periodic finiteness check reports. ``check=None`` (the default): checked on
    the CPU, where reading ``info`` costs nothing, not on an accelerator (reading it there stalls
    the host on every call: two syncs per SGPR/SVGP/exact step, measured on an H200)."""
    if check is None:
        check = A.device.type == "cpu"
    L, info = torch.linalg.cholesky_ex(A)
    if not check:
        return torch.where(info.unsqueeze(-1).unsqueeze(-1) == 0, L, torch.full_like(L, float("nan")))
    if not bool(info.any()):
        return L
    if A.dim() > 2:  # a batch (the members of sweep.batched_model): jitter for the failing matrices only
        return _batched_retry(A, L, info, jitter, max_tries, what)
    scale = A.diagonal(dim1=-2, dim2=-1).mean().detach().abs().clamp_min(1e-12)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    for i in range(max_tries):
        L, info = torch.linalg.cholesky_ex(A + (jitter * 10**i) * scale * eye)
        if not bool(info.any()):
            return L
    raise NumericalError(
        f"{what} is not positive definite even with jitter {jitter * 10 ** (max_tries - 1):g} x mean "
        f"diagonal; try fewer or better-spread inducing points (model.inducing_init=kmeans), a larger "
        f"model.jitter, or dtype=float64"
    )


def _batched_retry(A: torch.Tensor, L: torch.Tensor, info: torch.Tensor, jitter: float, max_tries: int, what: str):
    """The factors of a batch of matrices A (... x M x M) of which some failed: each failed one factored
    again alone, as ``safe_cholesky`` factors one matrix (jitter scaled by its own mean diagonal), the
    others kept -- a member of a batch gets the factor its separate run gets."""
    flat_A, flat_L = A.reshape(-1, *A.shape[-2:]), L.reshape(-1, *L.shape[-2:])
    bad = set(torch.nonzero(info.reshape(-1)).flatten().tolist())
    rows = [
        safe_cholesky(flat_A[i], jitter, max_tries, what, check=True) if i in bad else flat_L[i]
        for i in range(flat_A.shape[0])
    ]
    return torch.stack(rows).reshape(L.shape)


def tri_solve(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """L^{-1} B for lower-triangular L."""
    return torch.linalg.solve_triangular(L, B, upper=False)


def _solve_keeping_layout(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """L^{-1} B for lower-triangular L, as ``tri_solve``, but through a right-hand solve on B's transpose
    (A^T = B^T L^{-T}): for a row-major B the result is row-major too, with no copy to LAPACK's column-major
    layout and back -- the layout the hand-written backwards below multiply in."""
    return torch.linalg.solve_triangular(L.mT, B.mT, upper=True, left=False).mT


class _WhitenedGram(torch.autograd.Function):
    """(L, K_uf, r) -> (A A^T, A r) with A = L^{-1} K_uf; see ``whitened_gram``."""

    @staticmethod
    def forward(ctx, L, K_uf, r):
        A = _solve_keeping_layout(L, K_uf)  # M x N, in K_uf's layout
        AAt = A @ A.mT
        Ar = (A @ r.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(L, A, r, AAt, Ar)
        return AAt, Ar

    @staticmethod
    def backward(ctx, g_AAt, g_Ar):
        L, A, r, AAt, Ar = ctx.saved_tensors
        # dA = G_s A + g r^T (G_s = G + G^T); K_uf = L A gives dK_uf = L^{-T} dA and dL = -tril(dK_uf A^T)
        G_s = g_AAt + g_AAt.mT
        LtG = torch.linalg.solve_triangular(L.mT, G_s, upper=True)  # L^{-T} G_s  (M x M)
        Ltg = torch.linalg.solve_triangular(L.mT, g_Ar.unsqueeze(-1), upper=True)  # L^{-T} g  (M x 1)
        dL = dK = dr = None
        if ctx.needs_input_grad[1]:
            dK = (LtG @ A).addcmul_(Ltg, r.unsqueeze(-2))  # one M^2 N product, one pass
        if ctx.needs_input_grad[0]:
            dL = -(LtG @ AAt + Ltg @ Ar.unsqueeze(-2)).tril()  # dK_uf A^T, from A A^T and A r: O(M^3)
        if ctx.needs_input_grad[2]:
            dr = (A.mT @ g_Ar.unsqueeze(-1)).squeeze(-1)
        return dL, dK, dr


def whitened_gram(L: torch.Tensor, K_uf: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A A^T, A r) for A = L^{-1} K_uf (M x N), L lower-triangular (K_uu = L L^T), r an N-vector; batched
    over leading dimensions. Everything the collapsed bound needs from the M x N data (Titsias, 2009:
    sum_i Q_ii = tr(A A^T), and with it the optimal q(u); ``objectives.collapsed_elbo``).

    Its backward is written by hand: with G = d/d(A A^T) and g = d/d(A r),

        dK_uf = L^{-T} (G + G^T) A + L^{-T} g r^T,
        dL    = -tril( L^{-T} [ (G + G^T) A A^T + g (A r)^T ] ),     dr = A^T g,

    one O(M^2 N) product and one pass over M x N, where autograd's chain through the triangular solve,
    the product and the sums makes four such products, a second triangular solve and ~10 M x N
    elementwise passes (copies to LAPACK's column-major layout among them). Forward and backward together:
    one O(M^2 N) triangular solve and two O(M^2 N) products. Equal to autograd's to rounding (tested)."""
    return _WhitenedGram.apply(L, K_uf, r)


class _WhitenedMarginalUpdates(torch.autograd.Function):
    """(L, K_uf, S - I, m~) -> (A^T m~, diag A^T (S - I) A); see ``whitened_marginal_updates``."""

    @staticmethod
    def forward(ctx, L, K_uf, middle, m):
        A = _solve_keeping_layout(L, K_uf)
        mean_update = (m.unsqueeze(-2) @ A).squeeze(-2)
        variance_update = (middle @ A).mul_(A).sum(-2)
        ctx.save_for_backward(L, A, middle, m)
        return mean_update, variance_update

    @staticmethod
    def backward(ctx, g_mean, g_var):
        L, A, middle, m = ctx.saved_tensors
        A_g = A * g_var.unsqueeze(-2)  # A diag(g_var)
        d_middle = A_g @ A.mT
        Lt_middle = torch.linalg.solve_triangular(L.mT, middle, upper=True)  # L^{-T} (S - I)
        Lt_m = torch.linalg.solve_triangular(L.mT, m.unsqueeze(-1), upper=True)  # L^{-T} m~  (M x 1)
        A_gm = A @ g_mean.unsqueeze(-1)  # A g_mean  (M x 1)
        dK = (2 * Lt_middle @ A_g).addcmul_(Lt_m, g_mean.unsqueeze(-2))
        dL = -(2 * Lt_middle @ d_middle + Lt_m @ A_gm.mT).tril()
        return dL, dK, d_middle, A_gm.squeeze(-1)


def whitened_marginal_updates(
    L: torch.Tensor, K_uf: torch.Tensor, middle: torch.Tensor, m: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whitened sparse GP's updates to the prior marginals (Hensman et al., 2015), with A = L^{-1} K_uf:

        mu_i - m(x_i) = A_i^T m~,     var_i - K_ii = A_i^T (S - I) A_i      (``middle`` = S - I),

    batched over leading dimensions. gpytorch's ``ComputePredictiveUpdates`` computes the same numbers
    with the same hand-written backward (two O(M^2 N) products: d(S - I) = A diag(g_var) A^T and
    dK_uf = 2 L^{-T} (S - I) A diag(g_var) + L^{-T} m~ g_mean^T; dL = -tril(dK_uf A^T) from M x M
    products); this one keeps A in K_uf's row-major layout (a right-hand solve: no copy to LAPACK's
    column-major layout and back) and adds the mean's outer product in the same pass as the product
    (``addcmul_``) instead of forming it. Equal to gpytorch's to rounding (tested)."""
    return _WhitenedMarginalUpdates.apply(L, K_uf, middle, m)
