"""Watched monitors (``run.watch``, issue 40): a warning and the tag ``gpdlm.warning.<monitor>`` when a
family's monitored objective ends clearly below its best window (the lr-1e-2 airline-stand-in ELBO);
none when it rises, sits in noise, or the curve is too short."""

from __future__ import annotations

import numpy as np
import pytest

from gpdlm_cli.run.watch import falls


def curve(values, every=10):
    return [(every * (i + 1), v) for i, v in enumerate(values)]


# the ELBO per datum of sVBSSGP on the airline stand-in (30,000 rows, p = 150, seed 0), every epoch of 45,
# at the old default lr 1e-2 (it peaks around epoch 8, then falls) -- measured, issue 40
AIRLINE_LR_1E2 = [
    -1.8491,
    -1.4835,
    -1.3814,
    -1.3425,
    -1.3274,
    -1.3317,
    -1.3285,
    -1.3256,
    -1.3304,
    -1.3339,
    -1.341,
    -1.3321,
    -1.3317,
    -1.3325,
    -1.3428,
    -1.3346,
    -1.3437,
    -1.3477,
    -1.3514,
    -1.334,
    -1.3374,
    -1.3344,
    -1.3547,
    -1.3541,
    -1.3483,
    -1.3509,
    -1.349,
    -1.3428,
    -1.3544,
    -1.3509,
    -1.3457,
    -1.3443,
    -1.3537,
    -1.3589,
    -1.3503,
    -1.3541,
    -1.3466,
    -1.3486,
    -1.349,
    -1.3419,
    -1.343,
    -1.3491,
    -1.3516,
    -1.3457,
    -1.3581,
]


def test_the_airline_lr_1e_2_elbo_is_flagged():
    found = falls(curve(AIRLINE_LR_1E2, every=150))
    assert found is not None
    assert found["best"] == pytest.approx(np.mean(AIRLINE_LR_1E2[4:9]), abs=1e-12)  # windows of 5, best ends at epoch 9
    assert found["last"] == pytest.approx(np.mean(AIRLINE_LR_1E2[-5:]), abs=1e-12)
    assert (found["best_step"], found["last_step"]) == (1350, 6750) and found["z"] < -4


def test_a_steady_fall_is_found():
    found = falls(curve(np.linspace(-1.30, -1.36, 20)))
    assert found is not None and found["best"] == pytest.approx(-1.30 - 0.06 / 19, abs=1e-9)  # windows of 3


def test_rising_flat_noisy_or_short_curves_are_not_flagged():
    rng = np.random.default_rng(0)
    assert falls(curve(np.linspace(-1.5, -1.27, 40))) is None  # rising
    assert falls(curve(-1.5 + 0.2 * (1 - np.exp(-np.arange(45) / 5)) + 0.01 * rng.standard_normal(45))) is None
    assert sum(falls(curve(-0.8 + 0.01 * rng.standard_normal(30))) is not None for _ in range(200)) <= 5  # noise
    assert falls(curve([-1.0, -1.1, -1.2, -1.3, -1.4])) is None  # fewer than two windows of 3
    assert falls(curve(np.linspace(-1.0, -1.0005, 20))) is None  # a fall below the tolerance (1e-3)


def test_a_minimised_monitor_is_watched_for_rises():
    assert falls(curve(np.linspace(1.0, 1.2, 10)), higher_is_better=False) is not None
    assert falls(curve(np.linspace(1.2, 1.0, 10)), higher_is_better=False) is None


@pytest.mark.slow
def test_a_falling_elbo_warns_and_tags_the_run(tmp_path, mlflow_uri, monkeypatch, capsys):
    """Through `gpdlm train`'s path: sVBSSGP watches its ``elbo_per_datum``. The real monitor on a small
    AIMPEAK-like run at the default settings does not fall: no tag. The same run with the monitor made to
    fall by 0.01 per evaluation: the warning on stderr, in gpdlm.log, and the tag."""
    from mlflow.tracking import MlflowClient

    from gpdlm_cli.objectives.sparse_spectrum import SVBSSGPBound
    from gpdlm_cli.run.train import run_train

    from ..conftest import compose

    over = [
        "dataset=aimpeak",
        "dataset.n_segments=40",
        "progress=false",
        "model=svbssgp",
        "model.partitions=10",
        "model.predict_samples=2",
        "trainer.max_iters=null",
        "trainer.max_epochs=8",
        "trainer.eval_every=0",
        "trainer.eval_every_epochs=1",
        f"tracking.uri={mlflow_uri}",
        "tracking.experiment=watch",
    ]
    run_train(compose(over + ["tracking.run_name=plain"]), tmp_path / "plain", overrides=over)
    calls = []

    def falling(self, x, y, z):
        calls.append(1)
        return -1.0 - 0.01 * len(calls)

    monkeypatch.setattr(SVBSSGPBound, "elbo_per_datum", falling)
    run_train(compose(over + ["tracking.run_name=falling"]), tmp_path / "falling", overrides=over)
    err = capsys.readouterr().err
    assert (
        "gpdlm: warning: elbo_per_datum ended below its best: -1.02 (mean of the window ending at step 30) -> "
        "-1.07 (the last window); the optimiser's step size" in err
    )
    assert "elbo_per_datum ended below its best" in (tmp_path / "falling" / "gpdlm.log").read_text()
    client = MlflowClient(mlflow_uri)
    runs = {
        r.data.tags["mlflow.runName"]: r
        for r in client.search_runs([client.get_experiment_by_name("watch").experiment_id])
    }
    assert runs["falling"].data.tags["gpdlm.warning.elbo_per_datum"] == "falls -1.02 -> -1.07"
    assert "gpdlm.warning.elbo_per_datum" not in runs["plain"].data.tags
