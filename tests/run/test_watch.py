"""Watched monitors (``run.watch``, issue 40): a warning and the tag ``gpdlm.warning.<monitor>`` when a
family's monitored objective gets worse over the second half of a run; none when it rises, sits in
noise, or the curve is too short."""

from __future__ import annotations

import numpy as np
import pytest

from gpdlm_cli.run.watch import falls


def curve(values, every=10):
    return [(every * (i + 1), v) for i, v in enumerate(values)]


def test_a_steady_fall_is_found_with_its_fitted_ends():
    found = falls(curve(np.linspace(-1.30, -1.36, 20)))
    assert found is not None
    assert found["first"] == pytest.approx(-1.30 - 0.06 * 10 / 19, abs=1e-9)
    assert found["last"] == pytest.approx(-1.36, abs=1e-9)
    assert (found["from_step"], found["to_step"]) == (110, 200) and found["change"] < 0


def test_rising_flat_noisy_or_short_curves_are_not_flagged():
    rng = np.random.default_rng(0)
    assert falls(curve(np.linspace(-1.5, -1.27, 40))) is None  # rising
    assert falls(curve(-0.8 + 0.02 * rng.standard_normal(30))) is None  # noise about a plateau
    assert falls(curve([-1.0, -1.1, -1.2, -1.3, -1.4])) is None  # 3 points in the later half: too few
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

    over = ["dataset=aimpeak", "dataset.n_segments=40", "progress=false", "model=svbssgp", "model.partitions=10",
            "model.predict_samples=2", "trainer.max_iters=null", "trainer.max_epochs=8", "trainer.eval_every=0",
            "trainer.eval_every_epochs=1", f"tracking.uri={mlflow_uri}", "tracking.experiment=watch"]
    run_train(compose(over + ["tracking.run_name=plain"]), tmp_path / "plain", overrides=over)
    calls = []

    def falling(self, x, y, z):
        calls.append(1)
        return -1.0 - 0.01 * len(calls)

    monkeypatch.setattr(SVBSSGPBound, "elbo_per_datum", falling)
    run_train(compose(over + ["tracking.run_name=falling"]), tmp_path / "falling", overrides=over)
    err = capsys.readouterr().err
    assert "gpdlm: warning: elbo_per_datum got worse over the second half of training: -1.05 -> -1.09" in err
    assert "elbo_per_datum got worse" in (tmp_path / "falling" / "gpdlm.log").read_text()
    client = MlflowClient(mlflow_uri)
    runs = {r.data.tags["mlflow.runName"]: r for r in
            client.search_runs([client.get_experiment_by_name("watch").experiment_id])}
    assert runs["falling"].data.tags["gpdlm.warning.elbo_per_datum"] == "falls -1.05 -> -1.09"
    assert "gpdlm.warning.elbo_per_datum" not in runs["plain"].data.tags
