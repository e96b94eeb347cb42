"""Algorithm 2's refresh check (GP-LSTM paper Sec. 4.1; ``training.kernel_refresh.KernelRefresh`` and
``RefreshGuard``): lr_W is halved when the rise NLML(h_new, theta)/N - NLML(h_old, theta)/N stands out
of the rises' own noise (or they are systematically positive), at most 4 times, and restored when the
rises are calm again. Both sides are
evaluated on the same probe vectors, so with W and theta fixed the rise is exactly zero, on the
dense path and on KISS's stochastic structured path alike; a real rise still halves lr_W."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch

from gpdlm_cli.features.recurrent import FeatureMap
from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.models.deep_kernel import DeepKernelGP
from gpdlm_cli.objectives.recurrent import CotangentSurrogate
from gpdlm_cli.training.kernel_refresh import KernelRefresh

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
    model = DeepKernelGP(
        identity_network(),
        [gpytorch.kernels.RBFKernel(ard_num_dims=2)],
        [GaussianLikelihood(noise_init=0.05, noise_min=1e-4)],
        inference=inference,
        grid_size=40,
        kiss_dense_below=dense_below,
    )
    base = model.gps[0].covar_module.base_kernel
    (base.base_kernel if inference == "kiss" else base).lengthscale = torch.tensor([[0.3, 0.9]], dtype=torch.float64)
    surrogate = CotangentSurrogate(model, N)
    refresh = KernelRefresh(
        model,
        surrogate,
        x,
        y,
        tau=5,
        theta_steps=theta_steps,
        theta_lr={"kernel": 0.01, "likelihood": 0.01},
        check=True,
        probe_seed=0 if inference == "kiss" else None,
    )
    opt = torch.optim.Adam(model.network.parameters(), lr=LR)
    for g in opt.param_groups:
        g["base_lr"] = g["lr"]
    refresh.bind_optimizer(opt)
    return model, refresh, opt


@pytest.mark.parametrize(
    "inference,dense_below,theta_steps",
    [
        ("kiss", 0, 0),  # the structured path: CG + stochastic Lanczos, probes seeded per refresh
        ("kiss", 2000, 2),  # dense KISS (the default below 2,000 windows), theta moved by the refreshes
        ("exact", 0, 2),
    ],
)
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


def test_pure_minibatch_noise_does_not_freeze_lr_w():
    """Issue 40: rises that are pure noise (N(0, 0.01^2) nats per window, what minibatch steps give on a
    plateau) halved lr_W on every rise above 1e-3 until 10 halvings (lr_W / 1024: the network froze).
    The guard sees them as noise: after 100 refreshes lr_W is within a factor 2 of its start, and it
    never falls below lr / 16."""
    model, refresh, opt = setup("exact", 0, 0)
    rng = np.random.default_rng(0)
    refresh.refresh()
    refresh._value = lambda h, seed: refresh.last + float(rng.normal(0.0, 0.01))
    lrs = []
    for _ in range(100):
        refresh.refresh()
        lrs.append(opt.param_groups[0]["lr"])
    assert min(lrs) >= LR / 16
    assert opt.param_groups[0]["lr"] >= LR / 2
    assert sum(lr == LR for lr in lrs) >= 60  # most of the time at the full rate


def test_guard_halves_on_systematic_rises_down_to_its_bound_and_restores_when_calm():
    from gpdlm_cli.training.kernel_refresh import RefreshGuard

    rng = np.random.default_rng(1)
    g = RefreshGuard()
    factors = [g.observe(0.05 + 0.005 * rng.standard_normal()) for _ in range(40)]  # Lemma 3 biting
    assert factors.count(0.5) == 4 and g.level == 4  # bounded: lr_W >= lr / 16
    factors = [g.observe(-0.01 + 0.005 * rng.standard_normal()) for _ in range(32)]  # descending again
    assert factors.count(2.0) == 4 and g.level == 0 and g.restores == 4
    g = RefreshGuard()
    assert [g.observe(r) for r in (-0.05, -0.04, -0.06)] == [1.0, 1.0, 1.0]
    assert g.observe(0.3) == 0.5  # a jump out of a steady descent halves at once
    g = RefreshGuard()
    assert [g.observe(r) for r in (-0.02, 0.015, -0.025, 0.02)] == [1.0] * 4
    assert g.observe(0.03) == 1.0  # within the rises' own spread: noise, no halving
    assert g.observe(0.2) == 0.5  # an overshoot (> 0.05 nats per window) halves whatever the spread
    assert RefreshGuard().observe(0.3) == 0.5  # even as the first rise
