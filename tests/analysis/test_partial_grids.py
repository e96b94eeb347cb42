"""A selected cell leaves out a unit whose grid is partial (2026-11-30): an interrupted study's seed whose beta
grid stopped after 5 of its 17 values was "selected" from the five largest betas, and the DLM classification
part 1 report read 0.194 +- 0.124 (n = 2) for twonorm's joint DLM at n = 500, where the complete seed alone is
0.069."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpdlm_cli.analysis import claims as C
from gpdlm_cli.analysis import export
from gpdlm_cli.analysis import report as rep
from gpdlm_cli.analysis.records import RunRecord

RECORDS = Path(__file__).resolve().parents[2] / "docs/results/dlm_classification_2026-11-30/runs.jsonl.gz"


def _run(seed: int, beta: float, val: float) -> RunRecord:
    params = {"seed": str(seed), "objective.beta": str(beta)}
    return RunRecord(f"r{seed}-{beta}", "", 0, params, {"val_nll": val, "test_nll": val}, {})


def test_a_unit_with_fewer_grid_values_than_the_cells_others_is_left_out():
    by_unit = {
        0: [_run(0, b, v) for b, v in ((100, 0.7), (10, 0.3), (1, 0.1), (0.1, 0.2))],
        1: [_run(1, b, v) for b, v in ((100, 0.7), (10, 0.3))],  # interrupted after two betas
        2: [_run(2, b, v) for b, v in ((100, 0.6), (10, 0.4), (1, 0.2), (0.1, 0.1))],
    }
    assert rep._short_grids(by_unit, "val_nll", ["objective.beta"]) == {1}
    assert rep._short_grids({0: by_unit[0], 2: by_unit[2]}, "val_nll", ["objective.beta"]) == set()
    # a run without a finite selection metric does not count as a grid value; no selection: nothing left out
    by_unit[2][-1].metrics["val_nll"] = float("nan")
    assert rep._short_grids(by_unit, "val_nll", ["objective.beta"]) == {1, 2}
    assert rep._short_grids(by_unit, None, ["objective.beta"]) == set()


def _cell(runs: list[RunRecord]):
    report = rep.build(C.load("dlm"), runs, ["classification"])
    (table,) = [t for t in report.tables if t.table.id == "fig4_classification"]
    (row,) = [r for r in table.row_keys if tuple(map(str, r)) == ("twonorm", "500")]
    (col,) = [c for c in table.col_keys if str(c[0]) == "joint-DLM"]
    return table, table.cells[(row, col)]


def _twonorm_joint_500(record: RunRecord, seed: str) -> bool:
    p = record.params
    return (
        (p.get("dataset.name"), p.get("dataset.split.train_size"), p.get("model.variant"))
        == ("twonorm", "500", "joint")
        and p.get("seed") == seed
        and p.get("model.name") == "dlm"
    )


@pytest.mark.slow  # ~5 s: 3,900 records read, the DLM tables of twonorm's 1,300 built twice
def test_the_interrupted_twonorm_grid_of_the_classification_study_is_left_out():
    """The complete study's records, with seed 1's twonorm n = 500 joint-DLM grid cut back to its five largest
    betas: the state part 1 was interrupted in."""
    _, runs = export.load_records([export.read(RECORDS)], ["classification"], [])
    complete = [r for r in runs["classification"] if r.params.get("dataset.name") == "twonorm"]  # its row alone
    _, whole = _cell(complete)
    assert whole.n == 5 and whole.mean == pytest.approx(0.06945, abs=5e-5)
    grid = sorted({float(r.params["objective.beta"]) for r in complete if _twonorm_joint_500(r, "1")})
    assert len(grid) == 17
    cut = [r for r in complete if not (_twonorm_joint_500(r, "1") and float(r.params["objective.beta"]) < grid[-5])]
    assert len(complete) - len(cut) == 12
    table, cell = _cell(cut)
    others = [v for k, v in whole.values.items() if k != (1.0,)]
    assert cell.n == 4 and (1.0,) not in cell.values
    assert cell.mean == pytest.approx(sum(others) / 4, rel=1e-12)
    assert any("fewer values of objective.beta" in n for n in table.notes)
