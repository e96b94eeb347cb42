"""bench_study's RKHS Tables 2/4 projection counts the paper's protocol (issue 41): 1,440 runs and 21.6 M steps per
method over the 8 sets x 5 masks x 3 learning rates x b 32/64/128 x 100 epochs."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_rkhs_study_steps_are_the_papers_protocol():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_study
    finally:
        sys.path.remove(str(BENCH))
    per_b = {b: bench_study.rkhs_study_steps(b) for b in (32, 64, 128)}
    # pol alone at b = 32: 13,500 training rows -> 421 steps an epoch, 100 epochs, 5 masks x 3 lr
    assert bench_study.rkhs_study_steps(32, masks=1, lrs=1) - 100 * (13500 // 32) == sum(
        100 * (int(0.9 * n) // 32) for name, n in bench_study.RKHS_SETS.items() if name != "pol"
    )
    assert per_b[32] == 15 * sum(100 * (int(0.9 * n) // 32) for n in bench_study.RKHS_SETS.values())
    assert 21.5e6 < sum(per_b.values()) < 21.7e6  # the "21.6 M steps per method"
    assert len(bench_study.RKHS_SETS) * 5 * len(bench_study.RKHS_METHODS) * 3 * 3 == 1440


def _entry(run_id, method, b, iters, n, seconds, status="FINISHED", tags=None):
    return {
        "experiment": "chunk",
        "run_id": run_id,
        "run_name": run_id,
        "status": status,
        "start_time": 1_000_000,
        "end_time": 1_000_000 + int(1000 * seconds),
        "params": {"model.name": method, "trainer.batch_size": str(b), "trainer.max_epochs": "100"},
        "metrics": {"iterations": iters, "n_train": n},
        "tags": tags or {},
        "steps": {},
    }


def test_a_chunks_runs_are_projected_by_the_studys_formula_and_set_against_their_wall_time(tmp_path, monkeypatch):
    """``bench_study --paper rkhs --chunk FILE``: per run, iterations x ms per step + 100 evaluations scaled by
    its rows + the start-up, against its start-to-end; unfinished and resumed runs (whose time is split over
    two runs) and other families are left out."""
    from gpdlm_cli.analysis.export import write

    sys.path.insert(0, str(BENCH))
    try:
        import bench_study
    finally:
        sys.path.remove(str(BENCH))
    timings = {("minimax", 32, True): 5.0, ("bsgd", 32, True): 1.0}  # CPU ms per step
    monkeypatch.setattr(bench_study, "_rkhs_timings", lambda bs, steps, rounds, batched: timings)
    monkeypatch.setattr(bench_study, "rkhs_evaluation_seconds", lambda: 0.01)
    entries = [
        _entry("r1", "minimax", 32, 42_100, 4096, 400.0),
        _entry("r2", "bsgd", 32, 42_100, 8192, 100.0),
        _entry("r3", "minimax", 32, 42_100, 4096, 50.0, status="KILLED"),
        _entry("r4", "minimax", 32, 1000, 4096, 9.0, tags={"gpdlm.resumed_from": "r3"}),
        _entry("r5", "dlm", 32, 10, 4096, 9.0),
    ]
    path = tmp_path / "runs.jsonl.gz"
    write(path, entries, ["chunk"])
    rows = bench_study.rkhs_chunk(str(path), startup_s=6.0)
    by = {r["method"]: r for r in rows}
    assert by["minimax"]["runs"] == 1 and by["bsgd"]["runs"] == 1 and "dlm" not in by
    assert by["minimax"]["projected_s"] == 42_100 * 5.0 / 1000 + 100 * 0.01 * 1 + 6.0
    assert by["bsgd"]["projected_s"] == 42_100 * 1.0 / 1000 + 100 * 0.01 * 2 + 6.0
    assert by["minimax"]["measured_s"] == 400.0 and by["total"]["measured_s"] == 500.0
