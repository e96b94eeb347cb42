"""The collapsed SVGP predicts with the optimal q(u) of its final hyperparameters, whether or not an
evaluation happened during training (before the fix, the first prediction re-initialised q(u) to the
prior: with trainer.eval_every=0 -- or a run shorter than eval_every, e.g. trainer=fast -- the final
metrics were those of the prior q(u), and the first point of every learning curve was)."""

from __future__ import annotations

import numpy as np
import torch

from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import compose

BASE = [
    "model=svgp",
    "dataset.split.train_size=150",
    "model.num_inducing=10",
    "trainer.max_iters=40",
    "threads=1",
    "progress=false",
    "tracking.enabled=false",
]


def test_final_metrics_do_not_depend_on_intermediate_evaluations(tmp_path):
    a = run_train(compose(BASE + ["trainer.eval_every=0"]), tmp_path / "a", tracker=NullTracker())
    b = run_train(compose(BASE + ["trainer.eval_every=20"]), tmp_path / "b", tracker=NullTracker())
    for k in ("test_nll", "test_rmse", "val_nll", "final_loss"):
        assert a[k] == b[k], k


def test_the_predictive_is_the_optimal_q_of_the_final_hyperparameters():
    """After training (no intermediate evaluation), the model's predictive mean at the test inputs is
    Titsias' optimal one from a dense computation: mu* = K_*u (K_uu + s2^-1 K_uf K_fu)^-1 K_uf y / s2."""
    from gpdlm_cli.training import run_stages

    p = prepare(compose(BASE + ["trainer.eval_every=0"]))
    run_stages(
        p.method.stages,
        p.data.x_train,
        p.data.y_train,
        p.settings,
        generator=torch.Generator().manual_seed(0),
        modules=p.method.modules,
    )
    model, lik = p.method.model, p.method.likelihood
    with torch.no_grad():
        mu, _ = model.marginals(p.data.x_test)
        Z = model.inducing_points.cpu().numpy()
        ls, os = float(model.covar_module.base_kernel.lengthscale), float(model.covar_module.outputscale)
        s2 = float(lik.noise)

    def k(a, b):
        return os * np.exp(-0.5 * ((a[:, None] - b[None]) ** 2).sum(-1) / ls**2)

    X, y, Xs = p.data.x_train.cpu().numpy(), p.data.y_train.cpu().numpy(), p.data.x_test.cpu().numpy()
    Kuu, Kuf = k(Z, Z) + model.jitter * np.eye(len(Z)), k(Z, X)
    want = k(Xs, Z) @ np.linalg.solve(Kuu + Kuf @ Kuf.T / s2, Kuf @ y) / s2
    np.testing.assert_allclose(mu.cpu().numpy(), want, rtol=1e-6, atol=1e-8)
