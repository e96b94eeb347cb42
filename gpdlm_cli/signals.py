"""Termination signals as exceptions, so that every way a run can be stopped ends it cleanly.

Ctrl-C raises ``KeyboardInterrupt``; SIGTERM (Slurm's ``scancel`` and time limit, submitit,
``timeout``, ``docker stop``) and SIGHUP (a closed terminal or ssh session) would by default kill
the process on the spot and leave its MLflow run RUNNING forever. ``install_signal_handlers``
turns them into ``Terminated`` -- a ``KeyboardInterrupt`` subclass, so every ``except
KeyboardInterrupt`` (the tracker, the sweep, the CLI) treats them like Ctrl-C: the run ends KILLED
with the signal as its reason and the process exits with 128 + the signal number (143, 129), as a
shell reports a process killed by that signal.

Under submitit (hydra/launcher=submitit_*) the scheduler announces preemption and the coming time
limit with a user signal (SIGUSR2 by default, ``SUBMITIT_PREEMPT_SIGNAL``); submitit's handler
calls the launcher's ``checkpoint`` (hydra-submitit-launcher resubmits the same job), requeues it
and exits with ``SystemExit(-1)``, or raises ``UncompletedJobError`` when it cannot requeue. That
protocol is kept exactly -- the handler still runs and its exception still propagates -- and the
exception is only tagged with a reason (``KILLED_REASON``) so the tracker ends the run KILLED
("preempted or timed out ... requeued by submitit") instead of FAILED.
"""

from __future__ import annotations

import contextlib
import signal
import threading

# the attribute that marks an exception as "the run was stopped from outside" (KILLED, not FAILED)
KILLED_REASON = "gpdlm_killed_reason"
HANDLED = ("SIGTERM", "SIGHUP")


class Terminated(KeyboardInterrupt):
    """The process received a termination signal (SIGTERM, SIGHUP): stop like Ctrl-C."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.signame = signal.Signals(signum).name
        super().__init__(f"terminated by {self.signame}")

    @property
    def exit_code(self) -> int:
        """128 + the signal number: what a shell reports for a process killed by the signal."""
        return 128 + self.signum

    @property
    def reason(self) -> str:
        return f"terminated by {self.signame} (signal {self.signum})"


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def killed_reason(exc: BaseException) -> str | None:
    """Why a run stopped by ``exc`` was stopped from outside, or None when ``exc`` is a failure.

    Ctrl-C, SIGTERM/SIGHUP (``Terminated``) and a submitit preemption/timeout are KILLED; anything
    else is FAILED."""
    if isinstance(exc, Terminated):
        return exc.reason + _mid_step(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)" + _mid_step(exc)
    return getattr(exc, KILLED_REASON, None)


def _mid_step(exc: BaseException) -> str:
    """What a second stop signal (``MID_STEP``) adds to the reason: the step in progress is lost, and the last
    checkpoint (``LAST_CHECKPOINT``: its iteration, where the run had a checkpointer) is kept."""
    if not getattr(exc, MID_STEP, False):
        return ""
    text = "; stopped at once by a second signal, in the middle of a step: "
    if not hasattr(exc, LAST_CHECKPOINT):
        return text + "the last checkpoint, if any, is kept"
    at = getattr(exc, LAST_CHECKPOINT)
    return text + ("no checkpoint had been written" if at is None else f"the last checkpoint (iteration {at}) is kept")


def exit_code(exc: BaseException) -> int:
    """The process exit code after ``exc`` stopped the command: 128 + signal, 130 for Ctrl-C."""
    return exc.exit_code if isinstance(exc, Terminated) else 130


def _submitit_signal(handler) -> bool:
    """Whether ``handler`` is one of submitit's signal handlers (its job environment installed it)."""
    owner = getattr(handler, "__self__", None)
    return type(owner).__module__.startswith("submitit.") if owner is not None else False


