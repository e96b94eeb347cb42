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
gradients of Z, l and s_f^2 (``tests/sparse_variational/test_lean_kernel.py``). Any other kernel --
Matern, finite feature kernels, batch shapes, ``active_dims``, feature-map wrappers -- goes through
gpytorch unchanged.
"""

from __future__ import annotations

import gpytorch
import torch


def _lean_rbf(kernel) -> bool:
    """Whether ``kernel`` is a plain ScaleKernel(RBFKernel) this module computes itself. Decided once per
    kernel object and kept in its ``__dict__`` (gpytorch's ``batch_shape`` property alone cost ~0.1 ms a
    call, ~5% of a joint-DLM L-BFGS iteration at n = 500); a kernel's type, ``active_dims`` and batch
    shape are fixed once gpdlm has built it."""
    cached = kernel.__dict__.get("_gpdlm_lean_rbf")
    if cached is None:
        base = getattr(kernel, "base_kernel", None)
        cached = (type(kernel) is gpytorch.kernels.ScaleKernel and type(base) is gpytorch.kernels.RBFKernel
                  and base.active_dims is None and kernel.active_dims is None
                  and base.batch_shape == torch.Size([]) and kernel.batch_shape == torch.Size([]))
        kernel.__dict__["_gpdlm_lean_rbf"] = cached
    return cached


def dense_covariance(kernel, x1: torch.Tensor, x2: torch.Tensor | None = None) -> torch.Tensor:
    """K(x1, x2) as a dense N1 x N2 tensor (K(x1, x1) when ``x2`` is None)."""
    if not _lean_rbf(kernel) or x1.dim() != 2 or (x2 is not None and x2.dim() != 2):  # batched inputs: gpytorch
        return kernel(x1, x1 if x2 is None else x2).to_dense()
    ls = kernel.base_kernel.lengthscale  # 1 x 1 or 1 x D
    a = x1 / ls
    c = a.detach().mean(-2, keepdim=True)
    a = a - c
    b = a if x2 is None else x2 / ls - c
    return _ScaledRBF.apply(a, b, kernel.outputscale)


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


def diagonal_covariance(kernel, x: torch.Tensor) -> torch.Tensor:
    """K(x_i, x_i) for each row of x (a stationary ScaleKernel(RBF): s_f^2 everywhere)."""
    if not _lean_rbf(kernel) or x.dim() != 2:
        return kernel(x, diag=True)
    return kernel.outputscale.expand(x.shape[:-1])


__all__ = ["dense_covariance", "diagonal_covariance"]
