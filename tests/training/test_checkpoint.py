"""Checkpoints that resume (issue 22): a run stopped by SIGTERM after a checkpoint, resumed from its
folder, ends with exactly the metrics of the uninterrupted run (CPU, threads=1)."""

from __future__ import annotations

import os
import signal

import pytest

from gpdlm_cli.run.train import run_train
from gpdlm_cli.signals import Terminated, install_signal_handlers
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training.checkpoint import FILE, read_checkpoint

from ..conftest import KillAt, compose, kill_last_stage_at

BASE = [
    "dataset.split.train_size=150",
    "trainer.max_iters=60",
    "trainer.eval_every=10",
    "trainer.checkpoint_every=1",
    "progress=false",
    "threads=1",
    "tracking.enabled=false",
]
TIMING = ("train_seconds", "iter_ms", "peak_memory_mb", "peak_rss_mb")  # time and process memory differ by design
CASES = {
    "dlm_minibatch_keep_best": [
        "model=dlm",
        "model.num_inducing=12",
        "trainer.batch_size=32",
        "trainer.keep_best=val_nll",
    ],
    "dlm_fixed_two_stages": ["model=dlm_fixed", "model.num_inducing=12", "trainer.max_iters=40"],
    "bmc_estimator_stream": ["model=dlm", "dataset=doctor_visits", "estimator=bmc", "model.num_inducing=12"],
    "scgd_hooks": ["model=scgd", "features=nn", "trainer.batch_size=32"],
    "minimax_dual_generator": ["model=minimax", "features=nn", "trainer.batch_size=32"],
    # trainer=fast: killed inside the L-BFGS stage (after its 10-step first-order start); CompactLBFGS's
    # state (ring buffer of curvature pairs, their products) goes through the checkpoint
    "fast_lbfgs_stage": [
        "model=dlm",
        "model.num_inducing=12",
        "trainer=fast",
        "trainer.fast_adam_iters=10",
        "trainer.fast_max_iters=60",
    ],
}


def _strip(m):
    return {k: v for k, v in m.items() if k not in TIMING}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.slow
def test_sigterm_then_resume_equals_the_uninterrupted_run(name, tmp_path, monkeypatch):
    install_signal_handlers()
    ov = BASE + CASES[name]
    full = run_train(compose(ov), tmp_path / "full", tracker=NullTracker())
    assert not (tmp_path / "full" / FILE).exists()  # a finished run keeps its model, not its checkpoint

    from gpdlm_cli import build
    from gpdlm_cli.methods import sparse_variational  # noqa: F401  (families imported)

    real_build = build.build_method

    def with_killer(cfg, data, task, *family, **options):  # options: build_method's spec=
        method = real_build(cfg, data, task, *family, **options)
        stage = [s for s in method.stages if s.solve is None][-1]
        stage.hooks = list(stage.hooks) + [KillAt(27)]
        return method

    monkeypatch.setattr(build, "build_method", with_killer)
    with pytest.raises(Terminated):
        run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    state = read_checkpoint(tmp_path / "cut" / FILE)
    assert state is not None and state["loop"]["it"] == 27
    monkeypatch.setattr(build, "build_method", real_build)
    resumed = run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    assert _strip(resumed) == _strip(full)
    assert resumed["train_seconds"] > 0


@pytest.mark.slow  # three training runs: ~3-4 s of CPU
def test_a_checkpoint_of_another_configuration_is_not_resumed(tmp_path, monkeypatch):
    install_signal_handlers()
    ov = BASE + CASES["dlm_minibatch_keep_best"]
    from gpdlm_cli import build

    real_build = kill_last_stage_at(monkeypatch, 15)
    with pytest.raises(Terminated):
        run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    monkeypatch.setattr(build, "build_method", real_build)
    other = run_train(compose(ov + ["seed=1"]), tmp_path / "cut", tracker=NullTracker())
    fresh = run_train(compose(ov + ["seed=1"]), tmp_path / "fresh", tracker=NullTracker())
    assert _strip(other) == _strip(fresh)


