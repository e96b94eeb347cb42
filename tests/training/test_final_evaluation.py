"""The final iterate's evaluation (``Loop._finish`` under ``keep_best``) is a point of the learning curves
like any evaluation: when the selection picks the last step, the curves show the point selected. It goes
to the callbacks' ``on_final_evaluate`` hook, not ``on_evaluate``, so no checkpoint is written for it; the
iterate selected and every metric of the run stay what they were."""

from __future__ import annotations

import pytest
import torch

from gpdlm_cli import methods
from gpdlm_cli.run.train import run_train
from gpdlm_cli.training import TrainerSettings, train
from gpdlm_cli.training.callbacks import Callback

from ..conftest import compose, copy_store
from .test_families import ToyFamily, _Toy, _toy_run, toy_family  # noqa: F401 (a fixture)


def _quadratic():
    """Least squares from w = 0 by Adam at a small rate: the full-data loss falls at every step."""
    torch.manual_seed(0)
    x = torch.randn(40, 2, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0], dtype=torch.float64)
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)

    def loss():
        with torch.no_grad():
            return {"val_mse": float(((x @ w - y) ** 2).mean())}

    return x, y, w, (lambda xb, yb: ((xb @ w - yb) ** 2).mean()), loss


class Hooks(Callback):
    """The steps of the evaluations each hook saw."""

    def __init__(self):
        self.evaluate: list[int] = []
        self.final: list[tuple[int, dict]] = []

    def on_evaluate(self, loop, metrics):
        self.evaluate.append(loop.step)

    def on_final_evaluate(self, loop, metrics):
        self.final.append((loop.step, dict(metrics)))


class CountingCheckpointer:
    """A ``Checkpointer`` stand-in: how many evaluations ``callbacks.Checkpointing`` reported."""

    state = None

    def __init__(self):
        self.evaluations = 0
        self.steps = 0

    def after_evaluation(self, loop_state):
        self.evaluations += 1

    def after_step(self, loop_state):  # where trainer.checkpoint_minutes is checked
        self.steps += 1


@pytest.mark.parametrize("keep_best", ["val_mse", None])
def test_the_final_iterates_evaluation_is_on_the_curves_and_writes_no_checkpoint(keep_best):
    x, y, w, objective, evaluate = _quadratic()
    settings = TrainerSettings(
        max_iters=50, lr=0.01, eval_every=10, check_every=5, stop_rule="none", progress=False, keep_best=keep_best
    )
    logged: dict[str, list] = {}
    hooks, ck = Hooks(), CountingCheckpointer()
    res = train(
        objective,
        [w],
        x,
        y,
        settings,
        generator=torch.Generator().manual_seed(0),
        evaluate=evaluate,
        log_steps=lambda series: [logged.setdefault(k, []).extend(v) for k, v in series.items()],
        checkpoint=ck,
        callbacks=[hooks],
    )
    assert hooks.evaluate == [10, 20, 30, 40] and ck.evaluations == 4  # the periodic ones only
    assert ck.steps == 50  # the time rule is asked once a step
    curve = [s for s, _ in logged["val_mse"]]
    if keep_best is None:  # no final evaluation in the loop (the caller evaluates the final model)
        assert curve == [10, 20, 30, 40] and hooks.final == [] and res.best_iteration is None
        return
    assert res.best_iteration == 50  # the loss falls at every step: the last iterate is selected
    final = evaluate()["val_mse"]
    assert curve == [10, 20, 30, 40, 50] and logged["val_mse"][-1] == (50, final) and res.best_value == final
    assert hooks.final == [(50, {"val_mse": final})]
    assert [v for _, v in logged["val_mse"]] == sorted((v for _, v in logged["val_mse"]), reverse=True)
    assert [s for s, _ in logged["train_loss"]] == list(range(1, 51))


