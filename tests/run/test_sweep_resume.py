"""A sweep run again continues its interrupted job from that job's checkpoint (``run.resume``): the new
multirun's folder is not the interrupted one's, so the job finds the stopped run in the store
(``sweep.skip_finished=true``), moves its checkpoint into its own folder and trains only what was left."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gpdlm_cli import cli
from gpdlm_cli.files import folder_lock, sidecar, write_verified
from gpdlm_cli.run.resume import find_stopped
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.tracking.liveness import process_start
from gpdlm_cli.training.checkpoint import FILE, FORMAT, read_checkpoint

from ..conftest import KillAt, compose, copy_store

OV = [
    "model=dlm",
    "model.num_inducing=12",
    "trainer.batch_size=32",
    "trainer.keep_best=val_nll",
    "dataset.split.train_size=150",
    "trainer.max_iters=60",
    "trainer.eval_every=10",
    "trainer.checkpoint_every=1",
    "progress=false",
    "threads=1",
]
TIMING = ("train_seconds", "iter_ms", "peak_memory_mb", "peak_rss_mb")  # time and process memory differ by design


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


class CountSteps:
    """A training hook counting the iterations each seed trains in this process."""

    def __init__(self, counts: dict, seed: int):
        self.counts, self.seed = counts, seed

    def after_step(self, iteration, epoch):
        self.counts[self.seed] = self.counts.get(self.seed, 0) + 1

    def checkpoint_state(self):
        return {}

    def load_checkpoint_state(self, state):
        pass


def _instrument(monkeypatch, counts: dict, kill_seed: int | None, at: int = 27):
    """Every run built from now on counts its iterations; the seed ``kill_seed``'s gets SIGTERM at step ``at``."""
    from gpdlm_cli import build
    from gpdlm_cli.methods import sparse_variational  # noqa: F401  (families imported)

    real = getattr(build.build_method, "real", build.build_method)

    def instrumented(cfg, data, task, *family, **options):
        method = real(cfg, data, task, *family, **options)
        hooks = [CountSteps(counts, int(cfg.seed))] + ([KillAt(at)] if int(cfg.seed) == kill_seed else [])
        method.stages[-1].hooks = list(method.stages[-1].hooks) + hooks
        return method

    instrumented.real = real
    monkeypatch.setattr(build, "build_method", instrumented)


def _children(uri: str, experiment: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("gpdlm.sweep") != "parent"]


@pytest.mark.slow  # three short trainings and two in-process multiruns: ~10 s
def test_an_interrupted_multirun_run_again_resumes_its_job_at_the_checkpoint(
    tmp_path, template_db, monkeypatch, capsys, restore_signals
):
    """seed=1 is stopped at step 27 of 60 (SIGTERM, as Ctrl-C or a preemption would); the same multirun
    again, in a new folder: seed=0 is skipped, seed=1 trains 33 iterations from the checkpoint and ends
    with the uninterrupted run's metrics; the KILLED run is linked to its continuation, none is RUNNING."""
    monkeypatch.chdir(tmp_path)
    uri = copy_store(template_db, tmp_path)
    args = ["train", "-m", "seed=0,1", *OV, f"tracking.uri={uri}", "tracking.experiment=again"]
    args += ["sweep.skip_finished=true"]
    counts: dict = {}
    _instrument(monkeypatch, counts, kill_seed=1)
    assert cli.main([*args, f"hydra.sweep.dir={tmp_path / 'first'}"]) == 143
    state = read_checkpoint(tmp_path / "first" / "1" / FILE)
    assert state is not None and state["loop"]["it"] == 27 and counts == {0: 60, 1: 27}
    killed = [r for r in _children(uri, "again") if r.info.status == "KILLED"]
    assert len(killed) == 1 and killed[0].data.params["seed"] == "1"
    kid = killed[0].info.run_id

    counts.clear()
    _instrument(monkeypatch, counts, kill_seed=None)
    capsys.readouterr()
    assert cli.main([*args, f"hydra.sweep.dir={tmp_path / 'second'}"]) == 0
    err = capsys.readouterr().err
    assert counts == {1: 33}  # seed=0 skipped, seed=1 trained only what its checkpoint had left
    line = f"resuming run {kid[:8]} from its checkpoint at step 27 ("
    assert err.count(f"gpdlm: {line}") == 1, err
    log = (tmp_path / "second" / "1" / "gpdlm.log").read_text()
    assert log.count(line) == 1 and log.split(line)[1].splitlines()[0] == f"{(tmp_path / 'first' / '1').resolve()})"
    assert "gpdlm: sweep done: 1 finished (1 resumed from a checkpoint), 1 skipped, 0 failed" in err
    outcomes = {o: json.loads((tmp_path / "second" / "outcomes" / f"{o}.json").read_text()) for o in (0, 1)}
    assert outcomes[0]["status"] == "skipped" and "resumed" not in outcomes[0]
    assert outcomes[1]["status"] == "finished" and outcomes[1]["resumed"] == f"run {kid[:8]} at step 27"

    # the checkpoint moved: neither folder keeps one, the stopped folder says where it went
    assert not (tmp_path / "first" / "1" / FILE).exists() and not (tmp_path / "second" / "1" / FILE).exists()
    assert "checkpoint moved to" in (tmp_path / "first" / "1" / "gpdlm.log").read_text()
    capsys.readouterr()
    assert cli.main(["resume", str(tmp_path / "first" / "1")]) != 0  # gpdlm resume of the old folder: where it went
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"gpdlm: error: {tmp_path / 'first' / '1'} has no {FILE}: ")
    assert f"moved it to {(tmp_path / 'second' / '1').resolve()}: this run continues there as run " in said[0]
    runs = _children(uri, "again")
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED", "KILLED"]  # none RUNNING, none twice
    (resumed,) = [r for r in runs if r.info.status == "FINISHED" and r.data.params["seed"] == "1"]
    assert resumed.data.tags["gpdlm.resumed_from"] == kid
    assert [r for r in runs if r.info.run_id == kid][0].data.tags["gpdlm.resumed_as"] == resumed.info.run_id
    from mlflow.tracking import MlflowClient

    def steps(run):
        return sorted(m.step for m in MlflowClient(uri).get_metric_history(run.info.run_id, "val_nll"))

    (seed0,) = [r for r in runs if r.data.params["seed"] == "0"]
    assert steps(resumed) == steps(seed0) and steps(resumed)[:3] == [10, 20, 30]  # the stopped part's curve first

    _instrument(monkeypatch, counts, kill_seed=None)
    full = run_train(compose(OV + ["seed=1", "tracking.enabled=false"]), tmp_path / "full", tracker=NullTracker())
    got = json.loads((tmp_path / "second" / "1" / "metrics.json").read_text())
    assert {k: v for k, v in got.items() if k not in TIMING} == {k: v for k, v in full.items() if k not in TIMING}


