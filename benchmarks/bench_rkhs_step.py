"""The RKHS family's small step (issue 41): ms per step and ATen operations per step of SCGD, MINIMAX and BSGD
on the paper's network features (2 x 128 ReLU) with the linear kernel (Tables 2/4), fast path against the
reference path in the same run, threads pinned.

    python benchmarks/bench_rkhs_step.py                         # b = 32, 64, 128; all three methods
    python benchmarks/bench_rkhs_step.py --b 32 --methods scgd --compile   # + torch.compile of the fast step

*Reference* is the path before issue 41: the objective in autograd (``fused=False``: ``reference_step``) and
torch's ``Adadelta``; *fast* is the default (SCGD's and MINIMAX's closed-form steps, ``FlatAdadelta``; BSGD
only gets the flat optimiser). Both go through gpdlm's own builder and trainer (``training.train``: the loop,
its loss buffer, its convergence checks every 10 steps, the family's hooks: SCGD's F~ refresh, MINIMAX's
projections), on n = 4096 synthetic rows of D = 26 inputs (pol's width), AdaDelta, lr 0.3, float64. Timing:
``--rounds`` rounds, each timing ``--steps`` steps of every (method, b, path) in turn, so load on a shared
machine falls on both paths alike; the table gives the median over rounds of CPU ms per step (process time: on a shared machine
the wall clock also counts other jobs) and the ratio
fast / reference of the medians. ATen operations per step are counted by torch.profiler over 10 steps (every
aten:: event, nested ones included).

``--loop-overhead``: only the training loop's own cost per step (``loop_overhead``: gpdlm's loop against a
bare loop of the same objective, optimiser and hook, alternating rounds).

``--projection``: only MINIMAX's projection of A onto {A >= s2 I} at d = 128 (what ``Minimax.project`` does once
``cholesky_ex`` has found A infeasible): ``torch.linalg.eigh`` and the clamped rebuild V max(lambda, s2) V^T, against
a partial eigendecomposition (LAPACK ``syevr`` through ``scipy.linalg.eigh(subset_by_value=...)``: only the k
eigenpairs below s2) and the rank-k correction A + V_k (s2 - lambda_k) V_k^T, on a matrix with k = 4 eigenvalues
below s2; CPU ms per projection, alternating rounds, and the two results' largest difference.

``--compile``: also the fast path with the objective's forward wrapped by ``torch.compile`` (inductor, CPU),
reporting its compile time (the first steps) separately; it is kept out of gpdlm where it does not pay.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import torch

METHODS = ("scgd", "minimax", "bsgd", "svgp")


def synthetic(n: int = 4096, D: int = 26, seed: int = 0):
    from gpdlm_cli.build import Tensors

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=g, dtype=torch.float64)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    y = (y - y.mean()) / y.std()
    empty = x[:0]
    return Tensors(x, y, empty, y[:0], empty, y[:0])


class Runner:
    """One (method, b, path): a built method, its stage prepared, and a trainer that runs k more steps."""

    def __init__(self, method: str, b: int, fast: bool, data, compile_step: bool = False):
        from hydra import compose, initialize_config_module

        from gpdlm_cli import build

        overrides = [
            f"model={method}",
            "features=nn",
            "kernel=linear",
            "trainer.optimizer=adadelta",
            f"trainer.batch_size={b}",
            "progress=false",
            "trainer.eval_every=0",
            "trainer.stop_rule=none",
            "trainer.lr=0.3",
            "seed=0",
        ] + ([f"model.num_inducing={b}"] if method == "svgp" else [])
        with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        n = data.x_train.shape[0]
        self.m = build.build_method(cfg, data, "regression")
        self.settings = build.trainer_settings(cfg, n, "regression", method=self.m, n_val=0)
        self.stage = self.m.stages[-1]
        if hasattr(self.stage.objective, "fused"):
            self.stage.objective.fused = fast
        if self.stage.prepare:
            self.stage.prepare()
        self.options = {**self.settings.optimizer_options, "flat": fast}
        self.data = data
        self.gen = torch.Generator().manual_seed(1)
        self.objective = self.stage.objective
        self.compile_seconds = None
        if compile_step:
            self.objective = torch.compile(self.stage.objective)

    def run(self, steps: int) -> float:
        """CPU seconds of this process for ``steps`` steps through the trainer (one call: its set-up included,
        as in a run). CPU time, not wall time: on a shared machine the wall clock counts other jobs' time."""
        from gpdlm_cli.training import train

        s = dataclasses.replace(self.settings, max_iters=steps, max_epochs=None, optimizer_options=self.options)
        t = time.process_time()
        train(
            self.objective,
            self.stage.groups,
            self.data.x_train,
            self.data.y_train,
            s,
            generator=self.gen,
            hooks=self.stage.hooks,
        )
        return time.process_time() - t

    def aten_ops(self, steps: int = 10) -> float:
        with torch.profiler.profile() as prof:
            self.run(steps)
        return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) / steps


