"""A table reads only the runs of its own figure when several studies' runs are read in one report: the
regression_bmc runs of Fig. 16 (joint DLM on pol at n = 2000, beta = 0.1, bMC and exact gradients) matched
Fig. 1(a)'s and 1(b)'s joint-DLM column -- in a report over both they would have joined its beta selection."""

from __future__ import annotations

from pathlib import Path

from gpdlm_cli.analysis import claims as C
from gpdlm_cli.analysis import export
from gpdlm_cli.analysis import report as rep

RESULTS = Path(__file__).resolve().parents[2] / "docs/results"
ESTIMATORS = RESULTS / "dlm_estimators_2026-11-30/runs.jsonl.gz"


def _measured(report, table_id: str) -> dict:
    (table,) = [t for t in report.tables if t.table.id == table_id]
    return {key: cell.n for key, cell in table.cells.items() if cell.n}


def test_the_fig16_runs_are_no_cell_of_fig1a_or_fig1b():
    _, runs = export.load_records([export.read(ESTIMATORS)], [], [])
    assert "regression_bmc" in runs and len(runs["regression_bmc"]) == 20
    every = [r for rs in runs.values() for r in rs]
    report = rep.build(C.load("dlm"), every, list(runs))
    assert _measured(report, "fig2_logloss") == {} and _measured(report, "fig3_sqloss") == {}
    fig16 = _measured(report, "fig16_regression_bmc")
    assert sorted(fig16.values()) == [5, 5, 5, 5]  # exact, bMC-1, bMC-10, bMC-100 on pol: 5 seeds each
