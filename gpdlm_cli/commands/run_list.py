"""``gpdlm runs``: the runs of an experiment -- status, name, key metrics -- and the stale ones.

    gpdlm runs [--experiment NAME] [--tracking-uri URI] [--status STATUS ...] [--limit N]
               [--stale] [--stale-after 30m] [--mark-failed | --finish] [--hyperparameters]

``--hyperparameters`` adds the learned hyperparameters each run logged (``hp.*`` metrics,
``run.hyperparameters``): one column per hyperparameter, ARD lengthscales as one list.

A run killed by SIGKILL or the OOM killer (no handler can catch those) stays RUNNING in MLflow
forever, and ``compare``/``select`` skip it. A RUNNING run is **stale** when

* the process that ran it is gone: every run records ``gpdlm.host``, ``gpdlm.pid`` and the
  process's start time (``tracking.liveness``), checked when the run was made on this host; or
* nothing was logged for longer than ``--stale-after`` (default 30m; the latest metric, else the
  start): the only evidence for runs of other hosts (Slurm nodes).

``--stale`` lists only those, ``--mark-failed`` ends them FAILED with the reason as the tag
``failure_reason`` ("orphaned: ..."). ``--finish`` ends FINISHED those whose folder is complete (a
kill after the run saved its results, before it was closed): a final ``metrics.json``, a
``model.pt`` that matches its SHA-256 and the run's config hash; their metrics and result files are
logged as the run would have, the tag ``gpdlm.finished_by`` says who closed it, and the folder's
leftover checkpoint goes. The others are listed with what is missing (``gpdlm resume`` continues them).
Runs whose process is alive on this host are never stale.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass

from ..analysis import records as R
from ..analysis import store
from ..analysis import tables as T
from . import _cli

STATUSES = ("RUNNING", "FINISHED", "FAILED", "KILLED", "SCHEDULED")
DEFAULT_STALE = "30m"
METRICS = ("test_nll", "test_rmse", "test_error", "test_mre", "val_nll")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

EPILOG = """examples:
  gpdlm runs                               # the latest 30 runs of experiment gpdlm
  gpdlm runs --experiment regression_logloss_smoke --status RUNNING FAILED
  gpdlm runs --stale                       # RUNNING runs whose process is gone or silent for 30 minutes
  gpdlm runs --stale --stale-after 2h --mark-failed
  gpdlm runs --stale --finish              # close the stale runs whose folder holds their whole result
  gpdlm runs --hyperparameters             # with the learned noise, outputscale, lengthscales, M
"""


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1d' or a plain number of minutes -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise R.AnalysisError(f"--stale-after must be a positive duration like 90s, 30m, 2h or 1d; got {text!r}")
    return float(m.group(1)) * UNITS[m.group(2) or "m"]


def last_activity_ms(run) -> int:
    """When the run last logged a metric (ms since the epoch), else its start time."""
    stamps = [int(m.timestamp) for m in getattr(run.data, "_metric_objs", []) or [] if m.timestamp]
    return max(stamps + [int(run.info.start_time or 0)])


@dataclass
class Staleness:
    stale: bool
    why: str


def staleness(run, after_s: float, now_ms: int | None = None) -> Staleness:
    """Whether a RUNNING run is stale, and why (see the module docstring)."""
    from ..tracking.liveness import PID_TAG, process_state

    if run.info.status != "RUNNING":
        return Staleness(False, "")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    state = process_state(run.data.tags)
    idle = (now_ms - last_activity_ms(run)) / 1000
    if state == "gone":
        return Staleness(True, f"process {run.data.tags.get(PID_TAG)} on this host is gone")
    if state == "alive":
        return Staleness(False, "")
    if idle > after_s:
        return Staleness(True, f"nothing logged for {_duration(idle)} (> {_duration(after_s)})")
    return Staleness(False, "")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def mark_failed(client, run, why: str) -> None:
    from mlflow.entities import RunTag

    client.log_batch(run.info.run_id, tags=[RunTag("failure_reason", f"orphaned: {why} (marked by gpdlm runs)")])
    client.set_terminated(run.info.run_id, "FAILED")


RESULT_FILES = ("config.yaml", "metrics.json", "learning_curve.png", "hyperparameters.json", "model.pt")


def complete_folder(run) -> tuple[dict | None, str]:
    """(the final metrics, '') when the run's output folder holds its whole result, else (None, what is
    missing): a final metrics.json (no ``status``), a model.pt matching its SHA-256 and the run's config hash."""
    import json
    from pathlib import Path

    from ..run.saved_model import MODEL_FILE, read_model_file

    folder = run.data.tags.get("gpdlm.output_dir")
    if not folder or not Path(folder).is_dir():
        return None, f"no output folder on this machine ({folder or 'no gpdlm.output_dir tag'})"
    folder = Path(folder)
    try:
        metrics = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return None, "no readable metrics.json"
    if not isinstance(metrics, dict) or "status" in metrics:
        return (
            None,
            f"metrics.json is partial ({metrics.get('status') if isinstance(metrics, dict) else 'not a table'})",
        )
    try:
        meta, _ = read_model_file(folder / MODEL_FILE)
    except Exception as e:
        return None, str(e).splitlines()[0] if str(e) else f"{MODEL_FILE} unreadable"
    want = run.data.tags.get("gpdlm.config_hash")
    if want and meta.get("config_hash") and meta["config_hash"] != want:
        return None, f"{MODEL_FILE} belongs to another configuration (config hash {meta['config_hash']} != {want})"
    return metrics, ""


