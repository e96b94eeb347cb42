"""The bmc / smooth_bmc / ups YAML files build the right objects, and bad options are one-line
ConfigErrors in scikit-learn's shape (from the config schema, ``schema.options``, as the estimator
is built from its config node)."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gpdlm_cli.build import build_estimator
from gpdlm_cli.estimators import BMCEstimator, QuadratureEstimator, SmoothBMCEstimator, UPSEstimator
from gpdlm_cli.exceptions import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf" / "estimator"


@pytest.mark.parametrize(
    "name,cls,expected",
    [
        ("bmc", BMCEstimator, {"num_samples": 10}),
        ("smooth_bmc", SmoothBMCEstimator, {"num_samples": 10, "nu": 1e-4}),
        (
            "ups",
            UPSEstimator,
            {"num_samples": 10, "sampler": "rejection", "envelope_kind": "tight", "max_width": 10, "num_nodes": 20},
        ),
    ],
)
def test_yaml_builds_the_estimator_with_its_defaults(name, cls, expected):
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    assert cfg.name == name
    est = build_estimator(cfg)
    assert type(est) is cls and est.name == name
    for attr, value in expected.items():
        assert getattr(est, attr) == value


@pytest.mark.parametrize(
    "cls,kwargs,param",
    [
        (BMCEstimator, {"num_samples": 0}, "num_samples"),
        (BMCEstimator, {"num_samples": 2.5}, "num_samples"),
        (BMCEstimator, {"num_samples": True}, "num_samples"),
        (SmoothBMCEstimator, {"num_samples": -1}, "num_samples"),
        (SmoothBMCEstimator, {"nu": -1e-4}, "nu"),
        (SmoothBMCEstimator, {"nu": float("nan")}, "nu"),
        (SmoothBMCEstimator, {"nu": "small"}, "nu"),
        (UPSEstimator, {"num_samples": 0}, "num_samples"),
        (UPSEstimator, {"sampler": "gibbs"}, "sampler"),
        (UPSEstimator, {"envelope": "loose"}, "envelope"),
        (UPSEstimator, {"max_width": 0}, "max_width"),
        (UPSEstimator, {"num_nodes": 0}, "num_nodes"),
        (UPSEstimator, {"max_proposals": 0}, "max_proposals"),
        (UPSEstimator, {"newton_iters": 0}, "newton_iters"),
        (QuadratureEstimator, {"num_nodes": 0}, "num_nodes"),
        (QuadratureEstimator, {"newton_iters": 0}, "newton_iters"),
        (QuadratureEstimator, {"newton_iters": 2.5}, "newton_iters"),
    ],
)
def test_bad_kwargs_raise_one_line_config_errors(cls, kwargs, param):
    with pytest.raises(ConfigError) as err:
        build_estimator({"name": cls.name, **kwargs})
    msg = str(err.value)
    assert f"'{param}' parameter of estimator={cls.name}" in msg and "\n" not in msg


def test_bad_yaml_value_is_a_config_error_through_build():
    cfg = OmegaConf.load(CONF / "smooth_bmc.yaml")
    cfg.nu = -1.0
    with pytest.raises(ConfigError, match="'nu' parameter"):
        build_estimator(cfg)
