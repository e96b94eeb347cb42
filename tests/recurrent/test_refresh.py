"""Algorithm 2's refresh check (GP-LSTM paper Sec. 4.1; ``methods.recurrent.KernelRefresh``): lr_W is
halved when NLML(h_new, theta)/N exceeds NLML(h_old, theta)/N by more than 1e-3. Both sides are
evaluated on the same probe vectors, so with W and theta fixed the rise is exactly zero, on the
dense path and on KISS's stochastic structured path alike; a real rise still halves lr_W."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch

from gpdlm_cli.features.recurrent import FeatureMap
from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.methods.recurrent import KernelRefresh
from gpdlm_cli.models.deep_kernel import DeepKernelGP
from gpdlm_cli.objectives.recurrent import CotangentSurrogate

N, LR = 200, 1e-2


def identity_network() -> FeatureMap:
    """h = head(relu([x; -x])) = x."""
    net = FeatureMap("narx", None, 2, units=4, layers=1, out_dim=2).double()
    eye = torch.eye(2, dtype=torch.float64)
    with torch.no_grad():
        net.body[0].weight.copy_(torch.cat([eye, -eye]))
        net.body[0].bias.zero_()
        net.head.weight.copy_(torch.cat([eye, -eye], 1))
        net.head.bias.zero_()
    return net


def setup(inference: str, dense_below: int, theta_steps: int):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(N, 2)) * np.array([1.0, 3.0])
    y = np.sin(3 * x[:, 0]) + np.cos(x[:, 1]) + 0.1 * rng.standard_normal(N)
    x, y = torch.as_tensor(x), torch.as_tensor((y - y.mean()) / y.std())
    model = DeepKernelGP(identity_network(), [gpytorch.kernels.RBFKernel(ard_num_dims=2)],
                         [GaussianLikelihood(noise_init=0.05, noise_min=1e-4)], inference=inference, grid_size=40,
                         kiss_dense_below=dense_below)
    base = model.gps[0].covar_module.base_kernel
    (base.base_kernel if inference == "kiss" else base).lengthscale = torch.tensor([[0.3, 0.9]], dtype=torch.float64)
    surrogate = CotangentSurrogate(model, N)
    refresh = KernelRefresh(model, surrogate, x, y, tau=5, theta_steps=theta_steps,
                            theta_lr={"kernel": 0.01, "likelihood": 0.01}, check=True,
                            probe_seed=0 if inference == "kiss" else None)
    opt = torch.optim.Adam(model.network.parameters(), lr=LR)
    for g in opt.param_groups:
        g["base_lr"] = g["lr"]
    refresh.bind_optimizer(opt)
    return model, refresh, opt


@pytest.mark.parametrize("inference,dense_below,theta_steps", [
    ("kiss", 0, 0),  # the structured path: CG + stochastic Lanczos, probes seeded per refresh
    ("kiss", 2000, 2),  # dense KISS (the default below 2,000 windows), theta moved by the refreshes
    ("exact", 0, 2),
])
def test_refreshes_with_fixed_weights_halve_nothing_and_a_real_rise_halves_once(inference, dense_below, theta_steps):
    """Four refreshes with W fixed (theta fixed, or moved only by the refreshes' own theta steps): no
    halving, lr_W unchanged (before issue 19 the structured path compared NLMLs drawn with different
    probes: the review counted 6 halvings in 16 refreshes at N = 500). Then W is changed so that the
    embedding shrinks to 0.2 h (the NLML rises by ~0.5 per window): exactly one halving."""
    model, refresh, opt = setup(inference, dense_below, theta_steps)
    for _ in range(4):
        refresh.refresh()
    assert refresh.refreshes == 4
    assert refresh.halvings == 0
    assert opt.param_groups[0]["lr"] == LR
    with torch.no_grad():
        model.network.head.weight.mul_(0.2)
    refresh.refresh()
    assert refresh.halvings == 1
    assert opt.param_groups[0]["lr"] == LR / 2