def loop_overhead(steps: int = 200, rounds: int = 5, n: int = 4096) -> tuple[float, float]:
    """(gpdlm's loop, a bare loop) CPU ms per fast SCGD step at b = 32: the same objective, ``FlatAdadelta`` and
    F~ refresh, the bare loop without the trainer's bookkeeping (loss buffer, checks, callbacks, signal guard);
    rounds alternate. The difference is the training loop's own cost per step."""
    from gpdlm_cli.training.optim import make_optimizer

    data = synthetic(n)
    r = Runner("scgd", 32, True, data)
    r.run(20)
    obj, x, y = r.stage.objective, data.x_train, data.y_train
    opt = make_optimizer("adadelta", [{"params": ps, "lr": 0.3} for ps in r.stage.groups.values()])
    g = torch.Generator().manual_seed(0)

    def bare(k: int) -> float:
        t = time.process_time()
        perm = torch.randperm(n, generator=g)
        for i in range(k):
            lo = (i * 32) % (n - 32)
            idx = perm[lo : lo + 32]
            opt.zero_grad(set_to_none=True)
            obj(x[idx], y[idx]).backward()
            opt.step()
            obj.after_step(i + 1, 0)
        return 1000 * (time.process_time() - t) / k

    loop, plain = [], []
    for _ in range(rounds):
        loop.append(1000 * r.run(steps) / steps)
        plain.append(bare(steps))
    return statistics.median(loop), statistics.median(plain)


def projection(d: int = 128, k: int = 4, reps: int = 200, rounds: int = 5) -> tuple[float, float, float]:
    """(full, partial, max |difference|): CPU ms per projection of a d x d A with k eigenvalues below s2 (module
    docstring, ``--projection``)."""
    import numpy as np
    import scipy.linalg

    g = torch.Generator().manual_seed(0)
    X = torch.randn(d, 2 * d, generator=g, dtype=torch.float64)
    A = X @ X.T / (2 * d) + 0.05 * torch.eye(d, dtype=torch.float64)
    s2 = float(torch.linalg.eigvalsh(A)[k])  # k eigenvalues strictly below

    def full() -> torch.Tensor:
        lam, V = torch.linalg.eigh(A)
        return (V * lam.clamp_min(s2)) @ V.T

    def partial() -> torch.Tensor:
        lam, V = scipy.linalg.eigh(A.numpy(), subset_by_value=(-np.inf, s2), driver="evr", check_finite=False)
        V = torch.from_numpy(V)
        return A + (V * (s2 - torch.from_numpy(lam))) @ V.T

    def timed(f) -> float:
        t = time.process_time()
        for _ in range(reps):
            f()
        return 1000 * (time.process_time() - t) / reps

    a, b = [], []
    for _ in range(rounds):
        a.append(timed(full))
        b.append(timed(partial))
    return statistics.median(a), statistics.median(b), float((full() - partial()).abs().max())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=list(METHODS[:3]), choices=METHODS)
    p.add_argument("--b", type=int, nargs="+", default=[32, 64, 128])
    p.add_argument("--steps", type=int, default=100, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the fast objective")
    p.add_argument("--no-ops", action="store_true", help="skip the profiler's operation counts")
    p.add_argument("--loop-overhead", action="store_true", help="only: gpdlm's loop against a bare loop (SCGD, b 32)")
    p.add_argument("--projection", action="store_true", help="only: MINIMAX's projection, full eigh against syevr")
    args = p.parse_args(argv)
    if args.projection:
        torch.set_num_threads(args.threads)
        full, part, diff = projection(rounds=args.rounds)
        print(
            f"MINIMAX projection, d = 128, k = 4 below s2, CPU ms: eigh + rebuild {full:.2f}, syevr + rank-k "
            f"{part:.2f} (ratio {part / full:.2f}); max |difference| {diff:.1e}"
        )
        return
    if args.loop_overhead:
        torch.set_num_threads(args.threads)
        loop, bare = loop_overhead(args.steps, args.rounds, args.n)
        print(
            f"SCGD b = 32, CPU ms per step: gpdlm's loop {loop:.2f}, bare loop {bare:.2f}, loop's own {loop - bare:.2f}"
        )
        return
    os.environ.setdefault("MPLBACKEND", "Agg")
    torch.set_num_threads(args.threads)
    data = synthetic(args.n)
    paths = ["reference", "fast"] + (["compiled"] if args.compile else [])
    runners = {}
    for method in args.methods:
        for b in args.b:
            for path in paths:
                r = Runner(method, b, path != "reference", data, compile_step=path == "compiled")
                t = time.perf_counter()
                r.run(5)  # warm-up (the compiled path compiles here)
                if path == "compiled":
                    r.compile_seconds = time.perf_counter() - t
                runners[(method, b, path)] = r
    times: dict = {k: [] for k in runners}
    for _ in range(args.rounds):
        for key, r in runners.items():
            times[key].append(1000 * r.run(args.steps) / args.steps)
    print(
        f"threads={torch.get_num_threads()} n={args.n} D=26 network 2 x 128 linear kernel, AdaDelta, "
        f"{args.rounds} rounds x {args.steps} steps (median CPU ms/step; ratios of medians in the same run)"
    )
    head = f"{'method':<8} {'b':>4} {'ref ms':>8} {'fast ms':>8} {'fast/ref':>8}"
    if not args.no_ops:
        head += f" {'ref ops':>8} {'fast ops':>8}"
    if args.compile:
        head += f" {'comp ms':>8} {'comp/ref':>8} {'compile s':>9}"
    print(head)
    for method in args.methods:
        for b in args.b:
            ref = statistics.median(times[(method, b, "reference")])
            fast = statistics.median(times[(method, b, "fast")])
            line = f"{method:<8} {b:>4} {ref:8.2f} {fast:8.2f} {fast / ref:8.2f}"
            if not args.no_ops:
                ops = [runners[(method, b, path)].aten_ops() for path in ("reference", "fast")]
                line += f" {ops[0]:8.0f} {ops[1]:8.0f}"
            if args.compile:
                comp = statistics.median(times[(method, b, "compiled")])
                line += f" {comp:8.2f} {comp / ref:8.2f} {runners[(method, b, 'compiled')].compile_seconds:9.1f}"
            print(line, flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
