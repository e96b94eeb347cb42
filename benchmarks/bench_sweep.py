"""Sweep throughput: an 8-job beta grid run sequentially vs with the joblib launcher (2 workers),
wall-time ratio in one run (target <= 0.65), and the fixed per-job cost of a sweep.

Both sweeps use ``threads=1`` per job, so the ratio measures the launcher (2 workers should take
about half the time, plus what a worker pays once: process start and imports) rather than how
much faster one job runs on two threads than on one: with gpdlm's default ``threads=auto`` a
quiet machine gives the sequential sweep both cores and the ratio becomes about s/2, s being
that 2-thread speed-up of the job itself (``--default-threads`` measures that case too).

``--latency``: the time from ``gpdlm train -m`` to its first job's folder on a 255-job grid (3 models x 5
seeds x 17 betas, the shape of one training size of ``regression_logloss_pol``, on concrete), with
Hydra's basic sweeper (``hydra/sweeper=basic``: it composes every job's config before the launch)
against gpdlm's default (``hydra/sweeper=gpdlm``: one composition per config structure), in one run.

The per-job fixed cost is measured inside a running sweep: 5 one-iteration jobs minus 1, per job
(data load from the parsed cache, tracking, evaluation, the learning curve); the once-per-process
cost (interpreter, imports, store) is a 1-job sweep's wall time.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

# A job of realistic length (~20 s of training on a quiet machine): with 3-second jobs the
# once-per-worker costs dominate and no launcher can help.
JOB = ["trainer.max_iters=1500", "trainer.stop_window=0", "model.num_inducing=100", "progress=false"]
GRID = "objective.beta=0.01,0.03,0.1,0.3,1,3,10,30"
TINY = ["trainer.max_iters=1", "progress=false", "threads=1"]


def gpdlm(args, cwd) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", *args], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def ratio(d, threads: list[str], job: list[str], grid: str) -> tuple[float, float]:
    seq = gpdlm(["train", "-m", grid, *job, *threads], d)
    par = gpdlm(["train", "-m", grid, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *job, *threads], d)
    return seq, par


def first_job_latency(sweeper: str, cwd) -> float:
    """Seconds from the start of a 255-job sweep to its first job's folder (the process is then stopped)."""
    from pathlib import Path

    grid = [
        "model=dlm,dlm_fixed,svgp",
        "seed=0,1,2,3,4",
        "objective.beta=" + ",".join(f"{2.0**-k:g}" for k in range(17)),
        *TINY,
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpdlm_cli.cli",
            "train",
            "-m",
            *grid,
            f"hydra/sweeper={sweeper}",
            "hydra.sweep.dir=latency_" + sweeper,
        ],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    first = Path(cwd) / f"latency_{sweeper}" / "0"
    try:
        while not first.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the {sweeper} sweep ended before its first job")
            time.sleep(0.05)
        return time.perf_counter() - t0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--default-threads", action="store_true", help="also measure with threads=auto (the default)")
    p.add_argument("--iters", type=int, default=1500, help="training iterations per job (default 1500)")
    p.add_argument("--latency", action="store_true", help="only the time to the first job of a 255-job sweep")
    args = p.parse_args(argv if argv is not None else sys.argv[1:])
    if args.latency:
        return latency()
    job = [f"trainer.max_iters={args.iters}"] + JOB[1:]
    with tempfile.TemporaryDirectory() as d:
        gpdlm(["train", "-m", "seed=0", *TINY], d)  # the store and the parsed data exist from here on
        one = gpdlm(["train", "-m", "seed=0", *TINY], d)
        five = gpdlm(["train", "-m", "seed=0,1,2,3,4", *TINY], d)
        seq, par = ratio(d, ["threads=1"], job, GRID)
        print(
            f"8-job beta grid, threads=1: sequential {seq:.1f} s, joblib x2 {par:.1f} s, "
            f"ratio {par / seq:.2f} (target <= 0.65)"
        )
        if args.default_threads:
            seq_a, par_a = ratio(d, [], job, GRID)
            print(
                f"8-job beta grid, threads=auto: sequential {seq_a:.1f} s, joblib x2 {par_a:.1f} s, "
                f"ratio {par_a / seq_a:.2f} (about s/2 on a quiet machine)"
            )
    print(f"fixed cost per job inside a sweep (data, tracking, evaluation, figure): {(five - one) / 4:.2f} s")
    print(f"once per process (interpreter, imports, store, a 1-iteration job): {one:.1f} s")
    return latency()


def latency() -> int:
    with tempfile.TemporaryDirectory() as d:
        gpdlm(["train", "-m", "seed=0", *TINY], d)  # the store and the parsed data exist from here on
        basic, ours = first_job_latency("basic", d), first_job_latency("gpdlm", d)
    print(
        f"255-job sweep, time to its first job: hydra/sweeper=basic {basic:.1f} s, gpdlm (default) {ours:.1f} s, "
        f"ratio {ours / basic:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
