"""Per-iteration time and memory of SCGD, MINIMAX, BSGD and SVGP against the batch size b and the
feature dimension d (Shoham & Avron, Table 1).

Table 1 says O(d^3 + b d^2) per iteration for SCGD and MINIMAX and O(b^3 + b^2 d) for BSGD and SVGP
(M = b inducing points), d the dimension of the features the kernel sees. SCGD, MINIMAX and BSGD run
on random Fourier features of dimension d of 8 synthetic inputs (n = 4096); SVGP (whose M = b may
exceed the rank d of a finite kernel) on a Gaussian kernel of d-dimensional inputs tanh(x W), so all
four see d-dimensional features while the network cost C stays out. Everything goes through gpdlm's
own family builders and trainer (Adam; hooks included: SCGD's F~ refresh, MINIMAX's projections).
Reported per (method, d, b): the median ms per iteration, the peak memory of
an iteration above the memory held between iterations (CPU: the process's peak RSS, reset through
/proc/self/clear_refs; CUDA: max_memory_allocated), the growth of time with b (time / time at the
smallest b), BSGD / SCGD and SVGP / SCGD time ratios, and the crossover b from which BSGD is slower
than SCGD at each d. Ratios, not absolute times, are what compares across machines.

    python -m benchmarks rkhs                 # d in {128, 1000}, b in {16, 64, 256, 1024}, 4 timed steps each
    python -c 'import sys; sys.path[:0] = [".", "benchmarks"]; import bench_rkhs; bench_rkhs.main(sys.argv[1:])' \\
        --steps 20 --d 128 1000 2000 --b 16 64 256 1024 2048     # a longer grid
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

METHODS = ("scgd", "minimax", "bsgd", "svgp")


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def fixed_mmap_threshold(nbytes: int = 64 * 1024) -> None:
    """glibc: serve allocations >= nbytes by mmap and return them on free (a fixed threshold
    disables glibc's dynamic one, which would otherwise keep freed large blocks resident), so that
    the resident set follows the live tensors and its peak is the peak of an iteration."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, nbytes)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, nbytes)  # M_TRIM_THRESHOLD
    except OSError:
        pass


class PeakMemory:
    """Peak memory of a block above the memory held when it starts, in MB."""

    def __init__(self, device: torch.device):
        self.device = device
        self.linux = Path("/proc/self/clear_refs").exists()

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        elif self.linux:
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            self.base = _status_kb("VmRSS") * 1024
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.mb = (torch.cuda.max_memory_allocated(self.device) - self.base) / 2**20
        elif self.linux:
            self.mb = max(0.0, (_status_kb("VmHWM") * 1024 - self.base) / 2**20)
        else:
            self.mb = float("nan")


def build_method(model: str, d: int, b: int, data, seed: int = 0):
    from hydra import compose, initialize_config_module

    from gpdlm_cli import build

    overrides = [
        f"model={model}",
        f"trainer.batch_size={b}",
        "progress=false",
        "trainer.eval_every=0",
        "trainer.stop_rule=none",
        "trainer.lr=0.001",
        f"seed={seed}",
    ]
    if model == "svgp":
        overrides += ["kernel=rbf", f"model.num_inducing={b}", "model.inducing_init=random"]
    else:
        overrides += ["kernel=rff", f"kernel.num_features={d}"]
    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    method = build.build_method(cfg, data, "regression")
    settings = build.trainer_settings(cfg, data.x_train.shape[0], "regression", method=method, n_val=0)
    return method, settings


def measure(model: str, d: int, b: int, data, steps: int, warmup: int = 1) -> tuple[float, float]:
    """(median ms per iteration, peak MB of an iteration above the held memory)."""
    import dataclasses

    from gpdlm_cli.training import train

    method, settings = build_method(model, d, b, data)
    stage = method.stages[-1]
    if stage.prepare:
        stage.prepare()
    gen = torch.Generator(device=data.x_train.device).manual_seed(0)
    run = dataclasses.replace(settings, max_iters=warmup, check_every=1)
    train(stage.objective, stage.groups, data.x_train, data.y_train, run, generator=gen, hooks=stage.hooks)
    run = dataclasses.replace(settings, max_iters=steps, check_every=1)
    with PeakMemory(data.x_train.device) as mem:
        result = train(stage.objective, stage.groups, data.x_train, data.y_train, run, generator=gen, hooks=stage.hooks)
    return result.iter_ms, mem.mb


def synthetic(n: int, device: torch.device, d: int | None = None):
    """n rows of 8 standard-normal inputs (or their d-dimensional features tanh(x W)), a smooth target."""
    from gpdlm_cli.build import Tensors

    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g, dtype=torch.float64)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    y = (y - y.mean()) / y.std()
    if d is not None:
        x = torch.tanh(x @ torch.randn(8, d, generator=g, dtype=torch.float64))
    x, y = x.to(device), y.to(device)
    empty = x[:0]
    return Tensors(x, y, empty, y[:0], empty, y[:0])


def crossover(ds_b: dict[int, float]) -> str:
    """The smallest b of the grid from which BSGD / SCGD stays > 1."""
    bs = sorted(ds_b)
    for i, b in enumerate(bs):
        if all(ds_b[c] > 1 for c in bs[i:]):
            return f"b >= {b}" if i == 0 else f"between b = {bs[i - 1]} and {b}"
    return f"none up to b = {bs[-1]}"


def main(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d", type=int, nargs="+", default=[128, 1000])
    p.add_argument("--b", type=int, nargs="+", default=[16, 64, 256, 1024])
    p.add_argument("--steps", type=int, default=4, help="timed iterations per configuration (after one warm-up)")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    args = p.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    fixed_mmap_threshold()
    data = synthetic(args.n, device)
    print(
        f"device={device} threads={torch.get_num_threads()} n={args.n} steps={args.steps} "
        f"(timings measured on a loaded machine compare as ratios only)"
    )
    res: dict[tuple[str, int, int], tuple[float, float]] = {}
    print(f"{'method':<8} {'d':>5} {'b':>5} {'ms/iter':>9} {'peak MB':>8} {'x b_min':>8}")
    for d in args.d:
        for model in args.methods:
            for b in args.b:
                t0 = time.perf_counter()
                inputs = synthetic(args.n, device, d) if model == "svgp" else data
                res[(model, d, b)] = measure(model, d, b, inputs, args.steps)
                ms, mb = res[(model, d, b)]
                base = res[(model, d, args.b[0])][0]
                print(
                    f"{model:<8} {d:>5} {b:>5} {ms:9.2f} {mb:8.1f} {ms / base:8.2f}   ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
    print("\nratios of ms/iter (same run): BSGD / SCGD, SVGP / SCGD, MINIMAX / SCGD")
    for d in args.d:
        if "scgd" not in args.methods:
            break
        row = {}
        for b in args.b:
            s = res[("scgd", d, b)][0]
            parts = [f"{m}/scgd {res[(m, d, b)][0] / s:6.2f}" for m in ("bsgd", "svgp", "minimax") if m in args.methods]
            print(f"  d={d:<5} b={b:<5} " + "  ".join(parts))
            if "bsgd" in args.methods:
                row[b] = res[("bsgd", d, b)][0] / s
        if row:
            print(f"  d={d}: BSGD slower than SCGD from {crossover(row)}")


if __name__ == "__main__":
    main()
