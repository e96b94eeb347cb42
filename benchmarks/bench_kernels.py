"""Kernels on the hot path (issue 47): float32 against float64 with subnormals flushed, and the lean Matern
kernels against gpytorch's.

1. **float32 vs float64, per family** (sgpr, svgp; RBF): ms per full-batch evaluation + gradient of the
   family's own training objective (built through gpdlm's config and builder, as `gpdlm train` builds it)
   at pol's shape (N = 4,000, D = 26, M = 256; ``--n``, ``--m``), with the lengthscale set so that ~3% of
   the float32 K_uf entries are subnormal (below 1.2e-38) -- the situation of issue 47, where a learned
   kernel on kin40k/pol/elevators made float32 ~4x slower than float64. Three settings, interleaved in one
   process on one thread (the flush is per thread): float64, float32 with subnormals (``torch.
   set_flush_denormal(False)``, the code before), float32 flushed (gpdlm now: ``runtime.flush_denormals``).
   Reported: medians and the ratios float32 / float64 (target: flushed <= 1.0, i.e. float32 no slower).
2. **Matern 1/2, 3/2, 5/2: lean vs gpytorch**: first the kernel alone (K(Z, X) and its backward, M = 100,
   N = 4,000, D = 26), then ms per full-batch evaluation + gradient of sgpr's and svgp's
   objectives (float64, D = 26, M = 100, N = 2,000 and 4,000), gpdlm's lean kernel (``models.kernels``) against
   the same model on gpytorch's MaternKernel (the code before: ``kernels._lean`` patched to None),
   interleaved; the RBF's lean/gpytorch pair beside them for reference. Target: ratio < 1.

`python -m benchmarks kernels` (all of it, ~2-4 minutes on one core), or
`python benchmarks/bench_kernels.py --part dtype|matern [--n N] [--m M] [--repeats R]`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from contextlib import nullcontext
from unittest import mock

import torch

FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32
SUBNORMAL_SHARE = 0.03


def make_data(n: int, d: int, dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return x.to(dtype), ((y - y.mean()) / y.std()).to(dtype)


def build(model: str, kernel: str, x, y, m: int, lengthscale: float):
    """The family's model and its (first stage's) training objective, through gpdlm's config and builder."""
    from hydra import compose, initialize_config_module

    from gpdlm_cli import build as B
    from gpdlm_cli.build import Tensors

    dtype = str(x.dtype).split(".")[-1]
    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                f"model={model}",
                f"kernel={kernel}",
                f"model.num_inducing={m}",
                "model.inducing_init=random",
                f"kernel.lengthscale={lengthscale}",
                f"dtype={dtype}",
                "device=cpu",
                "progress=false",
                "likelihood.noise_init=0.1",
            ],
        )
    method = B.build_method(cfg, Tensors(x, y, x[:0], y[:0], x[:0], y[:0]), "regression")
    stage = method.stages[0]
    if stage.prepare is not None:
        stage.prepare()
    params = stage.params
    return method.model, stage.objective, params


def ms_per_evaluation(objective, params, x, y, evals: int) -> float:
    t0 = time.perf_counter()
    for _ in range(evals):
        for p in params:
            p.grad = None
        objective(x, y).backward()
    return 1000 * (time.perf_counter() - t0) / evals


def subnormal_lengthscale(x, m: int, share: float = SUBNORMAL_SHARE) -> float:
    """The lengthscale l at which ``share`` of the RBF values exp(-|x - z|^2 / (2 l^2)) between the first m
    rows and all rows fall below float32's smallest normal number."""
    d2 = torch.cdist(x[:m].double(), x.double()).pow(2).flatten()
    q = torch.quantile(d2[torch.randperm(d2.numel(), generator=torch.Generator().manual_seed(0))[:200_000]], 1 - share)
    return math.sqrt(float(q) / (2 * -math.log(FLOAT32_TINY)))


