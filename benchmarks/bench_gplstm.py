"""GP-LSTM scaling and convergence (GP-LSTM paper, Sec. 4.2, 5.2.1, 5.2.4), as ratios measured in one run.

1. **GP cost per epoch against n**: one NLML value and its gradient with respect to the embedding
   and the hyperparameters -- the GP algebra of a kernel refresh -- on a fixed 2-D embedding of n
   windows, for exact inference (dense Cholesky, O(n^3)), dense KISS (W K_UU W^T formed, Cholesky:
   the default below ``model.gp.kiss_dense_below`` = 2,000 windows) and KISS on the structured
   operator with 100 and 200 grid points per dimension (preconditioned CG + stochastic Lanczos,
   ~O(n + m log m); the default from 2,000 windows, forced here at every n). Reported: seconds and
   the ratio to the smallest n; exact should grow ~8x per doubling, structured KISS ~2x; and how far
   the structured path's NLML/N and dL/dh are from dense KISS on the same kernel.
2. **Prediction time per test point against n**: ``marginals_all`` after ``condition`` on n windows,
   means and variances of 2,000 test points. Exact and dense KISS: O(n) per point after a Cholesky;
   structured KISS: nearly constant (gpytorch's interpolated mean cache and LOVE variances).
3. **Full batch against Algorithm 2** on Actuator regression (the ``gplstm_convergence`` setting,
   16 units, seed 0): training seconds until the train NLML per window first reaches the target
   max(final NLML of both) + 0.02, from the learning curves evaluated every epoch.
"""

from __future__ import annotations

import time

import gpytorch
import torch


