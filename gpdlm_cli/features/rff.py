"""Random Fourier features of the Gaussian kernel (Rahimi & Recht, 2007; ``kernel=rff``)."""

from __future__ import annotations

import math

import torch

from .linear import inverse_softplus


class RandomFourierMap(torch.nn.Module):
    """phi(z) with phi(z)^T phi(z') ~= s exp(-||z - z'||^2 / (2 ell^2)) (Shoham & Avron, Sec. 5).

    With m frequencies omega_j ~ N(0, I) (a fixed buffer drawn from ``generator``) and
    u_j = omega_j^T (z / ell):

    * ``form="sincos"`` (default): phi = sqrt(s / m) [cos u_1..cos u_m, sin u_1..sin u_m],
      m = num_features / 2 (num_features even);
    * ``form="cos"``: phi = sqrt(2 s / m) cos(u_j + b_j), b_j ~ U(0, 2 pi), m = num_features.

    Either way ``out_dim`` = ``num_features`` = d. The lengthscale ell (one, or one per input with
    ``ard``) and the magnitude s are learned through softplus. ``exact_kernel`` is the Gaussian
    kernel the features approximate (for the exact-kernel NLML the RKHS family logs).
    """

    omega: torch.Tensor  # buffer
    phase: torch.Tensor  # buffer

    def __init__(
        self,
        in_dim: int,
        num_features: int,
        lengthscale: float = 1.0,
        outputscale: float = 1.0,
        ard: bool = False,
        form: str = "sincos",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if form not in ("sincos", "cos"):
            raise ValueError("form must be 'sincos' or 'cos'")
        if form == "sincos" and num_features % 2:
            raise ValueError("form='sincos' needs an even num_features")
        self.in_dim, self.out_dim, self.form = int(in_dim), int(num_features), form
        m = self.out_dim // 2 if form == "sincos" else self.out_dim
        self.register_buffer("omega", torch.randn(self.in_dim, m, generator=generator))
        phase = torch.rand(m, generator=generator) * 2 * math.pi if form == "cos" else torch.zeros(0)
        self.register_buffer("phase", phase)
        n_ell = self.in_dim if ard else 1
        raw_ell = torch.full((n_ell,), inverse_softplus(float(lengthscale)), dtype=torch.float64)
        self.raw_lengthscale = torch.nn.Parameter(raw_ell)
        self.raw_outputscale = torch.nn.Parameter(
            torch.tensor(inverse_softplus(float(outputscale)), dtype=torch.float64)
        )

    @property
    def lengthscale(self) -> torch.Tensor:
        return torch.nn.functional.softplus(self.raw_lengthscale)

    @property
    def outputscale(self) -> torch.Tensor:
        return torch.nn.functional.softplus(self.raw_outputscale)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        u = (z / self.lengthscale.to(z.dtype)) @ self.omega.to(z.dtype)
        s = self.outputscale.to(z.dtype)
        m = u.shape[-1]
        if self.form == "sincos":
            return torch.cat([torch.cos(u), torch.sin(u)], dim=-1) * (s / m).sqrt()
        return torch.cos(u + self.phase.to(z.dtype)) * (2 * s / m).sqrt()

    def exact_kernel(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """s exp(-||z1 - z2||^2 / (2 ell^2)), the kernel the features approximate."""
        ell = self.lengthscale.to(z1.dtype)
        d2 = torch.cdist(z1 / ell, z2 / ell).square()
        return self.outputscale.to(z1.dtype) * torch.exp(-0.5 * d2)
