"""A full-batch batched group (``sweep.batched=true``, SVGP and DLM: ``sweep.batched_model.train_batched``) keeps
its progress when it is stopped: its checkpoint (``BatchCheckpoint``, one file for the group) is written every
checkpoint_every-th iteration with an evaluation and when SIGTERM stops the group between two iterations; the
same group trained again continues from it and ends bit for bit as the uninterrupted group; the checkpoint is
removed once the group has trained. Before, a stopped group trained again from the start."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from gpdlm_cli.run.train import evaluator
from gpdlm_cli.signals import Terminated, install_signal_handlers
from gpdlm_cli.sweep import batched, batched_model
from gpdlm_cli.tracking.identity import config_hash

from ..conftest import compose
from .test_batched import SMALL


def _configs(model, cache, skip_finished=True):
    return [
        compose(
            [f"model={model}", f"seed={seed}", "objective.beta=0.5", *SMALL, "tracking.enabled=false"]
            + ["trainer.checkpoint_every=1", f"sweep.cache_dir={cache}", f"sweep.skip_finished={skip_finished}"]
        )
        for seed in (0, 1)
    ]


def _train(cfgs):
    out = batched._svgp_group(config_hash(cfgs[0]), cfgs, evaluator)
    return [out[config_hash(c)] for c in cfgs]


@pytest.mark.slow  # three groups of two members, 100 iterations each: ~2 s
@pytest.mark.parametrize("model", ["svgp", "dlm"])
def test_a_stopped_full_batch_group_continues_from_its_checkpoint(model, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    install_signal_handlers()
    full = _train(_configs(model, tmp_path / "a"))
    assert not list((tmp_path / "a" / "batched").glob("*"))

    real_step = batched_model._adam_step
    count = []

    def killed(*args):
        count.append(1)
        if len(count) == 40:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered once iteration 40 has ended
        return real_step(*args)

    monkeypatch.setattr(batched_model, "_adam_step", killed)
    with pytest.raises(Terminated):
        _train(_configs(model, tmp_path / "b"))
    monkeypatch.undo()
    [path] = list((tmp_path / "b" / "batched").glob("*.pt"))
    blob = torch.load(path, weights_only=True)
    assert blob["it"] == 40 and [s for s, _ in blob["steps"][0]["val_nll"]] == [30]

    steps = []

    def counted(*args):
        steps.append(1)
        return real_step(*args)

    monkeypatch.setattr(batched_model, "_adam_step", counted)
    afresh = batched_model.BatchCheckpoint(path, "", 1, resume=False)  # a sweep without skip_finished
    assert afresh.load() is None and batched_model.BatchCheckpoint(path, path.stem[6:], 1).load() is not None
    resumed = _train(_configs(model, tmp_path / "b"))
    assert len(steps) == max(f.fit.iterations for f in full) - 40  # continued from iteration 40
    assert resumed[0].note is not None and "at iteration 40" in resumed[0].note
    assert all(r.continued for r in resumed) and not any(f.continued for f in full)  # the job links its stopped run
    for a, b in zip(full, resumed):
        assert a.fit.losses == b.fit.losses and a.fit.iterations == b.fit.iterations
        assert a.steps == b.steps
        assert sorted(a.state) == sorted(b.state)
        for k in a.state:
            assert torch.equal(a.state[k], b.state[k]), k
    assert not list((tmp_path / "b" / "batched").glob("*"))
