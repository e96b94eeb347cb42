"""docs/results/dlm_thyroid_2026-11-30/study.md's numbers are what its committed run records say: per training size
the test NLL at the beta selected on validation NLL (per seed; SVGP's runs, beta = 1 included, are beta-ELBO's
candidates, and its beta = 1 runs alone the ELBO), averaged over the 5 seeds, as the study prints them (three
decimals); and the diagnosis of D4-thyroid's n = 100 failure (the test-set oracle, fixed DLM level there)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

FOLDER = Path(__file__).resolve().parents[2] / "docs/results/dlm_thyroid_2026-11-30"
# n: (joint DLM, fixed DLM, beta-ELBO, ELBO), as the study prints them
DOC = {
    100: (0.186, 0.159, 0.164, 0.171),
    200: (0.118, 0.105, 0.142, 0.147),
    500: (0.082, 0.082, 0.127, 0.133),
    1000: (0.083, 0.079, 0.103, 0.105),
    2000: (0.077, 0.060, 0.096, 0.098),
}
METHODS = ("joint", "fixed", "beta-ELBO", "ELBO")


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    d = pd.read_json(FOLDER / "runs.jsonl.gz", lines=True)
    d = d[d.params.notna() & (d.status == "FINISHED")]
    rows = [
        {
            "method": p.get("model.variant") if p["model.name"] == "dlm" else "beta-ELBO",
            "n": int(p["dataset.split.train_size"]),
            "seed": int(p["seed"]),
            "beta": float(p["objective.beta"]),
            "val": float(m["val_nll"]),
            "test": float(m["test_nll"]),
        }
        for p, m in zip(d.params, d.metrics)
    ]
    return pd.DataFrame(rows)


def test_the_studys_numbers_are_the_records(runs):
    assert len(runs) == 1300 and sorted(runs.seed.unique()) == [0, 1, 2, 3, 4]
    chosen = runs.loc[runs.groupby(["method", "n", "seed"]).val.idxmin()]
    elbo = runs[(runs.method == "beta-ELBO") & (runs.beta == 1.0)].assign(method="ELBO")
    table = pd.concat([chosen, elbo]).pivot_table(index=["n", "seed"], columns="method", values="test")
    means = table.groupby("n").mean()
    assert {n: tuple(round(float(means.loc[n, m]), 3) for m in METHODS) for n in DOC} == DOC
    diff = (table["joint"] - table["beta-ELBO"]).groupby("n")
    # D4-thyroid: beyond the 0.02 margin (worse) at n = 100 only, worse on 3 seeds; better at every larger size
    assert diff.mean()[100] == pytest.approx(0.021, abs=5e-4) and (diff.get_group(100) > 0).sum() == 3
    assert diff.get_group(100).max() == pytest.approx(0.086, abs=5e-4)
    assert all(-0.046 < diff.mean()[n] < -0.019 for n in (200, 500, 1000, 2000))


def test_the_n100_gap_is_not_the_selection_of_beta(runs):
    small = runs[runs.n == 100]
    oracle = small.loc[small.groupby(["method", "seed"]).test.idxmin()].groupby("method").test.mean()
    assert oracle["joint"] - oracle["beta-ELBO"] == pytest.approx(0.024, abs=5e-4)
    per_beta = small.pivot_table(index="beta", columns="method", values="test")  # the mean over the seeds
    assert per_beta["joint"].min() - per_beta["beta-ELBO"].min() > 0.02
    assert round(float(per_beta["joint"].min()), 3) == 0.198 and per_beta["joint"].idxmin() == 0.78125
