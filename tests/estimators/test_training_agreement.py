"""Issue 3: a Poisson DLM trained with bMC (L=10), uPS (L=10) and quadrature reaches nearly the same
test NLL on a real count dataset (doctor visits), and all three beat the constant-rate baseline."""

from __future__ import annotations

import pytest

from gpdlm_cli.run.train import run_train

from ..conftest import compose

BASE = [
    "dataset=doctor_visits",
    "dataset.split.train_size=300",
    "model=dlm",
    "model.num_inducing=20",
    "trainer.max_iters=150",
    "trainer.eval_every=0",
    "tracking.enabled=false",
    "progress=false",
    "seed=1",
]
TOLERANCE = 0.05  # nats per test point


@pytest.fixture(scope="module")
def nll_by_estimator(tmp_path_factory):
    out = {}
    for est in ("quadrature", "bmc", "ups"):
        extra = [] if est == "quadrature" else ["++estimator.num_samples=10"]
        cfg = compose(BASE + [f"estimator={est}"] + extra)
        out[est] = run_train(cfg, tmp_path_factory.mktemp(est))["test_nll"]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["bmc", "ups"])
def test_sampled_gradients_reach_the_quadrature_solution(nll_by_estimator, estimator):
    assert abs(nll_by_estimator[estimator] - nll_by_estimator["quadrature"]) < TOLERANCE, nll_by_estimator


@pytest.mark.slow
def test_all_beat_the_constant_rate_poisson(nll_by_estimator):
    from scipy.stats import poisson

    from gpdlm_cli.build import load_data

    _, splits, _ = load_data(compose(BASE))
    baseline = -poisson.logpmf(splits.y_test, splits.y_train.mean()).mean()
    assert max(nll_by_estimator.values()) < baseline - 0.1, (nll_by_estimator, baseline)
