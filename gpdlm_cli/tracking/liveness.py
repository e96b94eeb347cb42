"""Which process a run belongs to, and whether that process still exists.

Every run records ``gpdlm.host``, ``gpdlm.pid`` and ``gpdlm.process_start`` (the process's start
time in seconds since the epoch, from psutil: Linux, macOS and Windows alike). A run
still RUNNING whose process is gone -- killed by SIGKILL or the OOM killer, which no handler can
catch -- is an orphan: ``gpdlm runs --stale`` finds it. The start time guards against a PID that
the system has since given to another process.
"""

from __future__ import annotations

import os
import socket

HOST_TAG, PID_TAG, START_TAG = "gpdlm.host", "gpdlm.pid", "gpdlm.process_start"


def process_start(pid: int) -> str:
    """The start time of process ``pid``, seconds since the epoch to 0.01 s ('' when unknown)."""
    import psutil

    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except (psutil.Error, OSError):
        return ""


def process_tags() -> dict[str, str]:
    """This process's identity as run tags."""
    pid = os.getpid()
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), START_TAG: process_start(pid)}


def process_state(tags: dict) -> str:
    """'alive', 'gone', or 'unknown' (another host, or a run without the tags) for the process
    recorded in a run's ``tags``."""
    host, pid = tags.get(HOST_TAG), tags.get(PID_TAG)
    if not host or not pid or not pid.isdigit() or host != socket.gethostname():
        return "unknown"
    import psutil

    if not psutil.pid_exists(int(pid)):
        return "gone"
    start, now = tags.get(START_TAG), process_start(int(pid))
    if start and now and not _same_start(start, now):
        return "gone"  # the PID now belongs to a different process
    return "alive"


def _same_start(a: str, b: str) -> bool:
    try:
        return abs(float(a) - float(b)) < 0.05
    except ValueError:  # a tag written by an older gpdlm (clock ticks): cannot compare
        return True


def close_orphan(client, run, closed_by: str) -> None:
    """End a RUNNING MLflow ``run`` whose process is gone (``process_state`` 'gone'): KILLED, with
    ``failure_reason`` naming the process and who closed it (``gpdlm resume``, a sweep run again)."""
    from mlflow.entities import RunTag

    reason = f"orphaned: process {run.data.tags.get(PID_TAG)} is gone (closed by {closed_by})"
    client.log_batch(run.info.run_id, tags=[RunTag("failure_reason", reason)])
    client.set_terminated(run.info.run_id, "KILLED")
