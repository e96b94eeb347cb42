"""The linear kernel on features as a finite feature map (``kernel=linear``; Shoham & Avron, Sec. 5)."""

from __future__ import annotations

import math

import torch


def inverse_softplus(v: float) -> float:
    """softplus^-1(v) = log(exp(v) - 1), stable for large v."""
    return v + math.log(-math.expm1(-v))


class LinearKernelMap(torch.nn.Module):
    """phi(z) = sqrt(s / d_z) z, so k(z, z') = s <z, z'> / d_z.

    The paper's linear kernel k'(z, z') = <z, z'> on the network's features (s = d_z): the exact
    finite-dimensional case, d = d_z. gpdlm divides by d_z so that kernel values stay O(1) whatever
    the width; the network absorbs any scale. ``s`` (``kernel.outputscale``) is learned only with
    ``learn_outputscale`` (softplus-parameterised), else a fixed buffer.
    """

    def __init__(self, in_dim: int, outputscale: float = 1.0, learn_outputscale: bool = False):
        super().__init__()
        self.in_dim = self.out_dim = int(in_dim)
        raw = torch.tensor(inverse_softplus(float(outputscale)), dtype=torch.float64)
        if learn_outputscale:
            self.raw_outputscale = torch.nn.Parameter(raw)
        else:
            self.register_buffer("raw_outputscale", raw)

    @property
    def outputscale(self) -> torch.Tensor:
        return torch.nn.functional.softplus(self.raw_outputscale)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z * (self.outputscale / self.in_dim).sqrt().to(z.dtype)
