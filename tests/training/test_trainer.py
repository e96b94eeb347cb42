"""The general trainer (issue 8): optimisers, parameter groups, schedules, epoch budgets, hooks,
best-iterate restoration and the stopping rules, on objectives whose answers are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpdlm_cli.training import (
    BlockMeanRule,
    ConvergenceRule,
    Schedule,
    TrainerSettings,
    make_rule,
    train,
)

X = torch.zeros(100, 1, dtype=torch.float64)  # the data are not used by these objectives
Y = torch.zeros(100, dtype=torch.float64)
GEN = torch.Generator().manual_seed(0)


def quadratic(a, c):
    """f(w) = 1/2 sum_j a_j (w_j - c_j)^2, minimum 0 at w = c."""
    w = torch.nn.Parameter(torch.zeros_like(c))

    def objective(xb, yb):
        return 0.5 * (a * (w - c) ** 2).sum()

    return w, objective


def settings(**kw):
    base = dict(max_iters=200, lr=0.1, check_every=10, eval_every=0, progress=False, stop=ConvergenceRule(window=0))
    base.update(kw)
    return TrainerSettings(**base)


@pytest.mark.parametrize(
    "optimizer,lr,iters,tol",
    [
        ("adam", 0.05, 600, 1e-3),
        ("sgd", 0.1, 300, 1e-6),
        ("adadelta", 5.0, 600, 1e-2),
        ("lbfgs", 1.0, 20, 1e-5),
    ],
)
def test_every_optimizer_finds_the_minimum_of_a_quadratic(optimizer, lr, iters, tol):
    a = torch.tensor([1.0, 4.0, 0.5], dtype=torch.float64)
    c = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    w, f = quadratic(a, c)
    opts = {"momentum": 0.5} if optimizer == "sgd" else {}
    res = train(
        f, [w], X, Y, settings(optimizer=optimizer, lr=lr, max_iters=iters, optimizer_options=opts), generator=GEN
    )
    assert float((w.detach() - c).abs().max()) < tol, (optimizer, w)
    assert res.iterations == iters


def test_lbfgs_converges_in_few_iterations_with_the_window_rule():
    a = torch.tensor([1.0, 100.0], dtype=torch.float64)  # condition number 100
    c = torch.tensor([3.0, -1.0], dtype=torch.float64)
    w, f = quadratic(a, c)
    res = train(
        f,
        [w],
        X,
        Y,
        settings(optimizer="lbfgs", lr=1.0, max_iters=500, check_every=1, stop=ConvergenceRule(window=5, tol=1e-12)),
        generator=GEN,
    )
    assert res.converged and res.iterations < 20
    assert torch.allclose(w, c, atol=1e-8)


def test_lr_scale_gives_each_group_its_own_step():
    """One SGD step: w1 = w0 - lr * scale[group] * grad, exactly, per group; scale 0 freezes."""
    a = torch.tensor([1.0, 2.0], dtype=torch.float64)
    c = torch.tensor([1.0, 1.0], dtype=torch.float64)
    u = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    v = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    z = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))

    def f(xb, yb):
        return 0.5 * (a * (u - c) ** 2).sum() + 0.5 * (a * (v - c) ** 2).sum() + 0.5 * (a * (z - c) ** 2).sum()

    groups = {"kernel": [u], "variational": [v], "likelihood": [z]}
    train(
        f,
        groups,
        X,
        Y,
        settings(optimizer="sgd", lr=0.1, max_iters=1, lr_scale={"kernel": 3.0, "likelihood": 0.0}),
        generator=GEN,
    )
    grad0 = -(a * c)  # gradient at w = 0
    assert torch.allclose(u, -0.1 * 3.0 * grad0, rtol=1e-15)
    assert torch.allclose(v, -0.1 * 1.0 * grad0, rtol=1e-15)
    assert torch.equal(z, torch.zeros(2, dtype=torch.float64))


class Trajectory:
    """A hook recording a parameter after every step and the epochs that started."""

    def __init__(self, w):
        self.w, self.values, self.epochs, self.steps = w, [float(w.detach()[0])], [], []

    def epoch_start(self, epoch):
        self.epochs.append(epoch)

    def after_step(self, iteration, epoch):
        self.steps.append((iteration, epoch))
        self.values.append(float(self.w.detach()[0]))


def linear_objective(g=1.0):
    """f(w) = g w: SGD moves w by exactly -lr_t g per step, so the trajectory reveals lr_t."""
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    return w, (lambda xb, yb: g * w.sum())


def test_robbins_monro_schedule_follows_its_formula():
    w, f = linear_objective()
    hook = Trajectory(w)
    sched = Schedule(kind="robbins_monro", t0=10.0, kappa=0.75)
    train(f, [w], X, Y, settings(optimizer="sgd", lr=0.2, max_iters=40, schedule=sched), generator=GEN, hooks=[hook])
    lr_t = -np.diff(hook.values)
    expected = 0.2 / (1 + np.arange(40) / 10.0) ** 0.75
    np.testing.assert_allclose(lr_t, expected, rtol=1e-12)


def test_step_schedule_and_epoch_budget_on_minibatches():
    """n = 100, batch 30: 3 steps per epoch (the remainder is dropped); max_epochs = 4 -> 12 steps;
    the step schedule halves lr every 2 epochs."""
    w, f = linear_objective()
    hook = Trajectory(w)
    s = settings(
        optimizer="sgd",
        lr=0.4,
        max_iters=1000,
        batch_size=30,
        max_epochs=4,
        schedule=Schedule(kind="step", every_epochs=2, step_factor=0.5),
    )
    res = train(f, [w], X, Y, s, generator=GEN, hooks=[hook])
    assert res.iterations == 12 and res.epochs == 4
    assert hook.epochs == [0, 1, 2, 3]
    assert [e for _, e in hook.steps] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    np.testing.assert_allclose(-np.diff(hook.values), [0.4] * 6 + [0.2] * 6, rtol=1e-12)
    # the first cap reached stops: 5 iterations < 4 epochs
    w2, f2 = linear_objective()
    assert (
        train(
            f2, [w2], X, Y, settings(optimizer="sgd", batch_size=30, max_iters=5, max_epochs=4), generator=GEN
        ).iterations
        == 5
    )


def test_evaluation_every_k_epochs_and_every_k_iterations():
    w, f = linear_objective()
    logged = {}

    def log_steps(series):
        for k, pts in series.items():
            logged.setdefault(k, []).extend(pts)

    s = settings(optimizer="sgd", batch_size=30, max_epochs=6, max_iters=None, eval_every=0, eval_every_epochs=2)
    train(f, [w], X, Y, s, generator=GEN, evaluate=lambda: {"val_w": float(w.detach()[0])}, log_steps=log_steps)
    assert [st for st, _ in logged["val_w"]] == [6, 12]  # epochs 2 and 4; the final one is the caller's
    assert [st for st, _ in logged["train_loss"]] == list(range(1, 19))
    logged.clear()
    w, f = linear_objective()
    train(
        f,
        [w],
        X,
        Y,
        settings(optimizer="sgd", max_iters=20, eval_every=7),
        generator=GEN,
        evaluate=lambda: {"val_w": 0.0},
        log_steps=log_steps,
        step_offset=100,
    )
    assert [st for st, _ in logged["val_w"]] == [107, 114]


def test_keep_best_restores_the_iterate_with_the_best_metric():
    """SGD on 1/2 (w - 3)^2 from w = 0 passes w = 1 (the 'validation optimum') on its way to 3; the
    validation metric |w - 1| is smallest at an intermediate step, which must be restored."""
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def f(xb, yb):
        return 0.5 * ((w - 3.0) ** 2).sum()

    def evaluate():
        return {"val_dist": abs(float(w.detach()[0]) - 1.0)}

    s = settings(optimizer="sgd", lr=0.05, max_iters=100, eval_every=1, keep_best="val_dist", keep_best_mode="min")
    res = train(f, [w], X, Y, s, generator=GEN, evaluate=evaluate, step_offset=10)
    trajectory = 3.0 - 3.0 * 0.95 ** np.arange(101)  # w_t in closed form
    t_best = int(np.argmin(np.abs(trajectory - 1.0)))
    assert res.best_iteration == 10 + t_best
    assert float(w.detach()[0]) == pytest.approx(trajectory[t_best], rel=1e-12)
    assert res.best_value == pytest.approx(abs(trajectory[t_best] - 1.0), rel=1e-9)
    # mode=max keeps the worst distance instead: the final iterate, nothing restored
    w.data.zero_()
    res = train(
        f,
        [w],
        X,
        Y,
        settings(optimizer="sgd", lr=0.05, max_iters=100, eval_every=1, keep_best="val_dist", keep_best_mode="max"),
        generator=GEN,
        evaluate=evaluate,
    )
    assert res.best_iteration == 100 and float(w.detach()[0]) == pytest.approx(trajectory[100], rel=1e-12)


# ----- stopping rules --------------------------------------------------------------------------------
def test_window_rule_is_the_papers():
    rule = ConvergenceRule(window=5, tol=1e-4)
    flat = torch.tensor([1.0, 0.5, 0.3, 0.30005, 0.3, 0.30009, 0.30002], dtype=torch.float64)
    assert not rule.converged(flat[:4])  # fewer than `window` losses
    assert not rule.converged(flat[:6])  # the window still holds 0.5
    assert rule.converged(flat[2:7]) and rule.converged(flat)  # max - min = 9e-5 <= 1e-4
    assert not ConvergenceRule(window=5, tol=5e-5).converged(flat)
    assert not ConvergenceRule(window=0, tol=1.0).converged(flat)  # 0 disables


def test_block_mean_rule_sees_through_noise_that_defeats_the_window_rule():
    """bMC-like noise (sd 0.01, 100x tol): on a plateau the window rule never fires but the block-mean
    rule does; on a slope of 2e-4 per iteration (a decrease of 0.01 per block, far above the block
    mean's noise) the block-mean rule does not."""
    gen = np.random.default_rng(0)
    noise = torch.tensor(gen.normal(0, 0.01, 400))
    plateau = 1.0 + noise
    slope = 1.0 - 2e-4 * torch.arange(400, dtype=torch.float64) + noise
    window, block = ConvergenceRule(window=50, tol=1e-4), BlockMeanRule(block=50, tol=1e-4)
    assert not any(window.converged(plateau[:k]) for k in range(50, 401, 10))
    assert block.converged(plateau[:100]) and block.converged(plateau)
    assert not any(block.converged(slope[:k]) for k in range(100, 401, 10))
    assert not block.converged(plateau[:99])  # needs two full blocks


def test_block_mean_rule_waits_for_a_slow_decrease_that_adjacent_blocks_hide():
    """A training-like curve 1 + 0.5 exp(-t / 800) + N(0, 0.05^2): late on, the decrease between
    adjacent blocks of 50 (0.03 at t = 0, 0.01 at t = 800) sinks below two standard errors (0.02)
    while 0.1-0.3 of the loss is still to come. Comparing with the block one step back (lookback 0)
    stops there; comparing with the block half the run back stops once less than 0.01 remains."""
    t = torch.arange(8000, dtype=torch.float64)
    excess = 0.5 * torch.exp(-t / 800)
    losses = 1.0 + excess + torch.tensor(np.random.default_rng(3).normal(0, 0.05, 8000))

    def first_stop(rule):
        return next((n for n in range(100, 8001, 10) if rule.converged(losses[:n])), None)

    adjacent = first_stop(BlockMeanRule(block=50, tol=1e-4, lookback=0.0))
    half = first_stop(BlockMeanRule(block=50, tol=1e-4))
    assert adjacent is not None and excess[adjacent - 1] > 0.1, adjacent
    assert half is not None and excess[half - 1] < 0.01, half


def test_auto_rule_depends_on_whether_the_objective_is_stochastic():
    assert make_rule("auto", stochastic=False, window=50, tol=1e-4).name == "window"
    rule = make_rule("auto", stochastic=True, window=20, tol=1e-4, steps_per_epoch=33)
    assert rule.name == "block_mean" and rule.block == 33  # one epoch, at least the window
    assert make_rule("block_mean", stochastic=False, window=50, tol=1e-4, steps_per_epoch=3).block == 50
    assert make_rule("none", stochastic=False, window=50, tol=1e-4).name == "none"


def test_minibatch_training_uses_the_block_mean_rule_and_stops():
    """A noisy minibatch objective on a plateau stops under auto, never under window."""
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    x = torch.randn(200, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def f(xb, yb):  # minibatch mean of (x - w)^2: noisy, minimum near w = mean(x)
        return ((xb[:, 0] - w) ** 2).mean()

    s = settings(optimizer="sgd", lr=0.05, max_iters=3000, batch_size=10, stop=ConvergenceRule(window=20, tol=1e-4))
    res = train(f, [w], x, torch.zeros(200, dtype=torch.float64), s, generator=torch.Generator().manual_seed(2))
    assert res.stop_rule == "block_mean" and res.converged and res.iterations < 3000
    w.data.zero_()
    s.stop_rule = "window"
    res = train(f, [w], x, torch.zeros(200, dtype=torch.float64), s, generator=torch.Generator().manual_seed(2))
    assert res.stop_rule == "window" and not res.converged and res.iterations == 3000


def test_interrupted_training_flushes_the_losses_so_far():
    w, f = linear_objective()
    logged = {}
    calls = {"n": 0}

    def g(xb, yb):
        calls["n"] += 1
        if calls["n"] == 16:
            raise KeyboardInterrupt
        return f(xb, yb)

    with pytest.raises(KeyboardInterrupt):
        train(
            g,
            [w],
            X,
            Y,
            settings(optimizer="sgd", max_iters=100),
            generator=GEN,
            log_steps=lambda s: [logged.setdefault(k, []).extend(p) for k, p in s.items()],
        )
    assert [st for st, _ in logged["train_loss"]] == list(range(1, 16))
    assert math.isfinite(logged["train_loss"][-1][1])


# ----- keep_best across a refinement stage (issue 40) --------------------------------------------------
def _two_stages(refine_target: float, keep_start: bool):
    """Stage 'fit' (SGD on 1/2 (w - 1)^2 from w = 0, lr 0.5: w_t = 1 - 0.5^t) evaluated every step
    under keep_best on the validation metric |w - 1.2|, then a 'refine' stage of 10 SGD steps on
    1/2 (w - refine_target)^2 that is not evaluated periodically (like the recurrent family's final
    theta steps). Returns (w, FitResult, the logged (step, metric) pairs)."""
    from gpdlm_cli.methods.base import Stage
    from gpdlm_cli.training import run_stages

    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    logged: list[tuple[int, float]] = []

    def log_steps(pending):
        logged.extend(pending.get("val_dist", []))

    stages = [
        Stage("fit", lambda xb, yb: 0.5 * ((w - 1.0) ** 2).sum(), {"w": [w]}, overrides={"max_iters": 8}),
        Stage(
            "refine",
            lambda xb, yb: 0.5 * ((w - refine_target) ** 2).sum(),
            {"w": [w]},
            overrides={"max_iters": 10, "eval_every": 0},
            keep_start=keep_start,
        ),
    ]
    s = settings(optimizer="sgd", lr=0.5, eval_every=1, keep_best="val_dist", stop_rule="none")
    fit = run_stages(
        stages,
        X,
        Y,
        s,
        generator=GEN,
        evaluate=lambda: {"val_dist": abs(float(w.detach()[0]) - 1.2)},
        log_steps=log_steps,
    )
    return float(w.detach()[0]), fit, logged


def test_a_keep_start_stage_cannot_undo_the_selected_iterate():
    """The refinement moves w from the selected 1 - 0.5^8 to 3 - (3 - w_8) 0.5^10 (val |w - 1.2| 1.80):
    without keep_start (the old behaviour) the run ends there; with it the selected iterate is kept,
    with its step (8) as best_iteration, and the starting point's evaluation is logged at step 8 (then the
    refined iterate's, step 18, a point of the curve though not selected)."""
    w8 = 1.0 - 0.5**8
    w_refined = 3.0 - (3.0 - w8) * 0.5**10
    w, fit, _ = _two_stages(3.0, keep_start=False)
    assert w == pytest.approx(w_refined, rel=1e-12)
    w, fit, logged = _two_stages(3.0, keep_start=True)
    assert w == pytest.approx(w8, rel=1e-12) and fit.best_iteration == 8 and fit.iterations == 18
    assert logged[-2:] == [
        (8, pytest.approx(abs(w8 - 1.2), rel=1e-12)),
        (18, pytest.approx(abs(w_refined - 1.2), rel=1e-12)),
    ]


def test_a_keep_start_stage_keeps_its_end_when_it_improves_the_metric():
    """A refinement towards 1.2 (the validation optimum) improves |w - 1.2|: its last iterate is kept and
    becomes best_iteration (step 18)."""
    w8 = 1.0 - 0.5**8
    w, fit, _ = _two_stages(1.2, keep_start=True)
    assert w == pytest.approx(1.2 - (1.2 - w8) * 0.5**10, rel=1e-12) and fit.best_iteration == 18
