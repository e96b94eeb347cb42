"""Reading an experiment's runs straight from an MLflow SQLite store, without importing MLflow.

``gpdlm runs`` only lists runs; importing MLflow (and the pandas, SQLAlchemy, alembic, FastAPI and pydantic
it imports) took nearly all of its 6-8 s on a small store; the queries themselves take milliseconds
(docs/performance.md, "gpdlm runs"). This module reads the four tables MLflow's own SQLAlchemy store reads
for ``get_experiment_by_name``, ``search_experiments`` and ``search_runs`` (``experiments``, ``runs``,
``tags``, ``latest_metrics``), read-only, and returns runs with the attributes of MLflow's ``Run`` that the
listing uses (``info.run_id``, ``run_name``, ``status``, ``start_time``; ``data.tags``, ``data.metrics``
and the metrics' timestamps). It reads what MLflow would return: only active runs, the run name from the
``mlflow.runName`` tag when the column is empty, a metric logged as NaN as NaN.

A file that is not a store of that shape (another schema, not SQLite, locked) raises
``SqliteStoreUnreadable``; the caller then goes through MLflow, whose answer (migration, error) is the
same as before.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

RUN_NAME_TAG = "mlflow.runName"


class SqliteStoreUnreadable(Exception):
    """The file could not be read as an MLflow SQLite store (the caller falls back to MLflow)."""


@dataclass
class Experiment:
    """An experiment's id (a string, as MLflow gives it) and name."""

    experiment_id: str
    name: str


@dataclass
class Metric:
    """A run's latest value of one metric and when it was logged (ms since the epoch)."""

    key: str
    value: float
    timestamp: int
    step: int


@dataclass
class RunInfo:
    """A run's identity and state, as ``mlflow.entities.RunInfo`` names them."""

    run_id: str
    run_name: str | None
    status: str
    start_time: int | None


@dataclass
class RunData:
    """A run's tags and latest metrics (``metrics``: name -> value; ``_metric_objs``: with timestamps),
    as ``mlflow.entities.RunData`` names them."""

    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    _metric_objs: list[Metric] = field(default_factory=list)


@dataclass
class Run:
    """One run: ``info`` and ``data``, as ``mlflow.entities.Run``."""

    info: RunInfo
    data: RunData


class SqliteRuns:
    """Read-only access to the MLflow SQLite store at ``path`` (an existing file)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        except sqlite3.Error as e:
            raise SqliteStoreUnreadable(str(e)) from e
        return con

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        con = self._connect()
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.Error as e:  # not SQLite, not MLflow's schema, locked
            raise SqliteStoreUnreadable(str(e)) from e
        finally:
            con.close()

    def _workspace_clause(self) -> str:
        """MLflow 3's ``workspace`` column: only the default workspace, as MLflow reads it without one."""
        columns = {row[1] for row in self._query("PRAGMA table_info(experiments)")}
        if not columns:
            raise SqliteStoreUnreadable("no experiments table")
        return " AND workspace = 'default'" if "workspace" in columns else ""

    def get_experiment_by_name(self, name: str) -> Experiment | None:
        """The experiment called ``name`` (active or deleted, as MLflow finds it), or None."""
        rows = self._query(
            "SELECT experiment_id, name FROM experiments WHERE name = ?" + self._workspace_clause(), (name,)
        )
        return Experiment(str(rows[0][0]), rows[0][1]) if rows else None

    def experiment_names(self) -> list[str]:
        """The names of the active experiments."""
        rows = self._query("SELECT name FROM experiments WHERE lifecycle_stage = 'active'" + self._workspace_clause())
        return [r[0] for r in rows]

    def tag_values(self, experiment_id: str, key: str, status: str | None = None) -> set[str]:
        """The values of tag ``key`` over the active runs of the experiment (only those with ``status`` if
        given): one query, where MLflow's ``search_runs`` loads every run's params, metrics and tags (the
        finished config hashes of a 2,400-run store: ~8 s through MLflow, milliseconds here)."""
        sql = (
            "SELECT t.value FROM tags t JOIN runs r ON t.run_uuid = r.run_uuid "
            "WHERE t.key = ? AND r.experiment_id = ? AND r.lifecycle_stage = 'active'"
        )
        args: list[object] = [key, int(experiment_id)]
        if status is not None:
            sql += " AND r.status = ?"
            args.append(status)
        return {r[0] for r in self._query(sql, tuple(args))}

    def search_runs(self, experiment_id: str, status: str | None = None) -> list[Run]:
        """The active runs of the experiment (only those with ``status`` if given), with their tags and
        latest metrics; in no particular order."""
        where = "experiment_id = ? AND lifecycle_stage = 'active'"
        args: list[object] = [int(experiment_id)]
        if status is not None:
            where += " AND status = ?"
            args.append(status)
        con = self._connect()
        try:
            rows = con.execute(f"SELECT run_uuid, name, status, start_time FROM runs WHERE {where}", args).fetchall()
            runs = {r[0]: Run(RunInfo(r[0], r[1], r[2], r[3]), RunData()) for r in rows}
            selected = f"SELECT run_uuid FROM runs WHERE {where}"
            for rid, key, value in con.execute(
                f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({selected})", args
            ):
                runs[rid].data.tags[key] = value
            for rid, key, value, timestamp, step, is_nan in con.execute(
                "SELECT run_uuid, key, value, timestamp, step, is_nan FROM latest_metrics "
                f"WHERE run_uuid IN ({selected})",
                args,
            ):
                m = Metric(key, float("nan") if is_nan else float(value), int(timestamp), int(step))
                runs[rid].data.metrics[key] = m.value
                runs[rid].data._metric_objs.append(m)
        except sqlite3.Error as e:
            raise SqliteStoreUnreadable(str(e)) from e
        finally:
            con.close()
        for run in runs.values():
            if not run.info.run_name and run.data.tags.get(RUN_NAME_TAG):
                run.info.run_name = run.data.tags[RUN_NAME_TAG]
        return list(runs.values())