@pytest.mark.slow
def test_gpdlm_resume_continues_a_run_killed_by_sigterm(tmp_path):
    """The whole path through the CLI: `gpdlm train` in a subprocess, SIGTERM once a checkpoint exists,
    the run ends KILLED; `gpdlm resume FOLDER` ends with the uninterrupted run's metrics."""
    import json
    import subprocess
    import sys
    import time

    ov = [
        "model=dlm",
        "model.num_inducing=12",
        "trainer.batch_size=32",
        "dataset.split.train_size=150",
        "trainer.max_iters=1000",  # ~5 s a run: margin enough for the SIGTERM after step 10
        "trainer.eval_every=10",
        "trainer.checkpoint_every=1",
        "progress=false",
        "threads=1",
        "tracking.enabled=false",
        "trainer.stop_rule=none",
    ]
    full = run_train(compose(ov), tmp_path / "full", tracker=NullTracker())
    folder = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpdlm_cli.cli", "train", *ov, f"hydra.run.dir={folder}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (folder / FILE).exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert (folder / FILE).exists(), proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert json.loads((folder / "metrics.json").read_text())["status"] == "KILLED"
    done = subprocess.run(
        [sys.executable, "-m", "gpdlm_cli.cli", "resume", str(folder)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    resumed = json.loads((folder / "metrics.json").read_text())
    assert _strip(resumed) == _strip(full)
    assert not (folder / FILE).exists()


@pytest.mark.slow
def test_a_preempted_submitit_job_is_requeued_and_resumes_from_its_checkpoint(tmp_path):
    """The whole path under submitit: `gpdlm train -m hydra/launcher=submitit_local`, SIGUSR2 (submitit's
    preemption signal) to the job's task once a checkpoint exists; submitit's handler requeues the job
    (the local executor restarts the task on exit code 144, as Slurm requeues a preempted job), the
    requeued job finds the checkpoint in its output folder, continues as a new MLflow run linked to the
    KILLED one (``gpdlm.resumed_from``) and ends with the uninterrupted run's metrics. (submitit's local
    environment reports every SIGUSR2 as a time-out, "Job has timed out": it spends one of the job's
    timeout requeues, and the launcher's ``checkpoint`` resubmits the same job.)"""
    import json
    import subprocess
    import sys
    import time

    import psutil
    from mlflow.tracking import MlflowClient

    from ..conftest import REPO

    ov = [
        "model=dlm",
        "model.num_inducing=12",
        "trainer.batch_size=32",
        "dataset.split.train_size=150",
        "trainer.max_iters=1000",  # ~5 s or more a run: margin enough for SIGUSR2 after step 10
        "trainer.eval_every=10",
        "trainer.checkpoint_every=1",
        "progress=false",
        "threads=1",
        "tracking.enabled=false",
        "trainer.stop_rule=none",
    ]
    full = run_train(compose(ov), tmp_path / "full", tracker=NullTracker())
    sweep = tmp_path / "sweep"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpdlm_cli.cli",
            "train",
            "-m",
            "seed=0",
            *ov,
            "tracking.enabled=true",
            f"tracking.uri={uri}",
            "tracking.experiment=preempted",
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=10",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    folder = sweep / "0"
    deadline = time.monotonic() + 180
    while not (folder / FILE).exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert (folder / FILE).exists(), proc.communicate()
    tasks = [
        p for p in psutil.Process(proc.pid).children(recursive=True) if "submitit.core._submit" in " ".join(p.cmdline())
    ]
    assert len(tasks) == 1, tasks
    tasks[0].send_signal(signal.SIGUSR2)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    logs = "".join(p.read_text(errors="replace") for p in (sweep / ".submitit").rglob("*_log.*"))
    assert "Caught signal SIGUSR2" in logs and "Requeued job" in logs, logs[-3000:]
    resumed = json.loads((folder / "metrics.json").read_text())
    assert _strip(resumed) == _strip(full)
    assert not (folder / FILE).exists()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("preempted")
    jobs = {
        r.info.run_id: r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("gpdlm.sweep") != "parent"
    }
    killed = [r for r in jobs.values() if r.info.status == "KILLED"]
    finished = [r for r in jobs.values() if r.info.status == "FINISHED"]
    assert len(killed) == 1 and len(finished) == 1, [(r.info.status, r.data.tags) for r in jobs.values()]
    assert finished[0].data.tags.get("gpdlm.resumed_from") == killed[0].info.run_id  # continued, not restarted
    assert finished[0].data.metrics["test_nll"] == full["test_nll"]


def test_a_signal_received_by_another_thread_waits_for_the_end_of_the_block():
    """Python runs signal handlers in the main thread whichever thread the kernel hands the signal to;
    a process-directed SIGTERM/SIGUSR2 lands on any thread that does not block it (MLflow's logging
    threads in a tracked run). deferred_signals must still hold it until its block ends."""
    import threading
    import time

    from gpdlm_cli.signals import deferred_signals

    install_signal_handlers()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    done = []
    try:
        with pytest.raises(Terminated):
            with deferred_signals(user_signals=True):
                signal.pthread_kill(other.ident, signal.SIGTERM)  # the signal reaches the other thread
                time.sleep(0.05)  # many bytecodes later: the handler would have run by now
                done.append("the whole block")
        assert done == ["the whole block"]
    finally:
        stop.set()
        other.join()


# ----- issue 47.6 / 45.7: the ending -------------------------------------------------------------------
def test_a_run_stopped_after_its_last_iteration_resumes_without_training(tmp_path, monkeypatch):
    """A stop while the finished run evaluates and saves its results (here: SIGTERM while the learning
    curve is drawn) leaves a complete checkpoint; resuming trains no iteration and ends with the
    uninterrupted run's metrics. Before, the checkpoint held the last periodic state (iteration 40
    of 60) and the resumed run trained 20 iterations again."""
    import signal as _signal

    from gpdlm_cli.run import train as train_module
    from gpdlm_cli.training.loop import Loop

    install_signal_handlers()
    ov = BASE + CASES["dlm_minibatch_keep_best"] + ["trainer.checkpoint_every=4"]
    full = run_train(compose(ov), tmp_path / "full", tracker=NullTracker())

    def stopped(*args, **kwargs):
        raise Terminated(_signal.SIGTERM)

    monkeypatch.setattr(train_module, "plot_learning_curve", stopped)
    with pytest.raises(Terminated):
        run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    state = read_checkpoint(tmp_path / "cut" / FILE)
    assert state is not None and state["complete"] is True
    assert int(state["fit"]["iterations"]) == full["iterations"] == 60
    monkeypatch.undo()

    def no_training(*args, **kwargs):
        raise AssertionError("a complete run trained again")

    monkeypatch.setattr(Loop, "train", no_training)
    resumed = run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    assert _strip(resumed) == _strip(full)
    assert not (tmp_path / "cut" / FILE).exists() and (tmp_path / "cut" / "model.pt").is_file()


def test_a_flipped_checkpoint_is_refused_by_resume_and_not_resumed_silently(tmp_path, monkeypatch):
    """checkpoint.pt's SHA-256 is in checkpoint.pt.sha256: 8 flipped bytes make `read_checkpoint(strict)`
    one line (gpdlm resume), and a requeued job does not resume from it."""
    from gpdlm_cli.files import sidecar
    from gpdlm_cli.training.checkpoint import CheckpointError

    install_signal_handlers()
    ov = BASE + CASES["dlm_minibatch_keep_best"]

    kill_last_stage_at(monkeypatch, 15)
    with pytest.raises(Terminated):
        run_train(compose(ov), tmp_path / "cut", tracker=NullTracker())
    path = tmp_path / "cut" / FILE
    assert sidecar(path).is_file() and read_checkpoint(path, strict=True)["loop"]["it"] == 15
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8] = bytes(b ^ 0xFF for b in data[mid : mid + 8])
    path.write_bytes(bytes(data))
    assert read_checkpoint(path) is None
    with pytest.raises(CheckpointError, match="does not match its recorded SHA-256"):
        read_checkpoint(path, strict=True)


def test_a_checkpoint_that_cannot_be_written_is_said_once_in_the_log_the_report_and_a_tag(
    tmp_path, monkeypatch, capsys
):
    """A full disk from the third checkpoint on: training goes on, and the run says so once -- a console
    warning, one WARNING line in gpdlm.log, the tag gpdlm.checkpoint_failed and the one-line report --
    naming the iteration the checkpoint stays at. Before, it was silent."""
    import errno

    from gpdlm_cli.training import checkpoint as ck

    real = ck.write_verified
    writes = []

    def full_disk(path, data):
        writes.append(path)
        if len(writes) > 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(ck, "write_verified", full_disk)
    tracker = NullTracker()
    ov = BASE + CASES["dlm_minibatch_keep_best"]
    metrics = run_train(compose(ov), tmp_path / "run", tracker=tracker)
    assert metrics["iterations"] == 60 and len(writes) > 3
    out, err = capsys.readouterr()
    warned = [ln for ln in err.splitlines() if "checkpoint not written" in ln]
    assert warned == [
        "gpdlm: warning: checkpoint not written (No space left on device); checkpoint stays at "
        "iteration 20: a stop now costs the iterations since"
    ]
    log = [ln for ln in (tmp_path / "run" / "gpdlm.log").read_text().splitlines() if "checkpoint not written" in ln]
    assert len(log) == 1 and "[WARNING]" in log[0]
    assert "stays at iteration 20" in tracker.tags["gpdlm.checkpoint_failed"]
    report = [ln for ln in out.splitlines() if ln.startswith("gpdlm: ")]
    assert len(report) == 1 and "(WARNING: checkpoint not written (No space left on device)" in report[0]
