"""The estimator and dataset options in the config schema (issue 46, item 3): every key of every
conf/estimator and conf/dataset YAML is declared once (``schema.options``), the schema declares
exactly what each estimator and loader takes, and a bad value of each key gets the schema's one-line
``gpdlm: error:`` before any training (non-zero exit, no run folder, no MLflow run)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import gpdlm_cli
from gpdlm_cli import build, schema
from gpdlm_cli.exceptions import ConfigError
from gpdlm_cli.schema.options import DATASET_OPTIONS, ESTIMATOR_OPTIONS, WINDOW_MODES, dataset_options

from .conftest import assert_no_mlflow_run, compose, run_cli

CONF = Path(gpdlm_cli.__file__).resolve().parent / "conf"
#: the dataset keys every dataset has (``schema.DatasetSpec``); the others are the loader's options
COMMON = {"name", "missing", "standardize_y", "split"}


def names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def dataset_node(path: Path) -> dict:
    """A conf/dataset YAML's ``dataset`` keys (``_global_`` files keep them under ``dataset:``)."""
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    raw.pop("defaults", None)
    node = raw.get("dataset", raw)
    return {k: (0 if v == "${seed}" else v) for k, v in node.items()}


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "estimator").glob("*.yaml")))
def test_every_estimator_yaml_key_is_declared_and_its_defaults_pass(option):
    node = OmegaConf.to_container(OmegaConf.load(CONF / "estimator" / f"{option}.yaml"))
    declared = names(ESTIMATOR_OPTIONS[node["name"]])
    assert set(node) - {"name"} <= declared, set(node) - {"name"} - declared
    spec = schema.parse(node, schema.EstimatorSpec, "estimator")
    assert spec.options == {k: v for k, v in node.items() if k != "name"}


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "dataset").glob("*.yaml")))
def test_every_dataset_yaml_key_is_declared_and_its_defaults_pass(option):
    node = dataset_node(CONF / "dataset" / f"{option}.yaml")
    options = dataset_options(node["name"])
    assert options is not None, f"dataset={node['name']}: its loader has no options schema (schema.options)"
    own = set(node) - COMMON
    assert own <= names(options), f"{option}.yaml: {sorted(own - names(options))} not declared in {options.__name__}"
    assert COMMON - {"name"} <= names(schema.DatasetSpec)
    spec = schema.parse(node, schema.DatasetSpec, "dataset")
    assert spec.extra == {k: node[k] for k in own}


def test_a_yaml_key_without_a_schema_entry_fails_the_coverage_check():
    node = {**dataset_node(CONF / "dataset" / "chicago.yaml"), "window": 3}
    assert "window" not in names(dataset_options("chicago"))
    with pytest.raises(ConfigError, match=r"^dataset=chicago has no option 'window'; its options are: lag, mode"):
        schema.parse(node, schema.DatasetSpec, "dataset")


def test_each_loader_schema_declares_exactly_the_loaders_arguments():
    from gpdlm_cli.data.registry import all_datasets, loaders

    keys = {info.loader_key for info in all_datasets().values()}
    assert keys <= set(DATASET_OPTIONS), sorted(keys - set(DATASET_OPTIONS))
    for key, options in DATASET_OPTIONS.items():
        params = list(inspect.signature(loaders()[key].fn).parameters)[1:]  # after the info argument
        assert set(params) - {"missing"} == names(options), key


def test_each_estimator_schema_declares_exactly_its_constructors_arguments():
    from gpdlm_cli.methods.components import estimator_registry

    registry = estimator_registry()
    assert set(registry) == set(ESTIMATOR_OPTIONS)
    for name, options in ESTIMATOR_OPTIONS.items():
        params = inspect.signature(registry[name]).parameters  # ExactEstimator: object's (*args, **kwargs)
        assert {p for p in params if params[p].kind == params[p].POSITIONAL_OR_KEYWORD} == names(options), name


def test_the_schemas_choices_are_the_data_layers():
    from gpdlm_cli.data import aimpeak, driving, gef, sequences

    rules = schema.describe
    assert WINDOW_MODES == sequences.MODES
    assert rules(DATASET_OPTIONS["aimpeak"])["holdout"].choices == aimpeak.HOLDOUTS
    assert rules(DATASET_OPTIONS["gef_power"])["gaps"].choices == gef.GAPS
    assert rules(DATASET_OPTIONS["gef_wind"])["gaps"].choices == gef.GAPS
    assert rules(DATASET_OPTIONS["driving"])["task"].choices == tuple(driving.TASKS)


