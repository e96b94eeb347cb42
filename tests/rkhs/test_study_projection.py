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
