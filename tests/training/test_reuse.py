"""Work shared across a sweep (issue 21, items 2-3): a shareable stage is trained once and restored
bit for bit; warm starts along a beta path start each job where the previous beta ended."""

from __future__ import annotations

import pytest

from gpdlm_cli.run.train import reuse_key, run_train
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training.reuse import clear_warm_starts

from ..conftest import compose

BASE = ["model=dlm_fixed", "dataset.split.train_size=200", "model.num_inducing=15", "trainer.max_iters=60",
        "trainer.eval_every=0", "progress=false", "threads=1", "tracking.enabled=false"]
TIMING = ("train_seconds", "iter_ms")


def _run(tmp_path, extra, name):
    cfg = compose(BASE + [f"sweep.cache_dir={tmp_path / 'cache'}"] + list(extra))
    return run_train(cfg, tmp_path / name, tracker=_Tags())


class _Tags(NullTracker):
    last: dict = {}

    def set_tags(self, tags):
        _Tags.last.update(tags)


def _same(a, b):
    return {k: v for k, v in a.items() if k not in TIMING} == {k: v for k, v in b.items() if k not in TIMING}


@pytest.mark.slow
def test_shared_svgp_stage_is_restored_bit_for_bit(tmp_path):
    cold = _run(tmp_path, ["objective.beta=0.5", "sweep.share_stages=false"], "cold")
    _Tags.last = {}
    _run(tmp_path, ["objective.beta=2.0"], "first")  # trains the SVGP stage and stores it
    assert "gpdlm.reused_stage" not in _Tags.last
    assert len(list((tmp_path / "cache" / "stages").glob("*-svgp.pt"))) == 1
    _Tags.last = {}
    reused = _run(tmp_path, ["objective.beta=0.5"], "second")  # another beta: the stage is loaded, not trained
    assert _Tags.last["gpdlm.reused_stage"].startswith("svgp:")
    assert _same(cold, reused), (cold, reused)
    assert reused["iterations"] == cold["iterations"]  # the learning curve includes the restored stage


def test_the_key_ignores_beta_and_bookkeeping_but_nothing_else():
    a = compose(BASE + ["objective.beta=0.5", "tracking.experiment=x", "sweep.cache_dir=/tmp/a"])
    assert reuse_key(a) == reuse_key(compose(BASE + ["objective.beta=8"]))
    for change in ("seed=1", "model.num_inducing=16", "dataset.split.train_size=201", "trainer.lr=0.05",
                   "likelihood.noise_init=0.2", "dtype=float32"):
        assert reuse_key(compose(BASE + [change])) != reuse_key(a), change


def test_a_corrupt_cache_file_is_retrained_not_trusted(tmp_path):
    _run(tmp_path, ["objective.beta=2.0"], "first")
    for f in (tmp_path / "cache" / "stages").glob("*-svgp.pt"):
        f.write_bytes(f.read_bytes()[:100])
    cold = _run(tmp_path, ["objective.beta=0.5", "sweep.share_stages=false"], "cold")
    _Tags.last = {}
    again = _run(tmp_path, ["objective.beta=0.5"], "again")
    assert "gpdlm.reused_stage" not in _Tags.last and _same(cold, again)


@pytest.mark.slow
def test_warm_start_starts_each_beta_from_the_previous_end_state(tmp_path):
    clear_warm_starts()
    fast = ["model=dlm", "trainer=fast", "trainer.max_iters=80", "sweep.share_stages=false"]
    cold = [_run(tmp_path, fast + [f"objective.beta={b}"], f"c{b}") for b in (4.0, 2.0)]
    _Tags.last = {}
    w1 = _run(tmp_path, fast + ["objective.beta=4.0", "sweep.warm_start=true"], "w4")
    assert "gpdlm.warm_start_from" not in _Tags.last and _same(w1, cold[0])  # the path's first job is a cold start
    w2 = _run(tmp_path, fast + ["objective.beta=2.0", "sweep.warm_start=true"], "w2")
    assert _Tags.last["gpdlm.warm_start_from"] == "beta=4"
    # from the neighbour's end state: the first step starts far lower, and the same budget ends lower
    assert w2["first_loss"] < cold[1]["first_loss"] - 0.1
    assert w2["final_loss"] < cold[1]["final_loss"]
    clear_warm_starts()
