"""Work shared across a sweep (issue 21, items 2-3): a shareable stage is trained once and restored
bit for bit; warm starts along a beta path start each job where the previous beta ended."""

from __future__ import annotations

import pytest

from gpdlm_cli.run.train import reuse_key, run_train
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training.reuse import clear_warm_starts

from ..conftest import compose

BASE = [
    "model=dlm_fixed",
    "dataset.split.train_size=200",
    "model.num_inducing=15",
    "trainer.max_iters=60",
    "trainer.eval_every=0",
    "progress=false",
    "threads=1",
    "tracking.enabled=false",
]
TIMING = ("train_seconds", "iter_ms", "peak_rss_mb")  # time and process memory differ by design


def _run(tmp_path, extra, name, parent_run_id=None):
    cfg = compose(BASE + [f"sweep.cache_dir={tmp_path / 'cache'}"] + list(extra))
    return run_train(cfg, tmp_path / name, tracker=_Tags(), parent_run_id=parent_run_id)


class _Tags(NullTracker):
    last: dict = {}

    def set_tags(self, tags):
        _Tags.last.update(tags)


def _same(a, b):
    return {k: v for k, v in a.items() if k not in TIMING} == {k: v for k, v in b.items() if k not in TIMING}


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["paper", "fast"])
def test_shared_svgp_stage_is_restored_bit_for_bit(tmp_path, protocol):
    """Under trainer=fast the restored curve includes the stage's first-order start (200 Adam steps)."""
    p = [f"trainer={protocol}"]
    cold = _run(tmp_path, p + ["objective.beta=0.5", "sweep.share_stages=false"], "cold")
    _Tags.last = {}
    _run(tmp_path, p + ["objective.beta=2.0"], "first")  # trains the SVGP stage and stores it
    assert "gpdlm.reused_stage" not in _Tags.last
    assert len(list((tmp_path / "cache" / "stages").glob("*-svgp.pt"))) == 1
    _Tags.last = {}
    reused = _run(tmp_path, p + ["objective.beta=0.5"], "second")  # another beta: the stage is loaded, not trained
    assert _Tags.last["gpdlm.reused_stage"].startswith("svgp:")
    assert _same(cold, reused), (cold, reused)
    assert reused["iterations"] == cold["iterations"]  # the learning curve includes the restored stage


@pytest.mark.slow
def test_the_key_ignores_beta_and_bookkeeping_but_nothing_else():
    a = compose(BASE + ["objective.beta=0.5", "tracking.experiment=x", "sweep.cache_dir=/tmp/a"])
    assert reuse_key(a) == reuse_key(compose(BASE + ["objective.beta=8"]))
    for change in (
        "seed=1",
        "model.num_inducing=16",
        "dataset.split.train_size=201",
        "trainer.lr=0.05",
        "likelihood.noise_init=0.2",
        "dtype=float32",
    ):
        assert reuse_key(compose(BASE + [change])) != reuse_key(a), change


@pytest.mark.slow
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


def test_a_restored_stage_keeps_its_learning_curve_and_its_convergence(tmp_path):
    """The SVGP stage alone, stopped by a 7-iteration budget (not converged): restored from the cache it
    reports converged=False and logs the same train_loss steps as when it was trained."""
    import torch

    from gpdlm_cli.prepare import prepare
    from gpdlm_cli.training import run_stages
    from gpdlm_cli.training.reuse import StageCache

    def fit():
        prepared = prepare(compose(BASE + ["trainer.max_iters=7", "objective.beta=0.5"]))
        logged = {}

        def log_steps(series):
            for k, v in series.items():
                logged.setdefault(k, []).extend(v)

        (svgp, *_) = [st for st in prepared.method.stages if st.solve is None]
        out = run_stages(
            [svgp],
            prepared.data.x_train,
            prepared.data.y_train,
            prepared.settings,
            generator=torch.Generator().manual_seed(0),
            modules=prepared.method.modules,
            cache=StageCache(tmp_path, "k"),
            log_steps=log_steps,
        )
        return out, logged

    trained, trained_log = fit()
    restored, restored_log = fit()
    assert trained.reused == [] and restored.reused == ["svgp:k"]
    assert not trained.converged and not restored.converged
    assert trained.iterations == restored.iterations == 7
    assert restored_log["train_loss"] == trained_log["train_loss"] and len(trained_log["train_loss"]) == 7


@pytest.mark.slow  # ~1.5-2.5 s: the fast lane stays under 2 minutes
def test_a_multi_stage_run_reports_each_stages_final_objective(tmp_path):
    """dlm_fixed logs final_loss_svgp and final_loss_dlm: its first stage is the SVGP model at beta = 1
    (same objective, initialisation and stopping), so final_loss_svgp equals that model's final_loss; a
    one-stage model logs only final_loss."""
    fixed = _run(tmp_path, ["objective.beta=0.5", "sweep.share_stages=false"], "fixed")
    svgp = _run(tmp_path, ["model=svgp", "objective.beta=1.0", "sweep.share_stages=false"], "svgp")
    assert fixed["final_loss_svgp"] == pytest.approx(svgp["final_loss"], rel=1e-12)
    assert fixed["final_loss_dlm"] == fixed["final_loss"] != fixed["final_loss_svgp"]
    assert not any(k.startswith("final_loss_") for k in svgp)


@pytest.mark.slow
def test_a_sweep_job_computes_its_own_kmeans_centres(tmp_path):
    """Issue 46: the k-means cache of sweep jobs is gone (it saved < 1% of a sweep's time,
    docs/training.md); a sweep job writes no centres, carries no tag, and ends as it did with the cache."""
    svgp = ["model=svgp", "sweep.cache_dir=" + str(tmp_path / "cache")]
    cold = _run(tmp_path, svgp + ["objective.beta=0.5", "sweep.share_stages=false"], "cold", parent_run_id="p")
    _Tags.last = {}
    _run(tmp_path, svgp + ["objective.beta=2.0"], "first", parent_run_id="p")
    again = _run(tmp_path, svgp + ["objective.beta=0.5"], "second", parent_run_id="p")
    assert not (tmp_path / "cache" / "kmeans").exists()
    assert "gpdlm.reused_inducing" not in _Tags.last
    assert _same(cold, again), (cold, again)


def test_kmeans_on_a_seeded_subset_above_the_row_threshold(monkeypatch):
    """Issue 39: above KMEANS_SUBSET_ABOVE rows (the 1.9M airline rows) k-means runs on
    KMEANS_SUBSET_ROWS rows drawn with the run's seed; at or below it, on every row (unchanged)."""
    import numpy as np
    import torch

    from gpdlm_cli.methods import components

    seen = []
    real = components._kmeans_centres
    monkeypatch.setattr(components, "_kmeans_centres", lambda xs, M, seed: seen.append(xs.copy()) or real(xs, M, seed))
    monkeypatch.setattr(components, "KMEANS_SUBSET_ABOVE", 300)
    monkeypatch.setattr(components, "KMEANS_SUBSET_ROWS", 100)
    x = torch.randn(301, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    c = components.initial_inducing_points(x, 5, "kmeans", 2)
    pick = np.sort(np.random.default_rng(2 + components._KMEANS_SUBSET_STREAM).choice(301, 100, replace=False))
    assert seen[-1].shape == (100, 3) and np.array_equal(seen[-1], x.numpy()[pick])
    assert torch.equal(c, torch.as_tensor(real(x.numpy()[pick], 5, 2)))
    components.initial_inducing_points(x[:300], 5, "kmeans", 2)
    assert seen[-1].shape == (300, 3)  # at the threshold: all rows
