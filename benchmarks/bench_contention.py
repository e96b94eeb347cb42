"""Speed on a busy machine: the default demo's iteration time with gpdlm's default thread setting,
quiet and with competing busy processes, as ratios against the best alternative measured in the
same run.

Settings compared (each a `gpdlm train` process; iteration time = its median ``iter_ms``):

* ``default``      -- ``threads=auto`` and gpdlm's environment (what a user gets);
* ``1 thread``     -- ``threads=1``;
* ``all cores``    -- ``threads=<cores>`` with OpenMP's own defaults (``GOMP_SPINCOUNT=300000``,
  libgomp's built-in value), i.e. what torch does without gpdlm's settings.

Conditions: as the machine is now ("quiet" only if nothing else runs -- check ``load`` in the
output), then with ``cores + 1`` busy processes (pure Python loops) competing for the cores.

Targets: default quiet <= 1.2 x the best quiet time; default under load <= 1.5 x the 1-thread time
under load.

    python -m benchmarks contention            # or: python benchmarks/bench_contention.py --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
DEMO = ["trainer.max_iters=200", "trainer.stop_window=0", "progress=false", "tracking.enabled=false"]
SETTINGS = {
    "default": ([], {}),
    "1 thread": (["threads=1"], {}),
    "all cores": ([f"threads={CORES}"], {"GOMP_SPINCOUNT": "300000"}),
}


def run_demo(overrides, env_extra, workdir: Path, tag: str) -> float:
    """One `gpdlm train` of the default demo; its median iteration time in ms."""
    out = workdir / tag
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOMP_SPINCOUNT")}
    env.update(env_extra)
    subprocess.run(
        [sys.executable, "-m", "gpdlm_cli.cli", "train", *DEMO, *overrides, f"hydra.run.dir={out}"],
        cwd=workdir,
        env=env,
        check=True,
        capture_output=True,
    )
    return float(json.loads((out / "metrics.json").read_text())["iter_ms"])


def measure(workdir: Path, reps: int, label: str) -> dict[str, float]:
    """Median ms/iteration of every setting, the settings interleaved within each repetition."""
    times: dict[str, list[float]] = {k: [] for k in SETTINGS}
    for r in range(reps):
        for name, (overrides, env) in SETTINGS.items():
            times[name].append(run_demo(overrides, env, workdir, f"{label}-{name.replace(' ', '_')}-{r}"))
    return {k: statistics.median(v) for k, v in times.items()}


def busy_processes(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=1, help="repetitions of each setting per condition (default 1)")
    p.add_argument(
        "--busy", type=int, default=CORES + 1, help=f"competing busy processes (default cores + 1 = {CORES + 1})"
    )
    args = p.parse_args(argv if argv is not None else sys.argv[1:])
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # still stop the busy processes
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        load = os.getloadavg()[0]
        quiet = measure(workdir, args.reps, "quiet")
        procs = busy_processes(args.busy)
        try:
            time.sleep(1.0)
            loaded = measure(workdir, args.reps, "busy")
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    print(f"{CORES} cores; load average before the quiet measurement: {load:.2f} (quiet means < 0.5)")
    print(f"{'setting':<12} {'quiet ms/it':>12} {'busy ms/it':>12}   (busy = {args.busy} competing busy processes)")
    for name in SETTINGS:
        print(f"{name:<12} {quiet[name]:>12.2f} {loaded[name]:>12.2f}")
    best_quiet = min(quiet.values())
    r_quiet = quiet["default"] / best_quiet
    r_busy = loaded["default"] / loaded["1 thread"]
    print(f"default quiet / best quiet:          {r_quiet:.2f}  (target <= 1.2)")
    print(f"default busy / 1 thread busy:        {r_busy:.2f}  (target <= 1.5)")
    print(f"all cores busy / 1 thread busy:      {loaded['all cores'] / loaded['1 thread']:.2f}  (what gpdlm avoids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
