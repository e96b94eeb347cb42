"""The two trainer hook extensions Algorithm 2 uses: ``bind_optimizer`` (a hook may change the step
size, e.g. halve lr_W after a refresh found the NLML went up) and ``stage_end`` (time per epoch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpdlm_cli.training import ConvergenceRule, Schedule, TrainerSettings, train

X = torch.zeros(40, 1, dtype=torch.float64)
Y = torch.zeros(40, dtype=torch.float64)


class HalveAt:
    """Halve every group's lr after step ``at``; remember the stage's result."""

    def __init__(self, at):
        self.at, self.opt, self.result = at, None, None

    def bind_optimizer(self, opt):
        self.opt = opt

    def after_step(self, it, epoch):
        if it == self.at:
            for g in self.opt.param_groups:
                g["lr"] *= 0.5
                g["base_lr"] *= 0.5

    def stage_end(self, result):
        self.result = result


@pytest.mark.parametrize("schedule", ["constant", "step"])
def test_a_hook_can_halve_the_learning_rate_and_sees_the_stage_result(schedule):
    """SGD on 1/2 (w - 3)^2 from 0: w_t - 3 = -3 (1 - lr_t)^t, lr 0.1 for 5 steps then 0.05 (the
    step schedule's factor stays 1 within its first 10 epochs, so base_lr must carry the halving)."""
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    hook = HalveAt(5)
    s = TrainerSettings(
        max_iters=12,
        lr=0.1,
        optimizer="sgd",
        eval_every=0,
        progress=False,
        stop=ConvergenceRule(window=0),
        schedule=Schedule(kind=schedule, every_epochs=100),
    )
    res = train(
        lambda xb, yb: 0.5 * ((w - 3.0) ** 2).sum(),
        [w],
        X,
        Y,
        s,
        generator=torch.Generator().manual_seed(0),
        hooks=[hook],
    )
    expected = 3.0 - 3.0 * 0.9**5 * 0.95**7
    assert float(w.detach()) == pytest.approx(expected, rel=1e-12)
    assert hook.result is res and res.iterations == 12 and res.epochs == 12
    assert np.isfinite(res.train_seconds)
