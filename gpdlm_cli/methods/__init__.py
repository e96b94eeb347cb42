"""Model families, one module each, and the registry that maps ``model.name`` to its family.

A family module owns everything specific to it (the protocol is ``base.Family``):

* ``MODELS``: the ``model.name`` values it serves (one ``conf/model/<name>.yaml`` each);
* ``validate(cfg)``: range checks and impossible combinations of its keys (no data needed);
* ``check_sizes(cfg, n_train)`` (optional): checks that need the training-set size;
* ``build(cfg, data, task) -> Method``: the model, its likelihood and its training stages;
* what the commands need to know about it (optional, ``base.DECLARATIONS``): its selection metric,
  reference beta, variants, whether it takes ``features=``, its protocol keys, multi-output.

Adding a family touches its module and its YAML files (plus its tests, docs and README row; see
CONTRIBUTING.md's "Adding a model family"): every module of this package that defines ``MODELS`` is a
family, so no line here changes. A family never imports another family; it builds on ``models/``,
``objectives/``, ``estimators/``, ``training/`` and ``components``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from ..exceptions import param_error
from . import collapsed, exact, pic, recurrent, rkhs, sparse_spectrum, sparse_variational
from .base import DECLARATIONS, Family, Method, Stage, declared

#: the shipped families, in the order ``gpdlm train --help`` and error messages list their models
LISTED: tuple[ModuleType, ...] = (
    sparse_variational,
    collapsed,
    exact,
    sparse_spectrum,
    pic,
    rkhs,
    recurrent,
)


def _discovered() -> tuple[ModuleType, ...]:
    """The other family modules of this package (any module defining ``MODELS``), by name: a new
    family needs no edit of this file."""
    listed = {f.__name__ for f in LISTED}
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        name = f"{__name__}.{info.name}"
        if info.name.startswith("_") or info.ispkg or name in listed:
            continue
        module = importlib.import_module(name)
        if hasattr(module, "MODELS"):
            found.append(module)
    return tuple(found)


#: every family: the listed ones, then the others this package holds
FAMILIES: tuple[ModuleType, ...] = LISTED + _discovered()

REGISTRY: dict[str, ModuleType] = {name: family for family in FAMILIES for name in family.MODELS}
MODELS: tuple[str, ...] = tuple(REGISTRY)


def family_of(model_name: str) -> ModuleType:
    """The family module that serves ``model.name`` (a one-line ConfigError naming the valid ones)."""
    family = REGISTRY.get(model_name)
    if family is None:
        raise param_error("name", "model", f"one of {MODELS}", model_name)
    return family


def declaration(model_name: str, key: str):
    """What the family of ``model_name`` declares as ``key`` (``base.DECLARATIONS``: its default
    when the family does not declare it, or when no family serves the name)."""
    family = REGISTRY.get(model_name)
    return DECLARATIONS[key] if family is None else declared(family, key, model_name)


def selection_metric(model_name: str) -> str:
    """The validation metric runs of ``model_name`` are selected by (``gpdlm select``, sweeps)."""
    return declaration(model_name, "SELECTION_METRIC")


def has_variants(model_name: str) -> bool:
    """Whether ``model.variant`` distinguishes runs of ``model_name`` (it declares several variants)."""
    return len(declaration(model_name, "VARIANTS")) > 1


def declaration_tags(model_name: str) -> dict[str, str]:
    """The run tags through which analysis reads the family's declarations without importing it
    (``analysis.declarations``)."""
    beta = declaration(model_name, "REFERENCE_BETA")
    return {
        "gpdlm.selection_metric": selection_metric(model_name),
        "gpdlm.reference_beta": "none" if beta is None else repr(float(beta)),
    }


__all__ = [
    "DECLARATIONS",
    "FAMILIES",
    "Family",
    "LISTED",
    "MODELS",
    "Method",
    "REGISTRY",
    "Stage",
    "declaration",
    "declaration_tags",
    "family_of",
    "has_variants",
    "selection_metric",
]
