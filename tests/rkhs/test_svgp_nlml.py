"""SVGP's ``train_nlml`` on a finite feature map (``methods.sparse_variational.finite_kernel_nlml``; the RKHS
paper's Table 2 scores SVGP by the exact marginal likelihood at its hyperparameters): checked against a dense
n x n Gaussian log density (scipy) of the same features, noise and mean; logged, and its best iterate kept,
through `gpdlm train`'s real path and through a batched group; absent where the kernel has no finite map."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import evaluator, run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import compose

# 150 concrete rows, a 2 x 16 ReLU network, M = 16, AdaDelta batches of 16, 2 epochs evaluated every epoch
SMALL = [
    "model=svgp",
    "features=nn",
    "features.widths=[16,16]",
    "model.num_inducing=16",
    "dataset=concrete",
    "dataset.split.train_size=150",
    "trainer.optimizer=adadelta",
    "trainer.lr=1.0",
    "trainer.batch_size=16",
    "trainer.max_iters=null",
    "trainer.max_epochs=2",
    "trainer.eval_every=0",
    "trainer.eval_every_epochs=1",
    "trainer.stop_rule=none",
    "tracking.enabled=false",
    "threads=1",
    "progress=false",
]


def _dense_nlml(p) -> float:
    """-log N(y - m | 0, Phi Phi^T + s2 I) / n + log s_y by scipy's dense n x n density."""
    model, lik = p.method.model, p.method.likelihood
    x, y = p.data.x_train, p.data.y_train
    with torch.no_grad():
        z = model.features(x)
        phi = model.gp.covar_module.feature_map(z).numpy()
        r = (y - model.gp.mean_module(z)).numpy()
        s2 = float(lik.noise)
    cov = phi @ phi.T + s2 * np.eye(len(r))
    return -multivariate_normal(np.zeros(len(r)), cov).logpdf(r) / len(r) + math.log(float(p.splits.y_std))


@pytest.mark.parametrize("kernel,mean", [("linear", "zero"), ("rff", "constant")])
def test_svgps_train_nlml_is_the_exact_nlml_at_its_hyperparameters(kernel, mean):
    """At the start and after training, the monitor equals the dense density to 1e-9 (float64); it moves with
    training (a monitor of the live modules, not of the first state)."""
    torch.set_num_threads(1)
    cfg = compose(
        [*SMALL, f"kernel={kernel}", *(["kernel.num_features=64"] if kernel == "rff" else []), f"model.mean={mean}"]
    )
    p = prepare(cfg)
    monitor = p.method.monitors["train_nlml"]
    with torch.no_grad():  # a non-default mean and noise, so both enter the check
        if mean == "constant":
            p.method.model.gp.mean_module.constant.fill_(0.3)
        p.method.likelihood.gp.noise = 0.2
    start = monitor()
    assert start == pytest.approx(_dense_nlml(p), rel=1e-9, abs=1e-9)
    from gpdlm_cli.training import run_stages

    run_stages(
        p.method.stages,
        p.data.x_train,
        p.data.y_train,
        p.settings,
        generator=torch.Generator().manual_seed(0),
        modules=p.method.modules,
    )
    end = monitor()
    assert end == pytest.approx(_dense_nlml(p), rel=1e-9, abs=1e-9)
    assert abs(end - start) > 1e-3


def test_svgp_without_a_finite_map_has_no_train_nlml():
    p = prepare(compose([*SMALL, "kernel=rbf"]))
    assert "train_nlml" not in p.method.monitors
    p = prepare(compose([*SMALL, "kernel=linear", "likelihood=probit", "dataset=banana"]))
    assert "train_nlml" not in p.method.monitors


def test_svgp_logs_train_nlml_and_keeps_its_best_iterate(tmp_path):
    """Through `gpdlm train`: train_nlml per epoch and at the end; keep_best=train_nlml ends on the best
    evaluated iterate (the final value is the history's minimum)."""
    torch.set_num_threads(1)
    cfg = compose([*SMALL, "kernel=linear", "trainer.keep_best=train_nlml", "trainer.max_epochs=4", "trainer.lr=3.0"])
    tracker = NullTracker()
    run_train(cfg, tmp_path, tracker=tracker)
    history = [v for _, v in tracker.steps["train_nlml"]]
    assert len(history) >= 4  # after each epoch (and the restored final iterate)
    final = tracker.metrics["train_nlml"]
    assert math.isfinite(final) and final == pytest.approx(min(history), abs=1e-12)
    assert len(set(np.round(history, 9))) > 1  # it moved: the choice was a real one
    evaluated = {step: v for step, v in tracker.steps["train_nlml"]}
    assert evaluated[tracker.metrics["best_iteration"]] == pytest.approx(final, abs=1e-12)  # the kept iterate


@pytest.mark.slow  # ~3 s (3 separate runs and their batch)
def test_batched_svgp_members_keep_their_best_iterate_like_their_separate_runs():
    """The study's SVGP arm with the paper's selection (keep_best=train_nlml), three members in one stacked
    batch: every member's best iteration, train_nlml and end state equal its separate run's (1e-8)."""
    from gpdlm_cli.sweep.batched_rkhs import _member, train_rkhs_batched

    from .test_batched import _separate

    torch.set_num_threads(1)
    grid = [(0, 0.1), (1, 1.0), (2, 3.0)]
    cfgs = [
        compose(
            [
                *SMALL,
                "kernel=linear",
                "trainer.keep_best=train_nlml",
                "trainer.max_epochs=3",
                f"seed={s}",
                f"trainer.lr={lr}",
            ]
        )
        for s, lr in grid
    ]
    separate = [_separate(c) for c in cfgs]
    members = [_member(c, evaluator) for c in cfgs]
    fits = train_rkhs_batched(members)
    for (fit, metrics, state), m, f in zip(separate, members, fits):
        assert f.result.best_iteration == fit.best_iteration
        got = m.evaluate()
        assert got["train_nlml"] == pytest.approx(metrics["train_nlml"], rel=1e-8, abs=1e-8)
        assert got["test_rmse"] == pytest.approx(metrics["test_rmse"], rel=1e-8, abs=1e-8)
        for i, mod in enumerate(m.method.modules):
            for name, t in list(mod.named_parameters()) + list(mod.named_buffers()):
                torch.testing.assert_close(t, state[f"{i}.{name}"], rtol=1e-8, atol=1e-8, msg=name)
    assert len({fit.best_iteration for fit, _, _ in separate}) > 1  # the members' choices differ
