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

B = 1 is the batched machinery's own cost on one member (issue 41: B = 1, 8, 32, 64 per family; svgp, dlm
and the RKHS family have a batched form -- docs/sweeps.md says why the other families do not).

The RKHS family (issue 41, item 2; ``sweep.batched_rkhs``): per-member CPU time per step of B members of
SCGD / MINIMAX / BSGD (and the study's SVGP arm, M = b) on the paper's Tables 2/4 shape (2 x 128 ReLU network, linear kernel, d = 128, AdaDelta,
minibatches of b = 32) against one separate run through gpdlm's own loop (``training.train``, the fast path:
closed-form steps, ``FlatAdadelta``), both timed in the same run, round by round (``--rounds``), so load on
a shared machine falls on both sides alike. Each member has its own data (n = 4096 synthetic rows of D = 26,
pol's width, another seed), its own network seed, batch order and learning rate (0.1, 0.3, 1.0 in turn);
no evaluation, no stopping. CPU (process) time, threads pinned (``--threads``).

    python benchmarks/bench_batched.py [--models svgp,dlm] [--sizes 500,4000] [--batches 1,8,32,64]
                                       [--inducing 100] [--iters 5] [--threads 1]
                                       [--rkhs scgd,minimax,bsgd] [--rkhs-batches 1,8,32] [--rkhs-b 32]
                                       [--rkhs-steps 50] [--rounds 3]
    python benchmarks/bench_batched.py --models none --rkhs scgd,minimax     # the RKHS family only
"""

from __future__ import annotations

import argparse
import dataclasses
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


RKHS_LRS = (0.1, 0.3, 1.0)


def rkhs_member(method: str, b: int, seed: int, lr: float, n: int):
    """One RKHS run as a sweep job builds it (``build.build_method``, its stage prepared): a ``RKHSMember``
    of ``max_iters`` to be set per call."""
    from bench_rkhs_step import synthetic
    from hydra import compose, initialize_config_module

    from gpdlm_cli import build
    from gpdlm_cli.sweep.batched_rkhs import RKHSMember
    from gpdlm_cli.training import stage_settings

    overrides = [f"model={method}", "features=nn", "kernel=linear", "trainer.optimizer=adadelta"]
    overrides += [f"trainer.batch_size={b}", "progress=false", "trainer.eval_every=0", "trainer.stop_rule=none"]
    overrides += [f"trainer.lr={lr}", f"seed={seed}", "trainer.keep_best=null"]
    if method == "svgp":  # the RKHS study's SVGP arm: M = batch size
        overrides.append(f"model.num_inducing={b}")
    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    data = synthetic(n, seed=seed)
    m = build.build_method(cfg, data, "regression")
    settings = build.trainer_settings(cfg, n, "regression", method=m, n_val=0)
    stage = m.stages[-1]
    if stage.prepare:
        stage.prepare()
    if method == "svgp":
        m.model.gp._ensure_initialised()  # q(u)'s start (a run draws it at its first step)
    return RKHSMember(m, stage_settings(settings, stage, n), data.x_train, data.y_train, seed)


def rkhs_separate_seconds(member, steps: int) -> float:
    """CPU seconds of ``steps`` steps of one member through gpdlm's loop (``training.train``)."""
    from gpdlm_cli.training import train

    stage = member.method.stages[-1]
    s = dataclasses.replace(member.settings, max_iters=steps, max_epochs=None)
    t = time.process_time()
    gen = torch.Generator().manual_seed(1)
    train(stage.objective, stage.groups, member.x, member.y, s, generator=gen, hooks=stage.hooks)
    return time.process_time() - t


def rkhs_batched_seconds(members, steps: int) -> float:
    """CPU seconds of ``steps`` steps of the members together (``sweep.batched_rkhs.train_rkhs_batched``)."""
    from gpdlm_cli.sweep.batched_rkhs import train_rkhs_batched

    for m in members:
        m.settings = dataclasses.replace(m.settings, max_iters=steps, max_epochs=None)
    t = time.process_time()
    train_rkhs_batched(members)
    return time.process_time() - t


def run_rkhs(methods, batches, b: int, steps: int, rounds: int, n: int = 4096) -> dict:
    """The RKHS table (module docstring); returns {(method, B): per-member / separate ratio}."""
    print(
        f"RKHS family, CPU, {torch.get_num_threads()} thread(s): 2 x 128 ReLU network, linear kernel (d = 128), "
        f"b = {b}, AdaDelta, n = {n}; median CPU ms per step over {rounds} rounds x {steps} steps"
    )
    print(f"{'method':8} {'separate':>9} " + " ".join(f"{f'B={B}':>20}" for B in batches))
    ratios = {}
    for method in methods:
        one = rkhs_member(method, b, 0, RKHS_LRS[0], n)
        groups = {B: [rkhs_member(method, b, s, RKHS_LRS[s % 3], n) for s in range(B)] for B in batches}
        rkhs_separate_seconds(one, 5)  # warm-up
        for ms in groups.values():
            rkhs_batched_seconds(ms, 5)
        sep, bat = [], {B: [] for B in batches}
        for _ in range(rounds):  # interleaved: load falls on both sides alike
            sep.append(1000 * rkhs_separate_seconds(one, steps) / steps)
            for B, ms in groups.items():
                bat[B].append(1000 * rkhs_batched_seconds(ms, steps) / steps)
        s_ms = statistics.median(sep)
        cells = []
        for B in batches:
            per = statistics.median(bat[B]) / B
            ratios[(method, B)] = per / s_ms
            cells.append(f"{per:7.2f} ({per / s_ms:5.2f}x)")
        print(f"{method:8} {s_ms:9.2f} " + " ".join(f"{c:>20}" for c in cells), flush=True)
    print("cells: per-member ms per step (per-member batched time / separate time)")
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="svgp,dlm")
    ap.add_argument("--sizes", default="500,4000")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--inducing", type=int, default=100)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--devices", default="cpu,cuda", help="cpu, cuda or both (cuda is skipped where absent)")
    ap.add_argument(
        "--rkhs", default="scgd,minimax", help="RKHS methods (scgd, minimax, bsgd, svgp: the study's SVGP arm) or none"
    )
    ap.add_argument("--rkhs-batches", default="1,8,32")
    ap.add_argument("--rkhs-b", type=int, default=32, help="the RKHS minibatch size")
    ap.add_argument("--rkhs-steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    models = [] if a.models == "none" else a.models.split(",")
    sizes = [int(s) for s in a.sizes.split(",")]
    unknown = [m for m in models if m not in ("svgp", "dlm")]
    if unknown:
        raise SystemExit(f"bench_batched: error: {unknown[0]} has no batched form (svgp and dlm do; docs/sweeps.md)")
    batches = [int(b) for b in a.batches.split(",")]
    devices = a.devices.split(",")
    if "cpu" in devices and models:
        run(torch.device("cpu"), models, sizes, batches, a.inducing, a.iters)
    if "cuda" in devices and torch.cuda.is_available() and models:
        run(torch.device("cuda"), models, sizes, batches, a.inducing, a.iters)
    if a.rkhs != "none":
        rkhs = [int(B) for B in a.rkhs_batches.split(",")]
        run_rkhs(a.rkhs.split(","), rkhs, a.rkhs_b, a.rkhs_steps, a.rounds)


if __name__ == "__main__":
    main()