def _msg(key: str, owner: str, allowed: str, got: str) -> str:
    return f"the '{key}' parameter of {owner} must be {allowed}; got {got} instead"


# (group choices, the bad override, the one line it gets)
BAD = [
    # estimators
    (["estimator=auto"], "estimator.num_nodes=0", _msg("num_nodes", "estimator=auto", "an integer >= 1", "0")),
    (["estimator=auto"], "estimator.adaptive=2", _msg("adaptive", "estimator=auto", "true or false", "2")),
    (["estimator=quadrature"], "+estimator.newton_iters=0", _msg("newton_iters", "estimator=quadrature", "an integer >= 1", "0")),
    (["estimator=quadrature"], "+estimator.tail_rule=yes", _msg("tail_rule", "estimator=quadrature", "true or false", "'yes'")),
    (["estimator=bmc"], "estimator.num_samples=0", _msg("num_samples", "estimator=bmc", "an integer >= 1", "0")),
    (["estimator=smooth_bmc"], "estimator.nu=-1", _msg("nu", "estimator=smooth_bmc", "a float in [0, inf)", "-1")),
    (["estimator=ups"], "estimator.sampler=gibbs", _msg("sampler", "estimator=ups", "one of rejection, exact", "'gibbs'")),
    (["estimator=ups"], "estimator.envelope=loose", _msg("envelope", "estimator=ups", "one of tight, exact_k, paper", "'loose'")),
    (["estimator=ups"], "estimator.max_width=0", _msg("max_width", "estimator=ups", "an integer >= 1", "0")),
    (["estimator=ups"], "+estimator.max_rounds=0", _msg("max_rounds", "estimator=ups", "an integer >= 1", "0")),
    (["estimator=ups"], "+estimator.max_proposals=0", _msg("max_proposals", "estimator=ups", "an integer >= 1", "0")),
    (["estimator=exact"], "+estimator.num_nodes=5", "estimator=exact has no option 'num_nodes'; its options are: (none)"),
    # datasets
    (["dataset=boston"], "dataset.source=web", _msg("source", "dataset=boston", "one of package, download", "'web'")),
    (["dataset=ringnorm"], "dataset.n=1", _msg("n", "dataset=ringnorm", "an integer >= 2", "1")),
    (["dataset=banana"], "dataset.noise=0", _msg("noise", "dataset=banana", "a finite float in (0, inf)", "0")),
    (["dataset=twonorm"], "dataset.seed=abc", _msg("seed", "dataset=twonorm", "an integer >= 0", "'abc'")),
    (["dataset=sysid_actuator"], "dataset.lag=0", _msg("lag", "dataset=sysid_actuator", "an integer >= 1", "0")),
    (["dataset=sysid_actuator"], "dataset.mode=teleport", _msg("mode", "dataset=sysid_actuator", "one of regression, autoregression, free_simulation", "'teleport'")),
    (["dataset=sysid_drives"], "dataset.lag_step=0", _msg("lag_step", "dataset=sysid_drives", "an integer >= 1", "0")),
    (["dataset=actuator"], "dataset.test_fraction=1.0", _msg("test_fraction", "dataset=actuator", "a float in (0, 1)", "1.0")),
    (["dataset=drives"], "dataset.n=0", _msg("n", "dataset=drives", "an integer >= 1 or null (the whole series)", "0")),
    (["dataset=chicago"], "dataset.calendar=2", _msg("calendar", "dataset=chicago", "true or false", "2")),
    (["dataset=gef_power"], "dataset.stride=0", _msg("stride", "dataset=gef_power", "an integer >= 1", "0")),
    (["dataset=gef_power"], "dataset.gaps=fill", _msg("gaps", "dataset=gef_power", "one of split, join", "'fill'")),
    (["dataset=gef_wind"], "dataset.farms=[8]", _msg("farms", "dataset=gef_wind", "a non-empty list of farm numbers in 1..7 or null (all 7)", "[8]")),
    (["dataset=aimpeak"], "dataset.n_segments=4", _msg("n_segments", "dataset=aimpeak", "an integer >= 8", "4")),
    (["dataset=aimpeak"], "dataset.n_slots=0", _msg("n_slots", "dataset=aimpeak", "an integer >= 1", "0")),
    (["dataset=aimpeak"], "dataset.noise_kmh=-1", _msg("noise_kmh", "dataset=aimpeak", "a finite float in [0, inf)", "-1")),
    (["dataset=aimpeak"], "dataset.holdout=time", _msg("holdout", "dataset=aimpeak", "one of random, segments, slots", "'time'")),
    (["dataset=aimpeak"], "dataset.holdout_fraction=1.5", _msg("holdout_fraction", "dataset=aimpeak", "a float in (0, 1)", "1.5")),
    (["dataset=aimpeak"], "dataset.holdout_seed=-1", _msg("holdout_seed", "dataset=aimpeak", "an integer >= 0", "-1")),
    (["dataset=airline_nyc"], "dataset.target=late", _msg("target", "dataset=airline_nyc", "one of delay, delayed", "'late'")),
    (["dataset=airline"], "dataset.target=late", _msg("target", "dataset=airline", "one of delay, delayed", "'late'")),
    (["dataset=airline"], "dataset.path=5", _msg("path", "dataset=airline", "a non-empty string or null", "5")),
    (["dataset=airline"], "dataset.planes_path=5", _msg("planes_path", "dataset=airline", "a non-empty string or null", "5")),
    (["dataset=airline"], "dataset.months=[13]", _msg("months", "dataset=airline", "a list of months in 1..12 or null", "[13]")),
    (["dataset=airline"], "dataset.clock=hh", _msg("clock", "dataset=airline", "one of hhmm, minutes", "'hh'")),
    (["dataset=sarcos"], "dataset.joint=8", _msg("joint", "dataset=sarcos", "an integer in [1, 7]", "8")),
    (["dataset=blog"], "dataset.n_features=281", _msg("n_features", "dataset=blog", "an integer in [1, 280]", "281")),
    (["dataset=csv"], "dataset.path=5", _msg("path", "dataset=csv", "a non-empty string or null", "5")),
    (["dataset=csv"], "dataset.target=5", _msg("target", "dataset=csv", "a non-empty string or null", "5")),
    (["dataset=csv"], "dataset.task=ranking", _msg("task", "dataset=csv", "one of regression, classification, count, sequence or null (the registry's)", "'ranking'")),
    (["dataset=csv"], "dataset.features=abc", _msg("features", "dataset=csv", "a list or null", "'abc'")),
    (["dataset=csv"], "dataset.categorical=abc", _msg("categorical", "dataset=csv", "a list or null", "'abc'")),
    (["dataset=csv"], "dataset.label_map=abc", _msg("label_map", "dataset=csv", "a mapping or null", "'abc'")),
    (["dataset=csv"], "dataset.sep=''", _msg("sep", "dataset=csv", "a non-empty string", "''")),
    (["dataset=driving"], "dataset.task=steer", _msg("task", "dataset=driving", "one of speed, yaw, lanes, lead", "'steer'")),
    (["dataset=driving"], "dataset.output=5", _msg("output", "dataset=driving", "a non-empty string or null", "5")),
    (["dataset=driving"], "dataset.train_minutes=0", _msg("train_minutes", "dataset=driving", "a finite float in (0, inf)", "0")),
    (["dataset=driving"], "dataset.test_minutes=-1", _msg("test_minutes", "dataset=driving", "a finite float in (0, inf)", "-1")),
    (["dataset=driving"], "dataset.mode=teleport", _msg("mode", "dataset=driving", "one of regression, autoregression, free_simulation or null (regression for speed and yaw, autoregression for lanes and lead)", "'teleport'")),
]  # fmt: skip


