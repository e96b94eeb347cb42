"""What a run's model family declares, as the analysis reads it back from the run (no torch).

A family declares its selection metric (``SELECTION_METRIC``) and a reference beta
(``REFERENCE_BETA``) in ``gpdlm_cli/methods/<family>.py`` (see ``methods.base.Family``); training
records them as the run tags ``gpdlm.selection_metric`` and ``gpdlm.reference_beta``
(``methods.declaration_tags``). A run without a tag -- made before the tags existed -- falls back
to the declaration of the family that serves its ``model.name`` param (which imports the families,
and torch, only then), and a model no family serves to the defaults (``val_nll``, no reference
beta). So no analysis module names a model.
"""

from __future__ import annotations

import math

from .records import RunRecord

SELECTION_TAG = "gpdlm.selection_metric"
REFERENCE_BETA_TAG = "gpdlm.reference_beta"
DEFAULT_SELECTION_METRIC = "val_nll"
NONE = "none"  # the tag value of an absent declaration

#: metrics with the same arg-min as the key (monotone transforms), tried in order when runs lack it
SAME_ARGMIN = {"val_mse": ("val_rmse",)}


def _tagged(runs: list[RunRecord], tag: str) -> str | None:
    for r in runs:
        value = r.tags.get(tag)
        if value:
            return value
    return None


def _family_declaration(runs: list[RunRecord], key: str):
    """The declaration ``key`` of the family serving the runs' ``model.name`` (None: no such family)."""
    name = next((r.params.get("model.name") for r in runs if r.params.get("model.name")), None)
    if name is None:
        return None
    from ..methods import REGISTRY, declaration  # the fallback for untagged runs only: imports torch

    return declaration(name, key) if name in REGISTRY else None


def selection_metric(runs: list[RunRecord]) -> str:
    """The metric the runs' family selects by: the tag, else the family's declaration, else val_nll."""
    return _tagged(runs, SELECTION_TAG) or _family_declaration(runs, "SELECTION_METRIC") or DEFAULT_SELECTION_METRIC


def validation_metrics(runs: list[RunRecord]) -> list[str]:
    """The selection criterion of ``runs`` with the fallbacks that have the same arg-min."""
    metric = selection_metric(runs)
    return [metric, *SAME_ARGMIN.get(metric, ())]


def reference_beta(runs: list[RunRecord]) -> float | None:
    """The beta whose best run the family reports as a row of its own (None: none declared)."""
    tagged = _tagged(runs, REFERENCE_BETA_TAG)
    value = tagged if tagged is not None else _family_declaration(runs, "REFERENCE_BETA")
    if value is None or value == NONE:
        return None
    beta = float(value)
    return beta if math.isfinite(beta) else None
