"""Run records: an MLflow store's runs as a compressed, versioned, checksummed file (``gpdlm export``),
and read back in place of the store (``gpdlm report --from FILE``).

The file is gzip-compressed JSON lines (``runs.jsonl.gz``; gzip without a timestamp, so the same runs
give the same bytes):

* line 1, the header: ``{"format": "gpdlm-runs", "version": 1, "experiments": [...], "n_runs": N}``;
* one line per run: ``experiment``, ``run_id``, ``run_name``, ``status``, ``start_time``,
  ``end_time`` (ms since the epoch), ``params``, ``metrics`` (the final values), ``tags`` and
  ``steps``: for every metric logged at more than one step, its summary ``{"n", "first", "last",
  "min", "max", "last_step"}`` and (unless exported with ``--no-histories``) its ``points``
  ``[[step, value], ...]`` -- what the learning-curve figures draw. Model files and other artifacts
  are not exported;
* the last line, the trailer: ``{"sha256": ..., "n_runs": N}``, the SHA-256 of every line before it
  (the header included, newline-terminated, UTF-8).

``read`` checks the format, the version, the checksum and the run count: a truncated, edited or
foreign file is one line of error (``AnalysisError``), never a silently different report. The runs
come back as the objects ``MlflowClient.search_runs`` returns would be read (``.info``, ``.data``),
so ``store.load_runs``' rules apply unchanged: FINISHED training runs only, reruns of a configuration
counted once, the unfinished ones noted. With pandas: ``pd.read_json(path, lines=True)`` reads the
runs (drop the first and last rows: header and trailer).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from ..tracking.records_file import FORMAT, VERSION
from .records import AnalysisError, RunRecord


# ----- writing -----------------------------------------------------------------------------------------
def _num(x):
    """A float as JSON can hold it: NaN and infinities as strings ("nan", "inf", "-inf")."""
    x = float(x)
    return x if math.isfinite(x) else repr(x)


def _unnum(x) -> float:
    return float(x)


def run_entry(experiment: str, run, histories: dict | None, keep_points: bool = True) -> dict:
    """One MLflow run (``client.search_runs`` result) as an export line. ``histories``: metric ->
    [(step, value)] for the metrics that have them (None: no step metrics read)."""
    steps = {}
    for name, pts in sorted((histories or {}).items()):
        if len(pts) < 2:
            continue
        pts = sorted((int(s), float(v)) for s, v in pts)
        vals = [v for _, v in pts]
        finite = [v for v in vals if math.isfinite(v)] or [math.nan]
        entry = {
            "n": len(pts),
            "first": _num(vals[0]),
            "last": _num(vals[-1]),
            "min": _num(min(finite)),
            "max": _num(max(finite)),
            "last_step": pts[-1][0],
        }
        if keep_points:
            entry["points"] = [[s, _num(v)] for s, v in pts]
        steps[name] = entry
    return {
        "experiment": experiment,
        "run_id": run.info.run_id,
        "run_name": run.info.run_name or "",
        "status": run.info.status,
        "start_time": int(run.info.start_time or 0),
        "end_time": int(run.info.end_time or 0),
        "params": dict(sorted(run.data.params.items())),
        "metrics": {k: _num(v) for k, v in sorted(run.data.metrics.items())},
        "tags": dict(sorted(run.data.tags.items())),
        "steps": steps,
    }


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, sort_keys=False, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def write(path: str | Path, entries: list[dict], experiments: list[str]) -> str:
    """Write ``entries`` (``run_entry`` lines) to ``path`` (gzip, deterministic bytes, written to a
    temporary file and renamed); returns the SHA-256 recorded in the trailer."""
    path = Path(path)
    entries = sorted(
        entries,
        key=lambda e: (
            experiments.index(e["experiment"]) if e["experiment"] in experiments else len(experiments),
            e["start_time"],
            e["run_id"],
        ),
    )
    body = [_line({"format": FORMAT, "version": VERSION, "experiments": list(experiments), "n_runs": len(entries)})]
    body += [_line(e) for e in entries]
    digest = hashlib.sha256(b"".join(body)).hexdigest()
    body.append(_line({"sha256": digest, "n_runs": len(entries)}))
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(b"".join(body))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(raw.getvalue())
    tmp.replace(path)
    return digest


def export_store(
    client,
    experiments: list,
    *,
    histories: bool = True,
    keep_points: bool = True,
    commands: tuple[str, ...] = ("train", "bias"),
    filter_string: str = "",
) -> list[dict]:
    """The export lines of every run of ``experiments`` (MLflow experiment objects) made by one of
    ``commands`` and matching ``filter_string`` (MLflow's search syntax; all statuses: the reader applies
    the report's rules), step metrics read from each run's metric histories when ``histories``."""
    from .store import search_all

    out: list[dict] = []
    for exp in experiments:
        found = search_all(client, exp.experiment_id, filter_string)
        runs = [r for r in found if r.data.tags.get("gpdlm.command") in commands]
        hists = metric_histories(client, runs) if histories else {}
        out.extend(run_entry(exp.name, run, hists.get(run.info.run_id), keep_points) for run in runs)
    return out


#: run ids per bulk query of metric histories (well under SQLite's bound variables per statement)
BULK_RUNS = 500


def metric_histories(client, runs: list) -> dict[str, dict[str, list[tuple]]]:
    """run id -> metric -> [(step, value)] of every metric the runs logged, in MLflow's order (timestamp,
    step, value). A SQL store is read with one query per metric and ``BULK_RUNS`` runs
    (``get_metric_history_bulk``); one query per run and metric cost ~11 ms each: 1,300 runs of 25 metrics
    took 6 minutes. Other stores: ``client.get_metric_history`` per run and metric."""
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    bulk = getattr(store, "get_metric_history_bulk", None)
    out: dict[str, dict[str, list[tuple]]] = {r.info.run_id: {k: [] for k in r.data.metrics} for r in runs}
    if bulk is None:
        for r in runs:
            for k in r.data.metrics:
                out[r.info.run_id][k] = [(m.step, m.value) for m in client.get_metric_history(r.info.run_id, k)]
        return out
    for i in range(0, len(runs), BULK_RUNS):
        chunk = runs[i : i + BULK_RUNS]
        for key in sorted({k for r in chunk for k in r.data.metrics}):
            ids = [r.info.run_id for r in chunk if key in r.data.metrics]
            for m in bulk(ids, key, max_results=2**62):
                out[m.run_id][key].append((m.step, m.value))
    return out


# ----- reading -----------------------------------------------------------------------------------------
@dataclass
class RunFile:
    """A run-records file, read and verified."""

    path: Path
    experiments: list[str]
    entries: list[dict]
    sha256: str
    header: dict = field(default_factory=dict)

    def runs(self, experiment: str) -> list:
        """The runs of ``experiment`` shaped like ``MlflowClient.search_runs`` results."""
        return [as_run(e) for e in self.entries if e["experiment"] == experiment]

    def history(self, run_id: str, metric: str) -> list:
        for e in self.entries:
            if e["run_id"] == run_id:
                pts = e.get("steps", {}).get(metric, {}).get("points")
                if pts is None and metric in e["metrics"]:
                    pts = [[0, e["metrics"][metric]]]
                return [SimpleNamespace(step=int(s), value=_unnum(v)) for s, v in (pts or [])]
        return []


def as_run(e: dict):
    """An export line as an object with MLflow's run shape (``info.run_id``, ``data.params``, ...)."""
    info = SimpleNamespace(
        run_id=e["run_id"],
        run_name=e["run_name"],
        status=e["status"],
        start_time=e["start_time"],
        end_time=e.get("end_time"),
    )
    data = SimpleNamespace(
        params=dict(e["params"]), metrics={k: _unnum(v) for k, v in e["metrics"].items()}, tags=dict(e["tags"])
    )
    return SimpleNamespace(info=info, data=data)


