"""Model families, one module each, and the registry that maps ``model.name`` to its family.

A family module owns everything specific to it and exposes:

* ``MODELS``: the ``model.name`` values it serves (one ``conf/model/<name>.yaml`` each);
* ``validate(cfg)``: range checks and impossible combinations of its keys (no data needed);
* ``check_sizes(cfg, n_train)`` (optional): checks that need the training-set size;
* ``build(cfg, data, task) -> Method``: the model, its likelihood and its training stages.

Adding a family touches its module, one line in ``FAMILIES`` below, its YAML files, its tests and
its README rows (see the README's "Adding a model family"). A family never imports another family;
it builds on ``models/``, ``objectives/``, ``estimators/``, ``training/`` and ``components``.
"""

from __future__ import annotations

from types import ModuleType

from ..exceptions import param_error
from . import collapsed, exact, pic, recurrent, rkhs, sparse_spectrum, sparse_variational
from .base import Method, Stage

#: every family, in the order ``gpdlm train --help`` and error messages list their models
FAMILIES: tuple[ModuleType, ...] = (
    sparse_variational,
    collapsed,
    exact,
    sparse_spectrum,
    pic,
    rkhs,
    recurrent,
)

REGISTRY: dict[str, ModuleType] = {name: family for family in FAMILIES for name in family.MODELS}
MODELS: tuple[str, ...] = tuple(REGISTRY)


def family_of(model_name: str) -> ModuleType:
    """The family module that serves ``model.name`` (a one-line ConfigError naming the valid ones)."""
    family = REGISTRY.get(model_name)
    if family is None:
        raise param_error("name", "model", f"one of {MODELS}", model_name)
    return family


__all__ = ["FAMILIES", "MODELS", "Method", "REGISTRY", "Stage", "family_of"]
