"""The linear kernel on features as a finite feature map (``kernel=linear``; Shoham & Avron, Sec. 5)."""

from __future__ import annotations

import math

import torch


def inverse_softplus(v: float) -> float:
    """softplus^-1(v) = log(exp(v) - 1), stable for large v."""
    return v + math.log(-math.expm1(-v))


class LinearKernelMap(torch.nn.Module):
    """phi(z) = sqrt(s / m) z, so k(z, z') = s <z, z'> / m, with a fixed normaliser m.

    The paper's linear kernel k'(z, z') = <z, z'> on the network's features (s = m): the exact
    finite-dimensional case, d = d_z. ``normaliser`` m is a constant chosen at construction: by
    default d_z (the width); the builders pass m = mean_i ||z_i||^2 over the training inputs at
    initialisation (``kernel.normaliser=data``), so that the mean of k(x, x) over the training data
    starts at s whatever the network's depth, width and initialisation. (With d_z, gpdlm's default
    128-128 ReLU network gave mean k(x, x) = 0.033 on standardised concrete, against var(y) = 1: a
    model that starts as almost all noise.) ``s`` (``kernel.outputscale``) is learned with
    ``learn_outputscale`` (softplus-parameterised), else a fixed buffer.
    """

    raw_outputscale: torch.Tensor  # a Parameter, or a buffer when the outputscale is fixed
    normaliser: torch.Tensor  # buffer

    def __init__(
        self, in_dim: int, outputscale: float = 1.0, learn_outputscale: bool = False, normaliser: float | None = None
    ):
        super().__init__()
        self.in_dim = self.out_dim = int(in_dim)
        raw = torch.tensor(inverse_softplus(float(outputscale)), dtype=torch.float64)
        if learn_outputscale:
            self.raw_outputscale = torch.nn.Parameter(raw)
        else:
            self.register_buffer("raw_outputscale", raw)
        m = float(self.in_dim if normaliser is None else normaliser)
        if not m > 0:
            raise ValueError(f"the normaliser of the linear kernel must be > 0; got {m}")
        self.register_buffer("normaliser", torch.tensor(m, dtype=torch.float64))

    @property
    def outputscale(self) -> torch.Tensor:
        return torch.nn.functional.softplus(self.raw_outputscale)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z * (self.outputscale / self.normaliser).sqrt().to(z.dtype)
