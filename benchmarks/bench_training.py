"""Runner overhead: gpdlm's svgp and dlm training steps vs a plain hand-written gpytorch loop.

Same data (N=20000, D=8), M=200, minibatch 1000, same dtype, Adam; both measured side by side in
one process, interleaved, median of repeats. Target: gpdlm within 1.15x of the plain loop.
Also times `gpdlm train` end to end for the default demo, and the fast protocol's hot path:

* one full-batch evaluation (objective and gradient) of the collapsed SVGP bound and of joint DLM at
  pol's shape (D = 26, M = 100, float64) for N = 500, 2,000, 4,000, with the RBF of
  ``models/kernels.py`` against the same models on gpytorch's RBF (the code before it), interleaved;
* the same evaluations through this round's hand-written backwards (``linalg.whitened_gram`` for the
  collapsed bound, ``linalg.whitened_marginal_updates`` for DLM's marginals) against the paths they
  replaced, interleaved (``evaluation_paths``);
* one L-BFGS step (history 100, 7,800 parameters: joint DLM's count on pol) of ``CompactLBFGS``
  against torch's ``LBFGS`` on a cheap objective, so the step's own cost shows.
"""

from __future__ import annotations

import contextlib
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
        idx = perm[pos : pos + BATCH]
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
        cfg = compose(
            config_name="config",
            overrides=[
                f"model={objective}",
                f"model.num_inducing={M}",
                "model.inducing_init=random",
                "objective.beta=1.0",
                f"trainer.batch_size={BATCH}",
                "likelihood.noise_init=0.1",
                f"dtype={str(x.dtype).split('.')[-1]}",
            ],
        )
    t = Tensors(x, y, x[:0], y[:0], x[:0], y[:0])
    method = build.build_method(cfg, t, "regression")
    with torch.no_grad():
        method.model.variational_strategy.inducing_points.copy_(Z)
    stage = method.stages[0]
    settings = TrainerSettings(
        max_iters=ITERS,
        lr=1e-3,
        batch_size=BATCH,
        stop=ConvergenceRule(window=0),
        check_every=10,
        eval_every=0,
        progress=False,
    )
    res = train(stage.objective, stage.params, x, y, settings, generator=torch.Generator().manual_seed(1))
    return 1000 * res.train_seconds / res.iterations


