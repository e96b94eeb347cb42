"""A callback is one class in one file (issue 46): this module defines one, hands it to the loop, and
checks what it saw against the trainer's settings -- and one that stops a run at a chosen step."""

from __future__ import annotations

import pytest
import torch

from gpdlm_cli.training import TrainerSettings, train
from gpdlm_cli.training.callbacks import Callback
from gpdlm_cli.training.stages import run_stages


class Counter(Callback):
    """Counts every hook call, and the evaluation steps it saw."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.evaluated_at: list[int] = []

    def _count(self, hook):
        self.calls[hook] = self.calls.get(hook, 0) + 1

    def on_start(self, loop):
        self._count("on_start")

    def on_stage_start(self, loop, run):
        self._count("on_stage_start")

    def on_train_start(self, loop):
        self._count("on_train_start")

    def on_step(self, loop):
        self._count("on_step")

    def on_evaluate(self, loop, metrics):
        self._count("on_evaluate")
        self.evaluated_at.append(loop.step)

    def on_train_end(self, loop, result):
        self._count("on_train_end")

    def on_stage_end(self, loop, run):
        self._count("on_stage_end")

    def on_end(self, loop, fit):
        self._count("on_end")


class StopAt(Callback):
    """Ends training at step ``at``: the loop stops when ``converged`` is set after an iteration."""

    def __init__(self, at):
        self.at = at

    def on_step(self, loop):
        if loop.it == self.at:
            loop.converged = True


def _problem():
    torch.manual_seed(0)
    x = torch.randn(40, 2, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0], dtype=torch.float64)
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    return x, y, w, lambda xb, yb: ((xb @ w - yb) ** 2).mean()


class _Stage:
    """The smallest family stage (methods.base.Stage's fields the stage loop reads)."""

    def __init__(self, name, objective, params):
        self.name, self.objective, self.params, self.groups = name, objective, params, None
        self.prepare = self.solve = None
        self.hooks, self.overrides, self.stochastic, self.wants_index = [], {}, False, False


def test_a_counting_callback_sees_every_step_and_evaluation_the_settings_ask_for():
    x, y, w, objective = _problem()
    settings = TrainerSettings(max_iters=50, lr=0.01, eval_every=10, check_every=5, stop_rule="none", progress=False)
    counter = Counter()
    res = train(
        objective,
        [w],
        x,
        y,
        settings,
        generator=torch.Generator().manual_seed(0),
        evaluate=lambda: {"val_mse": 0.0},
        callbacks=[counter],
    )
    assert res.iterations == 50
    # evaluations at 10, 20, 30, 40; not at 50, the last iteration (the caller evaluates the final model)
    assert counter.calls == {"on_train_start": 1, "on_step": 50, "on_evaluate": 4, "on_train_end": 1}
    assert counter.evaluated_at == [10, 20, 30, 40]


def test_the_stage_hooks_come_once_per_stage_and_steps_continue_across_stages():
    x, y, w, objective = _problem()
    settings = TrainerSettings(max_iters=30, lr=0.01, eval_every=7, check_every=5, stop_rule="none", progress=False)
    counter = Counter()
    stages = [_Stage("a", objective, [w]), _Stage("b", objective, [w])]
    fit = run_stages(
        stages,
        x,
        y,
        settings,
        generator=torch.Generator().manual_seed(0),
        evaluate=lambda: {"val_mse": 0.0},
        callbacks=[counter],
    )
    assert fit.iterations == 60
    assert counter.calls == {
        "on_start": 1,
        "on_stage_start": 2,
        "on_train_start": 2,
        "on_step": 60,
        "on_evaluate": 8,
        "on_train_end": 2,
        "on_stage_end": 2,
        "on_end": 1,
    }
    assert counter.evaluated_at == [7, 14, 21, 28, 37, 44, 51, 58]  # global steps: stage b starts at 30


@pytest.mark.parametrize("at", [1, 17, 40])
def test_a_callback_can_stop_the_run_at_a_step(at):
    x, y, w, objective = _problem()
    settings = TrainerSettings(max_iters=40, lr=0.01, eval_every=0, stop_rule="none", progress=False)
    counter = Counter()
    res = train(
        objective, [w], x, y, settings, generator=torch.Generator().manual_seed(0), callbacks=[StopAt(at), counter]
    )
    assert res.iterations == at == counter.calls["on_step"]
    assert len(res.losses) == at


class Remember(Callback):
    """Counts steps across a checkpoint: its count goes into the loop's state and comes back on resume."""

    def __init__(self, stop_at=None):
        self.n, self.loaded, self.stop_at, self.saved = 0, None, stop_at, None

    def on_step(self, loop):
        self.n += 1
        if loop.it == self.stop_at:
            self.saved = loop.state()
            loop.converged = True

    def state(self):
        return {"remember_n": self.n}

    def load_state(self, state):
        self.loaded = self.n = state["remember_n"]


def test_a_callbacks_state_goes_through_the_loop_state_and_a_resumed_call_ends_as_the_uninterrupted_one():
    settings = TrainerSettings(max_iters=40, lr=0.05, eval_every=0, stop_rule="none", progress=False)
    x, y, w, objective = _problem()
    full = train(objective, [w], x, y, settings, generator=torch.Generator().manual_seed(0))
    x, y, w, objective = _problem()
    first = Remember(stop_at=15)
    train(objective, [w], x, y, settings, generator=torch.Generator().manual_seed(0), callbacks=[first])
    assert first.saved["remember_n"] == 15 and first.saved["it"] == 15
    again = Remember()
    resumed = train(
        objective,
        [w],
        x,
        y,
        settings,
        generator=torch.Generator().manual_seed(0),
        callbacks=[again],
        resume=first.saved,
    )
    assert again.loaded == 15 and again.n == 40
    assert resumed.iterations == 40 and resumed.losses == full.losses  # bit for bit, Adam's state included
