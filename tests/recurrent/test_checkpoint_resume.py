"""Recurrent runs resume from their checkpoints (GP-LSTM and the network baselines): a run stopped by SIGTERM
after a checkpoint -- in Algorithm 2's stage, in the final theta stage, in a baseline's training --
and continued with ``gpdlm resume`` ends with exactly (bit for bit) the uninterrupted run's metrics, time
and memory aside. Before, the recurrent stages' hooks had no checkpoint state: no checkpoint was written
in them and ``gpdlm resume`` had nothing to continue."""

from __future__ import annotations

import json

import pytest

from gpdlm_cli.run.train import run_train
from gpdlm_cli.signals import Terminated, install_signal_handlers
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training.checkpoint import FILE, read_checkpoint

from ..conftest import KillAt, compose, run_cli

TINY = [
    "dataset=sysid_actuator",
    "dataset.n=160",
    "dataset.seed=0",
    "dataset.lag=3",
    "model.network.units=4",
    "model.network.dropout=0.1",  # the dropout-mask generator goes through the checkpoint too
    "trainer.max_iters=null",
    "trainer.max_epochs=3",
    "trainer.batch_size=16",  # 58 training windows: 3 steps per epoch
    "trainer.eval_every=0",
    "trainer.eval_every_epochs=1",
    "trainer.stop_rule=none",
    "trainer.checkpoint_every=1",
    "progress=false",
    "tracking.enabled=false",
    "threads=1",
]
GP = [
    "model=gp_lstm",
    "model.training.algorithm=delayed",
    "model.training.theta_steps=2",
    "model.training.final_theta_steps=3",
    "model.init=pretrained",
    "model.pretrain_epochs=1",
]
# time and process memory differ by design
TIMING = ("train_seconds", "iter_ms", "peak_rss_mb", "epoch_seconds", "test_ms_per_point", "feedback_rollout_seconds")
CASES = {  # (overrides, the stage the run is stopped in, the step of that stage)
    "gp_lstm_in_algorithm_2": (GP, "delayed", 5),
    "gp_lstm_in_final_theta": (GP, "theta", 2),
    "gp_lstm_in_pretraining": (GP, "pretrain", 2),
    "gp_lstm_full_descent": ([*GP, "model.training.algorithm=full"], "full", 2),
    "gp_lstm_own_rollouts": (
        [*GP, "dataset.mode=free_simulation", "model.training.feedback=own_predictions", "model.horizons=[1,5]"],
        "delayed",
        4,
    ),
    "gp_lstm_own_rollouts_true_target_conditioning": (  # two window sets: both are the model's buffers
        [
            *GP,
            "dataset.mode=free_simulation",
            "model.training.feedback=own_predictions",
            "model.training.feedback_conditioning=true_targets",
            "model.horizons=[1,5]",
        ],
        "delayed",
        4,
    ),
    # structured KISS: CG and stochastic Lanczos on probes seeded per refresh (the refresh count resumes)
    "gp_lstm_kiss_structured": (
        [*GP, "model.gp.inference=kiss", "model.gp.grid_size=8", "model.gp.kiss_dense_below=0", "trainer.max_epochs=2"],
        "delayed",
        5,
    ),
    "lstm_baseline": (["model=lstm"], "mse", 5),
    "narx_baseline": (["model=narx"], "mse", 4),
    # GRU and RNN baselines: the LSTM's training loop and checkpoint with another cell (not repeated here)
}


def _strip(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in TIMING}


@pytest.mark.slow  # two tiny recurrent runs and a resume: 1-5 s each
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_recurrent_run_stopped_after_a_checkpoint_resumes_to_the_uninterrupted_result(
    name, tmp_path, monkeypatch, capsys
):
    from gpdlm_cli import build

    install_signal_handlers()
    extra, stage_name, at = CASES[name]
    ov = TINY + extra
    full = run_train(compose(ov), tmp_path / "full", tracker=NullTracker())
    real = build.build_method

    def with_killer(cfg, data, task, *family, **options):
        method = real(cfg, data, task, *family, **options)
        stage = next(s for s in method.stages if s.name == stage_name)
        stage.hooks = [*stage.hooks, KillAt(at)]
        return method

    monkeypatch.setattr(build, "build_method", with_killer)
    folder = tmp_path / "cut"
    with pytest.raises(Terminated):
        run_train(compose(ov), folder, tracker=NullTracker())
    monkeypatch.setattr(build, "build_method", real)
    state = read_checkpoint(folder / FILE)
    names = [s.name for s in real(compose(ov), *_data(ov)).stages]
    assert state is not None and state["stage"] == names.index(stage_name) and state["loop"]["it"] == at
    assert json.loads((folder / "metrics.json").read_text())["status"] == "KILLED"
    rc, err = run_cli(["resume", str(folder)], tmp_path, capsys)
    assert rc == 0, err
    resumed = json.loads((folder / "metrics.json").read_text())
    assert "status" not in resumed and not (folder / FILE).exists()
    assert _strip(resumed) == _strip(full)  # bit-identical: every metric, diagnostics and counts included
    assert resumed["iterations"] == full["iterations"] and resumed["epoch_seconds"] > 0


def _data(ov):
    from gpdlm_cli import build

    cfg = compose(ov)
    _, splits, data = build.load_data(cfg)
    return data, splits.task


@pytest.mark.slow  # two tiny GP-LSTM runs: ~1 s
def test_a_gp_lstm_run_stopped_while_it_saves_its_results_resumes_with_its_refresh_counts(tmp_path, monkeypatch):
    """A stop after the last iteration (while the learning curve is drawn) leaves a complete checkpoint; the
    resumed run trains nothing and reports the uninterrupted run's refresh counts, drifts and time per epoch:
    the hooks of every stage go through the checkpoint. Before, they came back as 0 refreshes and NaN."""
    import signal as _signal

    from gpdlm_cli.run import train as train_module
    from gpdlm_cli.training.loop import Loop

    install_signal_handlers()
    ov = TINY + GP
    full = run_train(compose(ov), tmp_path / "full", tracker=NullTracker())

    def stopped(*args, **kwargs):
        raise Terminated(_signal.SIGTERM)

    monkeypatch.setattr(train_module, "plot_learning_curve", stopped)
    with pytest.raises(Terminated):
        run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    assert read_checkpoint(tmp_path / "cut" / FILE)["complete"] is True
    monkeypatch.undo()

    def no_training(*args, **kwargs):
        raise AssertionError("a complete run trained again")

    monkeypatch.setattr(Loop, "train", no_training)
    resumed = run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    assert full["refreshes"] == 4 and full["embedding_drift_mean"] > 0
    assert _strip(resumed) == _strip(full)
    assert resumed["epoch_seconds"] > 0  # the cut run's own time per epoch, not NaN
