"""The config schema (issue 46, item 3): every key of every shipped YAML is declared once in the schema
(``gpdlm_cli.schema`` and each family's ``Spec``), every shipped option parses into typed specs, and
a bad value gets the schema's one-line message naming the key, its owner, what is allowed and the value."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import gpdlm_cli
from gpdlm_cli import build, schema
from gpdlm_cli.exceptions import ConfigError, UnsupportedCombination
from gpdlm_cli.methods import REGISTRY

from .conftest import compose

CONF = Path(gpdlm_cli.__file__).resolve().parent / "conf"
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))


def declared(cls, prefix: str = "") -> set[str]:
    """The dotted keys a schema declares (sub-groups expanded)."""
    out = set()
    for f in dataclasses.fields(cls):
        sub = f.metadata.get("nested")
        if sub is not None:
            out |= declared(sub, f"{prefix}{f.name}.")
        elif f.name != "extra":
            out.add(prefix + f.name)
    return out


def keys_of(node, prefix: str = "") -> set[str]:
    out = set()
    for k, v in node.items():
        if isinstance(v, dict) and v and prefix + k in ("network", "gp", "training"):
            out |= keys_of(v, f"{prefix}{k}.")
        else:
            out.add(prefix + k)
    return out


@pytest.mark.parametrize("model", MODELS)
def test_every_model_yaml_key_is_declared_and_its_defaults_pass_the_schema(model):
    cfg = compose([f"model={model}"])
    family = REGISTRY[cfg.model.name]
    spec = build.specs(cfg, family)
    node = OmegaConf.to_container(cfg.model, resolve=True)
    assert keys_of(node) <= declared(family.Spec), keys_of(node) - declared(family.Spec)
    assert spec.model.name == cfg.model.name and spec.model.extra == {}
    # the typed spec holds the YAML's values
    for key in keys_of(node):
        value = spec.model
        for part in key.split("."):
            value = getattr(value, part)
        raw = OmegaConf.select(cfg.model, key)
        assert value == (OmegaConf.to_container(raw) if OmegaConf.is_config(raw) else raw), key


@pytest.mark.parametrize("option", ["paper", "fast", "lbfgs"])
def test_every_trainer_key_is_declared(option):
    cfg = compose([f"trainer={option}"])
    assert set(cfg.trainer) <= declared(schema.TrainerSpec)
    spec = build.validate_trainer(cfg.trainer)
    assert spec.extra == {} and spec.protocol == ("fast" if option == "fast" else "paper")


@pytest.mark.parametrize(
    ("group", "cls"),
    [
        ("sweep", schema.SweepSpec),
        ("bias", schema.BiasSpec),
        ("objective", schema.ObjectiveSpec),
        ("tracking", schema.TrackingSpec),
    ],
)
def test_every_top_level_group_key_is_declared(group, cls):
    assert set(compose([])[group]) == declared(cls)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.momentum=1.0"],
            "the 'momentum' parameter of trainer (sgd) must be a float in [0, 1); got 1.0 instead",
        ),
        (
            ["trainer.schedule=step", "trainer.step_factor=0"],
            "the 'step_factor' parameter of trainer (schedule=step) must be a float in (0, 1]; got 0 instead",
        ),
        (
            ["model=gp_lstm", "dataset=sysid_actuator", "model.network.dropout=1.0"],
            "the 'dropout' parameter of model=gp_lstm (network) must be a float in [0, 1); got 1.0 instead",
        ),
        (
            ["model=gp_lstm", "dataset=sysid_actuator", "model.gp.grid_size=4"],
            "the 'grid_size' parameter of model=gp_lstm (gp) must be an integer >= 8; got 4 instead",
        ),
        (
            ["model=dlm", "model.elbo=closed"],
            "the 'elbo' parameter of model=dlm must be 'auto', 'collapsed' or 'uncollapsed'; got 'closed' instead",
        ),
        (["sweep.warm_start=1"], "the 'warm_start' parameter of sweep must be true or false; got 1 instead"),
        (["threads=0"], "the 'threads' parameter of gpdlm must be 'auto' or an integer >= 1; got 0 instead"),
    ],
)
def test_a_bad_value_gets_the_schemas_one_line_message(overrides, message):
    with pytest.raises(ConfigError) as e:
        build.validate_config(compose(overrides))
    assert str(e.value) == message


def test_a_rule_applies_only_where_its_condition_holds():
    # step_factor is a schedule=step key: any value passes under the constant schedule
    assert build.validate_trainer(compose(["trainer.step_factor=0"]).trainer).step_factor == 0
    with pytest.raises(UnsupportedCombination, match="trainer.optimizer=lbfgs needs a deterministic full-batch"):
        build.validate_trainer(compose(["trainer.optimizer=lbfgs", "trainer.batch_size=10"]).trainer)


def test_the_message_and_the_reference_come_from_one_rule():
    rule = schema.describe(schema.TrainerSpec)["batch_size"]
    assert rule.describe() == "an integer >= 1 or null (full batch)"
    assert rule.accepts(None) and rule.accepts(1) and not rule.accepts(0) and not rule.accepts(True)
    page = (Path(gpdlm_cli.__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    assert "| `trainer.batch_size` | int \\| null | an integer >= 1 or null (full batch) | null |" in page


@pytest.mark.parametrize("group", ["objective", "sweep", "bias"])
def test_objective_sweep_and_bias_are_config_groups_with_their_schema(group):
    cfg = compose([], hydra=True)
    assert cfg.hydra.runtime.choices[group] == "default"
    assert (CONF / group / "default.yaml").is_file()
    assert set(cfg[group]) == declared(schema.GROUPS[group])