# the toy family's run (tests/training/test_families.py) with keep_best=gap and 5 steps: |w - 1| falls at
# every step, so the final iterate (step 5) is selected; these are its metrics before the final evaluation
# reached the curves (2026-11-29), which must not change
OLD_METRICS = {
    "val_nll": 4.086329120369842,
    "val_rmse": 13.819506583286703,
    "val_crps": 7.963024681555874,
    "test_nll": 4.139481306504481,
    "test_rmse": 14.912273553200283,
    "test_coverage_50": 0.5581395348837209,
    "gap": 0.32134281249999996,
    "iterations": 5,
    "first_loss": 4.5,
    "final_loss": 2.985391940800781,
    "converged": 0,
    "best_iteration": 5,
}


def test_a_run_selecting_its_last_step_logs_that_step_and_keeps_its_metrics(tmp_path, toy_family):  # noqa: F811
    metrics, tracker = _toy_run(tmp_path, "trainer.keep_best=gap", "trainer.max_iters=5")
    assert {k: metrics[k] for k in OLD_METRICS} == pytest.approx(
        OLD_METRICS, rel=1e-6, abs=0
    )  # across CPUs float rounding differs (1e-9 to 2e-7 relative measured on an AMD EPYC, 2026-11-29)
    assert metrics["gap"] == pytest.approx(OLD_METRICS["gap"], rel=1e-6) and metrics["best_iteration"] == 5
    # the step metrics the tracker (MLflow) got: the evaluations at steps 1-4 and the final iterate's at 5,
    # the point the selection picked, with the run's own value
    for name in ("gap", "val_nll", "test_rmse"):
        steps = tracker.steps[name]
        assert [s for s, _ in steps] == [1, 2, 3, 4, 5], name
        assert steps[-1][1] == metrics[name], name
    assert [round(v, 12) for _, v in tracker.steps["gap"]] == [0.85, 0.7075, 0.572125, 0.44351875, 0.3213428125]


class TwoStageToy(ToyFamily):
    """The toy's objective in two stages of the same parameter: stage one ends (step 5) on its last
    iterate, which only the final evaluation sees; stage two selects step 8 (|w - 1| is smallest there)."""

    MODELS = ("toy2",)

    @staticmethod
    def build(cfg, data, task):
        from gpdlm_cli.likelihoods import GaussianLikelihood

        model = _Toy(data.x_train.dtype).to(data.x_train.device)
        lik = GaussianLikelihood().to(data.x_train.device, data.x_train.dtype)

        def objective(xb, yb):
            return 0.5 * ((model.w - 3.0) ** 2).sum()

        stages = [methods.Stage(name, objective, {"w": [model.w]}) for name in ("one", "two")]
        return methods.Method(
            "toy2", model, lik, stages, monitors={"gap": lambda: abs(float(model.w.detach()[0]) - 1.0)}
        )


@pytest.mark.slow
def test_an_earlier_stages_selected_last_step_reaches_the_mlflow_store(tmp_path, template_db, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setitem(methods.REGISTRY, "toy2", TwoStageToy)
    uri = copy_store(template_db, tmp_path / "store")
    cfg = compose(
        [
            "model.name=toy2",
            "trainer.optimizer=sgd",
            "trainer.lr=0.05",
            "trainer.max_iters=5",
            "trainer.eval_every=1",
            "trainer.stop_window=0",
            "trainer.keep_best=gap",
            "progress=false",
            f"tracking.uri={uri}",
            "tracking.experiment=final_eval",
            "dataset.split.train_size=100",
            "threads=1",
        ]
    )
    metrics = run_train(cfg, tmp_path / "run")
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("final_eval").experiment_id])
    history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "gap"))
    steps = [s for s, _ in history]
    # stage one: evaluations at 1-4 and its final iterate at 5 (selected); stage two: 6-9, its final iterate
    # at 10, then the run's final metrics at 10 (the restored step-8 iterate)
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10]
    w5 = 3 - 3 * 0.95**5
    assert dict(history[:5])[5] == pytest.approx(abs(w5 - 1), rel=1e-12)
    w8 = 3 - 3 * 0.95**8
    assert metrics["gap"] == pytest.approx(abs(w8 - 1), rel=1e-12) == run.data.metrics["gap"]
    assert metrics["best_iteration"] == 8