def _tag_submitit(handler, signame: str):
    """Wrap submitit's preemption/timeout handler: same behaviour, the exception it ends the job
    with (SystemExit after requeueing, UncompletedJobError otherwise) carries a KILLED reason."""

    def wrapped(signum, frame):
        try:
            handler(signum, frame)
        except BaseException as e:
            if isinstance(e, SystemExit):
                why = "requeued by submitit (the job continues from its checkpoint, if it wrote one, as a new run)"
            else:
                why = f"not requeued: {str(e).strip() or type(e).__name__}"
            setattr(e, KILLED_REASON, f"preempted or timed out ({signame} from the scheduler); {why}")
            raise

    wrapped.__dict__["gpdlm_wrapped"] = True  # read by install_signal_handlers (idempotence)
    return wrapped


def install_signal_handlers() -> bool:
    """Make SIGTERM and SIGHUP raise ``Terminated`` and tag submitit's preemption signal (see the
    module docstring). Idempotent; only possible in the main thread (False elsewhere, nothing done)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for name in HANDLED:
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, _raise_terminated)
            if hasattr(signal, "pthread_sigmask"):  # a mask inherited from the parent must not hide them
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    for name in ("SIGUSR1", "SIGUSR2"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        current = signal.getsignal(sig)
        if current is not None and _submitit_signal(current) and not getattr(current, "gpdlm_wrapped", False):
            signal.signal(sig, _tag_submitit(current, name))
    return True


class _Gate:
    """The handler ``deferred_signals`` puts in front of a signal's own handler (once; later blocks
    reuse it): inside a block it only records the signal, outside it calls the handler at once. A
    second stop signal (SIGINT, SIGTERM, SIGHUP) while one is held and an ``interruptible`` block is
    open is delivered at once (``_stop_now``), or at the end of the held blocks nested in it."""

    def __init__(self, handler):
        self.handler = handler

    def __call__(self, signum, frame):
        if _held["depth"] == 0:
            _deliver(self.handler, signum, frame)
            return
        stopping = any(s in STOP_SIGNALS for s in _held["pending"])
        open_ = _held["depth"] > _held["strict"]  # an interruptible block (a training iteration) is open
        if signum in STOP_SIGNALS and stopping and open_:  # the second Ctrl-C: stop now
            if _held["strict"] == 0:
                _held["pending"].clear()
                _stop_now(self.handler, signum, frame)
            else:  # a checkpoint or a log being written: at its end
                _held["urgent"] = signum
            return
        if signum not in _held["pending"]:
            _held["pending"].append(signum)
        if signum in STOP_SIGNALS and not stopping and open_:
            _say_stopping(signum)


_held: dict = {"depth": 0, "strict": 0, "pending": [], "urgent": None}
#: the attribute that marks the exception of a second stop signal, delivered in the middle of a training
#: iteration: the step in progress is lost, and no checkpoint is written of it (the last one is kept)
MID_STEP = "gpdlm_stopped_mid_step"
#: the attribute ``training.callbacks.Checkpointing`` sets on that exception: the iteration of the last
#: checkpoint written (None: none was)
LAST_CHECKPOINT = "gpdlm_last_checkpoint"
STOP_SIGNALS = {int(getattr(signal, n)) for n in ("SIGINT",) + HANDLED if hasattr(signal, n)}


def _say_stopping(signum: int) -> None:
    """The one line on stderr when the first stop signal is held back by a training iteration. Written with
    ``os.write``: a handler that printed through ``sys.stderr`` while the main thread was writing to it
    (a progress bar) would raise "reentrant call"."""
    import os

    again = "Ctrl-C again" if signum == signal.SIGINT else f"{signal.Signals(signum).name} again"
    line = f"gpdlm: stopping after this step ({again} to stop now; the last checkpoint is kept)\n"
    try:
        os.write(2, line.encode())
    except OSError:  # stderr closed: the stop goes on
        pass


def _stop_now(handler, signum, frame) -> None:
    """Deliver a second stop signal in the middle of an iteration: its handler's exception, marked ``MID_STEP``."""
    try:
        _deliver(handler, signum, frame)
    except BaseException as e:
        setattr(e, MID_STEP, True)
        raise


def stopped_mid_step(exc: BaseException) -> bool:
    """Whether ``exc`` is a second stop signal's, delivered in the middle of a training iteration."""
    return bool(getattr(exc, MID_STEP, False))


