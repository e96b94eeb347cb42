"""Dense kernel matrices on the hot path: ScaleKernel(RBF) written directly in torch.

The sparse models evaluate K_uu, K_uf and diag K_ff at every objective evaluation. gpytorch's
``ScaleKernel(RBFKernel)`` computes the same numbers through a general path -- ``torch.equal(x1, x2)``,
a padded ``[-2 x1, |x1|^2, 1] [x2, 1, |x2|^2]^T`` product, lazy tensors, ``to_dense`` -- whose
elementwise steps and their backward are most of an evaluation's M x N work (``benchmarks/
bench_training.py`` measures it). For the kernel gpdlm's sparse families use, the RBF with one
lengthscale or ARD lengthscales (``kernel.ard``),

    k(x, x') = s_f^2 exp(-|x / l - x' / l|^2 / 2),
    |a - b|^2 = |a - c|^2 + |b - c|^2 - 2 (a - c)^T (b - c),

with c the column mean of the first argument (held constant: the distance does not depend on it, so
the gradient is exact; it only keeps the expansion from cancelling digits, as gpytorch's ``sq_dist``
does), squared distances clamped at 0. It agrees with gpytorch to ~1e-15 in float64 and in the
gradients of Z, l and s_f^2 (``tests/sparse_variational/test_lean_kernel.py``).

The Matern kernels (nu = 1/2, 3/2, 5/2; issue 47, item 4) take the same path: with r = |a - b| on the
scaled, centred inputs,

    nu = 1/2:  k = s exp(-r),   nu = 3/2:  k = s (1 + sqrt3 r) exp(-sqrt3 r),
    nu = 5/2:  k = s (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r),

r from the same augmented product (``_ScaledMatern``), and a hand-written backward through
dk/da = s (f'(r) / r) (a - b), whose factor f'(r) / r is -3 exp(-sqrt3 r) and -5/3 (1 + sqrt5 r)
exp(-sqrt5 r) for nu = 3/2 and 5/2 (smooth at r = 0) and -exp(-r) / r for nu = 1/2 (0 where r = 0,
the subgradient torch's ``cdist`` also takes). Values and gradients equal gpytorch's ``MaternKernel``
to 1e-12 (``tests/kernels/test_lean_matern.py``; gpytorch's own self-covariance diagonal carries
~1e-8 of rounding for nu = 1/2, where this one is exactly s). Any other kernel -- finite feature
kernels, batch shapes, ``active_dims``, feature-map wrappers -- goes through gpytorch unchanged.
"""

from __future__ import annotations

import math

import gpytorch
import torch


def _lean(kernel):
    """What this module computes itself for ``kernel``: ``"rbf"`` for a plain ScaleKernel(RBFKernel),
    nu (0.5, 1.5 or 2.5) for a plain ScaleKernel(MaternKernel), None for anything else (gpytorch).
    Decided once per kernel object and kept in its ``__dict__`` (gpytorch's ``batch_shape`` property
    alone cost ~0.1 ms a call, ~5% of a joint-DLM L-BFGS iteration at n = 500); a kernel's type,
    ``nu``, ``active_dims`` and batch shape are fixed once gpdlm has built it."""
    d = kernel.__dict__
    if "_gpdlm_lean" not in d:
        base = getattr(kernel, "base_kernel", None)
        plain = (
            type(kernel) is gpytorch.kernels.ScaleKernel
            and base is not None
            and base.active_dims is None
            and kernel.active_dims is None
            and base.batch_shape == torch.Size([])
            and kernel.batch_shape == torch.Size([])
        )
        kind = None
        if plain and type(base) is gpytorch.kernels.RBFKernel:
            kind = "rbf"
        elif plain and type(base) is gpytorch.kernels.MaternKernel and float(base.nu) in _MATERN:
            kind = float(base.nu)
        d["_gpdlm_lean"] = kind
    return d["_gpdlm_lean"]


def dense_covariance(kernel, x1: torch.Tensor, x2: torch.Tensor | None = None) -> torch.Tensor:
    """K(x1, x2) as a dense N1 x N2 tensor (K(x1, x1) when ``x2`` is None)."""
    kind = _lean(kernel)
    if kind is None or x1.dim() != 2 or (x2 is not None and x2.dim() != 2):  # batched inputs: gpytorch
        return kernel(x1, x1 if x2 is None else x2).to_dense()
    ls = kernel.base_kernel.lengthscale  # 1 x 1 or 1 x D
    a = x1 / ls
    c = a.detach().mean(-2, keepdim=True)
    a = a - c
    b = a if x2 is None or x2 is x1 else x2 / ls - c  # K(Z, Z): one tensor, an exactly zero diagonal distance
    if kind == "rbf":
        return _ScaledRBF.apply(a, b, kernel.outputscale)
    return _ScaledMatern.apply(a, b, kernel.outputscale, kind)


