"""PIC++ (model=pic) cost: a block step is O(M^3 + M^2 n_k + M n_k^2 + n_k^3), independent of n at a
fixed block size; against M beside DTC++'s (SVGP's) minibatch step at the same M and batch size.

Synthetic standardised data (d = 5, like AIMPEAK), float64, RBF-ARD, gpdlm's own trainer (Adam) on
the one-block PIC bound over equal blocks of 200 rows (the step's cost depends on the block's size,
not on how the blocks were made), and on SVGP's uncollapsed ELBO with minibatches of 200.
Timings are the trainer's median ms per iteration; each setting is measured ``REPEATS`` times,
interleaved with the others, and the minimum is kept (the machine is shared). Reported as ratios
against the first setting in the same run. Target: time(160k) / time(10k) < 1.5 for PIC.
"""

from __future__ import annotations

import torch

REPEATS = 3
D_IN = 5
BLOCK = 200


def _data(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D_IN, generator=g, dtype=torch.float64)
    y = torch.sin(x[:, 0]) + 0.5 * torch.cos(2 * x[:, 1]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return x, y


def _kernel():
    import gpytorch

    return gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D_IN)).double()


def _settings(steps):
    from gpdlm_cli.training import TrainerSettings

    return TrainerSettings(max_iters=steps, lr=1e-2, eval_every=0, progress=False, stop_rule="none")


def _pic_step_ms(x, y, M: int, steps: int = 40) -> float:
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models.pic import PartiallyIndependentGP
    from gpdlm_cli.objectives.pic import PICBlockBound
    from gpdlm_cli.training import train

    n = x.shape[0]
    blocks = list(torch.randperm(n, generator=torch.Generator().manual_seed(1)).split(BLOCK))
    model = PartiallyIndependentGP(x[:M].clone(), _kernel(), GaussianLikelihood().double()).double()
    obj = PICBlockBound(model, n, len(blocks))
    return train(
        obj, list(model.parameters()), x, y, _settings(steps), blocks=blocks, generator=torch.Generator().manual_seed(2)
    ).iter_ms


def _svgp_step_ms(x, y, M: int, steps: int = 40) -> float:
    import gpytorch

    from gpdlm_cli.estimators import AutoEstimator
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models import SparseVariationalGP
    from gpdlm_cli.objectives import ELBO
    from gpdlm_cli.training import train

    lik = GaussianLikelihood().double()
    model = SparseVariationalGP(x[:M].clone(), _kernel(), gpytorch.means.ZeroMean()).double()
    obj = ELBO(model, lik, AutoEstimator(), x.shape[0])
    settings = _settings(steps)
    settings.batch_size = BLOCK
    return train(
        obj,
        list(model.parameters()) + list(lik.parameters()),
        x,
        y,
        settings,
        generator=torch.Generator().manual_seed(2),
    ).iter_ms


def _interleaved(labels, fn):
    best = {k: float("inf") for k in labels}
    for _ in range(REPEATS):
        for k in labels:
            best[k] = min(best[k], fn(k))
    return best


def _table(title, best, unit="ms/step"):
    ref = next(iter(best.values()))
    print(title)
    for k, v in best.items():
        print(f"  {str(k):>12}  {v:8.3f} {unit}   ratio {v / ref:5.2f}")


def main():
    torch.set_num_threads(1)
    print(f"threads={torch.get_num_threads()}  (measured on a shared machine: read the ratios)")
    sizes = (10_000, 40_000, 160_000)
    data = {n: _data(n) for n in sizes}
    best = _interleaved(sizes, lambda n: _pic_step_ms(*data[n], M=250))
    _table(f"PIC block step, blocks of {BLOCK} rows, M = 250, against n:", best)
    ratio = best[160_000] / best[10_000]
    print(f"  time(160k) / time(10k) = {ratio:.2f}   target < 1.5: {'met' if ratio < 1.5 else 'MISSED'}")

    x, y = data[40_000]
    settings = [(kind, M) for M in (125, 250, 500) for kind in ("pic", "svgp")]
    best = _interleaved(settings, lambda s: (_pic_step_ms if s[0] == "pic" else _svgp_step_ms)(x, y, M=s[1]))
    _table(f"n = 40k, block / minibatch = {BLOCK}: PIC vs DTC++ (SVGP) against M:", best)


if __name__ == "__main__":
    main()
