"""Feature maps shared by model families (DESIGN.md: ``features/``).

Recurrent maps (LSTM/GRU/RNN/NARX over a window, the GP-LSTM family) live in ``recurrent.py``.

Two kinds of maps compose into the finite feature map phi of an RKHS kernel
k(x, x') = phi(x)^T phi(x') (Shoham & Avron, Sec. 2.2 and 5):

* *input maps* g(x), chosen by ``features=`` -- ``none`` (``Identity``) or ``nn`` (``MLP``, the
  paper's two fully connected layers of 128 units with ReLU);
* *finite kernel maps* on top of g, chosen by ``kernel=`` -- ``linear`` (``LinearKernelMap``,
  phi(z) = sqrt(s / m) z, the paper's exact case) or ``rff`` (``RandomFourierMap``, random
  Fourier features of the Gaussian kernel with learned lengthscale and magnitude).

The RKHS family (scgd, minimax, bsgd) needs phi explicitly; the sparse variational family uses an
input map in front of its kernel (SVGP on g(x), inducing points in feature space) and a finite
kernel map through ``FiniteFeatureKernel`` (a gpytorch kernel). Everything here takes plain
arguments; ``methods/components.py`` reads the config. Random draws (network initialisation, RFF
frequencies) use an explicit ``torch.Generator``, never the global RNG.
"""

from __future__ import annotations

import torch

from .identity import Identity
from .kernel import FiniteFeatureKernel
from .linear import LinearKernelMap
from .mlp import MLP
from .rff import RandomFourierMap

#: ``features=`` options (input maps)
INPUT_MAPS = ("none", "nn")
#: ``kernel=`` options that are a finite feature map
FINITE_KERNELS = ("linear", "rff")
ACTIVATIONS = ("relu", "tanh")
RFF_FORMS = ("sincos", "cos")


def make_input_map(
    name: str, in_dim: int, *, widths=(128, 128), activation: str = "relu", generator: torch.Generator | None = None
) -> torch.nn.Module:
    """``none`` -> Identity(in_dim); ``nn`` -> MLP(in_dim, widths, activation)."""
    if name == "none":
        return Identity(in_dim)
    if name == "nn":
        return MLP(in_dim, tuple(int(w) for w in widths), activation, generator=generator)
    raise ValueError(f"unknown input map {name!r}")


def make_kernel_map(
    name: str,
    in_dim: int,
    *,
    num_features: int = 1000,
    lengthscale: float = 1.0,
    outputscale: float = 1.0,
    ard: bool = False,
    form: str = "sincos",
    learn_outputscale: bool = False,
    normaliser: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.nn.Module:
    """``linear`` -> LinearKernelMap; ``rff`` -> RandomFourierMap (see their docstrings)."""
    if name == "linear":
        return LinearKernelMap(
            in_dim, outputscale=outputscale, learn_outputscale=learn_outputscale, normaliser=normaliser
        )
    if name == "rff":
        return RandomFourierMap(
            in_dim,
            num_features,
            lengthscale=lengthscale,
            outputscale=outputscale,
            ard=ard,
            form=form,
            generator=generator,
        )
    raise ValueError(f"unknown finite kernel {name!r}")


__all__ = [
    "ACTIVATIONS",
    "FINITE_KERNELS",
    "INPUT_MAPS",
    "RFF_FORMS",
    "FiniteFeatureKernel",
    "Identity",
    "LinearKernelMap",
    "MLP",
    "RandomFourierMap",
    "make_input_map",
    "make_kernel_map",
]
