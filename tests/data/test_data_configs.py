"""Every conf/dataset YAML composes, names a registered dataset, sets only options its loader has,
and (offline sets) loads through the runner's path with a likelihood of the right task."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from gpdlm_cli import build
from gpdlm_cli.data import all_datasets, get_dataset_info
from gpdlm_cli.data.registry import check_options
from gpdlm_cli.data.splits import check_split
from gpdlm_cli.exceptions import DataError
from tests.conftest import exhaustive

CONF = Path(build.__file__).resolve().parent / "conf" / "dataset"
NAMES = sorted(p.stem for p in CONF.glob("*.yaml"))
HEAVY = {
    "airline_nyc": [],
    "airline_nyc_class": [],  # parsed and tested in test_data_loaders
    "driving": ["dataset.train_minutes=0.5", "dataset.test_minutes=0.5"],
}


@pytest.fixture(scope="module")
def hydra_conf():
    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        yield


def cfg_for(name, extra=()):
    return compose(config_name="config", overrides=[f"dataset={name}", "device=cpu", *extra])


def test_every_registry_entry_has_a_config():
    assert set(all_datasets()) <= set(NAMES)


# the fast lane: one set of each kind (masked regression, classification, counts, sequences, real mirror);
# make test, every set
FAST_SETS = {"pol", "bike", "thyroid", "abalone", "sysid_actuator", "actuator"}


@pytest.mark.parametrize("conf", exhaustive(NAMES, fast=lambda n: n in FAST_SETS))
def test_dataset_config(conf, hydra_conf):
    cfg = cfg_for(conf, HEAVY.get(conf, ()))
    d = cfg.dataset
    info = get_dataset_info(d.name)
    options = {k: v for k, v in d.items() if k not in ("name", "split", "standardize_y")}
    check_options(info, options)
    masks = info.mask_source is not None
    assert set(d.split) == {"val_fraction", "test_fraction", "train_size", "test_size", "mask"} | (
        {"mask_val_fraction"} if masks else set()
    )
    assert d.split.mask is None  # the papers' own protocol unless a published mask is asked for
    # a mask is accepted exactly where the table carries published masks (checked before any load)
    mask_options = {**options, "source": "download"} if info.mask_source == "alt_files" else options
    if masks:
        check_split(d.name, {"mask": 9}, mask_options)
    else:
        with pytest.raises(
            DataError, match=f"dataset '{d.name}' has no published test masks; the sets that have them: bike"
        ):
            check_split(d.name, {"mask": 0}, options)
    assert d.split.val_fraction > 0  # the runner reports validation metrics
    lik_task = build._likelihood_task(cfg.likelihood.name)
    tasks = info.task.split("|")
    if info.task == "sequence":
        assert lik_task == "regression"
    elif "target" in d:
        assert lik_task == ("classification" if d.target == "delayed" else "regression")
    else:
        assert lik_task in tasks
    if info.offline and conf not in ("airline_nyc", "airline_nyc_class"):
        table, splits, tensors = build.load_data(cfg)
        assert splits.n_train >= 2 and tensors.x_test.shape[0] > 0
        if info.size and conf not in HEAVY:
            assert (table.n, table.X.shape[1]) == info.size  # the registry states the real size
        if info.num_inducing:
            assert info.num_inducing <= splits.n_train