def dtype_part(n: int, m: int, d: int = 26, repeats: int = 5, evals: int = 3):
    from gpdlm_cli.models.kernels import dense_covariance

    print(f"\nfloat32 vs float64, RBF: ms per full-batch evaluation + gradient, N={n} D={d} M={m}, 1 thread")
    x64, y64 = make_data(n, d, torch.float64)
    ell = subnormal_lengthscale(x64, m)
    x32, y32 = x64.float(), y64.float()
    print(f"lengthscale {ell:.3f}: {SUBNORMAL_SHARE:.0%} of the float32 kernel values below {FLOAT32_TINY:.3g}")
    print(
        f"{'family':<7} {'float64':>9} {'f32 subn.':>10} {'f32 flush':>10} {'subnormal':>10}  "
        f"{'f32 subn./f64':>13} {'f32 flush/f64':>13}"
    )
    results = {}
    for family in ("sgpr", "svgp"):
        model64, obj64, par64 = build(family, "rbf", x64, y64, m, ell)
        model32, obj32, par32 = build(family, "rbf", x32, y32, m, ell)
        with torch.no_grad():  # the share of subnormal K_uf entries in float32, as the model computes them
            torch.set_flush_denormal(False)
            Z = model32.Z if hasattr(model32, "Z") else model32.variational_strategy.inducing_points
            K = dense_covariance(model32.covar_module, Z, x32)
            frac = float(((K != 0) & (K.abs() < FLOAT32_TINY)).double().mean())
        settings = {
            "float64": (obj64, par64, x64, y64, True),
            "f32 subnormal": (obj32, par32, x32, y32, False),
            "f32 flushed": (obj32, par32, x32, y32, True),
        }
        times = {k: [] for k in settings}
        for k, (obj, par, x, y, flush) in settings.items():  # warm-up
            torch.set_flush_denormal(flush)
            ms_per_evaluation(obj, par, x, y, 1)
        for _ in range(repeats):  # interleaved: drift on a shared machine hits all three alike
            for k, (obj, par, x, y, flush) in settings.items():
                torch.set_flush_denormal(flush)
                times[k].append(ms_per_evaluation(obj, par, x, y, evals))
        torch.set_flush_denormal(True)
        med = {k: statistics.median(v) for k, v in times.items()}
        slow = statistics.median(a / b for a, b in zip(times["f32 subnormal"], times["float64"]))
        fast = statistics.median(a / b for a, b in zip(times["f32 flushed"], times["float64"]))
        results[family] = (slow, fast)
        print(
            f"{family:<7} {med['float64']:9.1f} {med['f32 subnormal']:10.1f} {med['f32 flushed']:10.1f} {frac:10.2%}  "
            f"{slow:13.2f} {fast:13.2f}   float32 no slower: {fast <= 1.0}"
        )
    return results


def kernel_part(n: int = 4000, d: int = 26, m: int = 100, repeats: int = 5, evals: int = 10):
    """ms per K(Z, X) (M x N) and its backward alone: lean against gpytorch's, per kernel."""
    import gpytorch

    from gpdlm_cli.models import kernels

    print(f"\nthe kernel alone: ms per K(Z, X) + backward, N={n} D={d} M={m} float64 (gpytorch / lean)")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    Z = torch.nn.Parameter(X[:m].clone() + 0.1)
    G = torch.randn(m, n, generator=g, dtype=torch.float64)
    results = {}
    for name in ("rbf", "matern12", "matern32", "matern52"):
        base = (
            gpytorch.kernels.RBFKernel()
            if name == "rbf"
            else gpytorch.kernels.MaternKernel(nu={"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}[name])
        )
        kernel = gpytorch.kernels.ScaleKernel(base).double()
        base.lengthscale = 3.0

        def run(before: bool) -> float:
            with mock.patch.object(kernels, "_lean", lambda k: None) if before else nullcontext():
                t0 = time.perf_counter()
                for _ in range(evals):
                    Z.grad = None
                    (kernels.dense_covariance(kernel, Z, X) * G).sum().backward()
                return 1000 * (time.perf_counter() - t0) / evals

        run(True), run(False)
        ref, ours = [], []
        for _ in range(repeats):
            ref.append(run(True))
            ours.append(run(False))
        ratio = statistics.median(o / r for o, r in zip(ours, ref))
        results[name] = ratio
        print(f"{name:<9} {statistics.median(ref):9.2f} {statistics.median(ours):8.2f} {ratio:7.3f}")
    return results


def matern_part(sizes=(2000, 4000), d: int = 26, m: int = 100, repeats: int = 5, evals: int = 5):
    from gpdlm_cli.models import kernels

    print(
        f"\nlean kernels vs gpytorch's: ms per full-batch evaluation + gradient, D={d} M={m} float64 (gpytorch / lean)"
    )
    print(f"{'family':<6} {'kernel':<9} {'N':>5} {'gpytorch':>9} {'lean':>8} {'ratio':>7}")
    results = {}
    for n in sizes:
        x, y = make_data(n, d, torch.float64, seed=1)
        for family in ("sgpr", "svgp"):
            for kernel in ("rbf", "matern12", "matern32", "matern52"):
                _, obj, par = build(family, kernel, x, y, m, 3.0)

                def run(before: bool) -> float:
                    patch = mock.patch.object(kernels, "_lean", lambda k: None) if before else nullcontext()
                    with patch:
                        return ms_per_evaluation(obj, par, x, y, evals)

                run(True), run(False)
                ref, ours = [], []
                for _ in range(repeats):
                    ref.append(run(True))
                    ours.append(run(False))
                ratio = statistics.median(o / r for o, r in zip(ours, ref))
                results[(family, kernel, n)] = ratio
                print(
                    f"{family:<6} {kernel:<9} {n:5d} {statistics.median(ref):9.2f} {statistics.median(ours):8.2f} {ratio:7.3f}"
                )
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("all", "dtype", "matern"), default="all")
    p.add_argument("--n", type=int, default=4000)
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)  # the flush is per thread: one thread makes the on/off comparison exact
    torch.set_flush_denormal(True)
    print(f"torch {torch.__version__}, 1 thread, flush supported: {torch.set_flush_denormal(True)}")
    if args.part in ("all", "dtype"):
        dtype_part(args.n, args.m, repeats=args.repeats)
    if args.part in ("all", "matern"):
        kernel_part(repeats=args.repeats)
        matern_part(repeats=args.repeats)


if __name__ == "__main__":
    main()
