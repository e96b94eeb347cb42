"""Specs -> feature maps (``gpdlm_cli.features``), shared by the families that use them.

* ``features=none|nn`` (``schema.FeaturesSpec``): the input map g in front of the kernel -- the identity,
  or the paper's MLP (``features.widths``, ``features.activation``);
* ``kernel=linear|rff`` (``schema.KernelSpec``): a finite feature map on g's output, so that
  k(x, x') = phi(x)^T phi(x') -- what the RKHS family needs, and what the sparse variational family
  wraps in a gpytorch kernel.

Random draws use generators derived from the run's ``seed`` (network initialisation and RFF
frequencies from different streams); the global RNG is untouched, so ``features=none`` runs are
bit-identical to runs made before feature maps existed.
"""

from __future__ import annotations

import math

import torch

from ..exceptions import UnsupportedCombination, param_error
from ..schema import FeaturesSpec, KernelSpec, as_spec
from ..validation import is_int, is_number

FINITE_KERNELS = ("linear", "rff")
LINEAR_NORMALISERS = ("data", "width")
_NN_STREAM, _RFF_STREAM = 7919, 104729  # offsets of the generators' seeds from the run's seed


def uses_features(spec) -> bool:
    """Whether the run (a ``schema.RunSpec``) puts an input map in front of the kernel (``features``
    other than none)."""
    return _features(spec.features).used


def _features(value) -> FeaturesSpec:
    return as_spec(value if value is not None else {"name": "none"}, FeaturesSpec, "features")


def check_features(features) -> None:
    """``features.*``: ``none``, or ``nn`` with integer widths >= 1 and a known activation
    (``schema.FeaturesSpec.check``)."""
    _features(features).check()


def build_input_map(features, num_dims: int, seed: int) -> torch.nn.Module:
    """The input map g of ``features`` (a ``FeaturesSpec``) on ``num_dims`` inputs (its ``out_dim``
    is the kernel's input)."""
    from ..features import make_input_map

    f = _features(features)
    f.check()
    gen = torch.Generator().manual_seed(int(seed) + _NN_STREAM)
    return make_input_map(f.name, num_dims, widths=f.widths or (), activation=f.activation, generator=gen)


def check_finite_kernel(kernel: KernelSpec) -> None:
    """The keys of ``kernel=linear`` and ``kernel=rff``."""
    from ..features import RFF_FORMS

    k = as_spec(kernel, KernelSpec, "kernel")
    name = k.name
    for key in ("lengthscale", "outputscale") if name == "rff" else ("outputscale",):
        v = getattr(k, key)
        if not is_number(v) or v <= 0 or math.isinf(v):
            raise param_error(key, f"kernel={name}", "a finite float in (0, inf)", v)
    if name == "linear" and k.normaliser not in LINEAR_NORMALISERS:
        raise param_error("normaliser", "kernel=linear", f"one of {', '.join(LINEAR_NORMALISERS)}", k.normaliser)
    if name == "rff":
        if k.form not in RFF_FORMS:
            raise param_error("form", "kernel=rff", f"one of {', '.join(RFF_FORMS)}", k.form)
        d = k.num_features
        if k.form == "sincos" and not (is_int(d) and d >= 2 and d % 2 == 0):
            raise param_error("num_features", "kernel=rff", "an even integer >= 2 (form=sincos: d/2 sin/cos pairs)", d)
        if not is_int(d) or d < 1:
            raise param_error("num_features", "kernel=rff", "an integer >= 1", d)


def linear_normaliser(kernel: KernelSpec, inputs: torch.Tensor | None) -> float | None:
    """m of ``kernel=linear`` (k = s <z, z'> / m): ``width`` -> None (m = d_z); ``data`` -> the mean of
    ||z_i||^2 over ``inputs`` (the input map's outputs on the training inputs at initialisation), so
    that mean k(x, x) starts at s. Without ``inputs`` (the input map is the identity: families that
    take no ``features=``, or ``features=none``) ``data`` is the width too: on standardised inputs
    mean ||x_i||^2 = D over the training rows."""
    if kernel.normaliser != "data" or inputs is None:
        return None
    m = float(inputs.detach().to(torch.float64).square().sum(-1).mean())
    if not (m > 0 and math.isfinite(m)):
        raise UnsupportedCombination(
            f"kernel.normaliser=data needs a non-zero finite mean ||g(x)||^2 over the training "
            f"inputs; the input map gives {m:g} (a dead ReLU network?): use kernel.normaliser=width"
        )
    return m


def build_kernel_map(kernel, num_dims: int, seed: int, inputs: torch.Tensor | None = None) -> torch.nn.Module:
    """The finite feature map of ``kernel=linear|rff`` on inputs of ``num_dims`` dimensions; ``inputs``:
    the input map's outputs on the training inputs (``kernel.normaliser=data``; None for the identity)."""
    from ..features import make_kernel_map

    k = as_spec(kernel, KernelSpec, "kernel")
    check_finite_kernel(k)
    gen = torch.Generator().manual_seed(int(seed) + _RFF_STREAM)
    return make_kernel_map(
        k.name,
        num_dims,
        num_features=k.num_features,
        lengthscale=k.lengthscale,
        outputscale=k.outputscale,
        ard=bool(k.ard),
        form=k.form,
        learn_outputscale=bool(k.learn_outputscale),
        normaliser=linear_normaliser(k, inputs) if k.name == "linear" else None,
        generator=gen,
    )


def build_finite_kernel(kernel, num_dims: int, seed: int, inputs: torch.Tensor | None = None):
    """``kernel=linear|rff`` as a gpytorch kernel phi(x)^T phi(x') (for gpytorch-based families)."""
    from ..features import FiniteFeatureKernel

    return FiniteFeatureKernel(build_kernel_map(kernel, num_dims, seed, inputs))


__all__ = [
    "FINITE_KERNELS",
    "LINEAR_NORMALISERS",
    "build_finite_kernel",
    "build_input_map",
    "build_kernel_map",
    "check_features",
    "check_finite_kernel",
    "linear_normaliser",
    "uses_features",
]
