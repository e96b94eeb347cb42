"""docs/results/diagnoses/gplstm_units.py (the units of the GP-LSTM paper's Table 2, diagnosis section 8): its
target sds equal a numpy computation on the raw MATLAB files, its paper table is the claims file's, and its
agreement summary counts what it says."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "results" / "diagnoses" / "gplstm_units.py"


@pytest.fixture(scope="module")
def units():
    spec = importlib.util.spec_from_file_location("gplstm_units", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _raw_target(name: str) -> np.ndarray:
    """The target series read straight from the file (scipy), skipping when the mirror is absent."""
    import scipy.io

    from gpdlm_cli.data import get_dataset_info
    from gpdlm_cli.data.catalog import download_inputs
    from gpdlm_cli.exceptions import DataError

    try:
        (path,) = download_inputs(get_dataset_info(name))
    except DataError as e:
        pytest.skip(f"the real {name} file is not available: {e}")
    return np.asarray(scipy.io.loadmat(str(path))[{"actuator": "p", "drives": "z1"}[name]], dtype=float).ravel()


@pytest.mark.parametrize(
    ("name", "mode", "lag", "train_sd"),
    [
        ("actuator", "regression", 32, 1.5525),
        ("actuator", "free_simulation", 10, 1.5433),
        ("drives", "regression", 16, 0.6972),
    ],
)
def test_target_sds_are_numpy_on_the_raw_file(units, name, mode, lag, train_sd):
    """gpdlm's split of a series of N steps: the first half's windows have the targets y[lag:N/2], whose last
    quarter (rounded) validates; the second half y[N/2:] tests. The authors' kgp examples standardise with
    y[:int(0.45 N)] and test on y[int(0.45 N):int(0.9 N)]. All sds are numpy's ddof 0."""
    y = _raw_target(name)
    half = len(y) // 2
    n_val = int(round(0.25 * (half - lag)))
    train, train_val, test = y[lag : half - n_val], y[lag:half], y[half:]
    a, b = int(0.45 * len(y)), int(0.9 * len(y))
    got = units.target_sds(name, mode, lag)
    assert got["n_train"] == train.size
    assert got["train"] == pytest.approx(train.std(), rel=1e-12)
    assert got["train_val"] == pytest.approx(train_val.std(), rel=1e-12)
    assert got["test"] == pytest.approx(test.std(), rel=1e-12)
    assert got["authors_train"] == pytest.approx(y[:a].std(), rel=1e-12)
    assert got["authors_test"] == pytest.approx(y[a:b].std(), rel=1e-12)
    assert got["mean_predictor"] == pytest.approx(np.sqrt(np.mean((test - train.mean()) ** 2)) / train.std(), rel=1e-12)
    assert got["train"] == pytest.approx(train_sd, abs=1e-4)  # the figures of the diagnosis's section 8


def test_paper_table_2_is_the_claims_files_36_cells(units):
    paper = units.paper_table2()
    assert len(paper) == 36  # 6 models x 2 datasets x 3 modes (RGP quoted, not run)
    assert paper[("drives", "regression", "lstm")] == 0.29
    assert paper[("actuator", "free_simulation", "gp_lstm")] == 0.43
    assert paper[("actuator", "autoregression", "gp_narx")] == 0.14
    assert not any(model == "gru" or model == "gp_gru" for _ds, _mode, model in paper)


def test_agreement_counts_cells_within_a_factor(units):
    a = units.agreement([(1.0, 1.0), (1.4, 1.0), (1.0, 2.0), (3.0, 1.0)])
    assert a["cells"] == 4
    assert a["within_1.5"] == 2 and a["within_1.25"] == 1
    assert a["median_abs_log"] == pytest.approx((math.log(1.4) + math.log(2.0)) / 2)
    assert a["geo_mean_ratio"] == pytest.approx((1.4 * 0.5 * 3.0) ** 0.25)


def test_the_metric_of_each_mode_is_the_claims_files(units):
    """Regression and autoregression read test_rmse, free simulation test_sim_rmse: as Table 2's claims."""
    import yaml

    claims = yaml.safe_load((ROOT / "gpdlm_cli" / "claims" / "gplstm.yaml").read_text())
    (table,) = [t for t in claims["tables"] if t["id"] == "table2"]
    modes = table["dimensions"]["mode"]["values"]
    for mode, name in units.MODES.items():
        assert modes[name]["match"] == {"dataset.mode": mode}
        assert units.METRIC[mode] == modes[name].get("metric", table["metric"])


def test_the_input_window_bound_is_numpy_on_the_raw_file(units):
    """Drives at lag 16: the test targets y[250:500], each window the inputs u[t-15..t] (gpdlm's alignment);
    grouping identical windows and predicting each group's mean leaves 0.424 in target units (the paper's
    Drives regression figures are 0.25-0.53)."""
    import scipy.io

    _raw_target("drives")  # skips without the file
    from gpdlm_cli.data import get_dataset_info
    from gpdlm_cli.data.catalog import download_inputs

    (path,) = download_inputs(get_dataset_info("drives"))
    m = scipy.io.loadmat(str(path))
    u, y = np.asarray(m["u1"], dtype=float).ravel(), np.asarray(m["z1"], dtype=float).ravel()
    groups: dict[tuple, list[float]] = {}
    for t in range(250, 500):
        groups.setdefault(tuple(u[t - 15 : t + 1]), []).append(y[t])
    expected = np.sqrt(sum(np.sum((np.array(v) - np.mean(v)) ** 2) for v in groups.values()) / 250)
    got = units.input_window_bound("drives", 16)
    assert (got["n"], got["distinct"]) == (250, len(groups))
    assert got["target"] == pytest.approx(expected, rel=1e-12)
    assert got["target"] == pytest.approx(0.424, abs=1e-3)
    assert got["std"] == pytest.approx(expected / units.target_sds("drives", "regression", 16)["train"], rel=1e-12)