def _deliver(handler, signum, frame) -> None:
    if callable(handler):
        handler(signum, frame)
    elif handler in (signal.SIG_DFL, None):  # the default action (e.g. SIGUSR2 outside submitit: terminate)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


def _handler_of(sig: int):
    h = signal.getsignal(sig)
    return h.handler if isinstance(h, _Gate) else h


@contextlib.contextmanager
def deferred_signals(user_signals: bool = False, interruptible: bool = False):
    """Hold back SIGINT, SIGTERM and SIGHUP (and SIGUSR1/2, submitit's preemption signals, with
    ``user_signals``) while the block runs (a training iteration, ending a run, writing its last
    files); a signal that arrives meanwhile is delivered when the (outermost) block ends, to the
    handler in place. A no-op outside the main thread.

    ``interruptible`` (a training iteration, which may take minutes: a PIC++ epoch, an evaluation on
    20,000 rows): the first stop signal prints one line ("stopping after this step (Ctrl-C again to stop
    now; ...)"), and a second stop signal (SIGINT, SIGTERM or SIGHUP) is delivered at once, its exception
    marked ``MID_STEP`` (no checkpoint is written of a step half done; the last one is kept) -- or, when
    a block that is not interruptible (a checkpoint, a log, the end of a run) is open inside, at that
    block's end. Blocks that are not interruptible hold every signal to their end.

    A signal this process ignores stays ignored (``nohup``, or a process a shell without job control
    started in the background, inherits SIGINT ignored): no "stopping" line that would then not be kept.

    Held back in Python, not by a signal mask: Python runs every handler in the main thread, and
    ``pthread_sigmask`` holds a signal back only where the *receiving* thread blocks it -- a
    process-directed signal (``kill``, submitit's SIGUSR2, Slurm's SIGTERM) goes to any thread that
    does not, e.g. MLflow's logging threads, and its handler then ran in the middle of the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    for n in ("SIGINT",) + HANDLED + (("SIGUSR1", "SIGUSR2") if user_signals else ()):
        sig = getattr(signal, n, None)
        if sig is not None:
            current = signal.getsignal(sig)
            if not isinstance(current, _Gate) and current is not signal.SIG_IGN:
                signal.signal(sig, _Gate(current))
    strict = 0 if interruptible else 1
    _held["depth"] += 1
    _held["strict"] += strict
    try:
        yield
    finally:
        _held["depth"] -= 1
        _held["strict"] -= strict
        if _held["depth"] == 0:
            _held["urgent"] = None
            if _held["pending"]:
                todo = list(_held["pending"])
                _held["pending"].clear()
                for sig in todo:  # delivered now (the handler's exception is raised from here)
                    _deliver(_handler_of(sig), sig, None)
        elif _held["urgent"] is not None and _held["strict"] == 0:  # a second stop signal waited for this block
            sig, _held["urgent"] = _held["urgent"], None
            _held["pending"].clear()
            _stop_now(_handler_of(sig), sig, None)


_PARENT_WATCH: list = []


def exit_with_parent(poll_s: float = 1.0, grace_s: float = 60.0):
    """In a worker process (a job of ``hydra/launcher=joblib``): when the process that started it
    dies -- ``gpdlm train -m`` killed with SIGKILL, which no handler can pass on -- its parent PID
    changes; then this process sends itself SIGTERM (the job ends KILLED with its checkpoint, as on
    ``kill``) and, if it is still alive ``grace_s`` later, exits. Started once per process; returns
    the watching thread (None when the parent is already init)."""
    import os
    import time

    if _PARENT_WATCH:
        return _PARENT_WATCH[0]
    parent = os.getppid()
    if parent <= 1:
        return None

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(128 + signal.SIGTERM)

    t = threading.Thread(target=watch, name="gpdlm-exit-with-parent", daemon=True)
    t.start()
    _PARENT_WATCH.append(t)
    return t


__all__ = [
    "Terminated",
    "deferred_signals",
    "exit_code",
    "exit_with_parent",
    "install_signal_handlers",
    "killed_reason",
    "stopped_mid_step",
]
