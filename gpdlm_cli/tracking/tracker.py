"""Experiment tracking: MLflow (a SQLite store by default) and a null tracker for tests.

Runs are driven through ``MlflowClient`` with explicit run ids -- no global "active run" -- so a
run left over by one job can never leak into the next job of a reused worker. ``Tracker.run`` is a
context manager that always ends the run: FINISHED, FAILED (with the reason as the tag
``failure_reason``) or KILLED (Ctrl-C, SIGTERM/SIGHUP, a submitit preemption: the reason in the same
tag; see ``signals``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from ..signals import deferred_signals, killed_reason

HASH_TAG = "gpdlm.config_hash"  # the run tag that says which configuration a run trained (tracking.identity)
LOSS_EVERY = "gpdlm.loss_every"  # the run's tag: its train_loss history in the store holds every k-th step
MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
LOCK_WAIT_S = 60.0  # how long a call waits for a SQLite store another process holds locked
# ... once the run exists and trains: its results are worth a long wait, not a FAILED run (issue 45)
RUN_LOCK_WAIT_S = 3600.0
SERVER_CHECK_TIMEOUT_S = 5.0  # the reachability check of a tracking server before a run
# bounded HTTP retries (MLflow's defaults: 7 retries with doubling back-off, minutes of silence)
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


def default_tracking_uri(base_dir: str | os.PathLike | None = None) -> str:
    """``sqlite:///<base_dir>/mlflow.db``: MLflow 3's default store, in the launch directory."""
    base = Path(base_dir or os.getcwd()).resolve()
    return f"sqlite:///{base / 'mlflow.db'}"


def resolve_tracking_uri(uri: str | None, base_dir: str | os.PathLike | None = None) -> str:
    """None -> the default SQLite file; a bare path ending in .db -> a sqlite URI; else as given."""
    if not uri:
        return default_tracking_uri(base_dir)
    if "://" not in uri and uri.endswith(".db"):
        return f"sqlite:///{Path(base_dir or os.getcwd(), uri).resolve()}"
    return uri


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


class NullTracker:
    """Records everything in memory (tests, ``tracking.enabled=false``)."""

    run_id: str | None = None
    #: config hashes recorded FINISHED elsewhere (``sweep.finished_from``'s run-records files): finished for
    #: ``has_finished_run`` as the store's own FINISHED runs are
    recorded_finished: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.params: dict = {}
        self.tags: dict = {}
        self.metrics: dict = {}
        self.steps: dict = {}
        self.artifacts: list = []
        self.status: str | None = None

    @contextlib.contextmanager
    def run(self, run_name=None, params=None, tags=None, parent_run_id=None) -> Iterator[NullTracker]:
        self.params.update(params or {})
        self.tags.update(tags or {})
        try:
            yield self
        except BaseException as e:
            why = killed_reason(e)
            self.status = "KILLED" if why else "FAILED"
            self.tags["failure_reason"] = why or f"{type(e).__name__}: {e}"
            raise
        else:
            self.status = "FINISHED"

    def log_metrics(self, metrics: dict[str, float], step: int | None = None):
        self.metrics.update(metrics)

    def log_steps(self, series: dict[str, list[tuple[int, float]]]):
        for k, pts in series.items():
            self.steps.setdefault(k, []).extend(pts)

    def set_tags(self, tags: dict):
        self.tags.update(tags)

    def log_artifact(self, path):
        self.artifacts.append(str(path))

    def log_dataset(
        self, name: str, digest: str, source: str, columns: dict[str, str], num_rows: int, context: str = "training"
    ):
        self.datasets = getattr(self, "datasets", []) + [
            {
                "name": name,
                "digest": digest,
                "source": source,
                "columns": dict(columns),
                "num_rows": num_rows,
                "context": context,
            }
        ]

    def has_finished_run(self, tag: str, value) -> bool:
        return self.recorded(tag, value)

    def live_run(self, tag: str, value) -> str | None:
        """The id of a ``gpdlm train`` run still RUNNING whose ``tag`` equals ``value`` (or one of a tuple's
        values) and whose process is alive on this host, not this one: another process is training the same
        configuration (None without a store)."""
        return None

    def skip_reason(self, hashes) -> str | None:
        """Why a job of a configuration (``hashes``: the versions of its config hash) has nothing to do under
        ``sweep.skip_finished``: ``"finished"`` (a FINISHED run, the store's or a recorded one), the line saying
        which run another live process on this host is training, or None (the job trains)."""
        if self.has_finished_run(HASH_TAG, hashes):
            return "finished"
        live = self.live_run(HASH_TAG, hashes)
        return (
            None
            if live is None
            else f"run {live[:8]} of this configuration is training in another process on this host"
        )

    def recorded(self, tag: str, value) -> bool:
        """Whether ``value`` (a config hash, or a tuple of its versions) is in ``recorded_finished``."""
        values = (value,) if isinstance(value, str) else tuple(value)
        return tag == HASH_TAG and any(v in self.recorded_finished for v in values)

    def stopped_runs(self, tag: str, value) -> list:
        """The experiment's ``gpdlm train`` runs that did not finish (KILLED, FAILED or RUNNING) whose
        ``tag`` equals ``value`` (or one of a tuple's values), newest first (none without a store)."""
        return []

    def tag_run(self, run_id: str, tags: dict) -> None:
        """Tags on another run of the store (the stopped run a run continues: ``gpdlm.resumed_as``)."""


