"""How runs end and what they leave: SIGTERM/SIGHUP/submitit preemption end a run KILLED with the
signal as its reason; an interrupted run's partial results; run names; the one-line report."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli import signals as S
from gpdlm_cli.run import artifacts as RA
from gpdlm_cli.run import naming as RN
from gpdlm_cli.tracking import MlflowTracker, NullTracker

from ..conftest import compose, fast
from .conftest import copy_store


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def _only_run(uri, experiment):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id]) if exp else []
    return runs[0] if len(runs) == 1 else None


@pytest.mark.slow
def test_sigterm_ends_the_run_killed_with_the_signal_as_reason(template_db, tmp_path):
    """What Slurm's scancel, `timeout` and `docker stop` send: the run must not stay RUNNING."""
    uri = copy_store(template_db, tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpdlm_cli.cli",
            "train",
            "trainer.max_iters=100000",
            "trainer.stop_window=0",
            "model.num_inducing=10",
            "dataset.split.train_size=100",
            "progress=false",
            "threads=1",
            "trainer.eval_every=5",
            "trainer.checkpoint_every=1",
            f"tracking.uri={uri}",
            "tracking.experiment=term",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    while _only_run(uri, "term") is None or not (tmp_path / "run" / "checkpoint.pt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
    time.sleep(0.5)  # inside the training loop
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err  # 128 + 15, as a shell reports a process killed by SIGTERM
    assert err.strip().splitlines()[-1] == "gpdlm: terminated by SIGTERM (signal 15)"
    run = _only_run(uri, "term")
    # where the checkpoint is, and the command that continues the run (the short id `gpdlm runs` prints)
    assert err.strip().splitlines()[-2] == (
        f"gpdlm: checkpoint saved in run/checkpoint.pt; continue this run with: gpdlm resume {run.info.run_id[:8]}"
    )
    assert run.info.status == "KILLED"
    assert run.data.tags["failure_reason"] == "terminated by SIGTERM (signal 15)"
    assert run.data.tags["gpdlm.pid"] == str(proc.pid)
    assert "gpdlm: dlm" not in out  # no success line for a killed run
    last = (tmp_path / "run" / "gpdlm.log").read_text().splitlines()[-1]
    assert re.search(r"\[gpdlm\]\[ERROR\] - run KILLED at iteration \d+: terminated by SIGTERM \(signal 15\)$", last), (
        last
    )
    partial = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert partial["status"] == "KILLED" and partial["reason"] == "terminated by SIGTERM (signal 15)"


def test_sighup_becomes_terminated_and_the_tracker_ends_killed(module_uri, restore_signals):
    assert S.install_signal_handlers()
    tracker = MlflowTracker(module_uri, "hup")
    with pytest.raises(S.Terminated) as info:
        with tracker.run(run_name="hup"):
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)  # the handler raises before this ends
            pytest.fail("SIGHUP did not interrupt the run")
    assert info.value.exit_code == 129 and isinstance(info.value, KeyboardInterrupt)
    run = MlflowClient(module_uri).get_run(tracker.run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags["failure_reason"] == "terminated by SIGHUP (signal 1)"


def test_ctrl_c_and_failures_keep_their_status():
    for exc, status, reason in (
        (KeyboardInterrupt(), "KILLED", "interrupted (Ctrl-C)"),
        (ValueError("bad"), "FAILED", "ValueError: bad"),
    ):
        t = NullTracker()
        with pytest.raises(type(exc)):
            with t.run():
                raise exc
        assert (t.status, t.tags["failure_reason"]) == (status, reason)


def test_submitit_preemption_requeues_and_ends_the_run_killed(tmp_path, restore_signals):
    """submitit's own handler (SIGUSR2: preemption or the coming time limit) still checkpoints and
    requeues the job and exits with SystemExit(-1); the run ends KILLED, not FAILED."""
    import submitit
    from submitit.core.job_environment import SignalHandler

    class Job:
        def __call__(self):
            return 1

        def checkpoint(self):  # what hydra-submitit-launcher does: resubmit the same job
            return submitit.helpers.DelayedSubmission(self)

    class Env:
        global_rank = 0
        requeued = None

        def _requeue(self, countdown):
            Env.requeued = countdown

    class Paths:
        submitted_pickle = tmp_path / "submitted.pkl"

    delayed = submitit.helpers.DelayedSubmission(Job())
    delayed.set_timeout(60, 3)
    handler = SignalHandler(Env(), Paths(), delayed)
    signal.signal(signal.SIGUSR2, handler.checkpoint_and_try_requeue)
    assert S.install_signal_handlers()
    tracker = NullTracker()
    with pytest.raises(SystemExit) as info:
        with tracker.run():
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(5)
            pytest.fail("SIGUSR2 did not reach submitit's handler")
    assert info.value.code == -1 and Env.requeued == 3  # submitit's protocol, unchanged
    assert Paths.submitted_pickle.exists()  # the checkpointed job it resubmits
    assert tracker.status == "KILLED"
    assert tracker.tags["failure_reason"].startswith("preempted or timed out (SIGUSR2 from the scheduler); requeued")


def test_partial_results_of_an_interrupted_run(tmp_path):
    history = {
        "loss": [1.5, 1.2, 1.1, 1.05, 1.0, 0.98, 0.97],
        "steps": {
            "train_loss": [(i + 1, v) for i, v in enumerate([1.5, 1.2, 1.1, 1.05, 1.0, 0.98, 0.97])],
            "val_nll": [(3, 1.4), (6, 1.25)],
            "test_nll": [(3, 1.5), (6, 1.3)],
        },
    }
    iteration, last = RA.last_evaluation(history)
    assert iteration == 7 and last == {"val_nll": 1.25, "test_nll": 1.3}
    files = RA.write_partial_results(
        tmp_path,
        "KILLED",
        "terminated by SIGTERM (signal 15)",
        iteration,
        last,
        history,
        title="dlm_joint-concrete-b1-s0",
    )
    assert [f.name for f in files] == ["metrics.json", "learning_curve.png", "gpdlm.log"]
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record == {
        "status": "KILLED",
        "reason": "terminated by SIGTERM (signal 15)",
        "iterations": 7,
        "evaluated_at": 6,
        "val_nll": 1.25,
        "test_nll": 1.3,
    }
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log = (tmp_path / "gpdlm.log").read_text().splitlines()
    assert log[-1].endswith("[gpdlm][ERROR] - run KILLED at iteration 7: terminated by SIGTERM (signal 15)")
    # killed before any evaluation: still a metrics.json, no figure
    empty = tmp_path / "early"
    files = RA.write_partial_results(empty, "KILLED", "interrupted (Ctrl-C)", 0, None, {"loss": [], "steps": {}})
    assert [f.name for f in files] == ["metrics.json", "gpdlm.log"]
    assert json.loads((empty / "metrics.json").read_text())["evaluated_at"] is None


def test_rejected_output_folder_is_removed_unless_it_holds_more(tmp_path):
    run = tmp_path / "outputs" / "2026-01-01" / "10-00-00"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("a: 1")
    (run / "gpdlm.log").write_text("")
    assert RA.discard_rejected_output(run, "bad beta")
    assert not (tmp_path / "outputs").exists()  # the date folder and the then empty outputs/ went too
    mine = tmp_path / "my_runs" / "run1"  # hydra.run.dir=my_runs/run1: the user's empty folder stays
    (mine / ".hydra").mkdir(parents=True)
    assert RA.discard_rejected_output(mine, "bad beta")
    assert (tmp_path / "my_runs").is_dir() and not mine.exists()
    kept = tmp_path / "mine"
    (kept / ".hydra").mkdir(parents=True)
    (kept / "notes.txt").write_text("x")
    assert not RA.discard_rejected_output(kept, "bad beta")
    assert (kept / "notes.txt").exists() and "rejected: bad beta" in (kept / "gpdlm.log").read_text()


@pytest.mark.parametrize(
    "overrides,swept,name",
    [
        ([], (), "dlm_joint-concrete-b1-s0"),
        (["model=dlm_fixed", "objective.beta=0.1"], (), "dlm_fixed-concrete-b0.1-s0"),
        (["model=svgp", "seed=3"], ("model", "seed", "model.num_inducing"), "svgp-concrete-b1-M100-s3"),
        (
            ["model=fitc", "estimator=bmc", "trainer.lr=0.01"],
            ("estimator", "trainer.lr", "hydra.launcher.n_jobs"),
            "fitc-concrete-b1-bmc-lr0.01-s0",
        ),
    ],
)
def test_run_names_carry_variant_beta_and_swept_values(overrides, swept, name):
    assert RN.run_name_for(compose(overrides), swept) == name


@pytest.mark.slow  # a real run: ~3.5 s
def test_a_real_run_reports_one_line_and_logs_its_dataset(tmp_path, capfd):
    """A new store too: MLflow's "Creating initial MLflow database tables..." must not appear."""
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking.liveness import process_state

    module_uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    cfg = compose(
        fast(
            [
                f"tracking.uri={module_uri}",
                "tracking.experiment=report",
                "objective.beta=0.5",
                "dataset.split.train_size=100",
                "trainer.max_iters=20",
                "trainer.eval_every=10",
            ]
        )
    )
    metrics = run_train(cfg, tmp_path / "run", overrides=[])
    captured = capfd.readouterr()
    out = captured.out.strip().splitlines()
    assert captured.err == ""  # quiet: the one line is all a successful run prints
    run = _only_run(module_uri, "report")
    assert run.info.run_name == "dlm_joint-concrete-b0.5-s0"
    assert out == [
        RN.run_line(run.info.run_name, metrics, tmp_path / "run", run.info.run_id, module_uri, run.info.experiment_id)
    ]
    line = out[0]
    assert line.startswith(f"gpdlm: dlm_joint-concrete-b0.5-s0: test_nll {metrics['test_nll']:.4g}, ")
    assert f"| MLflow run {run.info.run_id}, open with `gpdlm ui --tracking-uri {module_uri}`" in line
    assert line.endswith(
        f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?workflowType=machine_learning"
    )
    assert process_state(run.data.tags) == "alive"  # this very process
    inputs = MlflowClient(module_uri).get_run(run.info.run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    ds = inputs[0].dataset
    assert (ds.name, ds.digest) == ("concrete", run.data.tags["gpdlm.dataset_fingerprint"])
    cols = json.loads(ds.schema)["mlflow_colspec"]
    assert [c["name"] for c in cols][-1] == "compressive_strength" and len(cols) == 9
    assert json.loads(ds.profile)["num_rows"] == 1030
    assert inputs[0].tags[0].key == "mlflow.data.context" and inputs[0].tags[0].value == "training"


def test_learning_curve_labels_give_settings_and_units():
    info = RN.curve_info(compose(["model=dlm_fixed", "objective.beta=0.1"]), "regression", 16.7, lr=0.1)
    assert info["subtitle"] == "dlm (fixed) on concrete, gaussian likelihood: beta=0.1, M=100, lr=0.1, full batch"
    assert info["objective_label"] == "training objective\n(per datum, standardised targets)"
    assert info["nll_label"] == "NLL (nats per point, target units)"
    cls = RN.curve_info(compose(["dataset=breast_cancer", "trainer.batch_size=64"]), "classification", 1.0)
    assert cls["nll_label"] == "NLL (nats per point)" and cls["subtitle"].endswith("batch=64")
    seq = RN.curve_info(compose(["model=svgp"]), "regression", 1.0, lr=[0.01, 0.1])  # stages with their own lr
    assert "lr=0.01/0.1," in seq["subtitle"]


@pytest.mark.slow  # ~1.5-2.5 s: the fast lane stays under 2 minutes
def test_the_learning_curve_shows_the_lr_the_family_trains_with(tmp_path, monkeypatch):
    """gp_lstm trains its network with Adam(0.01) (App. E) when trainer.lr is null, not the trainer's
    full-batch default 0.1: the subtitle says so."""
    from gpdlm_cli.run import train as T
    from gpdlm_cli.tracking import NullTracker

    seen = {}
    monkeypatch.setattr(T, "curve_info", lambda *a, **k: seen.update(RN.curve_info(*a, **k)) or dict(seen))
    T.run_train(
        compose(
            [
                "model=gp_lstm",
                "dataset=sysid_actuator",
                "dataset.n=128",
                "model.network.units=4",
                "trainer.max_iters=2",
                "model.training.final_theta_steps=1",
                "trainer.eval_every=0",
                "progress=false",
                "tracking.enabled=false",
            ]
        ),
        tmp_path,
        tracker=NullTracker(),
    )
    assert "lr=0.01, " in seen["subtitle"], seen["subtitle"]


# ----- a second Ctrl-C stops a long training block at once; the last checkpoint is kept --------------------
STOPPING = "gpdlm: stopping after this step (Ctrl-C again to stop now; the last checkpoint is kept)"


@pytest.fixture
def restore_sigint(restore_signals):
    saved = signal.getsignal(signal.SIGINT)  # (tests/conftest.py: Python's handler even if SIGINT came ignored)
    yield
    signal.signal(signal.SIGINT, saved)


def test_a_second_ctrl_c_stops_an_interruptible_block_at_once(restore_sigint, capfd):
    reached = []
    with pytest.raises(KeyboardInterrupt) as info:
        with S.deferred_signals(user_signals=True, interruptible=True):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached.append("held")
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the second Ctrl-C raises before this ends
            reached.append("the whole block")
    assert reached == ["held"]
    assert S.stopped_mid_step(info.value)
    assert S.killed_reason(info.value) == (
        "interrupted (Ctrl-C); stopped at once by a second signal, in the middle of a step: the last checkpoint, "
        "if any, is kept"
    )
    assert capfd.readouterr().err.splitlines() == [STOPPING]


def test_a_second_sigterm_in_a_checkpoint_write_waits_for_its_end(restore_sigint, capfd):
    """A block that is not interruptible (a checkpoint being written, a run being ended) inside the iteration
    holds the second signal to its own end; then the stop is at once (mid-step)."""
    assert S.install_signal_handlers()
    reached = []
    with pytest.raises(S.Terminated) as info:
        with S.deferred_signals(user_signals=True, interruptible=True):
            os.kill(os.getpid(), signal.SIGTERM)
            with S.deferred_signals(user_signals=True):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                reached.append("the checkpoint written")
            reached.append("after the write")
    assert reached == ["the checkpoint written"]
    assert S.stopped_mid_step(info.value) and info.value.exit_code == 143
    assert capfd.readouterr().err.splitlines() == [
        "gpdlm: stopping after this step (SIGTERM again to stop now; the last checkpoint is kept)"
    ]


def test_two_signals_in_a_block_that_is_not_interruptible_wait_for_its_end(restore_sigint, capfd):
    """Ending a run, writing its last files: every signal waits (no RUNNING run, no half file)."""
    reached = []
    with pytest.raises(KeyboardInterrupt) as info:
        with S.deferred_signals():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached.append("the whole block")
    assert reached == ["the whole block"] and not S.stopped_mid_step(info.value)
    assert S.killed_reason(info.value) == "interrupted (Ctrl-C)"
    assert capfd.readouterr().err == ""


def test_an_ignored_sigint_stays_ignored_and_says_nothing(restore_sigint, capfd):
    """`nohup gpdlm ...`, or gpdlm started in the background by a shell without job control, inherits SIGINT
    ignored: a training iteration must not announce a stop ("stopping after this step") it then does not make."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reached = []
    with S.deferred_signals(user_signals=True, interruptible=True):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        reached.append("the whole block")
    assert reached == ["the whole block"]
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert capfd.readouterr().err == ""


# a `gpdlm train` whose third evaluation takes a minute (the first two wrote checkpoints); it writes the
# iteration where that evaluation began to argv[1] first
SLOW_EVALUATION = r"""
import pathlib, sys, time
from gpdlm_cli.training import loop as L
evaluate, calls, marker = L.Loop._evaluate, [], pathlib.Path(sys.argv[1])  # (cli.main replaces sys.argv)
def slow(self):
    calls.append(self.step)
    if len(calls) == 3:
        marker.write_text(str(self.step))
        for _ in range(600):
            time.sleep(0.1)
    return evaluate(self)
L.Loop._evaluate = slow
from gpdlm_cli import cli
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_a_second_ctrl_c_stops_a_long_step_at_once_killed_with_the_last_checkpoint(template_db, tmp_path):
    """A long training block (an evaluation of minutes) and Ctrl-C: one line says the run stops after the step,
    and the process waits; a second Ctrl-C stops it at once -- exit 130, the run KILLED in the MLflow store with
    a reason that says so, and the checkpoint of the last evaluation before, whole and verified."""
    from gpdlm_cli.training.checkpoint import read_checkpoint

    from ..conftest import REPO

    uri = copy_store(template_db, tmp_path)
    marker = tmp_path / "slow_evaluation"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    args = [
        "train",
        "trainer.max_iters=100",
        "trainer.stop_rule=none",
        "model.num_inducing=10",
        "dataset.split.train_size=100",
        "progress=false",
        "threads=1",
        "trainer.eval_every=5",
        "trainer.checkpoint_every=1",
        f"tracking.uri={uri}",
        "tracking.experiment=twice",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_EVALUATION, str(marker), *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        assert marker.read_text() == "15"  # evaluations at 5 and 10 wrote checkpoints
        proc.send_signal(signal.SIGINT)
        time.sleep(1.5)
        assert proc.poll() is None  # held: the step goes on
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - t0 < 30  # not the minute the evaluation had left
    reason = (
        "interrupted (Ctrl-C); stopped at once by a second signal, in the middle of a step: the last checkpoint "
        "(iteration 10) is kept"
    )
    lines = err.strip().splitlines()
    assert proc.returncode == 130, err
    assert STOPPING in lines and lines[-1] == f"gpdlm: {reason}", err
    run = _only_run(uri, "twice")
    assert run.info.status == "KILLED" and run.data.tags["failure_reason"] == reason
    assert lines[-2] == (
        f"gpdlm: the last checkpoint is kept in run/checkpoint.pt; continue this run with: gpdlm resume "
        f"{run.info.run_id[:8]}"
    )
    ckpt = read_checkpoint(tmp_path / "run" / "checkpoint.pt", strict=True)  # whole, and its SHA-256 matches
    assert ckpt is not None and ckpt["stage"] == 0 and ckpt["loop"]["it"] == 10 and not ckpt["complete"]
    assert not list((tmp_path / "run").glob(".checkpoint.pt.tmp-*"))
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "KILLED"
