"""``model.training.feedback=own_predictions`` (free simulation trained on the model's own rollouts, issue 40):
the windows written for training are the model's free simulation over the training series, a run trains and
records the mode, any other prediction mode is refused in one line, and the default path is unchanged."""

from __future__ import annotations

import pytest
import torch

from gpdlm_cli import build
from gpdlm_cli.methods.recurrent_setup import OwnFeedback
from gpdlm_cli.run.saved_model import load_run
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import NoRunTracker, compose, run_cli

TINY = [
    "dataset=sysid_actuator",
    "dataset.n=160",
    "dataset.seed=0",
    "dataset.mode=free_simulation",
    "dataset.lag=3",
    "model.network.units=4",
    "trainer.max_iters=null",
    "trainer.batch_size=16",
    "trainer.eval_every=0",
    "trainer.eval_every_epochs=1",
    "trainer.stop_rule=none",
    "progress=false",
    "tracking.enabled=false",
    "threads=1",
    "model.horizons=[1,5]",
]
GP = [
    "model=gp_lstm",
    "model.training.algorithm=delayed",
    "model.training.final_theta_steps=3",
    "model.training.theta_steps=2",
]
OWN = ["model.training.feedback=own_predictions"]


def loop_rollout(model, x: torch.Tensor, feedback) -> torch.Tensor:
    """The free simulation over windows ``x`` written as a plain loop: row j's past-target column of output
    o that lies r rows back takes the model's mean at row j - r (j >= r), one window at a time."""
    out = x.clone()
    mus = []
    for j in range(x.shape[0]):
        row = x[j].clone()
        for o, taps in enumerate(feedback):
            for col, back in taps:
                if j >= back:
                    row[col] = mus[j - back][o]
        out[j] = row
        mus.append(model.means(row[None])[0].tolist())
    return out


@pytest.mark.parametrize("model", [["model=lstm"], GP], ids=["lstm", "gp_lstm"])
def test_the_training_windows_are_the_models_own_rollout(model):
    """float64 network: the windows the hook writes equal a loop rollout of the same model (conditioned, for
    the GP, on the windows it trained on so far) exactly; they are the loop's, the refresh's and the
    evaluation's training tensor and the model's buffer; the inputs and the first window stay true."""
    torch.manual_seed(0)
    cfg = compose([*TINY, *model, *OWN, "model.network.dtype=float64", "trainer.max_epochs=1"])
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    hooks = [h for s in method.stages for h in s.hooks if isinstance(h, OwnFeedback)]
    assert len(hooks) == 1
    own, x, y = hooks[0], data.x_train, data.y_train
    assert own.x is x and method.model.feedback_windows is x and own.steps_per_epoch == x.shape[0] // 16
    true = x.clone()
    fed = {c for taps in own.feedback for c, _ in taps}
    for _ in range(2):  # the second rollout: a GP conditioned on the first one's windows
        before = x.clone()
        method.model.condition(before, y)
        expected = loop_rollout(method.model, true, own.feedback)
        own.rollout()
        assert torch.equal(x, expected)
        with torch.no_grad():  # another model state for the second rollout
            for p in method.model.network.parameters():
                p.mul_(1.1)
    inputs = [c for c in range(x.shape[1]) if c not in fed]
    assert torch.equal(x[:, inputs], true[:, inputs]) and torch.equal(x[0], true[0])
    assert not torch.equal(x, true) and own.rollouts == 2
    other = OwnFeedback(method.model, x, y, own.feedback)  # a resumed stage's hook continues the counts
    other.load_checkpoint_state(own.checkpoint_state())
    assert other.diagnostics() == own.diagnostics() and own.diagnostics()["feedback_rollouts"] == 2