def read(path: str | Path) -> RunFile:
    """Read and verify a run-records file (format, version, SHA-256, run count:
    ``tracking.records_file.read_verified``)."""
    from ..tracking.records_file import RecordsError, read_verified

    path = Path(path)
    if not path.is_file():
        raise AnalysisError(f"--from {path}: no such file")
    try:
        header, entries, digest = read_verified(path)
    except RecordsError as e:
        raise AnalysisError(str(e)) from None
    return RunFile(path, list(header.get("experiments", [])), entries, digest, header)


def filter_runs(runs: list, filter_string: str) -> list:
    """The runs (``as_run`` shapes) that match ``filter_string``, MLflow's search syntax as a store's
    ``search_runs`` reads it (``SearchUtils.filter``: params, metrics, tags and the run attributes a record
    keeps -- run_id, run_name, status, start_time, end_time). A filter MLflow rejects, or one on an
    attribute the records do not keep, is an ``AnalysisError``."""
    if not filter_string:
        return runs
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    try:
        return SearchUtils.filter(runs, filter_string)
    except MlflowException as e:
        from .store import filter_error

        raise filter_error(filter_string, e) from None
    except AttributeError as e:
        raise AnalysisError(
            f"invalid --filter {filter_string!r} on run-records files: they keep the attributes run_id, run_name, "
            f"status, start_time and end_time, not {getattr(e, 'name', None) or e}"
        ) from None


def load_records(
    files: list[RunFile],
    experiments: list[str],
    notes: list[str],
    commands: tuple[str, ...] = ("train", "bias"),
    filter_string: str = "",
) -> tuple[list[str], dict[str, list[RunRecord]]]:
    """(experiment names, their FINISHED training runs matching ``filter_string``) from run-records
    ``files``, by the rules of ``store.load_runs``; ``experiments`` empty: every experiment of the files, in
    their order."""
    from .store import drop_reruns, is_training_run, skipped_note

    have = list(dict.fromkeys(name for f in files for name in f.experiments))
    names = list(dict.fromkeys(experiments)) or have
    out = {}
    for name in names:
        if name not in have:
            raise AnalysisError(
                f"experiment '{name}' is not in {', '.join(str(f.path) for f in files)}; "
                f"experiments there: {', '.join(have) or '(none)'}"
            )
        found = filter_runs([r for f in files for r in f.runs(name)], filter_string)
        runs = [RunRecord.from_run(r) for r in found if is_training_run(r, False, commands)]
        if skipped_note(found, commands):
            notes.append(skipped_note(found, commands))
        runs, reruns = drop_reruns(runs)
        if reruns:
            notes.append(
                f"{reruns} rerun(s) of identical configurations (same gpdlm.config_hash) counted once: "
                f"the latest run of each is used"
            )
        if not runs:
            where = f" matching --filter {filter_string!r}" if filter_string else ""
            raise AnalysisError(f"no FINISHED training runs in experiment '{name}'{where}")
        runs.sort(key=lambda r: (r.start_time, r.run_id))
        out[name] = runs
    return names, out


class FileHistories:
    """The ``get_metric_history`` of an MlflowClient, answered from run-records files (the report's
    learning-curve figures)."""

    def __init__(self, files: list[RunFile]):
        self.files = files

    def get_metric_history(self, run_id: str, metric: str) -> list:
        for f in self.files:
            pts = f.history(run_id, metric)
            if pts:
                return pts
        return []
