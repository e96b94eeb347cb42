"""Every kernel the builder accepts is one config-group option away (issue 47, item 1): ``kernel=<name>``
composes, builds the named kernel and trains; an unknown option is one line naming the working spellings."""

from __future__ import annotations

import math
from pathlib import Path

import gpytorch
import pytest

from gpdlm_cli.config_check import check_overrides
from gpdlm_cli.methods.components import STATIONARY_KERNELS
from gpdlm_cli.methods.feature_maps import FINITE_KERNELS
from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import run_train

from ..conftest import compose, fast

CONF = Path(__file__).resolve().parents[2] / "conf" / "kernel"


def test_every_buildable_kernel_has_its_config_file():
    """One conf/kernel/<name>.yaml per name the builder accepts, whose ``name`` is its file's stem."""
    assert {p.stem for p in CONF.glob("*.yaml")} == set(STATIONARY_KERNELS + FINITE_KERNELS)
    for name in STATIONARY_KERNELS + FINITE_KERNELS:
        assert compose([f"kernel={name}"]).kernel.name == name


@pytest.mark.parametrize("name,nu", [("matern12", 0.5), ("matern32", 1.5), ("matern52", 2.5)])
def test_kernel_option_builds_the_named_matern(name, nu):
    cfg = compose(fast(["model=sgpr", f"kernel={name}", "kernel.ard=true", "tracking.enabled=false"]))
    kernel = prepare(cfg).method.model.covar_module
    assert type(kernel.base_kernel) is gpytorch.kernels.MaternKernel and kernel.base_kernel.nu == nu
    assert kernel.base_kernel.lengthscale.shape[-1] == 8  # concrete's 8 inputs, one lengthscale each (ARD)


@pytest.mark.parametrize("model", ["sgpr", "svgp"])
def test_kernel_matern32_trains(tmp_path, model):
    metrics = run_train(compose(fast([f"model={model}", "kernel=matern32", "tracking.enabled=false"])), tmp_path)
    assert math.isfinite(metrics["test_nll"]) and metrics["test_rmse"] < 12.0  # concrete: y std ~16.7 MPa
    assert metrics["iterations"] == 60


def test_unknown_kernel_option_is_one_line_with_the_working_spellings():
    message = check_overrides(["kernel=matern3"])
    assert message == (
        "unknown kernel 'matern3'; did you mean 'matern32' or 'matern52' or 'matern12'? "
        "(choose from: linear, matern12, matern32, matern52, rbf, rff)"
    )