class MlflowTracker(NullTracker):
    """One MLflow run per ``run()`` block, logged with batched calls.

    Before anything else the store is checked (``check_store``: a SQLite file's folder exists and
    is writable, a server answers) and opened under a file lock (``store_lock``: parallel first
    runs never race to create the schema). Every call that finds a SQLite store locked by another
    process waits and retries for up to ``LOCK_WAIT_S`` (``locked_retry``)."""

    def __init__(self, uri: str, experiment: str, system_metrics: float | None = None, loss_every: int = 1):
        """``system_metrics``: sample CPU, memory, disk, network (and GPU where pynvml sees one) every
        that many seconds into the run as ``system/*`` metrics (MLflow's monitor); None = off.
        ``loss_every``: ``train_loss`` goes to the store at the steps that are multiples of it and at the run's
        last step (the run's tag ``gpdlm.loss_every`` says so when > 1), so a run shorter than k still ends on its
        last loss: a paper-protocol RKHS run of 128,600 steps logged every step took ~28 s and ~34 MB of the
        store (``tracking.loss_every``; benchmarks/bench_loss_logging.py)."""
        super().__init__()
        self.system_metrics = system_metrics
        self.loss_every = max(1, int(loss_every))
        self._loss_tail = None  # the last train_loss point handed over, while it is not in the store
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.experiment_name = experiment
        quiet_mlflow()
        check_store(uri)
        mlflow.set_tracking_uri(uri)
        with store_lock(uri):  # MLflow creates or migrates the schema when the client opens the store
            try:
                import warnings

                with warnings.catch_warnings():  # alembic's notes on reflected tables while it migrates
                    warnings.simplefilter("ignore")
                    self.client = RetryingClient(locked_retry(lambda: MlflowClient(tracking_uri=uri), uri), uri)
                    self.experiment_id = ensure_experiment(self.client, experiment, uri)
            except Exception as e:
                message = broken_schema_message(uri, e)
                if message is None:
                    raise
                from ..exceptions import TrackingError

                raise TrackingError(message) from None

    @contextlib.contextmanager
    def run(self, run_name=None, params=None, tags=None, parent_run_id=None):
        from mlflow.entities import Param

        all_tags = {k: str(v) for k, v in (tags or {}).items()}
        if self.loss_every > 1:
            all_tags[LOSS_EVERY] = str(self.loss_every)
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=all_tags)
        self.run_id, self._loss_tail = run.info.run_id, None
        self.client.wait_s = RUN_LOCK_WAIT_S  # from here on a locked store is waited out, the run goes on
        monitor = self._start_system_metrics()
        try:
            items = [Param(k, _param_str(v)) for k, v in (params or {}).items()]
            for i in range(0, len(items), 100):
                self.client.log_batch(self.run_id, params=items[i : i + 100])
            yield self
        except BaseException as e:
            why = killed_reason(e)
            if why:
                self._end("KILLED", why)
            else:
                self._end("FAILED", f"{type(e).__name__}: {e}".splitlines()[0][:5000])
            raise
        else:
            self._end("FINISHED")
        finally:
            self.client.wait_s = None
            if monitor is not None:
                try:
                    monitor.finish()
                except Exception:
                    pass

    def _start_system_metrics(self):
        if not self.system_metrics:
            return None
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            monitor = SystemMetricsMonitor(
                self.run_id,
                sampling_interval=float(self.system_metrics),
                samples_before_logging=1,
                tracking_uri=self.uri,
            )
            monitor.start()
            return monitor
        except Exception:  # system metrics are a courtesy: never a reason to fail a run
            return None

    def _end(self, status: str, reason: str | None = None):
        from mlflow.entities import RunTag

        with deferred_signals():  # a second Ctrl-C or SIGTERM must not leave the run RUNNING
            try:
                self._log_loss_tail()
                if reason:
                    self.client.log_batch(self.run_id, tags=[RunTag("failure_reason", reason)])
            finally:
                self.client.set_terminated(self.run_id, status)
                self.status = status

    def log_metrics(self, metrics, step=None):
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, step or 0) for k, v in metrics.items()]
        self._log(items)

    def log_steps(self, series):
        from mlflow.entities import Metric

        ts, every = int(time.time() * 1000), self.loss_every
        items = [
            Metric(k, float(v), ts, int(s))
            for k, pts in series.items()
            for s, v in pts
            if k != "train_loss" or int(s) % every == 0
        ]
        if series.get("train_loss"):  # the last point so far: logged at the run's end unless it is a k-th step
            s, v = series["train_loss"][-1]
            self._loss_tail = None if int(s) % every == 0 else Metric("train_loss", float(v), ts, int(s))
        self._log(items)

    def _log_loss_tail(self):
        """The run's last ``train_loss`` point into the store when ``loss_every`` left it out (at the run's end,
        whatever its status; a store that refuses it does not keep the run from ending)."""
        tail, self._loss_tail = self._loss_tail, None
        if tail is not None:
            try:
                self._log([tail])
            except Exception:  # the point is in the run's folder (metrics, plot); the run's end comes first
                pass

    def _log(self, items):
        with deferred_signals():  # whole batches: a second Ctrl-C mid-step stops after the write, not inside it
            for i in range(0, len(items), MAX_BATCH):
                self.client.log_batch(self.run_id, metrics=items[i : i + MAX_BATCH])

    def set_tags(self, tags):
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path):
        """A file, or a folder (its files under the folder's name: an MLflow Model's ``model/``)."""
        if Path(path).is_dir():
            self.client.log_artifacts(self.run_id, str(path), Path(path).name)
        else:
            self.client.log_artifact(self.run_id, str(path))

    def log_dataset(self, name, digest, source, columns, num_rows, context="training"):
        """The data as an MLflow dataset input (the UI's Dataset column, dataset tracking): name,
        digest (gpdlm's fingerprint), an MLflow column-spec schema and the row count."""
        import json

        from mlflow.entities import Dataset, DatasetInput, InputTag

        schema = json.dumps({"mlflow_colspec": [{"type": t, "name": c, "required": True} for c, t in columns.items()]})
        profile = json.dumps({"num_rows": int(num_rows), "num_elements": int(num_rows) * len(columns)})
        ds = Dataset(
            name=name,
            digest=digest,
            source_type="gpdlm",
            source=json.dumps({"uri": source}),
            schema=schema,
            profile=profile,
        )
        self.client.log_inputs(
            self.run_id, datasets=[DatasetInput(ds, tags=[InputTag("mlflow.data.context", context)])]
        )

    def has_finished_run(self, tag: str, value) -> bool:
        """Whether the experiment already has a FINISHED run whose ``tag`` equals ``value`` (or one
        of the values of a tuple: the versions of a config hash, ``tracking.identity``), or has one recorded
        in ``recorded_finished``."""
        if self.recorded(tag, value):
            return True
        for v in (value,) if isinstance(value, str) else tuple(dict.fromkeys(value)):
            runs = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{tag}` = {quote(v)} and attributes.status = 'FINISHED'",
                max_results=1,
            )
            if runs:
                return True
        return False

    def live_run(self, tag: str, value) -> str | None:
        from .liveness import PID_TAG, process_state

        for v in (value,) if isinstance(value, str) else tuple(dict.fromkeys(value)):
            runs = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{tag}` = {quote(v)} and attributes.status = 'RUNNING'"
                " and tags.`gpdlm.command` = 'train'",
                max_results=100,
            )
            for r in runs:
                if r.data.tags.get(PID_TAG) != str(os.getpid()) and process_state(r.data.tags) == "alive":
                    return r.info.run_id
        return None

    def stopped_runs(self, tag: str, value) -> list:
        """The experiment's ``gpdlm train`` runs that did not finish (KILLED, FAILED or RUNNING) whose
        ``tag`` equals ``value`` (or one of a tuple's values), newest first: MLflow ``Run`` objects."""
        found: dict = {}
        for v in (value,) if isinstance(value, str) else tuple(dict.fromkeys(value)):
            for status in ("KILLED", "FAILED", "RUNNING"):
                runs = self.client.search_runs(
                    [self.experiment_id],
                    filter_string=f"tags.`{tag}` = {quote(v)} and attributes.status = '{status}'"
                    " and tags.`gpdlm.command` = 'train'",
                    max_results=100,
                )
                found.update({r.info.run_id: r for r in runs})
        return sorted(found.values(), key=lambda r: r.info.start_time or 0, reverse=True)

    def tag_run(self, run_id: str, tags: dict) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


