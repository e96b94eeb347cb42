"""Every option in conf/ composes (Hydra compose API) into a config the builder accepts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpdlm_cli import build

from .conftest import compose, exhaustive

CONF = Path(build.__file__).resolve().parent / "conf"
GROUPS = sorted(
    p.name for p in CONF.iterdir() if p.is_dir() and not p.name.startswith("_") and p.name != "experiment"
)  # presets: test_sweeps
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONF / g).glob("*.yaml"))]
FIRST_OPTIONS = {next(c for c in OPTIONS if c[0] == g) for g in {g for g, _ in OPTIONS}}


def test_conf_is_shipped_inside_the_package():
    assert (CONF / "config.yaml").is_file()
    assert {"model", "likelihood", "estimator", "dataset", "trainer", "kernel", "tracking"} <= set(GROUPS)


@pytest.mark.parametrize(
    "group,option",
    # the fast lane: the first option of each group (each group's kind of config once); make test: every option
    exhaustive(OPTIONS, fast=lambda c: c in FIRST_OPTIONS, ids=lambda c: f"{c[0]}={c[1]}"),
)
def test_option_composes(group, option):
    from gpdlm_cli.methods import recurrent

    sequences = ["dataset=sysid_actuator"] if group == "model" and option in recurrent.MODELS else []  # windows only
    cfg = compose([f"{group}={option}", *sequences])
    node = cfg[group]
    if group == "dataset":
        from gpdlm_cli.data import get_dataset_info

        assert get_dataset_info(node.name).name == node.name  # presets (e.g. airline_reg) name a registered set
    elif option.endswith("_fixed"):
        assert node.name == option.removesuffix("_fixed") and node.variant == "fixed"
    elif option.endswith("_paper"):  # the RKHS paper's own settings of a model (scgd_paper, minimax_paper)
        assert node.name == option.removesuffix("_paper")
    elif "name" in node:
        assert node.name == option  # the file name is the option's name
    build.validate_config(cfg)  # every option alone, with the other defaults, is a valid config


def test_defaults_are_the_documented_public_interface():
    cfg = compose([])
    assert cfg.model.name == "dlm" and cfg.model.variant == "joint" and cfg.model.num_inducing == 100
    assert cfg.likelihood.name == "gaussian" and cfg.estimator.name == "auto"
    assert (
        cfg.objective.beta == 1.0
        and cfg.seed == 0
        and cfg.device == os.environ.get("GPDLM_DEVICE", "auto")
        and cfg.dtype == "float64"
    )
    assert cfg.trainer.lr is None and cfg.trainer.batch_size is None and cfg.trainer.stop_tol == 1e-4
    assert cfg.tracking.uri is None and cfg.tracking.experiment == "gpdlm"
    build.validate_config(cfg)


def test_dataset_chooses_its_likelihood_but_the_command_line_wins():
    assert compose(["dataset=breast_cancer"]).likelihood.name == "probit"
    assert compose(["dataset=breast_cancer", "likelihood=logit"]).likelihood.name == "logit"
    assert compose(["dataset=doctor_visits"]).likelihood.name == "poisson_exp"