class _ScaledRBF(torch.autograd.Function):
    """K = s exp(-|a_i - b_j|^2 / 2) for rows a_i, b_j (already divided by the lengthscales).

    Forward: the exponent plus log s is one product of augmented rows,

        a_i^T b_j - |a_i|^2 / 2 - |b_j|^2 / 2 + log s = [a_i, log s - |a_i|^2 / 2, 1] . [b_j, 1, -|b_j|^2 / 2],

    clamped at log s (a squared distance below 0 is rounding) and exponentiated in place: one N1 x N2
    product and two passes, where bias, subtraction, clamp, exp and scaling took five. Backward, with
    W = G o K (G = dL/dK):

        dL/da_i = sum_j W_ij (b_j - a_i),   dL/db_j = sum_i W_ij (a_i - b_j),   dL/ds = sum_ij W_ij / s,

    from W [b, 1] and W^T [a, 1] (the row and column sums of W come out of the same products as W b
    and W^T a): one elementwise pass and two thin products, where autograd's chain through the
    product, the clamp, exp and the scaling makes five N1 x N2 passes (the clamp's zero derivative
    is dropped: it only acts where rounding made a squared distance negative, i.e. a_i = b_j, where
    these derivatives vanish anyway)."""

    @staticmethod
    def forward(ctx, a, b, outputscale):
        log_s = outputscale.log()
        half_a = (a * a).sum(-1, keepdim=True).mul_(-0.5)
        half_b = half_a if b is a else (b * b).sum(-1, keepdim=True).mul_(-0.5)
        ones_a = torch.ones_like(half_a)
        ones_b = ones_a if b is a else torch.ones_like(half_b)
        rows = torch.cat([a, half_a + log_s, ones_a], -1)
        cols = torch.cat([b, ones_b, half_b], -1)
        K = (rows @ cols.mT).clamp_max_(log_s).exp_()
        ctx.save_for_backward(a, b, K, outputscale)
        return K

    @staticmethod
    def backward(ctx, G):
        a, b, K, outputscale = ctx.saved_tensors
        W = G * K
        D = a.shape[-1]
        ga = gb = gs = None
        row_sums = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[2]:
            Wb = W @ torch.cat([b, torch.ones_like(b[..., :1])], -1)  # [W b, W 1]
            row_sums = Wb[..., D:]
            ga = Wb[..., :D] - row_sums * a
        if ctx.needs_input_grad[1]:
            Wa = W.mT @ torch.cat([a, torch.ones_like(a[..., :1])], -1)  # [W^T a, W^T 1]
            gb = Wa[..., :D] - Wa[..., D:] * b
        if ctx.needs_input_grad[2]:
            gs = row_sums.sum() / outputscale
        return (ga if ctx.needs_input_grad[0] else None), gb, gs


_MATERN = (0.5, 1.5, 2.5)


class _ScaledMatern(torch.autograd.Function):
    """K = s f_nu(|a_i - b_j|) for rows a_i, b_j (already divided by the lengthscales); see the module
    docstring for f_nu and its derivative.

    Forward: the squared distances from one product of augmented rows, [a_i, |a_i|^2, 1] . [-2 b_j, 1,
    |b_j|^2], clamped at 0 (rounding) -- with ``b is a`` the diagonal is set to exactly 0 -- then r, the
    exponential E = exp(-c r) (c = sqrt(2 nu)) and K in place. Backward, with W = G o s f'(r) / r:

        dL/da_i = sum_j W_ij (a_i - b_j),   dL/db_j = sum_i W_ij (b_j - a_i),   dL/ds = sum_ij G_ij K_ij / s,

    from W [b, 1] and W^T [a, 1], as the RBF's: a few elementwise passes and two thin products, where
    autograd's chain through the distance, square root, polynomial and exponential makes ~10 N1 x N2
    passes (and gpytorch's ``cdist`` its own backward kernel)."""

    @staticmethod
    def forward(ctx, a, b, outputscale, nu):
        same = b is a
        na = (a * a).sum(-1, keepdim=True)
        nb = na if same else (b * b).sum(-1, keepdim=True)
        rows = torch.cat([a, na, torch.ones_like(na)], -1)
        cols = torch.cat([b * -2.0, torch.ones_like(nb), nb], -1)
        r = (rows @ cols.mT).clamp_min_(0)
        if same:
            r.diagonal().zero_()
        r.sqrt_()
        c = math.sqrt(2 * nu)
        E = torch.exp(r * -c)
        if nu == 0.5:
            K = E * outputscale
        elif nu == 1.5:
            K = (r * c).add_(1).mul_(E).mul_(outputscale)
        else:  # 2.5: 1 + c r + c^2 r^2 / 3
            K = (r * (c / 3)).add_(1).mul_(r).mul_(c).add_(1).mul_(E).mul_(outputscale)
        ctx.nu = nu
        ctx.save_for_backward(a, b, r, E, K, outputscale)
        return K

    @staticmethod
    def backward(ctx, G):
        a, b, r, E, K, outputscale = ctx.saved_tensors
        nu = ctx.nu
        D = a.shape[-1]
        ga = gb = gs = None
        if ctx.needs_input_grad[2]:
            gs = (G * K).sum() / outputscale
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return ga, gb, gs, None
        # W = G o s f'(r) / r  (sign included)
        if nu == 0.5:
            W = (G * E).div_(r).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0).mul_(-outputscale)  # r = 0: 0
        elif nu == 1.5:
            W = (G * E).mul_(-3.0 * outputscale)
        else:
            W = (r * math.sqrt(5.0)).add_(1).mul_(E).mul_(G).mul_(-5.0 / 3.0 * outputscale)
        if ctx.needs_input_grad[0]:
            Wb = W @ torch.cat([b, torch.ones_like(b[..., :1])], -1)  # [W b, W 1]
            ga = Wb[..., D:] * a - Wb[..., :D]
        if ctx.needs_input_grad[1]:
            Wa = W.mT @ torch.cat([a, torch.ones_like(a[..., :1])], -1)  # [W^T a, W^T 1]
            gb = Wa[..., D:] * b - Wa[..., :D]
        return ga, gb, gs, None


def diagonal_covariance(kernel, x: torch.Tensor) -> torch.Tensor:
    """K(x_i, x_i) for each row of x (a stationary ScaleKernel(RBF or Matern): s_f^2 everywhere)."""
    if _lean(kernel) is None or x.dim() != 2:
        return kernel(x, diag=True)
    return kernel.outputscale.expand(x.shape[:-1])


__all__ = ["dense_covariance", "diagonal_covariance"]