def finish(client, run, metrics: dict) -> None:
    """Close a stale run whose folder is complete as the run itself would have: its metrics, its result
    files as artifacts, FINISHED; the folder's leftover checkpoint is removed."""
    import time as _time
    from pathlib import Path

    from mlflow.entities import Metric, RunTag

    from ..training.checkpoint import FILE, Checkpointer

    folder = Path(run.data.tags["gpdlm.output_dir"])
    now, step = int(_time.time() * 1000), int(metrics.get("iterations", 0) or 0)
    items = [Metric(k, float(v), now, step) for k, v in metrics.items() if isinstance(v, (int, float))]
    for i in range(0, len(items), 1000):
        client.log_batch(run.info.run_id, metrics=items[i : i + 1000])
    for f in RESULT_FILES:
        if (folder / f).exists():
            client.log_artifact(run.info.run_id, str(folder / f))
    client.log_batch(
        run.info.run_id,
        tags=[RunTag("gpdlm.finished_by", "gpdlm runs --stale --finish (its folder held the whole result)")],
    )
    client.set_terminated(run.info.run_id, "FINISHED")
    Checkpointer(folder / FILE, 0, dict).remove()


def build_parser():
    p = _cli.make_parser("gpdlm runs", "List the runs of an experiment; find and close stale RUNNING runs.")
    p.epilog = EPILOG
    _cli.add_store_options(p)
    p.add_argument(
        "--status",
        nargs="+",
        type=str.upper,
        metavar="STATUS",
        help=f"only runs with these statuses ({', '.join(STATUSES)})",
    )
    p.add_argument("--limit", type=int, default=30, help="at most this many runs, newest first (default: 30; 0 = all)")
    p.add_argument("--stale", action="store_true", help="only RUNNING runs that look orphaned (see --stale-after)")
    p.add_argument(
        "--stale-after",
        default=DEFAULT_STALE,
        metavar="DURATION",
        help=f"a RUNNING run with no metric for this long is stale (default: {DEFAULT_STALE}; 90s, 2h, 1d)",
    )
    p.add_argument(
        "--mark-failed", action="store_true", help="with --stale: end the stale runs FAILED, with the reason"
    )
    p.add_argument(
        "--finish",
        action="store_true",
        help="with --stale: end FINISHED the stale runs whose folder holds their whole result",
    )
    p.add_argument(
        "--hyperparameters",
        action="store_true",
        help="also show each run's learned hyperparameters (its hp.* metrics: noise, outputscale, "
        "lengthscales -- one per input with ARD --, inducing count)",
    )
    return p


def hyperparameter_columns(metrics: list[dict]) -> list[tuple[str, list[str]]]:
    """(column name, metric names) for the ``hp.*`` metrics in ``metrics`` (one dict per run): a scalar
    ``hp.noise`` is column ``noise``; ``hp.lengthscale.0``, ``hp.lengthscale.1``, ... (ARD) share one
    column ``lengthscale``, shown as a space-separated list."""
    columns: dict[str, dict[int, str]] = {}
    for m in metrics:
        for key in m:
            if not key.startswith("hp."):
                continue
            name, _, index = key[3:].rpartition(".")
            if index.isdigit() and name:
                columns.setdefault(name, {})[int(index)] = key
            else:
                columns.setdefault(key[3:], {})[-1] = key
    return [(name, [keys[i] for i in sorted(keys)]) for name, keys in sorted(columns.items())]


def hyperparameter_cells(metrics: dict, columns: list[tuple[str, list[str]]]) -> list[str]:
    return [" ".join(R.fmt_num(metrics[k]) for k in keys if k in metrics) or "-" for _, keys in columns]


