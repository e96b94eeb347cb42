"""Which process a run belongs to, and whether that process still exists.

Every run records ``gpdlm.host``, ``gpdlm.pid`` and ``gpdlm.process_start`` (the process's start
time in clock ticks since boot, from ``/proc/<pid>/stat``; empty where there is no /proc). A run
still RUNNING whose process is gone -- killed by SIGKILL or the OOM killer, which no handler can
catch -- is an orphan: ``gpdlm runs --stale`` finds it. The start time guards against a PID that
the system has since given to another process.
"""

from __future__ import annotations

import os
import socket

HOST_TAG, PID_TAG, START_TAG = "gpdlm.host", "gpdlm.pid", "gpdlm.process_start"


def process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks after boot ('' when unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return ""
    # the command name (field 2) may contain spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""  # field 22 of proc(5), counted from field 3


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
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:  # exists, owned by someone else
        pass
    start = tags.get(START_TAG)
    if start and process_start(int(pid)) not in ("", start):
        return "gone"  # the PID now belongs to a different process
    return "alive"
