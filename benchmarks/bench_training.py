"""Runner overhead: gpdlm's svgp and dlm training steps vs a plain hand-written gpytorch loop.

Same data (N=20000, D=8), M=200, minibatch 1000, same dtype, Adam; both measured side by side in
one process, interleaved, median of repeats. Target: gpdlm within 1.15x of the plain loop.
Also times `gpdlm train` end to end for the default demo.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

import gpytorch
import torch

N, D, M, BATCH, ITERS, REPEATS = 20000, 8, 200, 1000, 60, 5


def make_data(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=g, dtype=dtype)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] ** 2 / (1 + x[:, 2].abs()) + 0.1 * torch.randn(N, generator=g, dtype=dtype)
    return x, y


class PlainSVGP(gpytorch.models.ApproximateGP):
    def __init__(self, Z):
        q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0], dtype=Z.dtype)
        super().__init__(gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True))
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def plain_loop(x, y, Z, objective: str):
    """The reference: what a user would write with gpytorch alone."""
    model = PlainSVGP(Z.clone()).to(x.dtype)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(x.dtype)
    cls = gpytorch.mlls.VariationalELBO if objective == "svgp" else gpytorch.mlls.PredictiveLogLikelihood
    mll = cls(lik, model, num_data=N)
    opt = torch.optim.Adam(list(model.parameters()) + list(lik.parameters()), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    perm, pos = torch.randperm(N, generator=g), 0
    t0 = time.perf_counter()
    for _ in range(ITERS):
        if pos + BATCH > N:
            perm, pos = torch.randperm(N, generator=g), 0
        idx = perm[pos:pos + BATCH]
        pos += BATCH
        opt.zero_grad()
        loss = -mll(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    return 1000 * (time.perf_counter() - t0) / ITERS


def gpdlm_loop(x, y, Z, objective: str):
    """gpdlm's objective and training loop (build_method + training.train), as `gpdlm train` runs them."""
    from hydra import compose, initialize_config_module

    from gpdlm_cli import build
    from gpdlm_cli.build import Tensors
    from gpdlm_cli.training import ConvergenceRule, TrainerSettings, train

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):  # the real config
        cfg = compose(config_name="config", overrides=[
            f"model={objective}", f"model.num_inducing={M}", "model.inducing_init=random", "objective.beta=1.0",
            f"trainer.batch_size={BATCH}", "likelihood.noise_init=0.1", f"dtype={str(x.dtype).split('.')[-1]}"])
    t = Tensors(x, y, x[:0], y[:0], x[:0], y[:0])
    method = build.build_method(cfg, t, "regression")
    with torch.no_grad():
        method.model.variational_strategy.inducing_points.copy_(Z)
    stage = method.stages[0]
    settings = TrainerSettings(max_iters=ITERS, lr=1e-3, batch_size=BATCH, stop=ConvergenceRule(window=0),
                               check_every=10, eval_every=0, progress=False)
    res = train(stage.objective, stage.params, x, y, settings, generator=torch.Generator().manual_seed(1))
    return 1000 * res.train_seconds / res.iterations


def end_to_end_demo_seconds() -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", "train", "progress=false"], cwd=d, check=True,
                       capture_output=True)
        return time.perf_counter() - t0


def main():
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(f"N={N} D={D} M={M} batch={BATCH} iters={ITERS} repeats={REPEATS} threads={torch.get_num_threads()}")
    print(f"{'objective':<8} {'dtype':<8} {'plain ms/it':>12} {'gpdlm ms/it':>12} {'ratio':>7}  target <= 1.15")
    for dtype in (torch.float32, torch.float64):
        x, y = make_data(dtype)
        Z = x[torch.randperm(N, generator=torch.Generator().manual_seed(2))[:M]].clone()
        for objective in ("svgp", "dlm"):
            plain_loop(x, y, Z, objective), gpdlm_loop(x, y, Z, objective)  # warm-up (lazy imports, allocator)
            plain, ours = [], []
            for _ in range(REPEATS):  # interleaved, so drift hits both equally
                plain.append(plain_loop(x, y, Z, objective))
                ours.append(gpdlm_loop(x, y, Z, objective))
            p, o = statistics.median(plain), statistics.median(ours)
            print(f"{objective:<8} {str(dtype)[6:]:<8} {p:12.2f} {o:12.2f} {o / p:7.3f}")
    print(f"\ngpdlm train (default demo, end to end incl. imports and MLflow): {end_to_end_demo_seconds():.1f} s")


if __name__ == "__main__":
    main()
