"""A long run's step losses into the MLflow store: every step (``tracking.loss_every=1``, the default) against
every 50th (the RKHS study presets' setting), through gpdlm's tracker (``MlflowTracker.log_steps``, batches of
1,000), in one run, the two interleaved round by round so that both see the same machine. Reports the median
seconds and the store's growth of each, and their ratios. The default size is one paper-protocol RKHS run on
protein at b = 32 (100 epochs x 1,286 steps = 128,600 losses).

    python benchmarks/bench_loss_logging.py [--steps 128600] [--every 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def _one(uri: str, path: str, steps: int, every: int) -> tuple[float, int]:
    """(seconds to log ``steps`` losses into a new run, bytes the store grew by)."""
    from gpdlm_cli.tracking.tracker import MlflowTracker

    tracker = MlflowTracker(uri, "bench", loss_every=every)
    before = os.path.getsize(path)
    losses = [(s, 1.0 / s) for s in range(1, steps + 1)]
    with tracker.run(run_name=f"every-{every}"):
        t0 = time.perf_counter()
        for i in range(0, steps, 5000):  # flushed in chunks, as a run flushes at its evaluations
            tracker.log_steps({"train_loss": losses[i : i + 5000]})
        seconds = time.perf_counter() - t0
    return seconds, os.path.getsize(path) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=128_600)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from gpdlm_cli.tracking.tracker import quiet_mlflow

    quiet_mlflow()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mlflow.db")
        uri = f"sqlite:///{path}"
        _one(uri, path, 10, 1)  # the schema, before anything is timed
        out: dict[int, list[tuple[float, int]]] = {1: [], args.every: []}
        for _ in range(args.rounds):
            for every in out:
                out[every].append(_one(uri, path, args.steps, every))
    (t1, b1), (tk, bk) = (
        (statistics.median(s for s, _ in out[k]), statistics.median(b for _, b in out[k])) for k in out
    )
    print(f"train_loss of a {args.steps:,}-step run into a SQLite MLflow store ({args.rounds} rounds, medians):")
    print(f"  {'every step':<16s}{t1:7.2f} s  {b1 / 1e6:7.2f} MB")
    print(f"  {f'every {args.every}th':<16s}{tk:7.2f} s  {bk / 1e6:7.2f} MB")
    print(f"  {'ratio':<16s}{tk / t1:7.3f}    {bk / max(b1, 1):7.3f}")


if __name__ == "__main__":
    main()