# ----- which stopped run a job continues (no training: fake store, real checkpoint files) ----------------
HASHES = ("h3", "h2")


class FakeStore(NullTracker):
    """``stopped_runs`` answers the given runs (newest first); tags and closed runs are recorded."""

    def __init__(self, runs):
        super().__init__()
        self.runs, self.tagged, self.closed = runs, {}, []
        self.client = SimpleNamespace(
            log_batch=lambda run_id, tags=(): self.tagged.setdefault(run_id, {}).update({t.key: t.value for t in tags}),
            set_terminated=lambda run_id, status: self.closed.append((run_id, status)),
        )

    def tag_run(self, run_id, tags):
        self.tagged.setdefault(run_id, {}).update(tags)

    def stopped_runs(self, tag, value):
        assert tag == "gpdlm.config_hash" and tuple(value) == HASHES
        return self.runs


def _run(run_id, folder, status="KILLED", **tags):
    tags = {"gpdlm.output_dir": str(folder), **tags}
    return SimpleNamespace(info=SimpleNamespace(run_id=run_id, status=status), data=SimpleNamespace(tags=tags))


def _checkpoint(folder: Path, chash="h2", it=7) -> Path:
    import io

    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "config_hash": chash, "fit": None, "loop": {"it": it}, "run_id": "x"}, buf)
    write_verified(folder / FILE, buf.getvalue())
    return folder / FILE


def _alive_tags():
    return {
        "gpdlm.host": socket.gethostname(),
        "gpdlm.pid": str(os.getpid()),
        "gpdlm.process_start": process_start(os.getpid()),
    }


def _gone_tags():
    return {"gpdlm.host": socket.gethostname(), "gpdlm.pid": "999999999", "gpdlm.process_start": "1.00"}


