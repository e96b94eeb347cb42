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

Importing the package imports no torch: ``trainer`` (whose choices come from ``gpdlm_cli.training``)
is imported on first use of ``TrainerSpec`` or ``GROUPS`` (PEP 562), so that
``config_check`` can read the other groups' rules in a multirun's launcher (``rule_of_key``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

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
from .keys import Rule, as_spec, describe, parse, plain, rule_of

if TYPE_CHECKING:  # at run time: __getattr__ imports them on first use (they import torch)
    from .trainer import TrainerSpec

#: the groups whose schema imports no torch (all but ``trainer``; ``model``: ``ModelSpec`` only)
LIGHT_GROUPS: dict[str, type] = {
    "objective": ObjectiveSpec,
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


def _groups() -> dict[str, type]:
    """config group -> its schema (``model``: the family's ``Spec``, ``ModelSpec`` by default)."""
    from .trainer import TrainerSpec

    out = dict(LIGHT_GROUPS)
    return {"objective": out.pop("objective"), "trainer": TrainerSpec, **out}


def __getattr__(name: str):
    """``TrainerSpec`` and ``GROUPS``, made on first use (PEP 562): they import torch."""
    if name == "TrainerSpec":
        from . import trainer

        value = getattr(trainer, name)
    elif name == "GROUPS":
        value = _groups()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def rule_of_key(key: str, names: dict[str, str | None] | None = None) -> tuple[Rule, str] | None:
    """The ``Rule`` of a dotted config key and the owner its messages name, for the groups whose
    schema imports no torch (``trainer`` and the model families' own keys: None), and for the
    options of the estimator and dataset ``names`` gives ({group: chosen name}): ``('dataset.lag',
    {'dataset': 'chicago'})`` -> (the rule of ChicagoOptions.lag, ``dataset=chicago``). None where
    the key has no rule here, or its rule depends on a sibling key (``when``)."""
    from .options import ESTIMATOR_OPTIONS, dataset_options

    names = names or {}
    group, _, param = key.rpartition(".")
    if not group:
        schema: type | None = RunKeys
        owner = "gpdlm"
    elif group == "dataset.split":
        schema, owner = SplitSpec, group
    elif "." in group or group not in LIGHT_GROUPS or group == "model":
        return None
    else:
        schema, owner = LIGHT_GROUPS[group], group
        if group == "kernel" and names.get("kernel"):  # run_spec's owner of the kernel group
            owner = f"kernel={names['kernel']}"
    fields = {f.name: f for f in dataclasses.fields(schema)} if schema is not None else {}
    if param not in fields:  # a loader's or an estimator's own option
        chosen = names.get(group)
        schema = None
        if group == "dataset" and chosen:
            schema = dataset_options(chosen)
        elif group == "estimator" and chosen:
            schema = ESTIMATOR_OPTIONS.get(chosen)
        if schema is None:
            return None
        owner = f"{group}={chosen}"
        fields = {f.name: f for f in dataclasses.fields(schema)}
        if param not in fields:
            return None
    rule = rule_of(fields[param])
    if rule is None or rule.when is not None:
        return None
    return rule, owner + (f" ({rule.context})" if rule.context else "")


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
    #: the config keys the overrides of this multirun job set, () outside a multirun: what a family may
    #: know about the sweep it runs in (``build.multirun_keys``, read from Hydra at the composition root)
    multirun_keys: tuple[str, ...] = ()

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
    from .trainer import TrainerSpec

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
    "LIGHT_GROUPS",
    "SweepSpec",
    "TrackingSpec",
    "TrainerSpec",
    "as_run_spec",
    "as_spec",
    "describe",
    "parse",
    "plain",
    "rule_of_key",
    "run_spec",
]
