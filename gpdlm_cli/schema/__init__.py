"""gpdlm's config schema: every config group's keys with their types, ranges, choices and meaning,
declared once as dataclasses, and the typed *specs* the composition root builds from a composed
config.

* ``keys``: the vocabulary (``integer``, ``real``, ``choice``, ... and ``parse``);
* ``trainer``: ``TrainerSpec``; ``groups``: the other groups (``ObjectiveSpec``, ``SweepSpec``,
  ``BiasSpec``, ``DatasetSpec``, ``TrackingSpec``, ``KernelSpec``, ``LikelihoodSpec``,
  ``EstimatorSpec``, ``FeaturesSpec``, ``ModelSpec``, the top-level ``RunKeys``);
* ``options``: each estimator's options (``ESTIMATOR_OPTIONS``) and each dataset loader's
  (``DATASET_OPTIONS``, by the loader key of ``datasets/registry.yaml``);
* a model family declares its own keys as a ``ModelSpec`` subclass named ``Spec`` in its module.

``run_spec(cfg, model_schema)`` checks a composed config group by group and returns the
``RunSpec`` families and the trainer receive (they never see the config). The YAML files under
``gpdlm_cli/conf`` hold the defaults; ``tools/config_docs.py`` writes the key reference of
docs/configuration.md from these schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .groups import (
    BiasSpec,
    DatasetSpec,
    EstimatorSpec,
    FeaturesSpec,
    InducingModelSpec,
    KernelSpec,
    LikelihoodSpec,
    ModelSpec,
    ObjectiveSpec,
    RunKeys,
    SplitSpec,
    SweepSpec,
    TrackingSpec,
)
from .keys import Rule, as_spec, describe, parse, plain
from .trainer import ALGORITHMS, TrainerSpec

#: config group -> its schema (``model``: the family's ``Spec``, ``ModelSpec`` by default)
GROUPS: dict[str, type] = {
    "objective": ObjectiveSpec,
    "trainer": TrainerSpec,
    "dataset": DatasetSpec,
    "model": ModelSpec,
    "kernel": KernelSpec,
    "likelihood": LikelihoodSpec,
    "estimator": EstimatorSpec,
    "features": FeaturesSpec,
    "tracking": TrackingSpec,
    "sweep": SweepSpec,
    "bias": BiasSpec,
}


@dataclass(frozen=True)
class RunSpec:
    """Everything a run is, typed and validated: what families, the trainer settings and the run
    lifecycle read instead of the config."""

    keys: RunKeys
    objective: ObjectiveSpec
    trainer: TrainerSpec
    dataset: DatasetSpec
    model: Any  # the family's Spec (a ModelSpec)
    kernel: KernelSpec
    likelihood: LikelihoodSpec
    estimator: EstimatorSpec
    features: FeaturesSpec
    sweep: SweepSpec = field(default_factory=SweepSpec)
    bias: BiasSpec | None = None

    @property
    def seed(self) -> int:
        return self.keys.seed

    def with_model(self, **changes) -> RunSpec:
        """This spec with model keys changed (``gpdlm bias``: ``variant='fixed'``)."""
        return replace(self, model=replace(self.model, **changes))


def run_spec(cfg, model_schema: type = ModelSpec) -> RunSpec:
    """The ``RunSpec`` of a composed config: each group checked against its schema (the first bad
    value raises a one-line ``ConfigError``); the model group against ``model_schema`` (the
    family's ``Spec``), its owner named ``model=<name>``. The trainer's cross-key rules
    (``TrainerSpec.check``) are left to the caller, which runs them after the family's own checks
    (``build.validate_config``): a family's message names the combination more precisely."""
    get = cfg.get
    model_node = get("model") or {}
    return RunSpec(
        keys=parse(cfg, RunKeys, "gpdlm"),
        objective=parse(get("objective"), ObjectiveSpec, "objective"),
        trainer=parse(get("trainer"), TrainerSpec, "trainer", check=False),  # cross-key rules: after the family's
        dataset=parse(get("dataset"), DatasetSpec, "dataset"),
        model=parse(model_node, model_schema, f"model={model_node.get('name')}"),
        kernel=parse(get("kernel"), KernelSpec, f"kernel={(get('kernel') or {}).get('name')}"),
        likelihood=parse(get("likelihood"), LikelihoodSpec, "likelihood"),
        estimator=parse(get("estimator"), EstimatorSpec, "estimator"),
        features=parse(get("features") or {"name": "none"}, FeaturesSpec, "features"),
        sweep=parse(get("sweep"), SweepSpec, "sweep"),
        bias=parse(get("bias"), BiasSpec, "bias") if get("bias") is not None else None,
    )


def as_run_spec(value, model_schema: type = ModelSpec) -> RunSpec:
    """``value`` itself when it is a ``RunSpec``, else the ``RunSpec`` of the config it is (for
    callers that still hold a config: a family's entry points accept both)."""
    return value if isinstance(value, RunSpec) else run_spec(value, model_schema)


__all__ = [
    "ALGORITHMS",
    "GROUPS",
    "BiasSpec",
    "DatasetSpec",
    "EstimatorSpec",
    "FeaturesSpec",
    "InducingModelSpec",
    "KernelSpec",
    "LikelihoodSpec",
    "ModelSpec",
    "ObjectiveSpec",
    "Rule",
    "RunKeys",
    "RunSpec",
    "SplitSpec",
    "SweepSpec",
    "TrackingSpec",
    "TrainerSpec",
    "as_run_spec",
    "as_spec",
    "describe",
    "parse",
    "plain",
    "run_spec",
]
