"""The RKHS family's steps for B members at once (``sweep.batched=true``; issue 41, item 2): the closed forms of
``objectives.rkhs._SCGDStep`` and ``_MinimaxStep`` with a leading member dimension, and BSGD's batch NLML.

Every tensor carries the members first: phi (B x b x d), w (B x d), s2 (B), y (B x b), F~ / A / B / C
(B x d x d), mu (B), and n (B: the members' training rows, e.g. 14,940 and 14,939 on two of elevators'
90/10 masks). Each member's value and gradients are its own step's (the formulas of the single-member
classes, line by line; only the matrix products are batched, so they agree with a separate run's up to
float rounding). The returned values are per member (B); the trainer minimises their sum, so every member
receives the gradient of its own loss.
"""

from __future__ import annotations

import torch

from ..models.bayesian_linear import LOG_2PI
from .rkhs import covariance_nlml


def _diag(A: torch.Tensor) -> torch.Tensor:
    return A.diagonal(dim1=-2, dim2=-1)


def _mv(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A v for batches of matrices and vectors."""
    return (A @ v.unsqueeze(-1)).squeeze(-1)


class SCGDStepBatched(torch.autograd.Function):
    """``_SCGDStep`` for B members: (values (B), F_batch (B x d x d), no gradient). ``L``: chol(F~) per member."""

    @staticmethod
    def forward(ctx, phi, w, s2, y, L, n):
        b, d = phi.shape[-2:]
        P = torch.cholesky_inverse(L)
        r = _mv(phi, w) - y
        rr = (r * r).sum(-1)
        bs2 = b * s2
        value = 0.5 * (
            rr / bs2
            + (w * w).sum(-1) / n
            + ((n - d) / n) * torch.log(s2)
            + 2 * torch.log(_diag(L)).sum(-1) / n
            + LOG_2PI
        )
        F_batch = (phi.mT @ phi).mul_((n / b)[:, None, None])
        _diag(F_batch).add_(s2.unsqueeze(-1))
        ctx.save_for_backward(phi, w, s2, r, rr, P, n)
        ctx.consts = (b, d)
        ctx.mark_non_differentiable(F_batch)
        return value, F_batch

    @staticmethod
    def backward(ctx, grad_value, grad_F_batch):
        phi, w, s2, r, rr, P, n = ctx.saved_tensors
        b, d = ctx.consts
        r_scaled = r / (b * s2).unsqueeze(-1)
        d_phi = torch.baddbmm(r_scaled.unsqueeze(-1) * w.unsqueeze(-2), phi, P, alpha=1.0 / b)
        d_w = w / n.unsqueeze(-1) + _mv(phi.mT, r_scaled)
        d_s2 = 0.5 * ((n - d) / (n * s2) + _diag(P).sum(-1) / n - rr / (b * s2 * s2))
        g = grad_value
        return d_phi * g[:, None, None], d_w * g[:, None], d_s2 * g, None, None, None


class MinimaxStepBatched(torch.autograd.Function):
    """``_MinimaxStep`` for B members. ``factor(A)``: the members' Cholesky factors of A (B x d x d; the
    trainer's per-member jitter rule); ``mu``: the penalty weights (B)."""

    @staticmethod
    def forward(ctx, phi, w, s2, M, Bd, y, C, phi_bar, mu, n, factor):
        b, d = phi.shape[-2:]
        S = 0.5 * (M + M.mT)
        A = C @ S @ C.mT
        LA = factor(A)
        norm_A = torch.linalg.norm(A, dim=(-2, -1))
        r = _mv(phi, w) - y
        rr = (r * r).sum(-1)
        Bs = Bd + Bd.mT
        phi_Bs = phi @ Bs
        trace_B = _diag(Bd).sum(-1)
        Q = (Bd * A).sum((-2, -1)) - ((n / b) * (0.5 * (phi_Bs * phi).sum((-2, -1))) + s2 * trace_B)
        value = 0.5 * (
            rr / (b * s2)
            + (w * w).sum(-1) / n
            + ((n - d) / n) * torch.log(s2)
            + (2 * torch.log(_diag(LA)).sum(-1) + mu * Q / norm_A) / n
            + LOG_2PI
        )
        ctx.save_for_backward(phi, w, s2, C, A, LA, Bd, r, rr, phi_Bs, trace_B, Q, norm_A, phi_bar, mu, n)
        ctx.consts = (b, d)
        return value

    @staticmethod
    def backward(ctx, grad_value):
        phi, w, s2, C, A, LA, Bd, r, rr, phi_Bs, trace_B, Q, norm_A, phi_bar, mu, n = ctx.saved_tensors
        b, d = ctx.consts
        kappa = mu / (n * norm_A)
        r_scaled = r / (b * s2).unsqueeze(-1)
        d_w = w / n.unsqueeze(-1) + _mv(phi.mT, r_scaled)
        d_phi = r_scaled.unsqueeze(-1) * w.unsqueeze(-2) - (kappa * (n / (2 * b)))[:, None, None] * phi_Bs
        d_s2 = 0.5 * ((n - d) / (n * s2) - rr / (b * s2 * s2) - kappa * trace_B)
        G = torch.cholesky_inverse(LA).mul_((0.5 / n)[:, None, None]) + (0.5 * kappa)[:, None, None] * (
            Bd - (Q / norm_A.square())[:, None, None] * A
        )
        dS = C.mT @ (G @ C)
        d_M = 0.5 * (dS + dS.mT)
        F_bar = (phi_bar.mT @ phi_bar).mul_((n / b)[:, None, None])
        _diag(F_bar).add_(s2.unsqueeze(-1))
        d_B = (-0.5 * kappa)[:, None, None] * (A - F_bar)
        g = grad_value
        g3 = g[:, None, None]
        return d_phi * g3, d_w * g[:, None], d_s2 * g, d_M * g3, d_B * g3, None, None, None, None, None, None


def bsgd_values(phi: torch.Tensor, y: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """BSGD's per-point batch NLML for B members (``BatchNLML`` on a finite map): B values."""
    return covariance_nlml(phi @ phi.mT, y, s2[:, None, None])


__all__ = ["MinimaxStepBatched", "SCGDStepBatched", "bsgd_values"]