class RetryingClient:
    """An ``MlflowClient`` whose calls wait for a SQLite store locked by another process
    (``locked_retry``) instead of failing after SQLite's 5 s: up to ``wait_s`` seconds (None:
    ``LOCK_WAIT_S``; a run in progress sets ``RUN_LOCK_WAIT_S``)."""

    wait_s = None

    def __init__(self, client, uri: str):
        self._client, self._uri = client, uri

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_client", "_uri"):  # pickling (sweep callbacks travel to jobs)
            raise AttributeError(name)
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            return locked_retry(lambda: attr(*args, **kwargs), self._uri, self.wait_s)

        return call


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


def _fcntl() -> ModuleType | None:
    """The ``fcntl`` module, None where it is missing (not POSIX)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    return fcntl


@contextlib.contextmanager
def store_lock(uri: str):
    """An exclusive lock (``flock`` on ``.<db>.lock`` beside a SQLite store) held while the store
    is created or migrated and the experiment looked up: two runs started together (two terminals,
    a Slurm array, joblib) would otherwise race in MLflow's schema migration. A no-op for servers
    and where ``fcntl`` is missing."""
    path = sqlite_path(uri)
    fcntl = _fcntl()
    if path is None or fcntl is None or not path.parent.is_dir():
        yield
        return
    fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def is_locked_error(e: BaseException) -> bool:
    return "database is locked" in str(e)


def lock_holders(path: Path) -> list[str]:
    """``pid N (command)`` of every other process that has ``path`` open (Linux ``/proc``; empty
    where that cannot be read)."""
    target = str(Path(path).resolve())
    out: list[str] = []
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit() and int(d) != os.getpid()]
    except OSError:
        return out
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())
                    out.append(f"pid {pid}: {cmd[:60]}" if cmd else f"pid {pid}")
                    break
            except OSError:
                continue
    return out


def locked_retry(fn, uri: str, wait_s: float | None = None):
    """``fn()``, retried while a SQLite store is locked by another process (each try already waits
    SQLite's busy timeout, 5 s), for up to ``LOCK_WAIT_S`` in all; then a TrackingError naming the
    processes that hold the file. The wait is said once on the console."""
    import sys

    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            return fn()
        except Exception as e:
            path = sqlite_path(uri)
            if path is None or not is_locked_error(e):
                raise
            if time.monotonic() >= deadline:
                from ..exceptions import TrackingError

                holders = lock_holders(path)
                who = f" ({'; '.join(holders)})" if holders else ""
                raise TrackingError(
                    f"the MLflow store {path} is locked by another process{who} for more than {wait_s:.0f} s; "
                    f"run again when it is done, or use another store (tracking.uri=other.db)"
                ) from None
            if not told:
                print(
                    f"gpdlm: the MLflow store {path} is locked by another process; waiting up to {wait_s:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
                told = True
            time.sleep(0.5)


SCHEMA_ERRORS = (
    "duplicate column name",
    "already exists",
    "no such table",
    "no such column",
    "can't locate revision",
    "alembic_version",
)


def broken_schema_message(uri: str, e: BaseException) -> str | None:
    """One line with the way out for a SQLite store whose schema is incomplete -- its creation or an
    upgrade was cut short (a kill while MLflow made its tables) -- or None for other errors."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    path = sqlite_path(uri)
    if path is None or not any(s in text.lower() for s in SCHEMA_ERRORS):
        return None
    import sqlite3

    runs = None
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            runs = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        runs = 0  # not even a runs table: nothing in it to keep
    why = f"the MLflow store {path} has an incomplete schema (its creation or an upgrade was cut short: {text[:120]})"
    if not runs:
        return f"{why}; it holds no runs: delete it and run again (gpdlm creates it anew)"
    return (
        f"{why}; it holds {runs} runs: keep a copy, then try `mlflow db upgrade sqlite:///{path}` on it, or "
        f"track into another store (tracking.uri=other.db)"
    )


def check_store(uri: str) -> None:
    """Before a run: a SQLite store's folder must exist and be writable (MLflow's own error is a
    60-line traceback); a tracking server must answer within ``SERVER_CHECK_TIMEOUT_S`` (MLflow
    would retry for minutes, silently). HTTP retries during the run are bounded (``HTTP_DEFAULTS``,
    unless set in the environment)."""
    from ..exceptions import ConfigError, TrackingError

    path = sqlite_path(uri)
    if path is not None:
        folder = path.parent
        if not folder.is_dir():
            raise ConfigError(
                f"tracking.uri={uri}: the folder {folder} does not exist; create it, or choose "
                f"another store (tracking.uri=mlflow.db is one in the launch folder)"
            )
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise ConfigError(
                f"tracking.uri={uri}: {path if path.exists() else folder} is not writable; "
                f"choose a store in a folder you can write (tracking.uri=mlflow.db)"
            )
        return
    if uri.startswith(("http://", "https://")):
        import urllib.error
        import urllib.request

        for k, v in HTTP_DEFAULTS.items():
            os.environ.setdefault(k, v)
        try:
            urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=SERVER_CHECK_TIMEOUT_S).close()
        except urllib.error.HTTPError:
            pass  # it answered: reachable (a proxy or an older server without /health)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise TrackingError(
                f"the MLflow tracking server {uri} cannot be reached ({reason}); start it (`mlflow server`), "
                f"or track locally (tracking.uri=mlflow.db) or not at all (tracking.enabled=false)"
            ) from None


