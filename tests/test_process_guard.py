"""A server a test starts (``gpdlm ui``, tests/commands/conftest.py's ``ui_server``) dies with the test process:
``tests/process_guard.py`` ends its whole process group when pytest is killed (SIGKILL, SIGTERM), exits
without its teardown (the atexit hook), or stops it (``stop_guarded``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# a stand-in for `gpdlm ui`: a listening server with a listening worker child (as mlflow's server has), both
# in the guard's group; the worker can ignore SIGTERM (then only the guard's SIGKILL ends it)
SERVER = r"""
import json, os, signal, socket, subprocess, sys, time
info, stubborn = sys.argv[1], sys.argv[2] == "1"
WORKER = '''
import signal, socket, sys, time
if sys.argv[2] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(600)
'''
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
wfile = info + ".worker"
worker = subprocess.Popen([sys.executable, "-c", WORKER, wfile, sys.argv[2]])
while not os.path.exists(wfile) or not open(wfile).read():
    time.sleep(0.02)
data = {"pid": os.getpid(), "port": s.getsockname()[1], "worker_pid": worker.pid, "worker_port": int(open(wfile).read())}
open(info + ".tmp", "w").write(json.dumps(data))
os.replace(info + ".tmp", info)
time.sleep(600)
"""

# the test process stand-in: starts the server through the fixture's helper, then waits to be killed or exits
# without stopping it (mode "exit": only the atexit hook is left to end it)
SCRIPT = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from tests.process_guard import start_guarded
info, stubborn, mode = sys.argv[2], sys.argv[3], sys.argv[4]
proc = start_guarded([sys.executable, "-c", sys.argv[5], info, stubborn], grace_s=1.0)
print(proc.pid, flush=True)
while not os.path.exists(info):
    time.sleep(0.02)
if mode == "exit":
    sys.stdin.readline()
    sys.exit(0)
time.sleep(600)
"""


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, is not alive)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize(
    "how,stubborn",
    [("SIGKILL", False), ("SIGTERM", False), ("exit", False), ("SIGKILL", True)],
    ids=["sigkill", "sigterm", "exit-without-teardown", "sigkill-worker-ignores-sigterm"],
)
def test_the_server_group_dies_with_the_test_process(tmp_path, how, stubborn):
    info = tmp_path / "server.json"
    mode = "exit" if how == "exit" else "wait"
    test_process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(REPO), str(info), "1" if stubborn else "0", mode, SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        guard = int(test_process.stdout.readline())
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline and test_process.poll() is None:
            time.sleep(0.05)
        server = json.loads(info.read_text())
        pids = [guard, server["pid"], server["worker_pid"]]
        assert all(_alive(p) for p in pids) and _listening(server["port"]) and _listening(server["worker_port"])
        if how == "exit":
            test_process.stdin.write("exit\n")
            test_process.stdin.flush()
        else:
            test_process.send_signal(getattr(signal, how))
        test_process.wait(timeout=30)
        # gone within a few seconds (SIGTERM first; SIGKILL after the guard's grace, 1 s here, for the stubborn worker)
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and (any(_alive(p) for p in pids) or _listening(server["port"])):
            time.sleep(0.05)
        left = [p for p in pids if _alive(p)]
        assert left == [] and not _listening(server["port"]) and not _listening(server["worker_port"]), left
    finally:
        if test_process.poll() is None:
            test_process.kill()
            test_process.wait()
        for p in locals().get("pids", []):
            if _alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.slow
def test_stop_guarded_ends_the_group_and_reaps_the_guard(tmp_path):
    """The fixture's teardown: ``stop_guarded`` ends the server and its worker, and the guard's status is read."""
    from .process_guard import _EXIT_HOOKS, start_guarded, stop_guarded

    info = tmp_path / "server.json"
    proc = start_guarded([sys.executable, "-c", SERVER, str(info), "0"])
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        server = json.loads(info.read_text())
        assert proc.pid in _EXIT_HOOKS
        start = time.monotonic()
        stop_guarded(proc)
        assert time.monotonic() - start < 4 and proc.returncode is not None and proc.pid not in _EXIT_HOOKS
        time.sleep(0.2)  # the worker, reparented, is reaped by init
        assert not _alive(server["pid"]) and not _alive(server["worker_pid"])
        assert not _listening(server["port"]) and not _listening(server["worker_port"])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


SERVER_WORDS = {"server", "ui"}  # `mlflow server`, `mlflow ui`, `gpdlm ui`: processes that never end by themselves


def _unguarded_servers(path: Path) -> list[str]:
    """The ``Popen(...)``/``subprocess.Popen(...)`` calls in ``path`` whose command names a server (a string
    argument ``server`` or ``ui``): 'file:line' each. A server started so is left running by a killed pytest;
    ``start_guarded`` (or ``gpdlm_subprocess(..., runner=start_guarded)``) ends it with the test process."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        runner = [k.value for k in node.keywords if k.arg == "runner"]
        if name == "Popen" or any(isinstance(r, ast.Attribute) and r.attr == "Popen" for r in runner):
            words = {c.value for a in node.args for c in ast.walk(a) if isinstance(c, ast.Constant)}
            if words & SERVER_WORDS:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_server_a_test_starts_is_guarded():
    """No test starts a server with a plain Popen (test_ray_launcher_with_a_tracking_server's `mlflow server`
    was one): each goes through tests/process_guard.py, so that none outlives a killed pytest."""
    found = [hit for path in sorted((REPO / "tests").rglob("*.py")) for hit in _unguarded_servers(path)]
    assert found == []
