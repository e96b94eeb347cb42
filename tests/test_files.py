"""Files written whole and verified (issue 45): SHA-256 sidecars, stale temporaries, the folder lock."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpdlm_cli.files import (
    ChecksumMismatch,
    FolderBusy,
    folder_holder,
    folder_lock,
    remove_stale_temporaries,
    sidecar,
    verify_sha256,
    write_bytes_atomic,
    write_verified,
)


def test_a_verified_file_checks_its_bytes_and_survives_a_kill_between_its_two_writes(tmp_path):
    path = tmp_path / "model.pt"
    write_verified(path, b"first version")
    assert verify_sha256(path) is not None
    # a kill after the sidecar, before the rename: the sidecar names the new digest, the file is the old one
    old = path.read_bytes()
    write_verified(path, b"second version")
    write_bytes_atomic(path, old)
    assert verify_sha256(path) is not None  # the old file still verifies (second line of the sidecar)
    path.write_bytes(b"first versioN")  # one changed byte
    with pytest.raises(ChecksumMismatch, match="does not match its recorded SHA-256"):
        verify_sha256(path)
    sidecar(path).unlink()
    assert verify_sha256(path) is None  # a file saved before checksums were recorded


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.slow
def test_partial_temporaries_of_dead_processes_are_removed(tmp_path):
    dead = tmp_path / f".checkpoint.pt.tmp-{_dead_pid()}"
    live = tmp_path / f".checkpoint.pt.tmp-{os.getpid()}"
    dead.write_bytes(b"half")
    live.write_bytes(b"being written")
    assert remove_stale_temporaries(tmp_path) == [dead]
    assert not dead.exists() and live.exists()


def test_the_folder_lock_is_exclusive_and_names_its_holder(tmp_path):
    assert folder_holder(tmp_path) is None
    with folder_lock(tmp_path):
        assert folder_holder(tmp_path) == str(os.getpid())
        with pytest.raises(FolderBusy):
            with folder_lock(tmp_path):
                pass
    assert folder_holder(tmp_path) is None


def test_a_second_train_into_a_busy_folder_is_one_line(tmp_path):
    from gpdlm_cli.exceptions import GpdlmError
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking import NullTracker

    from .conftest import compose

    cfg = compose(
        [
            "dataset=diabetes",
            "model.num_inducing=8",
            "dataset.split.train_size=60",
            "trainer.max_iters=2",
            "progress=false",
            "threads=1",
            "tracking.enabled=false",
        ]
    )
    with folder_lock(tmp_path):
        with pytest.raises(GpdlmError, match=rf"another gpdlm process \(pid {os.getpid()}\) is training into"):
            run_train(cfg, tmp_path, tracker=NullTracker())
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_a_worker_exits_when_the_process_that_started_it_is_killed(tmp_path):
    """A joblib worker's parent killed by SIGKILL: the worker (here a grandchild of the test, watching
    with ``exit_with_parent``) sends itself SIGTERM and is gone within seconds, not 33 minutes."""
    import signal
    import time

    import psutil

    child = (
        "import time; from gpdlm_cli.signals import exit_with_parent\n"
        "exit_with_parent(poll_s=0.1, grace_s=5); time.sleep(120)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "print(p.pid, flush=True); time.sleep(120)\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(__import__("pathlib").Path(__file__).parents[1])] + [os.environ.get("PYTHONPATH", "")]
        ),
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, env=env)
    worker = int(proc.stdout.readline())
    time.sleep(1.5)  # the worker has started watching
    assert psutil.pid_exists(worker)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(worker).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the worker outlived its parent")
