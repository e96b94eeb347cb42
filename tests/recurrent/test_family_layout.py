"""The recurrent family's layout (issue 46, item 2): the family module composes parts that live in
their layers -- no dataset names or catalog look-ups, no copy of the kernel builder, no long
functions -- and the shared kernel builder serves the family's base kernels."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import gpdlm_cli
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.methods import components as C

METHODS = Path(gpdlm_cli.__file__).resolve().parent / "methods"
FAMILY_FILES = ("recurrent.py", "recurrent_setup.py")


@pytest.mark.parametrize("name", FAMILY_FILES)
def test_the_family_names_no_dataset_and_copies_no_kernel_builder(name):
    text = (METHODS / name).read_text()
    for word in ("get_dataset_info", "all_datasets", '"actuator"', '"drives"', "sysid_", "RBFKernel", "MaternKernel"):
        assert word not in text, f"{name} holds {word}"


@pytest.mark.parametrize("name", FAMILY_FILES)
def test_no_function_of_the_family_is_over_80_lines(name):
    tree = ast.parse((METHODS / name).read_text())
    long = {
        n.name: n.end_lineno - n.lineno + 1
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 > 80
    }
    assert long == {}


def test_the_shared_base_kernel_takes_the_family_ard_and_checks_the_lengthscale():
    k = OmegaConf.create({"name": "matern32", "lengthscale": 0.7, "outputscale": 1.0, "ard": False})
    base = C.build_base_kernel(k, 3, ard=True)
    assert base.nu == 1.5 and tuple(base.lengthscale.shape) == (1, 3)
    assert torch.allclose(base.lengthscale.detach(), torch.full((1, 3), 0.7))
    assert tuple(C.build_base_kernel(k, 3).lengthscale.shape) == (1, 1)  # ard=None: kernel.ard
    with pytest.raises(GpdlmError, match="'lengthscale' parameter of kernel=matern32 must be a float in"):
        C.build_base_kernel(OmegaConf.create({**k, "lengthscale": -1.0}), 3)
    with pytest.raises(GpdlmError, match="one of rbf, matern12, matern32, matern52"):
        C.build_base_kernel(OmegaConf.create({**k, "name": "linear"}), 3)


def test_sequence_dataset_knowledge_lives_in_the_data_layer():
    from gpdlm_cli.data.sequence_datasets import TABLE1_SERIES, check_sequence_dataset, series_statistics

    assert series_statistics("pol") == {}
    assert TABLE1_SERIES["sysid_drives"] == ("generated", "drives")
    check_sequence_dataset("sysid_drives", "model=gp_lstm")
    with pytest.raises(GpdlmError, match=r"model=gp_lstm maps windows .* dataset=pol is a regression dataset"):
        check_sequence_dataset("pol", "model=gp_lstm")


@pytest.mark.slow
def test_series_statistics_of_a_generated_set_are_its_seeds_series():
    from gpdlm_cli.data.sequence_datasets import series_statistics
    from gpdlm_cli.data.sequences import sysid_statistics

    stats = series_statistics("sysid_drives", 200, 1)
    ref = sysid_statistics("drives", 200, 1)
    assert stats == {"data_abs_corr": ref["abs_corr"], "data_snr": ref["snr"]}
