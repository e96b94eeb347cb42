"""The GPU path (issue 25): training steps on CUDA against the same steps on this machine's CPU cores,
in one run, with the GPU's name, the memory high-water mark and the host-device syncs per step.

    python -m benchmarks gpu                  # on a machine with CUDA (prints "no CUDA device" elsewhere)
    python benchmarks/bench_gpu.py --quick    # fewer iterations

* SVGP and DLM steps (gpdlm's builder and trainer, synthetic N = 20,000 x 8 data as bench_training)
  at M in {200, 1000} and minibatch in {1,000, 10,000}, float64 and float32: ms per step on CPU (all
  cores) and CUDA, their ratio, the CUDA memory high-water mark, and the syncs per step
  (``training.sync.count_cuda_syncs``, measured between two run lengths, so the loop's end costs
  nothing);
* the sampling estimators (bMC-10, uPS-10) on a Poisson DLM step;
* one step of every other family on its own data (scgd/minimax/bsgd on concrete features=nn,
  gp_lstm on the actuator windows, ssgp/svbssgp on the AIMPEAK-like network): ms per step, CPU and CUDA.

Timings of a GPU are only meaningful with the GPU's name next to them; this script prints it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch

N, D = 20000, 8


def make_data(dtype, device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=g, dtype=torch.float64)
    y = (
        torch.sin(x[:, 0])
        + 0.5 * x[:, 1] ** 2 / (1 + x[:, 2].abs())
        + 0.1 * torch.randn(N, generator=g, dtype=torch.float64)
    )
    return x.to(device, dtype), y.to(device, dtype)


def sparse_step_ms(model: str, M: int, batch: int, dtype, device, iters: int) -> tuple[float, float, float]:
    """(ms per step, syncs per step, peak MB) of gpdlm's `model` (svgp | dlm) stage."""
    from omegaconf import OmegaConf

    from gpdlm_cli import build
    from gpdlm_cli.build import Tensors
    from gpdlm_cli.training import ConvergenceRule, TrainerSettings, train
    from gpdlm_cli.training.sync import count_cuda_syncs

    x, y = make_data(dtype, device)
    cfg = OmegaConf.create(
        {
            "seed": 0,
            "objective": {"beta": 1.0},
            "features": {"name": "none"},
            "model": {
                "name": model,
                "variant": "joint",
                "num_inducing": M,
                "inducing_init": "random",
                "elbo": "uncollapsed",
                "learn_inducing": True,
                "mean": "zero",
                "jitter": 1e-6,
            },
            "likelihood": {"name": "gaussian", "noise_init": 0.1},
            "estimator": {"name": "exact"},
            "kernel": {"name": "rbf", "ard": False, "lengthscale": 1.0, "outputscale": 1.0},
            "trainer": {"batch_size": batch},
        }
    )
    method = build.build_method(cfg, Tensors(x, y, x[:0], y[:0], x[:0], y[:0]), "regression")
    stage = [s for s in method.stages if s.solve is None][-1]

    def run(n):
        s = TrainerSettings(
            max_iters=n,
            lr=1e-3,
            batch_size=batch,
            stop=ConvergenceRule(window=0),
            check_every=10**9,
            eval_every=0,
            progress=False,
        )
        return train(stage.objective, stage.params, x, y, s, generator=torch.Generator().manual_seed(1))

    run(5)  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with count_cuda_syncs() as short:
        run(iters)
    if device.type == "cuda":
        torch.cuda.synchronize()
    ms = 1000 * (time.perf_counter() - t0) / iters
    with count_cuda_syncs() as long:
        run(2 * iters)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else float("nan")
    return ms, (long.count - short.count) / iters, peak


def family_step_ms(overrides: list[str], device: str, iters: int) -> float:
    """ms per step of one family's first iterative stage, through `gpdlm train`'s builder."""
    from hydra import compose, initialize_config_module

    from gpdlm_cli.prepare import prepare
    from gpdlm_cli.training import run_stages

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"device={device}", "progress=false", *overrides])
    prepared = prepare(cfg)
    data, method, settings = prepared.data, prepared.method, prepared.settings
    settings = dataclasses.replace(
        settings,
        max_epochs=None,
        eval_every=0,
        eval_every_epochs=None,
        keep_best=None,
        stop_rule="none",
        check_every=10**9,
        progress=False,
    )
    stage = [s for s in method.stages if s.solve is None][0]
    run_stages(
        [stage],
        data.x_train,
        data.y_train,
        dataclasses.replace(settings, max_iters=3),
        generator=torch.Generator().manual_seed(0),
    )
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    run_stages(
        [stage],
        data.x_train,
        data.y_train,
        dataclasses.replace(settings, max_iters=iters),
        generator=torch.Generator().manual_seed(0),
    )
    if device == "cuda":
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - t0) / iters


FAMILIES = {
    "dlm bmc-10 (doctor_visits)": ["model=dlm", "dataset=doctor_visits", "estimator=bmc", "estimator.num_samples=10"],
    "dlm ups-10 (doctor_visits)": ["model=dlm", "dataset=doctor_visits", "estimator=ups", "estimator.num_samples=10"],
    "scgd nn+linear b=64": ["model=scgd", "features=nn", "trainer.batch_size=64"],
    "minimax nn+rff b=64": ["model=minimax", "features=nn", "kernel=rff", "trainer.batch_size=64"],
    "bsgd nn+linear b=64": ["model=bsgd", "features=nn", "trainer.batch_size=64"],
    "gp_lstm exact (actuator)": ["model=gp_lstm", "dataset=sysid_actuator"],
    "gp_lstm kiss (actuator)": ["model=gp_lstm", "dataset=sysid_actuator", "model.gp.inference=kiss"],
    "ssgp (aimpeak)": ["model=ssgp", "dataset=aimpeak", "trainer=paper"],
    "svbssgp (aimpeak)": ["model=svbssgp", "dataset=aimpeak"],
}


def main(argv=None):
    p = argparse.ArgumentParser(prog="bench_gpu")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    if not torch.cuda.is_available():
        print("no CUDA device: bench_gpu measures nothing here (run it on a GPU machine)")
        return
    iters = 10 if a.quick else 30
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    print(f"GPU: {torch.cuda.get_device_name()}  CPU threads: {torch.get_num_threads()}  torch {torch.__version__}")
    print(
        f"{'model':<5} {'dtype':<8} {'M':>5} {'batch':>6} {'CPU ms':>9} {'CUDA ms':>9} {'CPU/CUDA':>9} {'syncs/step':>10} {'peak MB':>8}"
    )
    for dtype in (torch.float64, torch.float32):
        for model in ("svgp", "dlm"):
            for M in (200, 1000):
                for batch in (1000, 10000):
                    c, _, _ = sparse_step_ms(model, M, batch, dtype, cpu, max(3, iters // 3))
                    g, syncs, peak = sparse_step_ms(model, M, batch, dtype, cuda, iters)
                    print(
                        f"{model:<5} {str(dtype)[6:]:<8} {M:5d} {batch:6d} {c:9.2f} {g:9.2f} {c / g:9.2f} {syncs:10.2f} {peak:8.0f}",
                        flush=True,
                    )
    print(f"\n{'family step':<30} {'CPU ms':>9} {'CUDA ms':>9} {'CPU/CUDA':>9}")
    for name, ov in FAMILIES.items():
        c = family_step_ms(ov, "cpu", max(3, iters // 3))
        g = family_step_ms(ov, "cuda", iters)
        print(f"{name:<30} {c:9.2f} {g:9.2f} {c / g:9.2f}", flush=True)


if __name__ == "__main__":
    main()
