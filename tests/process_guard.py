"""Background servers that tests start (``gpdlm ui``), and that never outlive the test process.

``start_guarded(cmd)`` starts ``python tests/process_guard.py <pid of this process> -- <cmd>``: the
guard makes itself the leader of a new session and process group, runs ``cmd`` in it (so the command's
own children -- ``mlflow ui``'s server worker -- are in it too) and ends the whole group when

* this process goes away by any means -- the end of a session's teardown, a failing test, Ctrl-C,
  SIGTERM or SIGKILL of pytest: Linux sends the guard SIGTERM when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``), and the guard also notices that it was re-parented (polled every
  0.2 s, where prctl is unavailable);
* the guard itself gets SIGTERM, SIGINT or SIGHUP (``stop_guarded``: ``killpg`` of the group);
* ``cmd`` exits (what it left behind is ended; the guard exits with ``cmd``'s status).

Ending the group: SIGTERM to every process in it, SIGKILL after ``GRACE_S`` (``grace_s``) to whatever is left. The
returned ``Popen`` is the guard's: ``poll()`` is None while ``cmd`` runs, its ``pid`` is the group's id.
``start_guarded`` also registers an ``atexit`` hook that ends the group (``stop_guarded`` removes it).
Standard library only, Linux (the process-group calls are POSIX; the parent-death signal is Linux's).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
POLL_S = 0.2
_EXIT_HOOKS: dict[int, Callable[[], None]] = {}  # guard pid -> its atexit hook


def start_guarded(cmd: list[str], grace_s: float = GRACE_S, **popen_kwargs) -> subprocess.Popen:
    """``cmd`` under a guard (module docstring), started with ``subprocess.Popen(**popen_kwargs)``
    (``cwd``, ``env``, ``stdout``, ``stderr``; not ``start_new_session``: the guard makes its own);
    ``grace_s``: the guard's time between SIGTERM and SIGKILL."""
    popen_kwargs.pop("start_new_session", None)
    guard = [sys.executable, os.path.abspath(__file__), str(os.getpid()), str(grace_s), "--", *cmd]
    proc = subprocess.Popen(guard, start_new_session=True, **popen_kwargs)

    def at_exit(pid=proc.pid):
        _end_group(pid)

    _EXIT_HOOKS[proc.pid] = at_exit
    atexit.register(at_exit)
    return proc


def stop_guarded(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """End the guarded command's whole process group and reap the guard (SIGKILL to the group if the
    guard has not exited after ``timeout`` s)."""
    hook = _EXIT_HOOKS.pop(proc.pid, None)
    if hook is not None:
        atexit.unregister(hook)
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
    _signal_group(proc.pid, signal.SIGKILL)  # anything the guard could not end


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _end_group(pgid: int) -> None:
    """SIGTERM to the group, SIGKILL after ``GRACE_S`` if any member is left (from outside the group)."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and _members(pgid):
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)


def _parent_death_signal(sig: int) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _guard(parent: int, cmd: list[str], grace_s: float = GRACE_S) -> int:
    """The guard process (module docstring): returns ``cmd``'s exit status, or 143 when stopped."""
    if os.getpgrp() != os.getpid():
        os.setsid()
    stop: list[int] = []

    def on_signal(signum, frame):
        stop.append(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    _parent_death_signal(signal.SIGTERM)
    child = subprocess.Popen(cmd) if os.getppid() == parent else None  # same session and group as the guard
    rc = 143
    while child is not None and not stop and os.getppid() == parent:
        try:
            rc = child.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
    # end the group (this guard ignores the SIGTERM it sends itself); SIGKILL what is left after the grace
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _signal_group(0, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while ((child is not None and child.poll() is None) or _others_in_group()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if (child is not None and child.poll() is None) or _others_in_group():
        _signal_group(0, signal.SIGKILL)  # this guard too: nothing is waiting for its status any more
    return rc if child is not None and child.returncode is not None and not stop else 143


def _others_in_group() -> list[int]:
    """The live processes of this process's group other than itself."""
    return [p for p in _members(os.getpgrp()) if p != os.getpid()]


def _members(pgid: int) -> list[int]:
    """The live processes of group ``pgid``, zombies (ended, not yet reaped) left out; from /proc, or
    without it every process ``killpg`` reaches ([pgid] or [])."""
    out = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
            out.append(pid)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit("usage: process_guard.py PARENT_PID GRACE_S -- COMMAND ...")
    sys.exit(_guard(int(sys.argv[1]), sys.argv[4:], float(sys.argv[2])))