def _embedding(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = torch.rand(n, 2, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(3 * h).sum(1) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return h, y


def _model(inference: str, grid: int = 100, dense_below: int = 0):
    """A GP on the embedding itself (an identity network: h = relu(x) - relu(-x)), RBF with
    lengthscale 0.3, noise 0.01; KISS densely below ``dense_below`` windows (0: always structured)."""
    from gpdlm_cli.features.recurrent import FeatureMap
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models.deep_kernel import DeepKernelGP

    net = FeatureMap("narx", None, 2, units=4, layers=1, out_dim=2).double()
    eye = torch.eye(2, dtype=torch.float64)
    with torch.no_grad():
        net.body[0].weight.copy_(torch.cat([eye, -eye]))
        net.body[0].bias.zero_()
        net.head.weight.copy_(torch.cat([eye, -eye], 1))
        net.head.bias.zero_()
    lik = GaussianLikelihood(noise_init=0.01, noise_min=1e-4)
    model = DeepKernelGP(
        net,
        [gpytorch.kernels.RBFKernel(ard_num_dims=2)],
        [lik],
        inference=inference,
        grid_size=grid,
        kiss_dense_below=dense_below,
    )
    base = model.gps[0].covar_module.base_kernel
    (base.base_kernel if inference == "kiss" else base).lengthscale = 0.3
    return model


def refresh(inference: str, n: int, grid: int = 100, dense_below: int = 0):
    """Seconds of one NLML + gradient (w.r.t. the embedding and theta) on n windows, its NLML/N and
    dL/dh (probes seeded)."""
    model = _model(inference, grid, dense_below)
    h, y = _embedding(n)
    model.fit_grid(h)
    leaf = h.clone().requires_grad_(True)
    t0 = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        value = model.nlml(leaf, y) / n
        value.backward()
    return time.perf_counter() - t0, float(value), leaf.grad


def prediction_ms_per_point(inference: str, n: int, grid: int = 100, dense_below: int = 0, n_test: int = 2000) -> float:
    """Milliseconds per test point of ``marginals_all`` (means and variances) after ``condition`` on n
    windows, the caches built first (dense: Cholesky; structured: gpytorch's mean cache and LOVE)."""
    model = _model(inference, grid, dense_below)
    h, y = _embedding(n)
    ht, _ = _embedding(n_test, seed=1)
    model.condition(h, y)
    model.marginals_all(ht[:10] * 0.9)
    t0 = time.perf_counter()
    model.marginals_all(ht * 0.9)
    return 1000 * (time.perf_counter() - t0) / n_test


def convergence():
    from hydra import compose, initialize_config_module

    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking import NullTracker

    out = {}
    for algorithm in ("full", "delayed"):
        with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
            cfg = compose(
                config_name="config",
                overrides=[
                    "+experiment=gplstm_convergence",
                    "model.network.units=16",
                    "seed=0",
                    f"model.training.algorithm={algorithm}",
                    "progress=false",
                    "tracking.enabled=false",
                ],
            )
        tracker = NullTracker()
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            m = run_train(cfg, tmp, tracker=tracker)
        steps_per_epoch = 1 if algorithm == "full" else 360 // 64
        curve = [
            (s / steps_per_epoch, v)
            for s, v in tracker.steps["train_nlml"]
            if s <= cfg.trainer.max_epochs * steps_per_epoch
        ]
        out[algorithm] = (curve, m["epoch_seconds"], m["test_rmse"])
    target = max(min(v for _, v in c) for c, _, _ in out.values()) + 0.02
    print(f"target train NLML per window: {target:.4f}")
    times = {}
    for algorithm, (curve, epoch_s, rmse) in out.items():
        epoch = next((e for e, v in curve if v <= target), float("nan"))
        times[algorithm] = epoch * epoch_s
        print(
            f"{algorithm:<8} epochs to target {epoch:6.1f}  s/epoch {epoch_s:7.3f}  seconds {times[algorithm]:7.2f}  "
            f"final test RMSE {rmse:.4f}"
        )
    print(f"Algorithm 2 / full batch time to target: {times['delayed'] / times['full']:.2f}")


def main():
    torch.set_num_threads(1)
    print("1. GP algebra of one refresh (NLML + gradient), seconds and ratio to n = 500; KISS on the structured")
    print("   operator against dense KISS (the same kernel): |NLML/N difference| and dL/dh cosine")
    sizes, dense_sizes = (500, 1000, 2000, 4000), (500, 1000, 2000)
    dense = {n: refresh("kiss", n, 100, dense_below=10**9) for n in dense_sizes}
    for label, inference, grid, below in (
        ("exact", "exact", 100, 0),
        ("kiss-100 dense", "kiss", 100, 10**9),
        ("kiss-100", "kiss", 100, 0),
        ("kiss-200", "kiss", 200, 0),
    ):
        runs = {
            n: dense[n] if below and n in dense else refresh(inference, n, grid, below)
            for n in (dense_sizes if below else sizes)
        }
        t0 = runs[sizes[0]][0]
        cells = []
        for n, (secs, value, grad) in runs.items():
            cell = f"n={n}: {secs:7.3f}s ({secs / t0:5.1f}x)"
            if inference == "kiss" and not below and n in dense:
                _, v_d, g_d = dense[n]
                cos = float((grad * g_d).sum() / grad.norm() / g_d.norm())
                cell += f" [dNLML/N {abs(value - v_d):.1e}, cos {cos:.2f}]"
            cells.append(cell)
        print(f"{label:<15} " + "  ".join(cells), flush=True)
    print("2. prediction ms per test point (means and variances of 2,000 points)")
    for label, inference, below, ns in (
        ("exact", "exact", 0, sizes),
        ("kiss-100 dense", "kiss", 10**9, dense_sizes),
        ("kiss-100", "kiss", 0, sizes),
    ):
        ms = [prediction_ms_per_point(inference, n, 100, below) for n in ns]
        print(f"{label:<15} " + "  ".join(f"n={n}: {v:7.4f} ({v / ms[0]:4.1f}x)" for n, v in zip(ns, ms)), flush=True)
    print("3. full batch vs Algorithm 2 (gplstm_convergence, 16 units, seed 0)")
    convergence()


if __name__ == "__main__":
    main()
