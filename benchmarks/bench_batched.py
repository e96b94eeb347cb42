"""Batched configurations (issue 21, item 4; ``sweep.batched=true``): per-member time per Adam iteration
of a batch of B sparse variational GPs (``sweep.batched_model``) against one separate model trained by
gpdlm's own loop (``training.train``), as a sweep would train each job.

Members are what a sweep batches: one model and training size, each member with its own data
(another seed) and beta. Data: y = sin(x_0) + x_1^2 / 2 / (1 + |x_2|) + noise, D = 8, float64,
inducing inputs drawn from the rows (``inducing_init=random``: k-means is per job and not timed).
Both sides: the same objective (svgp: the collapsed ELBO; dlm: the closed-form log-loss DLM), the
full batch, no stopping, no evaluation; the first iterations are a warm-up, then the median of
``REPEATS`` timings of ``ITERS`` iterations. Prints ms per iteration and the ratio per-member batched
time / separate time (below 1: batching pays). On CPU at the threads given (default 1), and on the
GPU too when ``torch.cuda.is_available()`` (absolute times with the GPU's name).

B = 1 is the batched machinery's own cost on one member (issue 41: B = 1, 8, 32, 64 per family; only
svgp and dlm have a batched form -- docs/sweeps.md says why the other families do not).

    python benchmarks/bench_batched.py [--models svgp,dlm] [--sizes 500,4000] [--batches 1,8,32,64]
                                       [--inducing 100] [--iters 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

REPEATS, WARMUP = 3, 2


def make_member(model: str, n: int, m: int, seed: int, beta: float, device, dtype=torch.float64):
    from omegaconf import OmegaConf

    from gpdlm_cli import build
    from gpdlm_cli.build import Tensors
    from gpdlm_cli.sweep.batched_model import Member

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g, dtype=dtype)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] ** 2 / (1 + x[:, 2].abs()) + 0.1 * torch.randn(n, generator=g, dtype=dtype)
    x, y = x.to(device), y.to(device)
    cfg = OmegaConf.create(
        {
            "seed": seed,
            "objective": {"beta": beta},
            "features": {"name": "none"},
            "trainer": {"batch_size": None},
            "model": {
                "name": model,
                "variant": "joint",
                "num_inducing": m,
                "inducing_init": "random",
                "learn_inducing": True,
                "mean": "zero",
                "jitter": 1e-6,
                "elbo": "auto",
                "baseline_estimator": "deterministic",
            },
            "likelihood": {"name": "gaussian", "noise_init": 0.1},
            "estimator": {"name": "auto"},
            "kernel": {"name": "rbf", "ard": False, "lengthscale": 1.0, "outputscale": 1.0},
        }
    )
    method = build.build_method(cfg, Tensors(x, y, x[:0], y[:0], x[:0], y[:0]), "regression")
    method.model._ensure_initialised()
    stage = method.stages[0]
    kind = "collapsed_elbo" if model == "svgp" else "log_loss"
    return Member(kind, method.model, method.likelihood, x, y, beta, stage.groups, list(stage.hooks)), stage


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def separate_ms(model, n, m, iters, device) -> float:
    """ms per iteration of one model in gpdlm's loop (``training.train``, Adam, full batch)."""
    from gpdlm_cli.training import TrainerSettings, train

    member, stage = make_member(model, n, m, 0, 1.0, device)
    settings = TrainerSettings(
        max_iters=WARMUP, lr=0.1, eval_every=0, progress=False, stop_rule="none", check_every=iters
    )
    gen = torch.Generator().manual_seed(0)
    train(stage.objective, stage.groups, member.x, member.y, settings, generator=gen)
    times = []
    for _ in range(REPEATS):
        s = TrainerSettings(max_iters=iters, lr=0.1, eval_every=0, progress=False, stop_rule="none", check_every=iters)
        _sync(device)
        t0 = time.perf_counter()
        train(stage.objective, stage.groups, member.x, member.y, s, generator=gen)
        _sync(device)
        times.append(1000 * (time.perf_counter() - t0) / iters)
    return statistics.median(times)


def batched_ms(model, n, m, b, iters, device) -> float:
    """ms per iteration of a batch of ``b`` members (``sweep.batched_model.train_batched``)."""
    from gpdlm_cli.sweep.batched_model import train_batched

    members = [make_member(model, n, m, seed, (0.5, 1.0, 2.0, 4.0)[seed % 4], device)[0] for seed in range(b)]
    train_batched(members, max_iters=WARMUP, lr=0.1, stop_rule="none", check_every=iters)
    times = []
    for _ in range(REPEATS):
        _sync(device)
        t0 = time.perf_counter()
        train_batched(members, max_iters=iters, lr=0.1, stop_rule="none", check_every=iters)
        _sync(device)
        times.append(1000 * (time.perf_counter() - t0) / iters)
    return statistics.median(times)


def run(device, models, sizes, batches, m, iters) -> None:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"device: {name}; M = {m}, float64, ms per Adam iteration (median of {REPEATS} x {iters})")
    print(f"{'model':6} {'N':>6} {'separate':>10} " + " ".join(f"{f'B={b}':>22}" for b in batches))
    for model in models:
        for n in sizes:
            sep = separate_ms(model, n, m, iters, device)
            cells = []
            for b in batches:
                ms = batched_ms(model, n, m, b, iters, device)
                cells.append(f"{ms:9.1f} ({ms / b / sep:5.2f}x)")
            print(f"{model:6} {n:>6} {sep:10.2f} " + " ".join(f"{c:>22}" for c in cells), flush=True)
    print("cells: batch ms per iteration (per-member batched time / separate time)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="svgp,dlm")
    ap.add_argument("--sizes", default="500,4000")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--inducing", type=int, default=100)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--devices", default="cpu,cuda", help="cpu, cuda or both (cuda is skipped where absent)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    models, sizes = a.models.split(","), [int(s) for s in a.sizes.split(",")]
    unknown = [m for m in models if m not in ("svgp", "dlm")]
    if unknown:
        raise SystemExit(f"bench_batched: error: {unknown[0]} has no batched form (svgp and dlm do; docs/sweeps.md)")
    batches = [int(b) for b in a.batches.split(",")]
    devices = a.devices.split(",")
    if "cpu" in devices:
        run(torch.device("cpu"), models, sizes, batches, a.inducing, a.iters)
    if "cuda" in devices and torch.cuda.is_available():
        run(torch.device("cuda"), models, sizes, batches, a.inducing, a.iters)


if __name__ == "__main__":
    main()
