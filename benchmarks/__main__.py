"""Run every benchmark: `python -m benchmarks [name ...]` (names: training, optimizers, estimators, data, sweep,
compose, contention, optuna, sparse_spectrum, pic, rkhs, rkhs_step, gplstm, gplstm_eval, kiss_car, study, stochastic_start, gpu, batched, kernels, loss_logging)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ALL = [
    "training",
    "optimizers",
    "estimators",
    "data",
    "sweep",
    "compose",
    "contention",
    "optuna",
    "sparse_spectrum",
    "pic",
    "rkhs",
    "rkhs_step",
    "gplstm",
    "gplstm_eval",
    "kiss_car",
    "study",
    "stochastic_start",
    "gpu",
    "batched",
    "kernels",
    "loss_logging",
]


def main(argv: list[str]) -> int:
    names = argv or ALL
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    for name in names:
        if not (here / f"bench_{name}.py").exists():
            print(f"(no benchmark '{name}' yet)")
            continue
        print(f"\n=== bench_{name} ===", flush=True)
        sys.argv = [f"bench_{name}.py"]  # each benchmark's own defaults (some parse argv)
        importlib.import_module(f"bench_{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
