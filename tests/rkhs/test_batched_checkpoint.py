"""A batched RKHS group keeps its progress when it is stopped (``sweep.batched_rkhs.GroupCheckpoint``): each
member's checkpoint is written every checkpoint_every-th iteration with an evaluation and when SIGTERM stops
the group between two iterations; the same group trained again continues every member from its checkpoint
and ends bit for bit as the uninterrupted group (losses, step metrics, best iterate, end state, hook
states); the checkpoints are removed once the group has trained. Before, a stopped group lost every
member's progress and trained again from the start."""

from __future__ import annotations

import pytest
import torch

from gpdlm_cli.run.train import evaluator
from gpdlm_cli.signals import Terminated, install_signal_handlers
from gpdlm_cli.sweep import batched_rkhs
from gpdlm_cli.tracking.identity import config_hash

from ..conftest import KillAt, compose
from .test_batched import GRID, _cfg


def _group(cache, extra=("sweep.skip_finished=true",)):
    cfgs = [
        _cfg("minimax", "rff", seed, lr, ["kernel.num_features=20", "trainer.checkpoint_every=1", *extra])
        # continued only in a sweep run again with skip_finished
        for seed, lr in GRID
    ]
    for c in cfgs:
        c.sweep.cache_dir = str(cache)
    return cfgs


def _train(cfgs):
    out = batched_rkhs.train_group(cfgs[0], config_hash(cfgs[0]), cfgs, evaluator)
    return [out[config_hash(c)] for c in cfgs]


def _same(a, b):
    assert a["fit"].losses == b["fit"].losses and a["fit"].best_iteration == b["fit"].best_iteration
    assert a["steps"] == b["steps"]
    assert sorted(a["state"]) == sorted(b["state"])
    for k in a["state"]:
        assert torch.equal(a["state"][k], b["state"][k]), k


