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
    """Whether ``kernel`` is a plain ScaleKernel(RBFKernel) this module computes itself."""
    if type(kernel) is not gpytorch.kernels.ScaleKernel:
        return False
    base = kernel.base_kernel
    return (type(base) is gpytorch.kernels.RBFKernel and base.active_dims is None and kernel.active_dims is None
            and base.batch_shape == torch.Size([]) and kernel.batch_shape == torch.Size([]))


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
    """K = s exp(-|a_i - b_j|^2 / 2) for rows a_i, b_j (already divided by the lengthscales), with
    -|a - b|^2 / 2 = a^T b - |a|^2 / 2 - |b|^2 / 2 clamped at 0. Backward, with W = G o K (G = dL/dK):

        dL/da_i = sum_j W_ij (b_j - a_i),   dL/db_j = sum_i W_ij (a_i - b_j),   dL/ds = sum_ij W_ij / s,

    two N1 x N2 x D products and one elementwise product, where autograd's chain through addmm,
    the clamp, exp and the scaling makes five N1 x N2 passes (the clamp's zero derivative is dropped:
    it only acts where rounding made a squared distance negative, i.e. a_i = b_j, where these
    derivatives vanish anyway)."""

    @staticmethod
    def forward(ctx, a, b, outputscale):
        a_norm = (a * a).sum(-1, keepdim=True)
        b_norm = a_norm if b is a else (b * b).sum(-1, keepdim=True)
        K = torch.addmm(a_norm, a, b.mT, beta=-0.5).sub_(0.5 * b_norm.mT).clamp_max_(0).exp_().mul_(outputscale)
        ctx.save_for_backward(a, b, K, outputscale)
        return K

    @staticmethod
    def backward(ctx, G):
        a, b, K, outputscale = ctx.saved_tensors
        W = G * K
        ga = gb = gs = None
        if ctx.needs_input_grad[0]:
            ga = torch.addmm(W.sum(-1, keepdim=True) * a, W, b, beta=-1)
        if ctx.needs_input_grad[1]:
            gb = torch.addmm(W.sum(-2).unsqueeze(-1) * b, W.mT, a, beta=-1)
        if ctx.needs_input_grad[2]:
            gs = W.sum() / outputscale
        return ga, gb, gs


def diagonal_covariance(kernel, x: torch.Tensor) -> torch.Tensor:
    """K(x_i, x_i) for each row of x (a stationary ScaleKernel(RBF): s_f^2 everywhere)."""
    if not _lean_rbf(kernel) or x.dim() != 2:
        return kernel(x, diag=True)
    return kernel.outputscale.expand(x.shape[:-1])


__all__ = ["dense_covariance", "diagonal_covariance"]
