"""The identity input map (``features=none``)."""

from __future__ import annotations

import torch


class Identity(torch.nn.Module):
    """g(x) = x; ``out_dim`` = ``in_dim``."""

    def __init__(self, in_dim: int):
        super().__init__()
        self.in_dim = self.out_dim = int(in_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