def load_runs(tracking_uri: str | None, experiment: str, stale: bool, writes: bool):
    """(MLflow client or None, uri, the experiment's name, its runs -- only the RUNNING ones if ``stale``).

    A SQLite store is read directly (``tracking.sqlite_runs``: no MLflow import, which was nearly all of the
    command's time) unless the command ``writes`` (``--mark-failed``, ``--finish``) or the file is not
    readable that way; then, and for other stores, through MLflow (the client is returned for the writes)."""
    from ..tracking.sqlite_runs import SqliteRuns, SqliteStoreUnreadable

    uri = store.resolve_uri(tracking_uri)
    db = store.sqlite_path(uri)
    if db is not None and db.is_file() and not writes:
        reader = SqliteRuns(db)
        try:
            exp = reader.get_experiment_by_name(experiment)
            if exp is None:
                raise store.no_experiment(experiment, uri, reader.experiment_names())
            return None, uri, exp.name, reader.search_runs(exp.experiment_id, "RUNNING" if stale else None)
        except SqliteStoreUnreadable:
            pass  # MLflow says what is wrong (or migrates the schema), as before
    client, uri = store.open_store(tracking_uri)
    exp = store.get_experiment(client, experiment, uri)
    found = store.search_all(client, exp.experiment_id, "attributes.status = 'RUNNING'" if stale else "")
    return client, uri, exp.name, found


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.mark_failed and not args.stale:
        raise R.AnalysisError("--mark-failed needs --stale (only stale runs are ever marked)")
    if args.finish and not args.stale:
        raise R.AnalysisError("--finish needs --stale (only stale runs are ever closed)")
    if args.finish and args.mark_failed:
        raise R.AnalysisError(
            "--finish and --mark-failed exclude each other (run --finish first: it closes the "
            "complete runs; then --mark-failed the rest)"
        )
    bad = [s for s in args.status or [] if s not in STATUSES]
    if bad:
        raise R.AnalysisError(f"unknown --status {bad[0]!r}; choose from: {', '.join(STATUSES)}")
    if args.limit < 0:
        raise R.AnalysisError(f"--limit must be >= 0; got {args.limit}")
    after = parse_duration(args.stale_after)
    client, uri, exp_name, found = load_runs(
        args.tracking_uri, args.experiment, args.stale, args.finish or args.mark_failed
    )
    found = [r for r in found if r.data.tags.get("gpdlm.command") not in ("compare", "select")]
    if args.status:
        found = [r for r in found if r.info.status in args.status]
    found.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id), reverse=True)
    now = int(time.time() * 1000)
    marks = {r.info.run_id: staleness(r, after, now) for r in found}
    if args.stale:
        found = [r for r in found if marks[r.info.run_id].stale]
    everything, total = found, len(found)
    if args.limit:
        found = found[: args.limit]
    header = ["run_id", "name", "status", "started", "last logged"] + [
        m for m in METRICS if any(m in r.data.metrics for r in found)
    ]
    n_metrics = len(header) - 5
    hp_columns = hyperparameter_columns([r.data.metrics for r in found]) if args.hyperparameters else []
    header += [name for name, _ in hp_columns]
    rows = []
    for r in found:
        st = marks[r.info.run_id]
        status = r.info.status + (" (stale)" if st.stale else "")
        kind = " [sweep]" if r.data.tags.get("gpdlm.sweep") == "parent" else ""
        rows.append(
            [
                r.info.run_id[:8],
                (r.info.run_name or "") + kind,
                status,
                time.strftime("%Y-%m-%d %H:%M", time.localtime((r.info.start_time or 0) / 1000)),
                _duration((now - last_activity_ms(r)) / 1000) + " ago",
            ]
            + [R.fmt_num(r.data.metrics[m]) if m in r.data.metrics else "-" for m in header[5 : 5 + n_metrics]]
            + hyperparameter_cells(r.data.metrics, hp_columns)
        )
    what = "stale RUNNING runs" if args.stale else "runs"
    shown = f"{len(found)} of {total}" if len(found) < total else f"{total}"
    T.print_table(f"{exp_name}: {shown} {what} ({uri})", header, rows, numeric_from=5)
    for r in found:
        if marks[r.info.run_id].stale:
            print(f"{r.info.run_id[:8]} {r.info.run_name}: stale: {marks[r.info.run_id].why}")
    if args.finish:  # every stale run, not only those shown
        done = 0
        for r in everything:
            metrics, missing = complete_folder(r)
            if metrics is None:
                print(
                    f"{r.info.run_id[:8]} {r.info.run_name}: not finished: {missing} "
                    f"(`gpdlm resume {r.info.run_id}` continues it)"
                )
                continue
            finish(client, r, metrics)
            done += 1
        print(f"finished {done} of {len(everything)} stale run(s) from their folders", file=sys.stderr)
    elif args.mark_failed:  # every stale run, not only those shown
        for r in everything:
            mark_failed(client, r, marks[r.info.run_id].why)
        print(f"marked {len(everything)} stale run(s) FAILED", file=sys.stderr)
    elif args.stale and found:
        print("gpdlm: note: `gpdlm runs --stale --mark-failed` ends them FAILED with this reason", file=sys.stderr)
    return 0


def cli() -> int:
    return _cli.run_cli(main)