@pytest.mark.parametrize("model", [["model=lstm"], GP], ids=["lstm", "gp_lstm"])
def test_a_run_on_its_own_rollouts_trains_and_records_the_mode(tmp_path, model):
    tracker = NullTracker()
    m = run_train(compose([*TINY, *model, *OWN, "trainer.max_epochs=1", "seed=0"]), tmp_path, tracker=tracker)
    assert tracker.status == "FINISHED" and tracker.params["model.training.feedback"] == "own_predictions"
    assert "own rollout" in tracker.tags["gpdlm.free_simulation"]
    assert m["feedback_rollouts"] == 2  # before the first step and after the epoch
    assert m["feedback_rollout_seconds"] > 0 and torch.isfinite(torch.tensor(m["test_sim_rmse"]))
    # the saved model comes back with the windows it was trained on (a GP conditions on them) and predicts the same
    loaded = load_run(tmp_path)
    assert loaded.method.model.feedback_windows is loaded.data.x_train
    fresh = build.load_data(loaded.cfg)[2].x_train
    assert not torch.equal(loaded.data.x_train, fresh)  # the rollout's windows, not the series' true ones
    again = loaded.method.evaluate(loaded.data.x_test, loaded.data.y_test, "test_", loaded.splits.y_std)
    assert again["test_sim_rmse"] == pytest.approx(m["test_sim_rmse"], rel=1e-12)


def test_own_predictions_outside_free_simulation_is_one_line_before_any_run(tmp_path, capsys):
    cfg = compose([*TINY, "model=lstm", *OWN, "dataset.mode=autoregression"])
    message = (
        "model.training.feedback=own_predictions trains on the model's own free-simulation rollouts: it needs "
        "dataset.mode=free_simulation (got dataset.mode=autoregression)"
    )
    with pytest.raises(Exception) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    assert str(e.value) == message
    rc, err = run_cli(["train", "model=gp_rnn", "dataset=sysid_drives", *OWN], tmp_path, capsys)
    assert rc != 0 and err == [f"gpdlm: error: {message}"], err


# the metrics of TINY + 2 epochs trained by the code before model.training.feedback existed (d2a4c66), threads=1
BEFORE = {
    "lstm": (0.8257061204810222, 0.7767420776237434, 0.9751265284356787),
    "gp_lstm": (1.0575041890174264, 0.8423608856688988, 1.24278248518331),
}


@pytest.mark.parametrize("model", [["model=lstm"], GP], ids=["lstm", "gp_lstm"])
def test_the_default_trains_teacher_forced_as_before(tmp_path, model):
    """feedback=true_targets (the default): no hook, no buffer, no new metric, the metrics of the code before."""
    cfg = compose([*TINY, *model, "trainer.max_epochs=2"])
    assert cfg.model.training.feedback == "true_targets"
    torch.set_num_threads(1)
    m = run_train(cfg, tmp_path, tracker=NullTracker())
    assert not any(k.startswith("feedback_") for k in m)
    assert (m["test_sim_rmse"], m["test_rmse"], m["val_rmse"]) == pytest.approx(BEFORE[model[0][6:]], rel=1e-6)


# ----- model.training.feedback_conditioning=true_targets (the conditioning ablation) -----------------------------
TRUE_COND = [*OWN, "model.training.feedback_conditioning=true_targets"]


def test_true_target_conditioning_rolls_out_and_predicts_from_the_true_windows():
    """The rollout is the loop rollout of the GP conditioned on the true-target windows (a copy taken before any
    rollout, the model's buffer ``conditioning_windows``); the training tensor takes the rollout; every
    evaluation conditions the GP on the true windows, not on the training tensor."""
    torch.manual_seed(0)
    cfg = compose([*TINY, *GP, *TRUE_COND, "model.network.dtype=float64", "trainer.max_epochs=1"])
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    own = next(h for s in method.stages for h in s.hooks if isinstance(h, OwnFeedback))
    x, y, model = data.x_train, data.y_train, method.model
    true = x.clone()
    assert own.x is x and model.feedback_windows is x
    assert own.conditioning is model.conditioning_windows and own.conditioning is not x
    for _ in range(2):
        model.condition(true, y)
        expected = loop_rollout(model, true, own.feedback)
        own.rollout()
        assert torch.equal(x, expected) and torch.equal(own.conditioning, true)
        with torch.no_grad():
            for p in model.network.parameters():
                p.mul_(1.1)
    assert not torch.equal(x, true)
    method.evaluate(data.x_val, data.y_val, "val_", splits.y_std)
    with torch.no_grad():
        assert torch.equal(model._train_h, model.embed(true))  # conditioned on the true windows
        assert not torch.equal(model._train_h, model.embed(x))