def test_the_stopped_run_with_the_furthest_checkpoint_is_continued_and_the_others_are_left(tmp_path, capsys):
    """A run still alive, a run already continued (``gpdlm.resumed_as``), the job's own folder, a folder
    without checkpoint and a folder another process trains in are passed over; of the others, the furthest
    checkpoint is taken (the newest run among equals), not the newest run's (a restart from scratch)."""
    here = tmp_path / "job"
    _checkpoint(tmp_path / "alive")
    _checkpoint(tmp_path / "continued")
    _checkpoint(here)
    (tmp_path / "empty").mkdir()
    _checkpoint(tmp_path / "busy")
    _checkpoint(tmp_path / "restarted", it=3)
    _checkpoint(tmp_path / "taken", it=12)
    _checkpoint(tmp_path / "equal", it=12)
    _checkpoint(tmp_path / "older", it=5)
    runs = [
        _run("alive000", tmp_path / "alive", "RUNNING", **_alive_tags()),
        _run("cont0000", tmp_path / "continued", **{"gpdlm.resumed_as": "next"}),
        _run("self0000", here),
        _run("empty000", tmp_path / "empty"),
        _run("busy0000", tmp_path / "busy", "FAILED"),
        _run("restart0", tmp_path / "restarted"),
        _run("taken000", tmp_path / "taken", "FAILED"),
        _run("equal000", tmp_path / "equal"),
        _run("older000", tmp_path / "older"),
    ]
    store = FakeStore(runs)
    with folder_lock(tmp_path / "busy"):
        found = find_stopped(store, HASHES, here)
    assert found is not None and (found.run_id, found.folder, found.step) == ("taken000", tmp_path / "taken", 12)
    assert store.closed == [] and capsys.readouterr().err == ""

    store.run_id = "new00000"
    (here / "new").mkdir()
    found.take_over(here / "new", store)
    assert not (tmp_path / "taken" / FILE).exists() and not sidecar(tmp_path / "taken" / FILE).exists()
    assert all((tmp_path / f / FILE).exists() for f in ("restarted", "equal", "older"))  # the others: left
    assert read_checkpoint(here / "new" / FILE, strict=True)["loop"]["it"] == 12
    assert store.tagged == {"taken000": {"gpdlm.resumed_as": "new00000"}}
    assert "checkpoint moved to" in (tmp_path / "taken" / "gpdlm.log").read_text()
    assert capsys.readouterr().err.startswith("gpdlm: resuming run taken000 from its checkpoint at step 12 (")


def test_a_running_run_whose_process_is_gone_is_closed_killed_and_continued(tmp_path):
    _checkpoint(tmp_path / "orphan")
    store = FakeStore([_run("orphan00", tmp_path / "orphan", "RUNNING", **_gone_tags())])
    found = find_stopped(store, HASHES, tmp_path / "job")
    assert found is not None and found.run_id == "orphan00"
    assert store.closed == [("orphan00", "KILLED")]
    assert store.tagged["orphan00"]["failure_reason"].startswith("orphaned: process 999999999 is gone (closed by")


@pytest.mark.parametrize("damage", ["flipped", "other config", "not a checkpoint"])
def test_a_checkpoint_that_fails_its_checks_is_not_resumed_the_job_trains_afresh(damage, tmp_path, capsys):
    """One warning line (stderr and the job's log) and the job trains afresh; the checkpoint stays. With a
    good checkpoint of an older run besides, the line says that one is resumed instead."""
    path = _checkpoint(tmp_path / "bad", chash="other" if damage == "other config" else "h2")
    if damage == "flipped":
        data = bytearray(path.read_bytes())
        data[-20:-12] = bytes(b ^ 0xFF for b in data[-20:-12])
        path.write_bytes(bytes(data))
    elif damage == "not a checkpoint":
        write_verified(path, b"not a torch file")
    (tmp_path / "job").mkdir()
    store = FakeStore([_run("bad00000", tmp_path / "bad")])
    assert find_stopped(store, HASHES, tmp_path / "job") is None
    why = {
        "flipped": "does not match its recorded SHA-256",
        "other config": "belongs to another configuration (config hash other)",
        "not a checkpoint": "is not a readable gpdlm checkpoint",
    }[damage]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("gpdlm: warning: not resuming the stopped run bad00000: ")
    assert why in err[0] and err[0].endswith("; training afresh")
    assert (tmp_path / "job" / "gpdlm.log").read_text().count("not resuming the stopped run bad00000") == 1
    assert path.exists() and store.closed == [] and store.tagged == {}

    _checkpoint(tmp_path / "older")
    store = FakeStore([_run("bad00000", tmp_path / "bad"), _run("older000", tmp_path / "older")])
    assert find_stopped(store, HASHES, tmp_path / "job").run_id == "older000"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("gpdlm: warning: not resuming the stopped run bad00000: ")
    assert line.endswith("; resuming run older000 instead")


@pytest.mark.slow  # a (2-iteration) run: ~5 s with its data
def test_without_skip_finished_a_job_does_not_look_for_a_stopped_run(tmp_path, monkeypatch):
    from gpdlm_cli.run import resume

    def looked(*a, **k):
        raise AssertionError("looked for a stopped run")

    monkeypatch.setattr(resume, "find_stopped", looked)
    ov = [o for o in OV if not o.startswith("trainer.max_iters")] + ["trainer.max_iters=2", "tracking.enabled=false"]
    assert run_train(compose(ov), tmp_path / "a", tracker=NullTracker())["iterations"] == 2


