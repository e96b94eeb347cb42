"""The one kernel builder: ``kernel.name`` -> a gpytorch kernel, through a registry.

Every family that puts a kernel on its inputs calls ``build_kernel(spec, num_dims, seed, inputs)``
with the run's ``schema.KernelSpec``. Shipped kernels: the stationary ones (``rbf``, ``matern12``,
``matern32``, ``matern52``: ScaleKernel(base), ARD if ``kernel.ard``) and the finite feature maps
(``linear``, ``rff``: phi(x)^T phi(x'), ``feature_maps``). A new kernel is one ``register`` call (a
module of its own, or a test): a name, a builder ``(spec, num_dims, seed, inputs) -> kernel``, and
optionally a check of its keys ``(spec) -> None`` run before any data is read -- no other file
changes (tests/kernels/test_toy_kernel.py is the proof).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..exceptions import param_error
from ..schema import KernelSpec, as_spec
from ..validation import is_number

STATIONARY_KERNELS = ("rbf", "matern12", "matern32", "matern52")
_NU = {"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}


@dataclass(frozen=True)
class KernelKind:
    """A registered kernel: its builder, the check of its keys, and whether it is stationary
    (families that need a stationary kernel refuse the others)."""

    build: Callable
    check: Callable[[KernelSpec], None] | None = None
    stationary: bool = False


KERNELS: dict[str, KernelKind] = {}


def register(name: str, build: Callable, check: Callable | None = None, *, stationary: bool = False) -> None:
    """Make ``kernel.name=<name>`` build ``build(spec, num_dims, seed, inputs)``."""
    KERNELS[name] = KernelKind(build, check, stationary)


def check_kernel(spec) -> KernelSpec:
    """The kernel's name and keys (no data needed); returns the spec."""
    spec = as_spec(spec, KernelSpec, "kernel")
    kind = KERNELS.get(spec.name)
    if kind is None:
        raise param_error("name", "kernel", f"one of {', '.join(KERNELS)}", spec.name)
    if kind.check is not None:
        kind.check(spec)
    return spec


def build_kernel(spec, num_dims: int, seed: int = 0, inputs=None):
    """The kernel ``spec`` names on inputs of ``num_dims`` dimensions (``inputs``: an input map's
    outputs on the training data, for ``kernel.normaliser=data``; ``seed``: random features)."""
    spec = check_kernel(spec)
    return KERNELS[spec.name].build(spec, num_dims, seed, inputs)


def is_stationary(spec) -> bool:
    kind = KERNELS.get(spec.name)
    return kind is not None and kind.stationary


def _check_stationary(spec: KernelSpec) -> None:
    for key in ("lengthscale", "outputscale"):
        v = getattr(spec, key)
        if not is_number(v) or v <= 0:
            raise param_error(key, spec.owner, "a float in (0, inf)", v)


def build_base_kernel(spec, num_dims: int, ard: bool | None = None):
    """The stationary base kernel of ``spec`` (no outputscale) over ``num_dims`` inputs, ARD if ``ard``
    (None: ``kernel.ard``), with ``kernel.lengthscale`` as its initial lengthscale: what the ScaleKernel
    of ``build_kernel`` wraps, and what the recurrent family puts on each output's embedding."""
    import gpytorch

    spec = as_spec(spec, KernelSpec, "kernel")
    if spec.name not in STATIONARY_KERNELS:
        raise param_error("name", "kernel", f"one of {', '.join(STATIONARY_KERNELS)}", spec.name)
    if not is_number(spec.lengthscale) or spec.lengthscale <= 0:
        raise param_error("lengthscale", spec.owner, "a float in (0, inf)", spec.lengthscale)
    dims = num_dims if (spec.ard if ard is None else ard) else None
    if spec.name == "rbf":
        base = gpytorch.kernels.RBFKernel(ard_num_dims=dims)
    else:
        base = gpytorch.kernels.MaternKernel(nu=_NU[spec.name], ard_num_dims=dims)
    base.lengthscale = spec.lengthscale
    return base


def _stationary(spec: KernelSpec, num_dims: int, seed: int, inputs):
    import gpytorch

    k = gpytorch.kernels.ScaleKernel(build_base_kernel(spec, num_dims))
    k.outputscale = spec.outputscale
    return k


def _finite(spec: KernelSpec, num_dims: int, seed: int, inputs):
    from .feature_maps import build_finite_kernel

    return build_finite_kernel(spec, num_dims, seed, inputs)


def _check_finite(spec: KernelSpec) -> None:
    from .feature_maps import check_finite_kernel

    check_finite_kernel(spec)


for _name in STATIONARY_KERNELS:
    register(_name, _stationary, _check_stationary, stationary=True)
for _name in ("linear", "rff"):
    register(_name, _finite, _check_finite)


__all__ = [
    "KERNELS",
    "STATIONARY_KERNELS",
    "KernelKind",
    "build_base_kernel",
    "build_kernel",
    "check_kernel",
    "is_stationary",
    "register",
]
