"""GP-LSTM scaling and convergence (GP-LSTM paper, Sec. 4.2, 5.2.1, 5.2.4), as ratios measured in one run.

1. **GP cost per epoch against n**: one NLML value and its gradient with respect to the embedding
   and the hyperparameters -- the GP algebra of a kernel refresh -- on a fixed 2-D embedding of n
   windows, for exact inference (dense Cholesky, O(n^3)) and KISS-GP with 100 and 200 grid points
   per dimension (CG + stochastic Lanczos, ~O(n + m log m)). Reported: seconds and the ratio to the
   smallest n; exact should grow ~8x per doubling, KISS ~2x.
2. **Prediction time per test point against n**: after conditioning on n windows, means and
   variances of 2,000 test points. Exact: O(n^2) per point (triangular solves); KISS: nearly
   constant (gpytorch's interpolated mean cache and LOVE variances).
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


def _model(inference: str, grid: int = 100):
    from gpdlm_cli.features.recurrent import FeatureMap
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models.deep_kernel import DeepKernelGP

    net = FeatureMap("narx", None, 2, units=2, layers=1, out_dim=2)
    lik = GaussianLikelihood(noise_init=0.01, noise_min=1e-4)
    model = DeepKernelGP(net, [gpytorch.kernels.RBFKernel(ard_num_dims=2)], [lik], inference=inference, grid_size=grid)
    base = model.gps[0].covar_module.base_kernel
    (base.base_kernel if inference == "kiss" else base).lengthscale = 0.3
    return model


def refresh_seconds(inference: str, n: int, grid: int = 100, repeats: int = 1) -> float:
    model = _model(inference, grid)
    h, y = _embedding(n)
    model.fit_grid(h)
    best = float("inf")
    for _ in range(repeats):
        leaf = h.clone().requires_grad_(True)
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            value = model.nlml(leaf, y) / n
            value.backward()
        best = min(best, time.perf_counter() - t0)
    return best


def prediction_ms_per_point(inference: str, n: int, grid: int = 100, n_test: int = 2000) -> float:
    model = _model(inference, grid)
    h, y = _embedding(n)
    model.fit_grid(h)
    gp = model.gps[0]
    gp.set_train_data(h, y, strict=False)
    gp.eval()
    ht, _ = _embedding(n_test, seed=1)
    ht = model._clamp(ht * 0.9)
    with torch.no_grad(), model.settings(n), gpytorch.settings.fast_pred_var(inference == "kiss"):
        gp(ht[:10])  # build the caches (mean cache, Cholesky / LOVE) once
        t0 = time.perf_counter()
        f = gp(ht)
        f.mean, f.variance
        seconds = time.perf_counter() - t0
    return 1000 * seconds / n_test


def convergence():
    from hydra import compose, initialize_config_module

    from gpdlm_cli.commands.train import run_train
    from gpdlm_cli.tracking import NullTracker

    out = {}
    for algorithm in ("full", "delayed"):
        with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "+experiment=gplstm_convergence", "model.network.units=16", "seed=0", f"trainer.algorithm={algorithm}",
                "progress=false", "tracking.enabled=false"])
        tracker = NullTracker()
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            m = run_train(cfg, tmp, tracker=tracker)
        steps_per_epoch = 1 if algorithm == "full" else 360 // 64
        curve = [(s / steps_per_epoch, v) for s, v in tracker.steps["train_nlml"] if s <= cfg.trainer.max_epochs * steps_per_epoch]
        out[algorithm] = (curve, m["epoch_seconds"], m["test_rmse"])
    target = max(min(v for _, v in c) for c, _, _ in out.values()) + 0.02
    print(f"target train NLML per window: {target:.4f}")
    times = {}
    for algorithm, (curve, epoch_s, rmse) in out.items():
        epoch = next((e for e, v in curve if v <= target), float("nan"))
        times[algorithm] = epoch * epoch_s
        print(f"{algorithm:<8} epochs to target {epoch:6.1f}  s/epoch {epoch_s:7.3f}  seconds {times[algorithm]:7.2f}  "
              f"final test RMSE {rmse:.4f}")
    print(f"Algorithm 2 / full batch time to target: {times['delayed'] / times['full']:.2f}")


def main():
    torch.set_num_threads(1)
    print("1. GP algebra of one refresh (NLML + gradient), seconds and ratio to n = 500")
    sizes = (500, 1000, 2000, 4000)
    for label, inference, grid in (("exact", "exact", 0), ("kiss-100", "kiss", 100), ("kiss-200", "kiss", 200)):
        secs = [refresh_seconds(inference, n, grid or 100) for n in sizes]
        print(f"{label:<9} " + "  ".join(f"n={n}: {s:7.3f}s ({s / secs[0]:5.1f}x)" for n, s in zip(sizes, secs)), flush=True)
    print("2. prediction ms per test point (means and variances of 2,000 points)")
    for label, inference, grid in (("exact", "exact", 0), ("kiss-100", "kiss", 100)):
        ms = [prediction_ms_per_point(inference, n, grid or 100) for n in sizes]
        print(f"{label:<9} " + "  ".join(f"n={n}: {v:7.4f} ({v / ms[0]:4.1f}x)" for n, v in zip(sizes, ms)), flush=True)
    print("3. full batch vs Algorithm 2 (gplstm_convergence, 16 units, seed 0)")
    convergence()


if __name__ == "__main__":
    main()
