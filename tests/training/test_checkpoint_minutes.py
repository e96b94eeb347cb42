"""Checkpoints by wall time (``trainer.checkpoint_minutes``): a run that never evaluates (``eval_every=0``, as
the sparse-spectrum airline presets) still leaves checkpoints, and a run that dies without a chance to write
one (a crash, not a signal) resumes from the last of them with the uninterrupted run's metrics."""

from __future__ import annotations

import pytest

from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training.checkpoint import FILE, read_checkpoint

from ..conftest import compose

BASE = [
    "model=dlm",
    "model.num_inducing=12",
    "dataset.split.train_size=150",
    "trainer.max_iters=16",
    "trainer.eval_every=0",  # no evaluation: checkpoint_every alone would never write one
    "trainer.keep_best=null",
    "progress=false",
    "threads=1",
    "tracking.enabled=false",
]
TIMING = ("train_seconds", "iter_ms", "peak_memory_mb", "peak_rss_mb")


class CrashAt:
    """A hook that fails in step ``at`` the way a crash does: no signal, so no checkpoint on the way out."""

    def __init__(self, at):
        self.at = at

    def after_step(self, iteration, epoch):
        if iteration == self.at:
            raise RuntimeError("crash")

    def checkpoint_state(self):
        return {}

    def load_checkpoint_state(self, state):
        pass


def _with_crash(monkeypatch, at):
    from gpdlm_cli import build

    real = build.build_method

    def build_method(cfg, data, task, *family, **options):
        method = real(cfg, data, task, *family, **options)
        method.stages[-1].hooks = list(method.stages[-1].hooks) + [CrashAt(at)]
        return method

    monkeypatch.setattr(build, "build_method", build_method)
    return real


@pytest.mark.slow  # three short training runs: ~3 s
def test_a_run_without_evaluations_resumes_from_its_last_timed_checkpoint(tmp_path, monkeypatch):
    full = run_train(compose(BASE), tmp_path / "full", tracker=NullTracker())
    timed = [*BASE, "trainer.checkpoint_minutes=1e-9"]  # every step: the time since the last one has passed
    real = _with_crash(monkeypatch, 11)
    with pytest.raises(RuntimeError, match="crash"):
        run_train(compose(timed), tmp_path / "cut", tracker=NullTracker())
    state = read_checkpoint(tmp_path / "cut" / FILE)
    assert state is not None and state["loop"]["it"] == 10  # the step before the crash's
    from gpdlm_cli import build

    monkeypatch.setattr(build, "build_method", real)
    resumed = run_train(compose(timed), tmp_path / "cut", tracker=NullTracker())
    assert {k: v for k, v in resumed.items() if k not in TIMING} == {k: v for k, v in full.items() if k not in TIMING}


def test_without_the_time_rule_a_run_without_evaluations_writes_none(tmp_path, monkeypatch):
    _with_crash(monkeypatch, 11)
    with pytest.raises(RuntimeError, match="crash"):
        run_train(compose([*BASE, "trainer.checkpoint_minutes=0"]), tmp_path / "cut", tracker=NullTracker())
    assert read_checkpoint(tmp_path / "cut" / FILE) is None