def test_every_option_key_has_a_bad_value_case():
    covered = {(tuple(g), o.lstrip("+").split("=")[0]) for g, o, _ in BAD}
    estimator_keys = {k for cls in ESTIMATOR_OPTIONS.values() for k in names(cls)}
    assert estimator_keys <= {k.split(".", 1)[1] for _, k in covered if k.startswith("estimator.")}
    dataset_keys = {k for cls in DATASET_OPTIONS.values() for k in names(cls)}
    assert dataset_keys <= {k.split(".", 1)[1] for _, k in covered if k.startswith("dataset.")}


@pytest.mark.parametrize(("groups", "override", "message"), BAD, ids=[f"{' '.join(g)} {o}" for g, o, _ in BAD])
def test_a_bad_option_is_one_line_before_any_run(groups, override, message, tmp_path, capsys):
    argv = [
        "train",
        *groups,
        override,
        "trainer.max_iters=2",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        "progress=false",
        f"hydra.run.dir={tmp_path}/run",
    ]
    rc, lines = run_cli(argv, tmp_path, capsys)
    assert rc != 0
    assert lines == [f"gpdlm: error: {message}"]
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "run").exists()
    assert_no_mlflow_run(tmp_path / "mlflow.db")


def test_validate_config_checks_the_options_without_loading_data():
    """``build.validate_config`` (before any data is read) rejects an estimator's and a loader's option."""
    with pytest.raises(ConfigError, match="^the 'num_samples' parameter of estimator=bmc must be an integer >= 1"):
        build.validate_config(compose(["estimator=bmc", "estimator.num_samples=0"]))
    with pytest.raises(ConfigError, match="^the 'holdout' parameter of dataset=aimpeak must be one of"):
        build.validate_config(compose(["dataset=aimpeak", "dataset.holdout=time"]))


