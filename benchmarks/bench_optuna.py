"""Tuning beta with Optuna vs the DLM paper's beta grid: the best validation NLL each reaches, and
how many runs it took.

Both on the same smoke problem (log-loss DLM on concrete, a few hundred training points, M=20,
a short budget), in one run:

* grid:   ``gpdlm sweep beta``        -- the paper's [n, n/2, ..., 0.01] (16 values for n = 200);
* optuna: ``gpdlm train -m hydra/sweeper=optuna`` -- 8 trials of TPE (seed 0, 4 random start-up
  trials) over log-uniform beta in [0.01, n], each returning its validation NLL (``sweep.objective``).

Reported: best val_nll of each, the gap (optuna - grid, in nats per point; <= 0.01 counts as
reaching the grid), runs and wall time of each.

    python -m benchmarks optuna          # or: python benchmarks/bench_optuna.py --trials 8 --train-size 200
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBLEM = [
    "model=dlm",
    "model.num_inducing=20",
    "trainer.max_iters=150",
    "trainer.eval_every=0",
    "progress=false",
    "threads=1",
]


def gpdlm(args, cwd) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gpdlm {' '.join(args[:3])} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def best_val_nll(db: Path, experiment: str) -> tuple[float, int, float, float]:
    """(best val_nll, runs, its beta, its test_nll)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    runs = [
        r
        for r in client.search_runs([exp.experiment_id], max_results=1000)
        if r.data.tags.get("gpdlm.command") == "train" and r.info.status == "FINISHED"
    ]
    best = min(runs, key=lambda r: r.data.metrics["val_nll"])
    return (
        best.data.metrics["val_nll"],
        len(runs),
        float(best.data.params["objective.beta"]),
        best.data.metrics["test_nll"],
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--train-size", type=int, default=200)
    p.add_argument("--seed", type=int, default=0, help="data split and initialisation seed")
    args = p.parse_args(argv if argv is not None else sys.argv[1:])
    n = args.train_size
    common = PROBLEM + [f"dataset.split.train_size={n}", f"seed={args.seed}"]
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "mlflow.db"
        uri = [f"tracking.uri=sqlite:///{db}"]
        t_grid = gpdlm(["sweep", "beta", *common, *uri, "tracking.experiment=grid"], d)
        t_opt = gpdlm(
            [
                "train",
                "-m",
                "hydra/sweeper=optuna",
                f"hydra.sweeper.n_trials={args.trials}",
                "hydra.sweeper.sampler.seed=0",
                "hydra.sweeper.sampler.n_startup_trials=4",
                f"objective.beta=tag(log, interval(0.01, {n}))",
                *common,
                *uri,
                "tracking.experiment=optuna",
            ],
            d,
        )
        grid, n_grid, b_grid, t_grid_nll = best_val_nll(db, "grid")
        opt, n_opt, b_opt, t_opt_nll = best_val_nll(db, "optuna")
    print(
        f"problem: dlm on concrete, n_train={n}, M=20, 150 iterations, seed {args.seed} "
        f"({os.cpu_count()} cores; a loaded machine makes the times, not the NLLs, unreliable)"
    )
    print(
        f"paper's beta grid: best val_nll {grid:.4f} (beta {b_grid:.4g}, test_nll {t_grid_nll:.4f}) "
        f"with {n_grid} runs in {t_grid:.0f} s"
    )
    print(
        f"optuna (TPE):      best val_nll {opt:.4f} (beta {b_opt:.4g}, test_nll {t_opt_nll:.4f}) "
        f"with {n_opt} runs in {t_opt:.0f} s"
    )
    print(
        f"optuna - grid: {opt - grid:+.4f} nats per point (<= 0.01: optuna reaches the grid) "
        f"with {n_opt / n_grid:.2f} of the runs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
