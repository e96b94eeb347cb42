"""docs/results/diagnoses/svbssgp.md section 2a (sVBSSGP's default step at the paper's sizes): the table's means
and p-values are what the committed records give (stepsize_table.py's reading of them), and the re-run default
matched its published record to the last digit."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs/results/diagnoses/svbssgp/stepsize_table.py"


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("stepsize_table", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _paths(mod):
    return {k: (str(ROOT / p), e, r) for k, (p, e, r) in mod.DEFAULT.items()}, str(ROOT / mod.ROBBINS_MONRO)


# (data set, metric): (default mean, Robbins-Monro mean, decimals, p) as the doc's table prints them
DOC = {
    ("AIMPEAK-like", "test_rmse"): (5.593, 5.570, 3, 0.64),
    ("AIMPEAK-like", "elbo_per_datum"): (-0.7775, -0.7776, 4, 0.99),
    ("BLOG", "test_rmse"): (33.40, 35.30, 2, 0.005),
    ("BLOG", "test_nll"): (4.920, 4.983, 3, 0.035),
    ("BLOG", "elbo_per_datum"): (-1.471, -1.434, 3, 8e-6),
    ("AIRLINE (200,000 flights)", "test_rmse"): (35.06, 35.16, 2, 0.51),
}


def test_the_docs_table_is_the_records(table):
    default, rm_path = _paths(table)
    read = {
        name: (table.runs(path, e, r, "constant"), table.runs(rm_path, e, r, "robbins_monro"))
        for name, (path, e, r) in default.items()
    }
    for (name, metric), (want_a, want_b, digits, want_p) in DOC.items():
        base, rm = read[name]
        seeds = sorted(set(base) & set(rm))
        assert len(seeds) == (2 if name.startswith("AIRLINE") else 5)
        a, b = [base[s][metric] for s in seeds], [rm[s][metric] for s in seeds]
        assert round(statistics.mean(a), digits) == want_a and round(statistics.mean(b), digits) == want_b
        assert stats.ttest_rel(b, a).pvalue == pytest.approx(want_p, rel=0.15)


def test_the_rerun_default_matched_its_record(table):
    d = pd.read_json(ROOT / table.ROBBINS_MONRO, lines=True)
    d = d[d.params.notna()]
    (check,) = [m["test_rmse"] for p, m in zip(d.params, d.metrics) if p.get("tracking.experiment") == "check_default"]
    path, experiment, r = _paths(table)[0]["AIMPEAK-like"]
    assert check == table.runs(path, experiment, r, "constant")[0]["test_rmse"] == 5.184843343333425