# ----- config_check reads the schema's rules (every value of a sweep, in the launcher: no torch) ----------
SWEEPS = [
    (
        ["dataset=aimpeak", "dataset.holdout_fraction=0.1,1.5"],
        _msg("holdout_fraction", "dataset=aimpeak", "a float in (0, 1)", "1.5"),
    ),
    (["estimator=bmc", "estimator.num_samples=5,0"], _msg("num_samples", "estimator=bmc", "an integer >= 1", "0")),
    (["objective.beta=1,0"], _msg("beta", "objective", "a finite float in (0, inf)", "0")),
    (["dataset=ringnorm", "dataset.n=100,null"], _msg("n", "dataset=ringnorm", "an integer >= 2", "None")),
    (["threads=1,0"], _msg("threads", "gpdlm", "'auto' or an integer >= 1", "0")),
    # a schema rule that leaves the range to a validator: the default's type still rules out -1
    (["kernel.lengthscale=1,-1"], _msg("lengthscale", "kernel=rbf", "a finite number >= 0", "-1")),
]


@pytest.mark.parametrize(("overrides", "message"), SWEEPS, ids=[" ".join(o) for o, _ in SWEEPS])
def test_a_sweeps_every_value_is_checked_against_the_schema(overrides, message):
    from gpdlm_cli.config_check import check_overrides

    assert check_overrides(["-m", *overrides]) == message


@pytest.mark.slow
def test_the_schema_imports_no_torch_until_the_trainer_is_asked_for():
    import subprocess
    import sys

    code = (
        "import sys; from gpdlm_cli import schema; "
        "r = schema.rule_of_key('dataset.lag', {'dataset': 'chicago'}); "
        "print(r[1], r[0].describe(), 'torch' in sys.modules); "
        "schema.TrainerSpec; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["dataset=chicago an integer >= 1 False", "True"]


def test_the_split_keys_are_declared_in_the_schema():
    """``dataset.split``: its rules are ``schema.SplitSpec``'s (the reference's table, the messages, a sweep's
    every value), the masks' count the data layer's."""
    from gpdlm_cli.config_check import check_overrides
    from gpdlm_cli.data.splits import N_MASKS
    from gpdlm_cli.schema.groups import N_MASKS as SCHEMA_MASKS

    assert SCHEMA_MASKS == N_MASKS
    rules = schema.describe(schema.SplitSpec)
    assert {k: r.kind for k, r in rules.items()} == {
        "val_fraction": "float",
        "test_fraction": "float",
        "train_size": "int",
        "test_size": "int",
        "mask": "int",
        "mask_val_fraction": "float",
    }
    with pytest.raises(ConfigError, match=r"^the 'test_size' parameter of dataset.split must be a non-negative"):
        schema.parse({"name": "concrete", "split": {"test_size": 1.5}}, schema.DatasetSpec, "dataset")
    assert check_overrides(["-m", "dataset.split.mask=0,10"]) == _msg(
        "mask", "dataset.split", "an integer in 0..9 (one of the 10 published test masks) or null", "10"
    )
