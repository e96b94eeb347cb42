"""CONTRIBUTING.md's "Adding a model family" recipe, proved (issue 20): a new family written as one new
module (``methods/ridge.py``) plus its YAML (``conf/model/ridge.yaml``), dropped into a copy of the
package with no other file edited, trains through ``gpdlm train``, and is selected (by the metric it
declares, with the row of the reference beta it declares) and compared through ``gpdlm select`` and
``gpdlm compare``. The numbers are checked against ridge regression computed here with numpy."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpdlm_cli

HERE = Path(__file__).resolve().parent / "new_family"
#: exactly the files the recipe adds (CONTRIBUTING.md's list)
NEW_FILES = {"methods/ridge.py": HERE / "ridge.py", "conf/model/ridge.yaml": HERE / "ridge.yaml"}
BETAS = (0.01, 30.0, 1.0)
DATA = ["dataset=concrete", "dataset.split.train_size=200", "seed=0"]

SCRIPT = """
import sys
from pathlib import Path
import gpdlm_cli
from gpdlm_cli import cli

root, uri, out, betas, data = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4], sys.argv[5:]
assert Path(gpdlm_cli.__file__).resolve().parent == root.resolve(), gpdlm_cli.__file__
common = ["--tracking-uri", uri, "--experiment", "ridge", "--no-figures"]
for i, beta in enumerate(betas.split(",")):  # (cli.main replaces sys.argv)
    code = cli.main(["train", "model=ridge", f"objective.beta={beta}", *data, "threads=1", "progress=false",
                     f"tracking.uri={uri}", "tracking.experiment=ridge", f"hydra.run.dir={out}/run{i}"])
    assert code == 0, ("train", beta, code)
assert cli.main(["select", *common, "--out", str(out / "select")]) == 0
assert cli.main(["compare", *common, "--select", "--out", str(out / "compare")]) == 0
"""


def _rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_family_of_one_module_and_one_yaml_trains_and_is_selected_and_compared(tmp_path):
    package = Path(gpdlm_cli.__file__).resolve().parent
    copy = tmp_path / "src" / "gpdlm_cli"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, source in NEW_FILES.items():
        assert not (copy / rel).exists()
        shutil.copyfile(source, copy / rel)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # the copy first; a PYTHONPATH already set (packages installed with --target) stays after it
    path = os.pathsep.join(p for p in (str(tmp_path / "src"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "GPDLM_DEVICE": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(copy), uri, str(tmp_path / "out"), ",".join(map(str, BETAS)), *DATA],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    # the runs, and ridge regression by numpy on the same standardised splits
    from gpdlm_cli import build

    from ..conftest import compose

    _, splits, _ = build.load_data(compose(DATA))
    X, y = np.asarray(splits.X_train, float), np.asarray(splits.y_train, float)
    y_std = float(np.asarray(splits.y_std))

    def rmse(beta, Xs, ys):
        w = np.linalg.solve(X.T @ X + beta * np.eye(X.shape[1]), X.T @ y)
        return math.sqrt(np.mean((Xs @ w - np.asarray(ys, float)) ** 2)) * y_std

    val = {b: rmse(b, np.asarray(splits.X_val, float), splits.y_val) for b in BETAS}
    test = {b: rmse(b, np.asarray(splits.X_test, float), splits.y_test) for b in BETAS}
    metrics = {}
    for i in range(len(BETAS)):
        m = json.loads((tmp_path / "out" / f"run{i}" / "metrics.json").read_text())
        metrics[BETAS[i]] = m.get("metrics", m)
    for b in BETAS:
        assert metrics[b]["val_rmse"] == pytest.approx(val[b], rel=1e-6)
        assert metrics[b]["test_rmse"] == pytest.approx(test[b], rel=1e-6)

    # select: by the declared val_rmse (not the default val_nll), plus the declared reference beta's row
    best = min(BETAS, key=lambda b: val[b])
    selected = {r["method"]: r for r in _rows(tmp_path / "out" / "select" / "selected.csv")}
    assert set(selected) == {"ridge", "ridge (beta=1)"}
    assert selected["ridge"]["selected_by"] == "val_rmse"
    assert float(selected["ridge"]["beta"]) == best
    assert float(selected["ridge"]["val_value"]) == pytest.approx(val[best], rel=1e-6)
    assert float(selected["ridge"]["test_rmse"]) == pytest.approx(test[best], rel=1e-6)
    assert float(selected["ridge (beta=1)"]["test_rmse"]) == pytest.approx(test[1.0], rel=1e-6)

    # compare --select: the same two rows, one run each (mean = the run's value)
    compared = {r["method"]: r for r in _rows(tmp_path / "out" / "compare" / "compare.csv")}
    assert set(compared) == {"ridge", "ridge (beta=1)"}
    assert float(compared["ridge"]["test_rmse_mean"]) == pytest.approx(test[best], rel=1e-6)
    assert float(compared["ridge (beta=1)"]["test_rmse_mean"]) == pytest.approx(test[1.0], rel=1e-6)