def hot_path(sizes=(500, 2000, 4000), D=26, M_hot=100, repeats=5, evals=20):
    """ms per full-batch evaluation + gradient, gpdlm's RBF against gpytorch's (module docstring)."""
    from unittest import mock

    import gpytorch

    from gpdlm_cli.estimators import ExactEstimator
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models import SparseVariationalGP, kernels
    from gpdlm_cli.objectives import DLM
    from gpdlm_cli.objectives.collapsed_elbo import CollapsedELBO

    print(f"\nhot path: ms per full-batch evaluation + gradient, D={D} M={M_hot} float64 (gpytorch RBF / gpdlm RBF)")
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        x = torch.randn(n, D, generator=g, dtype=torch.float64)
        y = torch.sin(x[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
        kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
        kernel.base_kernel.lengthscale = 3.0
        model = SparseVariationalGP(x[:M_hot].clone(), kernel, gpytorch.means.ZeroMean()).double()
        lik = GaussianLikelihood().double()
        objectives = {
            "svgp": CollapsedELBO(model, lik, n, beta=1.0),
            "dlm": DLM(model, lik, ExactEstimator(), n, beta=1.0),
        }
        params = list(model.parameters()) + list(lik.parameters())

        def ms(objective):
            t0 = time.perf_counter()
            for _ in range(evals):
                for q in params:
                    q.grad = None
                objective(x, y).backward()
            return 1000 * (time.perf_counter() - t0) / evals

        for name, objective in objectives.items():
            ms(objective)
            ref, ours = [], []
            for _ in range(repeats):
                with mock.patch.object(kernels, "_lean", lambda kernel: None):
                    ref.append(ms(objective))
                ours.append(ms(objective))
            r, o = statistics.median(ref), statistics.median(ours)
            print(f"{name:<5} N={n:<5} {r:8.2f} {o:8.2f}   ratio {o / r:.3f}")


def evaluation_paths(sizes=(500, 2000, 4000), D=26, M_hot=100, repeats=7, evals=10):
    """ms per full-batch evaluation + gradient at pol's shape, each hand-written backward against the path
    it replaced, interleaved in one process (2026-11-28):

    * svgp: ``CollapsedELBO`` through ``linalg.whitened_gram`` (A A^T and A r with one O(M^2 N) product in
      the backward) against autograd through A = L^{-1} K_uf, A A^T, A r and the per-point k_i (the
      code before, rebuilt here from ``collapsed_bound``);
    * dlm: ``SparseVariationalGP.marginals`` through ``linalg.whitened_marginal_updates`` against
      gpytorch's ``ComputePredictiveUpdates`` (the code before).
    """
    import math
    from unittest import mock

    from gpytorch.variational.variational_strategy import ComputePredictiveUpdates

    from gpdlm_cli.estimators import ExactEstimator
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models import SparseVariationalGP, sparse_variational
    from gpdlm_cli.models.linalg import safe_cholesky
    from gpdlm_cli.objectives import DLM
    from gpdlm_cli.objectives.collapsed_elbo import CollapsedELBO, collapsed_bound

    print(f"\nevaluation paths: ms per full-batch evaluation + gradient, D={D} M={M_hot} float64 (before / now)")
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        x = torch.randn(n, D, generator=g, dtype=torch.float64)
        y = torch.sin(x[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
        kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D)).double()
        kernel.base_kernel.lengthscale = 3.0
        model = SparseVariationalGP(x[:M_hot].clone() + 0.1, kernel, gpytorch.means.ConstantMean()).double()
        lik = GaussianLikelihood().double()
        params = list(model.parameters()) + list(lik.parameters())
        collapsed = CollapsedELBO(model, lik, n, beta=0.5)

        def collapsed_before(x, y):
            A = model.interpolation(x).mT
            r = y - model.prior_mean(x)
            k = (model.prior_variance(x) - (A**2).sum(0)).clamp_min(0)
            AAt = A @ A.mT
            L_B = safe_cholesky(torch.eye(M_hot, dtype=A.dtype) + AAt / (0.5 * lik.noise))
            return -collapsed_bound(A, r, k, lik.noise, 0.5, L_B, AAt)[0] / n

        dlm = DLM(model, lik, ExactEstimator(), n, beta=0.5)

        def ms(f, patch=None):
            t0 = time.perf_counter()
            with (
                mock.patch.object(sparse_variational, "whitened_marginal_updates", patch)
                if patch
                else contextlib.nullcontext()
            ):
                for _ in range(evals):
                    for q in params:
                        q.grad = None
                    f(x, y).backward()
            return 1000 * (time.perf_counter() - t0) / evals

        pairs = {
            "svgp": ((collapsed_before, None), (collapsed, None)),
            "dlm": ((dlm, ComputePredictiveUpdates.apply), (dlm, None)),
        }
        for name, (before, now) in pairs.items():
            ms(*before), ms(*now)
            ref, ours = [], []
            for _ in range(repeats):
                ref.append(ms(*before))
                ours.append(ms(*now))
            ratio = statistics.median(o / r for o, r in zip(ours, ref))
            print(
                f"{name:<5} N={n:<5} {statistics.median(ref):8.2f} {statistics.median(ours):8.2f}   ratio {ratio:.3f}"
            )
        assert math.isfinite(float(collapsed(x, y).detach()))


def lbfgs_step(p=7800, history=100, steps=100):
    """ms per L-BFGS step (full history) on a cheap objective: CompactLBFGS against torch's LBFGS."""
    from gpdlm_cli.training.lbfgs import CompactLBFGS

    g = torch.Generator().manual_seed(0)
    x0, w = torch.randn(p, generator=g, dtype=torch.float64), torch.rand(p, generator=g, dtype=torch.float64) + 0.01

    def run(cls):
        x = torch.nn.Parameter(x0.clone())
        opt = cls(
            [x],
            lr=1,
            max_iter=1,
            max_eval=26,
            history_size=history,
            line_search_fn="strong_wolfe",
            tolerance_change=0.0,
            tolerance_grad=0.0,
        )

        def closure():
            opt.zero_grad()
            value = (w * x * x).sum() + 0.1 * (x[1:] * x[:-1]).sum() + 1e-3 * (x**4).sum()
            value.backward()
            return value

        for _ in range(history + 20):  # fill the history
            opt.step(closure)
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.step(closure)
        return 1000 * (time.perf_counter() - t0) / steps

    ref, ours = [], []
    for _ in range(3):
        ref.append(run(torch.optim.LBFGS))
        ours.append(run(CompactLBFGS))
    r, o = statistics.median(ref), statistics.median(ours)
    print(
        f"\nL-BFGS step, p={p}, history {history}: torch LBFGS {r:.2f} ms, CompactLBFGS {o:.2f} ms, ratio {o / r:.3f}"
    )


def end_to_end_demo_seconds() -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gpdlm_cli.cli", "train", "progress=false"], cwd=d, check=True, capture_output=True
        )
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
    hot_path()
    evaluation_paths()
    lbfgs_step()
    print(f"\ngpdlm train (default demo, end to end incl. imports and MLflow): {end_to_end_demo_seconds():.1f} s")


if __name__ == "__main__":
    main()
