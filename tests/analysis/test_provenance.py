"""The report's "runs read" table: training hours (the runs' train_seconds) next to run hours (each run's MLflow
start-to-end time, which adds data loading, evaluation and logging: issue 41), from stores and export files."""

from __future__ import annotations

from types import SimpleNamespace

from gpdlm_cli.analysis import export
from gpdlm_cli.analysis.records import RunRecord
from gpdlm_cli.analysis.render import provenance_rows
from gpdlm_cli.analysis.report import provenance


def _run(rid: str, start_ms: int, end_ms: int | None, train_s: float):
    info = SimpleNamespace(run_id=rid, run_name=rid, status="FINISHED", start_time=start_ms, end_time=end_ms)
    data = SimpleNamespace(params={"dataset.name": "pol"}, metrics={"train_seconds": train_s}, tags={})
    return SimpleNamespace(info=info, data=data)


def test_run_hours_are_the_runs_start_to_end_times_next_to_their_training_seconds():
    runs = [_run("a", 0, 5_400_000, 3600.0), _run("b", 10_000, 1_810_000, 900.0), _run("c", 20_000, None, 60.0)]
    records = [RunRecord.from_run(r) for r in runs]
    assert [r.end_time for r in records] == [5_400_000, 1_810_000, 0]
    assert records[1].with_extra(method="x").end_time == 1_810_000  # a derived record keeps it
    p = provenance("e", records)
    assert p.train_hours == (3600 + 900 + 60) / 3600  # 1.2667
    assert p.run_hours == 1.5 + 0.5  # c has no end time: not counted
    header, rows = provenance_rows(SimpleNamespace(provenance=[p]))
    assert header[-2:] == ["training hours", "run hours"] and rows[0][-2:] == ["1.27", "2.00"]


def test_an_export_line_keeps_the_end_time():
    line = {
        "run_id": "a",
        "run_name": "a",
        "status": "FINISHED",
        "start_time": 1000,
        "end_time": 3_601_000,
        "params": {},
        "metrics": {},
        "tags": {},
    }
    assert RunRecord.from_run(export.as_run(line)).end_time == 3_601_000
    assert provenance("e", [RunRecord.from_run(export.as_run(line))]).run_hours == 1.0
