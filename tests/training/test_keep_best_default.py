"""`trainer.keep_best=auto` (the default): each family selects the iterate the way its paper does --
the recurrent models by validation RMSE (GP-LSTM paper, App. E), the RKHS family by the full-data
NLML (Shoham & Avron, Sec. 5), every other family ends on its last iterate -- and falls back to the
last iterate where the metric is not computed (no evaluations, no validation set)."""

from __future__ import annotations

import pytest

from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import compose

SMALL_SEQ = ["dataset=sysid_actuator", "dataset.n=256", "model.network.units=8"]


def _resolved(overrides):
    cfg = compose(list(overrides) + ["progress=false", "tracking.enabled=false"])
    return prepare(cfg).settings.keep_best


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["model=gp_lstm"] + SMALL_SEQ, "val_rmse"),
        (["model=lstm"] + SMALL_SEQ, "val_rmse"),
        (["model=gp_lstm", "dataset.split.val_fraction=0.0"] + SMALL_SEQ, None),  # no validation set
        (["model=gp_lstm", "trainer.eval_every=0"] + SMALL_SEQ, None),  # no evaluations
        (["model=gp_lstm", "trainer.keep_best=null"] + SMALL_SEQ, None),  # the last iterate, by request
        (["model=gp_lstm", "trainer.keep_best=val_nll"] + SMALL_SEQ, "val_nll"),
        (["model=scgd", "features=nn", "kernel=linear", "dataset.split.train_size=100"], "train_nlml"),
        (["model=dlm", "model.num_inducing=10", "dataset.split.train_size=100"], None),
        (["model=sgpr", "model.num_inducing=10", "dataset.split.train_size=100"], None),
    ],
)
def test_auto_resolves_to_the_family_protocol(overrides, expected):
    assert _resolved(overrides) == expected


@pytest.mark.slow
def test_default_gp_lstm_run_on_actuator_ends_on_its_best_validation_iterate(tmp_path):
    """Full-batch GP-LSTM on the Actuator windows overfits after a few hundred steps (the learned noise
    falls towards 0.007 of the standardised variance). The default run restores the evaluation point
    with the lowest val_rmse, records the choice as a tag, and its validation RMSE is below that of
    the last iterate (`trainer.keep_best=null`) at the same seed."""
    common = [
        "model=gp_lstm",
        "dataset=sysid_actuator",
        "dataset.n=512",
        "trainer.max_iters=600",
        "trainer.eval_every=25",
        "model.training.final_theta_steps=0",
        "progress=false",
        "tracking.enabled=false",
        "threads=1",
    ]
    auto_tracker, last_tracker = NullTracker(), NullTracker()
    auto = run_train(compose(common), tmp_path / "auto", tracker=auto_tracker)
    last = run_train(compose(common + ["trainer.keep_best=null"]), tmp_path / "last", tracker=last_tracker)
    assert auto_tracker.tags["gpdlm.keep_best"] == "val_rmse" and last_tracker.tags["gpdlm.keep_best"] == "none"
    logged = dict(auto_tracker.steps["val_rmse"][:-1])  # the last point is the final (restored) evaluation
    best_step = min(logged, key=logged.get)
    assert auto["best_iteration"] == best_step < auto["iterations"]
    assert auto["val_rmse"] == pytest.approx(logged[best_step], rel=1e-9)
    assert auto["val_rmse"] < 0.8 * last["val_rmse"], (auto["val_rmse"], last["val_rmse"])


def test_the_recurrent_final_theta_steps_compete_with_the_selected_iterate():
    """The GP models' last stage (``model.training.final_theta_steps`` on theta, W fixed) runs after keep_best
    restored the selected iterate; it is a ``keep_start`` stage, so the refit replaces that iterate only
    if it lowers the selection metric (in the Table 2 study on the real Actuator data the unchecked refit
    raised the selected GP models' val RMSE in 13 of 16 measurable regression runs and 11 of 16
    autoregression runs: docs/results/diagnoses/gplstm.md)."""
    cfg = compose(
        ["model=gp_lstm", "model.training.final_theta_steps=7"]
        + SMALL_SEQ
        + ["progress=false", "tracking.enabled=false"]
    )
    p = prepare(cfg)
    last = p.method.stages[-1]
    assert p.settings.keep_best == "val_rmse"
    assert last.name == "theta" and last.keep_start is True and last.overrides["max_iters"] == 7
    assert not any(s.keep_start for s in p.method.stages[:-1])
