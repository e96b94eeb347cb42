"""The neural-network input map g_w of Shoham & Avron (Sec. 5): fully connected layers with ReLU."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

_ACT: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": torch.nn.functional.relu, "tanh": torch.tanh}


class MLP(torch.nn.Module):
    """g_w(x) = act(W_L ... act(W_1 x + c_1) ... + c_L), an activation after *every* layer.

    The paper: "two fully connected layers, both with output dimension of 128 and ReLU activation"
    (``widths=(128, 128)``), so ``out_dim`` = 128 and the features are non-negative. Weights and
    biases start U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch's ``nn.Linear`` default), drawn from
    ``generator`` so that ``seed`` fixes them without touching the global RNG. Parameters are
    created in float32; move the module with ``.to(dtype=...)``.
    """

    def __init__(
        self, in_dim: int, widths=(128, 128), activation: str = "relu", generator: torch.Generator | None = None
    ):
        super().__init__()
        if activation not in _ACT:
            raise ValueError(f"activation must be one of {tuple(_ACT)}")
        self.in_dim = int(in_dim)
        self.widths = tuple(int(w) for w in widths)
        self.activation = activation
        self.out_dim = self.widths[-1] if self.widths else self.in_dim
        self.layers = torch.nn.ModuleList()
        fan_in = self.in_dim
        for width in self.widths:
            layer = torch.nn.utils.skip_init(torch.nn.Linear, fan_in, width)
            bound = 1.0 / math.sqrt(fan_in)
            with torch.no_grad():
                layer.weight.copy_(torch.rand(width, fan_in, generator=generator) * 2 * bound - bound)
                layer.bias.copy_(torch.rand(width, generator=generator) * 2 * bound - bound)
            self.layers.append(layer)
            fan_in = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = _ACT[self.activation]
        for layer in self.layers:
            x = act(layer(x))
        return x
