"""Benchmark: the parsed-table cache makes the second load of a large table >= 10x faster.

Run: ``python benchmarks/bench_data.py`` (exit code 1 if a speed-up is below 10x).

Two large tables, each in a fresh temporary cache (GPDLM_DATA), so the first load really parses:

* ``airline_nyc``: 336,776 nycflights13 flights joined with planes -> 273,853 x 8 (xz pickles
  read by pandas, join, feature building, checks);
* ``csv``: a 300,000 x 20 CSV file written for the benchmark, parsed by the user-CSV loader.

The second load reads the uncompressed .npz keyed by the input files' SHA-256 (memoised by size
and mtime) and the loader version.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MIN_SPEEDUP = 10.0


def _time(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench(name: str, options: dict) -> tuple[float, float, tuple]:
    from gpdlm_cli.data import load_table

    shape = []
    first = _time(lambda: shape.append(load_table(name, **options).X.shape))
    second = _time(lambda: load_table(name, **options), repeat=3)
    return first, second, shape[0]


def main() -> int:
    import numpy as np
    import pandas as pd

    rows = []
    saved = os.environ.get("GPDLM_DATA")
    with tempfile.TemporaryDirectory(prefix="gpdlm-bench-") as tmp:
        os.environ["GPDLM_DATA"] = str(Path(tmp) / "cache")
        rng = np.random.default_rng(0)
        csv = Path(tmp) / "big.csv"
        df = pd.DataFrame(rng.normal(size=(300_000, 20)), columns=[f"x{i}" for i in range(20)])
        df["y"] = df.sum(axis=1) + rng.normal(size=len(df))
        df.to_csv(csv, index=False)
        for name, opts in (("airline_nyc", {}), ("csv", {"path": str(csv), "target": "y"})):
            first, second, shape = bench(name, opts)
            rows.append((name, shape, first, second, first / second))
    if saved is None:
        os.environ.pop("GPDLM_DATA", None)
    else:
        os.environ["GPDLM_DATA"] = saved
    ok = True
    print(f"{'table':<12} {'shape':>14} {'first parse':>12} {'cached load':>12} {'speed-up':>9}")
    for name, shape, first, second, speedup in rows:
        flag = "" if speedup >= MIN_SPEEDUP else f"  < {MIN_SPEEDUP:.0f}x!"
        ok &= speedup >= MIN_SPEEDUP
        print(f"{name:<12} {f'{shape[0]:,} x {shape[1]}':>14} {first:>11.3f}s {second:>11.4f}s {speedup:>8.1f}x{flag}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