def test_a_run_with_true_target_conditioning_trains_on_rollouts_and_predicts_from_the_true_windows(
    tmp_path, monkeypatch
):
    """Every batch of Algorithm 2's stage is rows of the rolled-out training tensor (not the true windows),
    while the saved model conditions on the true windows: its buffer equals the series' true windows exactly,
    the training-window buffer holds the rollout, and the reloaded model reproduces the run's test metrics."""
    real = build.build_method
    seen = []

    def recording(cfg, data, task, *family, **options):
        method = real(cfg, data, task, *family, **options)
        stage = next(s for s in method.stages if s.name == "delayed")
        objective, x = stage.objective, data.x_train

        def record(xb, yb, idx, objective=objective, x=x):
            seen.append((xb.clone(), x[idx].clone(), method.model.conditioning_windows[idx].clone()))
            return objective(xb, yb, idx)

        stage.objective = record
        return method

    monkeypatch.setattr(build, "build_method", recording)
    tracker = NullTracker()
    m = run_train(compose([*TINY, *GP, *TRUE_COND, "trainer.max_epochs=2", "seed=0"]), tmp_path, tracker=tracker)
    monkeypatch.setattr(build, "build_method", real)
    assert tracker.status == "FINISHED" and tracker.params["model.training.feedback_conditioning"] == "true_targets"
    assert "true-target windows" in tracker.tags["gpdlm.free_simulation"] and m["feedback_rollouts"] == 3
    assert len(seen) == 2 * (58 // 16)
    assert all(torch.equal(xb, rolled) for xb, rolled, _ in seen)  # batches: rows of the rolled-out tensor
    assert all(not torch.equal(xb, true) for xb, _, true in seen)  # ... which are not the true windows
    loaded = load_run(tmp_path)
    fresh = build.load_data(loaded.cfg)[2].x_train
    model = loaded.method.model
    assert torch.equal(model.conditioning_windows, fresh) and not torch.equal(model.feedback_windows, fresh)
    again = loaded.method.evaluate(loaded.data.x_test, loaded.data.y_test, "test_", loaded.splits.y_std)
    assert again["test_sim_rmse"] == pytest.approx(m["test_sim_rmse"], rel=1e-12)
    with torch.no_grad():
        assert torch.equal(model._train_h, model.embed(fresh))


@pytest.mark.parametrize(
    "overrides, model, feedback",
    [
        (["model=lstm", *TRUE_COND], "lstm", "own_predictions"),
        ([*GP, "model.training.feedback_conditioning=true_targets"], "gp_lstm", "true_targets"),
    ],
    ids=["network", "teacher_forced_gp"],
)
def test_true_target_conditioning_elsewhere_is_one_line_before_any_run(tmp_path, capsys, overrides, model, feedback):
    message = (
        "model.training.feedback_conditioning=true_targets chooses the windows a GP model trained on its own "
        "rollouts conditions on: it needs a GP model and model.training.feedback=own_predictions (got "
        f"model={model}, model.training.feedback={feedback})"
    )
    with pytest.raises(Exception) as e:
        run_train(compose([*TINY, *overrides]), tmp_path, tracker=NoRunTracker())
    assert str(e.value) == message
    rc, err = run_cli(["train", *TINY, *overrides], tmp_path, capsys)
    assert rc != 0 and err == [f"gpdlm: error: {message}"], err


# the metrics of TINY + own_predictions + 2 epochs trained by the code before feedback_conditioning existed (fd6aea7)
BEFORE_OWN = {
    "lstm": (0.8274511912283858, 0.7998719839511643, 1.0513917647685982),
    "gp_lstm": (1.0269367304260384, 0.8370529814358597, 1.3077760167248806),
}


@pytest.mark.parametrize("model", [["model=lstm"], GP], ids=["lstm", "gp_lstm"])
def test_own_rollouts_with_the_default_conditioning_train_as_before(tmp_path, model):
    """feedback_conditioning=rollouts (the default): no second buffer, the metrics of the code before the key."""
    cfg = compose([*TINY, *model, *OWN, "trainer.max_epochs=2"])
    assert cfg.model.training.feedback_conditioning == "rollouts"
    torch.set_num_threads(1)
    m = run_train(cfg, tmp_path, tracker=NullTracker())
    assert "conditioning_windows" not in dict(load_run(tmp_path).method.model.named_buffers())
    assert (m["test_sim_rmse"], m["test_rmse"], m["val_rmse"]) == pytest.approx(BEFORE_OWN[model[0][6:]], rel=1e-6)
