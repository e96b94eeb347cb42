"""A finite feature map as a gpytorch kernel, for families built on gpytorch kernels (SVGP, DLM)."""

from __future__ import annotations

import gpytorch
import torch


class FiniteFeatureKernel(gpytorch.kernels.Kernel):
    """k(x, x') = phi(x)^T phi(x') for a feature-map module phi (``LinearKernelMap``,
    ``RandomFourierMap``). Rank <= d = ``num_features``, so a sparse GP on it needs M <= d
    inducing points (the family checks)."""

    def __init__(self, feature_map: torch.nn.Module):
        super().__init__()
        self.feature_map = feature_map
        self.num_features = feature_map.out_dim

    def forward(self, x1, x2, diag: bool = False, last_dim_is_batch: bool = False, **params):
        p1 = self.feature_map(x1)
        p2 = p1 if x2 is x1 else self.feature_map(x2)
        if diag:
            return (p1 * p2).sum(-1)
        return p1 @ p2.transpose(-1, -2)