def quiet_mlflow() -> None:
    """No INFO chatter from MLflow's store set-up ("Creating initial MLflow database tables...")
    on the console: a run's output is its one-line report."""
    import logging

    for name in ("alembic.runtime.migration", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # the system-metrics thread logs every failed sample with its traceback (a locked store: hundreds of
    # lines); its samples are a courtesy, and the run's own calls say what matters once (locked_retry)
    # (mlflow.store.db.utils logs every "database is locked" with a 60-line traceback at ERROR, and the
    # exception reaches gpdlm anyway: locked_retry waits, other errors become one line)
    for name in (
        "mlflow.system_metrics",
        "mlflow.store.db",
        "mlflow.store.db.utils",
        "mlflow.tracking._tracking_service",
        "sqlalchemy",
    ):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def quote(value: str) -> str | None:
    """``value`` as a string literal of an MLflow filter: in single quotes, or in double quotes when
    it holds a ``'`` (MLflow's filter parser knows no escapes); None when it holds both kinds of
    quote (the caller then compares in Python)."""
    value = str(value)
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return None


def _param_str(v) -> str:
    s = "None" if v is None else str(v)
    return s[:6000]


def ensure_experiment(client, name: str, uri: str) -> str:
    """Get or create the experiment (safe if another process creates it at the same time), with
    gpdlm's view of it in the UI (``configure_view``).

    Artifacts of a SQLite store go to ``mlartifacts/`` beside the database file."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        configure_view(client, exp.experiment_id, exp.tags)
        return exp.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    try:
        exp_id = client.create_experiment(name, artifact_location=location)
    except Exception:  # created concurrently
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id
    configure_view(client, exp_id, {})
    return exp_id


# ----- the MLflow UI's view of a gpdlm experiment ---------------------------------------------------------
# MLflow 3 opens an experiment in its GenAI view and shows none of a run's params or metrics as
# columns. Two experiment tags change that: ``mlflow.experimentKind`` marks it as model training,
# and a shared view state (what the UI's "Share" button stores, opened by the URL parameter
# ``viewStateShareKey``) lists only gpdlm's training runs, newest first, with the columns users
# compare by. ``view_url`` is the address that opens it.
VIEW_KEY = "gpdlm"
VIEW_PARAMS = (
    "model.name",
    "model.variant",
    "objective.beta",
    "dataset.name",
    "dataset.split.train_size",
    "model.num_inducing",
    "likelihood.name",
    "estimator.name",
    "trainer.lr",
    "seed",
)
VIEW_METRICS = ("test_nll", "test_rmse", "test_error", "test_mre", "val_nll", "iterations", "train_seconds")


def view_state() -> dict:
    cols = ["attributes.`Dataset`"] + [f"params.`{p}`" for p in VIEW_PARAMS] + [f"metrics.`{m}`" for m in VIEW_METRICS]
    return {
        "searchFilter": "tags.`gpdlm.command` = 'train'",
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "selectedColumns": cols,
        "runsHiddenMode": "SHOW_ALL",
    }


def configure_view(client, experiment_id: str, tags: dict) -> None:
    """Set the two experiment tags of gpdlm's UI view where they are missing or outdated."""
    import json

    wanted = {
        "mlflow.experimentKind": "custom_model_development",
        f"mlflow.sharedViewState.{VIEW_KEY}": json.dumps(view_state()),
    }
    for k, v in wanted.items():
        if k == "mlflow.experimentKind" and tags.get(k):
            continue  # the user's choice wins
        if tags.get(k) != v:
            try:
                client.set_experiment_tag(experiment_id, k, v)
            except Exception:  # a read-only store or server: the view is a convenience
                return


def view_url(base: str, experiment_id: str) -> str:
    """The UI address of an experiment's training runs in gpdlm's view. The ``/runs`` page itself:
    MLflow 3 redirects ``#/experiments/<id>`` there and drops the view's key on the way (the
    default columns, every kind of run)."""
    return f"{base.rstrip('/')}/{view_page(experiment_id)}"


def view_page(experiment_id: str) -> str:
    """``view_url`` without the server's address."""
    return f"#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}&workflowType=machine_learning"


def run_page(experiment_id: str, run_id: str) -> str:
    """The UI page of one run (without the server's address), in the model-training mode: without
    ``workflowType`` MLflow 3 shows a run page in its GenAI mode (evaluations, traces, judges)."""
    return f"#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"