@pytest.mark.slow  # three groups of three MINIMAX members: ~1-4 s
def test_a_stopped_batched_group_continues_each_member_from_its_checkpoint(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    install_signal_handlers()
    full = _train(_group(tmp_path / "a"))
    assert not list((tmp_path / "a" / "batched").glob("*"))  # removed once the group trained

    real = batched_rkhs._member

    def killed(c, ev):
        m = real(c, ev)
        if int(c.seed) == GRID[0][0]:
            m.method.stages[-1].hooks.append(KillAt(10))  # SIGTERM in iteration 10 (21 in all)
        return m

    monkeypatch.setattr(batched_rkhs, "_member", killed)
    cut = _group(tmp_path / "b")
    with pytest.raises(Terminated):
        _train(cut)
    monkeypatch.undo()
    folder = tmp_path / "b" / "batched"
    files = sorted(p.name for p in folder.glob("*.pt"))
    assert files == sorted(f"{config_hash(c)}.pt" for c in cut)
    checkpoint = batched_rkhs.GroupCheckpoint(folder, [config_hash(c) for c in cut], 1)
    for b in range(3):
        blob = checkpoint.load(b)
        assert blob is not None and blob["loop"]["it"] == 10 and blob["active"] is True
        assert [s for s, _ in blob["steps"]["train_nlml"]] == [7]  # the member's evaluation at epoch 1 is kept

    calls = []
    real_train = batched_rkhs.train_rkhs_batched

    def recording(members, checkpoint=None):
        fits = real_train(members, checkpoint)
        calls.append(list(checkpoint.resumed))
        return fits

    iterations = []
    real_iteration = batched_rkhs._batched_iteration

    def counted(*args):
        iterations.append(1)
        return real_iteration(*args)

    monkeypatch.setattr(batched_rkhs, "train_rkhs_batched", recording)
    keys = [config_hash(c) for c in cut]
    assert batched_rkhs.GroupCheckpoint(folder, keys, 1, resume=False).load(0) is None  # no skip_finished: afresh
    monkeypatch.setattr(batched_rkhs, "_batched_iteration", counted)
    resumed = _train(_group(tmp_path / "b"))
    assert calls == [[0, 1, 2]] and len(iterations) == 11  # every member continued from iteration 10 of 21
    for a, b in zip(full, resumed):
        _same(a, b)
        assert b["fit"].iterations == 21
    assert not list(folder.glob("*"))


@pytest.mark.slow  # three in-process sweeps of two MINIMAX jobs (MLflow store, Hydra): ~13 s
def test_an_interrupted_batched_sweep_run_again_continues_its_group(tmp_path, capsys, mlflow_uri, monkeypatch):
    """`gpdlm train -m ... sweep.batched=true` stopped by SIGTERM while its group trains (iteration 10 of 21),
    then the same sweep again with sweep.skip_finished=true: the group continues every member from its
    checkpoint and each of its two jobs ends FINISHED with the uninterrupted sweep's metrics, bit for bit, its run
    tagged with how its group continued, the stopped run linked to the run that continued its job."""
    from mlflow.tracking import MlflowClient

    from gpdlm_cli.sweep.batched import clear_batched

    from ..conftest import run_cli
    from .test_batched import SMALL

    def sweep(name, folder, cache, extra=()):
        clear_batched()
        argv = ["train", "-m", "model=minimax", "kernel=linear", *SMALL[:-3], "threads=1", "progress=false"]
        argv += ["seed=0", "trainer.lr=0.1,1.0", f"tracking.uri={mlflow_uri}", f"tracking.experiment={name}"]
        argv += ["sweep.batched=true", "trainer.checkpoint_every=1", f"sweep.cache_dir={tmp_path / cache}"]
        return run_cli([*argv, f"hydra.sweep.dir={tmp_path / folder}", *extra], tmp_path, capsys)

    def runs(name):
        client = MlflowClient(mlflow_uri)
        exp = client.get_experiment_by_name(name)
        found = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
        return [(r.data.params["seed"], r.data.params["trainer.lr"], r.info.status, r) for r in found]

    rc, lines = sweep("bat-full", "full", "cache-a")
    assert rc == 0, lines
    full = {(s, lr): r for s, lr, _, r in runs("bat-full")}
    real = batched_rkhs._member

    def killed(c, ev):
        m = real(c, ev)
        if int(c.seed) == 0 and float(c.trainer.lr) == 0.1:
            m.method.stages[-1].hooks.append(KillAt(10))
        return m

    monkeypatch.setattr(batched_rkhs, "_member", killed)
    rc, lines = sweep("bat-cut", "cut", "cache-b")
    monkeypatch.undo()
    assert rc != 0
    assert [st for *_, st, _ in runs("bat-cut")] == ["KILLED"]  # the first job, which trains the group
    assert len(list((tmp_path / "cache-b" / "batched").glob("*.pt"))) == 2
    rc, lines = sweep("bat-cut", "again", "cache-b", ["sweep.skip_finished=true"])
    assert rc == 0, lines
    assert any("sweep.batched: 2 of 2 members continued from their checkpoints" in ln for ln in lines), lines
    again = {(s, lr): r for s, lr, st, r in runs("bat-cut") if st == "FINISHED"}
    assert sorted(again) == sorted(full) and len(again) == 2
    timing = ("train_seconds", "iter_ms", "peak_memory_mb", "peak_rss_mb", "wall_seconds")
    for key, run in again.items():
        ref = full[key].data.metrics
        assert run.data.tags["gpdlm.batched"] == "2"
        # the store says the group continued (before: only the job folder's gpdlm.log did)
        assert run.data.tags["gpdlm.batched_note"] == "sweep.batched: 2 of 2 members continued from their checkpoints"
        assert "gpdlm.batched_note" not in full[key].data.tags
        assert {k: v for k, v in run.data.metrics.items() if not k.startswith(timing)} == {
            k: v for k, v in ref.items() if not k.startswith(timing)
        }, key
    # the stopped run and the run that continued its job are linked both ways, as a resumed run is (before: only
    # the note said so); the group's other job never started a run, so its run continues none
    (stopped,) = [r for *_, st, r in runs("bat-cut") if st == "KILLED"]
    assert again[("0", "0.1")].data.tags["gpdlm.resumed_from"] == stopped.info.run_id
    assert stopped.data.tags["gpdlm.resumed_as"] == again[("0", "0.1")].info.run_id
    assert "gpdlm.resumed_from" not in again[("0", "1.0")].data.tags
    assert not list((tmp_path / "cache-b" / "batched").glob("*"))


def test_gpdlm_resume_of_a_batched_job_says_how_its_group_continues(tmp_path, capsys):
    """The job that trained a batched group ends KILLED without a checkpoint.pt of its own: `gpdlm resume` says
    in one line where the group's checkpoints are and how to continue them (before: 'stopped before its first
    checkpoint ... retrain it')."""
    from omegaconf import OmegaConf

    from ..conftest import run_cli
    from .test_batched import SMALL

    folder = tmp_path / "job"
    folder.mkdir()
    OmegaConf.save(compose(["model=minimax", "kernel=linear", *SMALL, "sweep.batched=true"]), folder / "config.yaml")
    rc, lines = run_cli(["resume", str(folder)], tmp_path, capsys)
    assert rc != 0 and len(lines) == 1, lines
    assert "a job of a batched sweep (sweep.batched=true) that trained its group" in lines[0]
    assert "run its sweep again with sweep.skip_finished=true to continue it" in lines[0]
