"""Cost and accuracy of the log E_q[p(y|f)] gradient estimators, through a real sparse GP.

One "gradient evaluation" is what a DLM training step spends on its data term: the marginals
(mu, var) of a ``SparseVariationalGP`` (M = 100 inducing points) on a minibatch, the estimator's
``log_marginal``, and the backward pass into every model parameter. The table gives milliseconds per
evaluation (the best of several repetitions, the estimators interleaved, so that background load on
a shared machine distorts the comparison as little as possible)
for each estimator, minibatch size and L (samples; nodes for quadrature), the ratios uPS/bMC and
quadrature-20/bMC-20 measured in the same run, and the error of the parameter gradient against
200-node adaptive quadrature.

    python benchmarks/bench_estimators.py                       # poisson_exp, float32
    python benchmarks/bench_estimators.py --dtype float64 --likelihood probit --envelopes tight paper
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpdlm_cli.estimators import (  # noqa: E402
    BMCEstimator,
    QuadratureEstimator,
    SmoothBMCEstimator,
    UPSEstimator,
)
from gpdlm_cli.likelihoods import LIKELIHOODS  # noqa: E402
from gpdlm_cli.models import SparseVariationalGP  # noqa: E402

NUM_INDUCING = 100
NUM_INPUTS = 4


def make_problem(likelihood: str, n: int, dtype, seed: int = 0):
    """Synthetic data from a smooth latent function and an SVGP with a partly fitted q(u)."""
    import gpytorch

    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, NUM_INPUTS, generator=g, dtype=dtype)
    f = 1.5 * torch.sin(3 * x[:, 0]) + x[:, 1] - 0.5 + 0.3 * torch.randn(n, generator=g, dtype=dtype)
    lik = LIKELIHOODS[likelihood]()
    if likelihood.startswith("poisson"):
        y = torch.poisson(torch.exp(f + 1.0), generator=g)
    elif likelihood in ("probit", "logit"):
        y = (torch.rand(n, generator=g, dtype=dtype) < torch.special.ndtr(2 * f)).to(dtype)
    else:
        y = f + 0.3 * torch.randn(n, generator=g, dtype=dtype)
    lik = lik.to(dtype)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=NUM_INPUTS))
    kernel.base_kernel.lengthscale = 0.5
    model = SparseVariationalGP(x[:NUM_INDUCING].clone(), kernel, gpytorch.means.ZeroMean()).to(dtype)
    with torch.no_grad():  # a q(u) "in training": random mean, shrunken covariance
        model.q_u.variational_mean.copy_(0.7 * torch.randn(NUM_INDUCING, generator=g, dtype=dtype))
        model.q_u.chol_variational_covar.copy_(0.3 * torch.eye(NUM_INDUCING, dtype=dtype))
    model.variational_strategy.variational_params_initialized.fill_(1)
    return model, lik, x, y


def data_term_grad(model, lik, est, x, y):
    """One gradient evaluation of the DLM data term; returns the flattened parameter gradient."""
    params = [p for p in list(model.parameters()) + list(lik.parameters()) if p.requires_grad]
    for p in params:
        p.grad = None
    mu, var = model.marginals(x)
    loss = -est.log_marginal(lik, y, mu, var).mean()
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])


def estimators_for(L: int, envelopes, smooth: bool):
    out = {
        "quadrature": QuadratureEstimator(num_nodes=L),
        "bmc": BMCEstimator(num_samples=L),
    }
    if smooth:
        out["smooth_bmc"] = SmoothBMCEstimator(num_samples=L)
    for env in envelopes:
        out["ups" if env == "tight" else f"ups_{env}"] = UPSEstimator(num_samples=L, envelope=env)
    for i, est in enumerate(out.values()):
        est.seed(i, "cpu")
    return out


def time_configs(model, lik, x, y, ests: dict, reps: int) -> dict[str, float]:
    """Best-of-reps ms per gradient evaluation of each estimator, interleaved over repetitions."""
    times = {k: [] for k in ests}
    for k, est in ests.items():  # warm-up
        data_term_grad(model, lik, est, x, y)
    for _ in range(reps):
        for k, est in ests.items():
            t0 = time.perf_counter()
            data_term_grad(model, lik, est, x, y)
            times[k].append(1000 * (time.perf_counter() - t0))
    return {k: min(v) for k, v in times.items()}


def gradient_errors(model, lik, x, y, draws: int) -> dict[str, float]:
    """Relative error ||g - g_ref|| / ||g_ref|| of the parameter gradient (RMS over draws)."""
    ref = data_term_grad(model, lik, QuadratureEstimator(num_nodes=200), x, y)
    specs = {
        "quadrature-20": (QuadratureEstimator(num_nodes=20), 1),
        "bmc-20": (BMCEstimator(num_samples=20), draws),
        "bmc-100": (BMCEstimator(num_samples=100), draws),
        "ups-10": (UPSEstimator(num_samples=10), draws),
        "ups-100": (UPSEstimator(num_samples=100), draws),
    }
    out = {}
    for name, (est, n) in specs.items():
        est.seed(123, "cpu")
        errs = [float((data_term_grad(model, lik, est, x, y) - ref).norm() / ref.norm()) for _ in range(n)]
        out[name] = math.sqrt(sum(e * e for e in errs) / n)
        if n > 1:  # the bias part: error of the gradient averaged over the draws
            est.seed(123, "cpu")
            mean = sum(data_term_grad(model, lik, est, x, y) for _ in range(n)) / n
            out[name + " (mean of draws)"] = float((mean - ref).norm() / ref.norm())
    return out


def run(likelihood: str, dtype, batches, samples, reps: int, envelopes, smooth: bool, draws: int) -> None:
    model, lik, x_all, y_all = make_problem(likelihood, max(batches), dtype)
    print(
        f"\n== likelihood={likelihood} dtype={str(dtype).replace('torch.', '')} M={NUM_INDUCING} "
        f"threads={torch.get_num_threads()}: ms per gradient evaluation (best of {reps})"
    )
    header = None
    for n in batches:
        x, y = x_all[:n], y_all[:n]
        for L in samples:
            ests = estimators_for(L, envelopes, smooth)
            ms = time_configs(model, lik, x, y, ests, reps)
            if header is None:
                header = f"{'batch':>6} {'L':>4} " + " ".join(f"{k:>12}" for k in ms) + f" {'ups/bmc':>8}"
                print(header)
            ups = ms.get("ups", float("nan"))
            print(f"{n:>6} {L:>4} " + " ".join(f"{v:>12.2f}" for v in ms.values()) + f" {ups / ms['bmc']:>8.2f}")
            if "ups" in ests:
                stats = ests["ups"].statistics()
                print(
                    f"{'':>12}ups: acceptance {stats['ups_acceptance_rate']:.3f}, draws/sample "
                    f"{stats['ups_draws_per_sample']:.2f}, fallback {stats['ups_fallback_fraction']:.4f}"
                )
        q20 = time_configs(
            model,
            lik,
            x,
            y,
            {"quadrature-20": QuadratureEstimator(num_nodes=20), "bmc-20": BMCEstimator(num_samples=20)},
            reps,
        )
        print(
            f"{n:>6}   quadrature(20 nodes) {q20['quadrature-20']:.2f} ms / bmc(20 samples) {q20['bmc-20']:.2f} ms"
            f" = {q20['quadrature-20'] / q20['bmc-20']:.2f}"
        )
    n = min(batches)
    errs = gradient_errors(model, lik, x_all[:n], y_all[:n], draws)
    print(
        f"gradient error vs 200-node adaptive quadrature (batch {n}, relative L2 over all parameters; "
        f"RMS over {draws} draws for the stochastic ones):"
    )
    for k, v in errs.items():
        print(f"  {k:>28}: {v:.2e}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--likelihood", default="poisson_exp", choices=sorted(LIKELIHOODS))
    ap.add_argument("--dtype", nargs="+", default=["float32"], choices=["float32", "float64"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1000, 6000])
    ap.add_argument("--samples", nargs="+", type=int, default=[1, 10, 100])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--envelopes", nargs="+", default=["tight"], choices=list(UPSEstimator.ENVELOPES))
    ap.add_argument("--smooth", action="store_true", help="also time smooth_bmc (costs as bmc)")
    ap.add_argument("--draws", type=int, default=20, help="draws for the stochastic gradient errors")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    for dt in args.dtype:
        run(
            args.likelihood,
            getattr(torch, dt),
            args.batches,
            args.samples,
            args.reps,
            args.envelopes,
            args.smooth,
            args.draws,
        )


if __name__ == "__main__":
    main()
