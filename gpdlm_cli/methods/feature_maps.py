"""Config -> feature maps (``gpdlm_cli.features``), shared by the families that use them.

* ``features=none|nn`` (``cfg.features``): the input map g in front of the kernel -- the identity,
  or the paper's MLP (``features.widths``, ``features.activation``);
* ``kernel=linear|rff`` (``cfg.kernel``): a finite feature map on g's output, so that
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
from ..validation import is_int, is_number

FINITE_KERNELS = ("linear", "rff")
LINEAR_NORMALISERS = ("data", "width")
_NN_STREAM, _RFF_STREAM = 7919, 104729  # offsets of the generators' seeds from the run's seed


def uses_features(cfg) -> bool:
    """Whether the run puts an input map in front of the kernel (``features`` other than none)."""
    f = cfg.get("features")
    return f is not None and f.name != "none"


def check_features(fcfg) -> None:
    """``features.*``: ``none``, or ``nn`` with integer widths >= 1 and a known activation."""
    from ..features import ACTIVATIONS, INPUT_MAPS

    if fcfg.name not in INPUT_MAPS:
        raise param_error("name", "features", f"one of {', '.join(INPUT_MAPS)}", fcfg.name)
    if fcfg.name == "nn":
        widths = fcfg.widths
        ok = widths is not None and not isinstance(widths, (str, int, float)) and len(widths) > 0
        if not ok or not all(is_int(w) and w >= 1 for w in widths):
            raise param_error("widths", "features=nn", "a non-empty list of integers >= 1", widths)
        if fcfg.activation not in ACTIVATIONS:
            raise param_error("activation", "features=nn", f"one of {', '.join(ACTIVATIONS)}", fcfg.activation)


def build_input_map(fcfg, num_dims: int, seed: int) -> torch.nn.Module:
    """The input map g of ``features=`` on ``num_dims`` inputs (its ``out_dim`` is the kernel's input)."""
    from ..features import make_input_map

    check_features(fcfg)
    gen = torch.Generator().manual_seed(int(seed) + _NN_STREAM)
    return make_input_map(
        fcfg.name, num_dims, widths=fcfg.get("widths") or (), activation=fcfg.get("activation", "relu"), generator=gen
    )


def check_finite_kernel(kcfg) -> None:
    """The keys of ``kernel=linear`` and ``kernel=rff``."""
    from ..features import RFF_FORMS

    name = kcfg.name
    for key in ("lengthscale", "outputscale") if name == "rff" else ("outputscale",):
        v = kcfg[key]
        if not is_number(v) or v <= 0 or math.isinf(v):
            raise param_error(key, f"kernel={name}", "a finite float in (0, inf)", v)
    if name == "linear" and kcfg.get("normaliser", "width") not in LINEAR_NORMALISERS:
        raise param_error("normaliser", "kernel=linear", f"one of {', '.join(LINEAR_NORMALISERS)}", kcfg.normaliser)
    if name == "rff":
        if kcfg.form not in RFF_FORMS:
            raise param_error("form", "kernel=rff", f"one of {', '.join(RFF_FORMS)}", kcfg.form)
        d = kcfg.num_features
        if kcfg.form == "sincos" and not (is_int(d) and d >= 2 and d % 2 == 0):
            raise param_error("num_features", "kernel=rff", "an even integer >= 2 (form=sincos: d/2 sin/cos pairs)", d)
        if not is_int(d) or d < 1:
            raise param_error("num_features", "kernel=rff", "an integer >= 1", d)


def linear_normaliser(kcfg, inputs: torch.Tensor | None) -> float | None:
    """m of ``kernel=linear`` (k = s <z, z'> / m): ``width`` -> None (m = d_z); ``data`` -> the mean of
    ||z_i||^2 over ``inputs`` (the input map's outputs on the training inputs at initialisation), so
    that mean k(x, x) starts at s. Without ``inputs`` (the input map is the identity: families that
    take no ``features=``, or ``features=none``) ``data`` is the width too: on standardised inputs
    mean ||x_i||^2 = D over the training rows."""
    if kcfg.get("normaliser", "width") != "data" or inputs is None:
        return None
    m = float(inputs.detach().to(torch.float64).square().sum(-1).mean())
    if not (m > 0 and math.isfinite(m)):
        raise UnsupportedCombination(
            f"kernel.normaliser=data needs a non-zero finite mean ||g(x)||^2 over the training "
            f"inputs; the input map gives {m:g} (a dead ReLU network?): use kernel.normaliser=width"
        )
    return m


def build_kernel_map(kcfg, num_dims: int, seed: int, inputs: torch.Tensor | None = None) -> torch.nn.Module:
    """The finite feature map of ``kernel=linear|rff`` on inputs of ``num_dims`` dimensions; ``inputs``:
    the input map's outputs on the training inputs (``kernel.normaliser=data``; None for the identity)."""
    from ..features import make_kernel_map

    check_finite_kernel(kcfg)
    gen = torch.Generator().manual_seed(int(seed) + _RFF_STREAM)
    return make_kernel_map(
        kcfg.name,
        num_dims,
        num_features=kcfg.get("num_features", 0),
        lengthscale=kcfg.get("lengthscale", 1.0),
        outputscale=kcfg.outputscale,
        ard=bool(kcfg.get("ard", False)),
        form=kcfg.get("form", "sincos"),
        learn_outputscale=bool(kcfg.get("learn_outputscale", False)),
        normaliser=linear_normaliser(kcfg, inputs) if kcfg.name == "linear" else None,
        generator=gen,
    )


def build_finite_kernel(kcfg, num_dims: int, seed: int, inputs: torch.Tensor | None = None):
    """``kernel=linear|rff`` as a gpytorch kernel phi(x)^T phi(x') (for gpytorch-based families)."""
    from ..features import FiniteFeatureKernel

    return FiniteFeatureKernel(build_kernel_map(kcfg, num_dims, seed, inputs))


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
