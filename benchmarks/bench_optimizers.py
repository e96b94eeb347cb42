"""L-BFGS vs Adam on collapsed and exact models (issue 8's evidence for the general trainer).

`model=sgpr` on concrete (M=100) and `model=exact` on concrete: Adam with the paper's full-batch
rate (0.1) for 1000 iterations against `trainer.optimizer=lbfgs` with its default stopping rule
(max - min of the loss over 10 iterations <= 1e-4). Both run in this process, one after the other,
through gpdlm's own builder and trainer. Reported: the final training objective (per datum,
lower is better), whether the stopping rule fired, iterations, wall time, and the ratio
L-BFGS time / Adam-1000 time. Target: L-BFGS reaches at least Adam-1000's objective with
converged=1 in a fraction of its time.
"""

from __future__ import annotations

import time

import torch


def fit(overrides):
    from hydra import compose, initialize_config_module

    from gpdlm_cli.prepare import prepare
    from gpdlm_cli.training import run_stages

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["progress=false", "trainer.eval_every=0", *overrides])
    prepared = prepare(cfg)
    data, method, settings = prepared.data, prepared.method, prepared.settings
    t0 = time.perf_counter()
    result = run_stages(method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        value = float(method.stages[-1].objective(data.x_train, data.y_train))
    return value, result, seconds


def main():
    print(f"threads={torch.get_num_threads()}")
    print(
        f"{'model':<22} {'optimizer':<10} {'objective':>10} {'conv':>5} {'iters':>6} {'seconds':>8} {'time ratio':>10}"
    )
    for label, model in (
        ("sgpr concrete M=100", ["model=sgpr", "model.num_inducing=100"]),
        ("exact concrete", ["model=exact"]),
    ):
        adam, adam_res, adam_s = fit(model + ["trainer.max_iters=1000"])
        lbfgs, lbfgs_res, lbfgs_s = fit(model + ["trainer.optimizer=lbfgs", "trainer.max_iters=1000"])
        print(
            f"{label:<22} {'adam-1000':<10} {adam:10.5f} {int(adam_res.converged):5d} {adam_res.iterations:6d} {adam_s:8.2f} {1.0:10.2f}"
        )
        print(
            f"{label:<22} {'lbfgs':<10} {lbfgs:10.5f} {int(lbfgs_res.converged):5d} {lbfgs_res.iterations:6d} {lbfgs_s:8.2f} "
            f"{lbfgs_s / adam_s:10.2f}   objective <= adam: {lbfgs <= adam + 1e-9}"
        )


if __name__ == "__main__":
    main()
