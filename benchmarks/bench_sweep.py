"""Sweep throughput: an 8-job beta grid run sequentially vs with the joblib launcher (2 workers),
wall-time ratio in one run (target <= 0.65), and the fixed per-job overhead (imports, tracking):
the wall time of a 1-iteration job minus its training time."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A job of realistic length (~20 s of training): with 3-second jobs the fixed costs (a joblib
# worker imports torch, gpytorch, hydra and mlflow: ~10 s) dominate and no launcher can help.
JOB = ["trainer.max_iters=1500", "trainer.stop_window=0", "model.num_inducing=100", "progress=false"]
GRID = "objective.beta=0.01,0.03,0.1,0.3,1,3,10,30"


def gpdlm(args, cwd) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", *args], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main():
    with tempfile.TemporaryDirectory() as d:
        gpdlm(["train", "trainer.max_iters=1", "progress=false"], d)  # create the store once
        seq = gpdlm(["train", "-m", GRID, *JOB], d)
        par = gpdlm(["train", "-m", GRID, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *JOB], d)
        one = gpdlm(["train", "trainer.max_iters=1", "progress=false", "hydra.run.dir=one"], d)
        train_s = json.loads((Path(d) / "one" / "metrics.json").read_text())["train_seconds"]
    print(f"8-job beta grid: sequential {seq:.1f} s, joblib x2 {par:.1f} s, ratio {par / seq:.2f} (target <= 0.65)")
    print(f"fixed per-job overhead (process, imports, data, tracking): {one - train_s:.1f} s")


if __name__ == "__main__":
    main()
