"""The convergence rule of the DLM paper (App. D): stop when max - min of the loss over the last
``window`` iterations is <= ``tol`` (paper: window 50 for regression, 20 otherwise; tol 1e-4)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ConvergenceRule:
    window: int = 50
    tol: float = 1e-4

    def converged(self, losses: torch.Tensor) -> bool:
        """``losses``: 1-D tensor of all losses so far (on any device)."""
        if self.window <= 0 or losses.numel() < self.window:
            return False
        tail = losses[-self.window:]
        return bool((tail.max() - tail.min()) <= self.tol)