# ----- gpdlm reproduce's progress: a resumed job is done, but its short time is no job's time ----------
def test_reproduce_progress_counts_a_resumed_job_as_done_not_as_a_trained_one(tmp_path, monkeypatch, capsys):
    """Job 0 trains 100 s, job 1 resumes and ends 10 s later: 2 of 4 done, the time left is the 100 s of
    the one trained job times the 2 left (counting the resumed job as a job: 110 s / 2 x 2 = 110 s)."""
    import time

    from omegaconf import OmegaConf

    from gpdlm_cli.commands import reproduce as rp
    from gpdlm_cli.sweep.callback import record_outcome

    clock = [0.0]
    monkeypatch.setattr(rp, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    p = rp.Progress(total=4, deadline=None, started=0.0)
    monkeypatch.setattr(rp, "PROGRESS", p)
    callback = rp.ReproduceCallback()
    for job, (seconds, resumed) in enumerate([(100.0, None), (10.0, "run abcdef12 at step 27")]):
        config = OmegaConf.create(
            {"hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"num": job}, "overrides": {"task": [f"seed={job}"]}}}
        )
        callback.on_job_start(config)
        clock[0] += seconds
        record_outcome(tmp_path, job, "finished", [f"seed={job}"], resumed=resumed)
        callback.on_job_end(config)
    assert (p.done, p.trained, p.resumed) == (2, 1, 1)
    assert p.left_s() == pytest.approx(200.0)
    err = capsys.readouterr().err.splitlines()
    assert err[1].startswith(
        "gpdlm reproduce: 2/4 jobs done (finished, resumed run abcdef12 at step 27: seed=1), 2 left"
    )

    q = rp.Progress(total=4, deadline=None, started=0.0)  # a parallel launcher: the multirun's outcomes at its end
    rp._count_outcomes(q, tmp_path, "multirun 1 of 1")
    assert (q.done, q.trained, q.resumed) == (2, 1, 1)
    assert "(multirun 1 of 1: 2 finished (1 of them resumed from a checkpoint))" in capsys.readouterr().err


@pytest.mark.slow  # a `gpdlm train -m` process, then the same command in this one: ~15-25 s
def test_ctrl_c_in_a_multirun_then_the_same_command_again_continues_the_job(
    tmp_path, template_db, capsys, restore_signals
):
    """The reported case, through the CLI: Ctrl-C (SIGINT) while seed=1 trains, once it has a checkpoint;
    the same command again (a new timestamped folder) skips seed=0 and continues seed=1 from that
    checkpoint's step to the end; no run is left RUNNING."""
    import subprocess
    import time

    from ..conftest import gpdlm_subprocess, run_cli

    uri = copy_store(template_db, tmp_path)
    ov = [o for o in OV if not o.startswith(("trainer.max_iters", "trainer.keep_best"))]
    args = ["train", "-m", "seed=0,1", *ov, "trainer.max_iters=160", "trainer.stop_rule=none", "trainer.eval_every=16"]
    args += [f"tracking.uri={uri}", "tracking.experiment=ctrlc", "sweep.skip_finished=true"]
    first = tmp_path / "multirun" / "first"
    proc = gpdlm_subprocess(
        [*args, f"hydra.sweep.dir={first}"],
        tmp_path,
        runner=subprocess.Popen,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 180
    while not (first / "1" / FILE).exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert (first / "1" / FILE).exists(), proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "continue this run with: gpdlm resume" in err
    state = read_checkpoint(first / "1" / FILE)
    assert state is not None
    from gpdlm_cli.training.checkpoint import checkpoint_step

    step = checkpoint_step(state)
    assert 16 <= step < 160

    # the same command again (in this process: the signal was the first process's part)
    rc, lines = run_cli([*args, f"hydra.sweep.dir={tmp_path / 'multirun' / 'second'}"], tmp_path, capsys)
    err = "\n".join(lines)
    assert rc == 0, err
    assert f"from its checkpoint at step {step} (multirun/first/1)" in err, err
    assert "1 finished (1 resumed from a checkpoint), 1 skipped, 0 failed" in err
    metrics = json.loads((tmp_path / "multirun" / "second" / "1" / "metrics.json").read_text())
    assert metrics["iterations"] == 160 and "status" not in metrics
    runs = _children(uri, "ctrlc")
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED", "KILLED"]
    (killed,) = [r for r in runs if r.info.status == "KILLED"]
    assert killed.data.tags["gpdlm.resumed_as"] in {r.info.run_id for r in runs if r.data.params["seed"] == "1"}
