"""Reading gpdlm's training runs back from MLflow, for ``gpdlm compare``, ``select`` and ``report``.

What is loaded: the FINISHED runs of one experiment that ``gpdlm train`` made (tag
``gpdlm.command=train``), through ``MlflowClient.search_runs`` (every page), optionally narrowed
by an MLflow filter expression. Sweep parents, ``compare``/``select`` runs and unfinished runs are
left out -- and the unfinished training runs are counted in a note (RUNNING, possibly orphaned:
``gpdlm runs --stale``; FAILED; KILLED) -- refits (tag ``gpdlm.refit_of``) only when asked for.
Reruns of an identical configuration (the same ``gpdlm.config_hash``, seed included) count once:
the latest of them is kept, so a rerun never passes for another seed.

The analysis commands' own results (``outputs/<command>/<timestamp>``) are logged as a FINISHED
run named after the command (``log_analysis_run``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .records import AnalysisError, RunRecord


# ----- the store -------------------------------------------------------------------------------------
def resolve_uri(uri: str | None) -> str:
    from ..tracking import resolve_tracking_uri

    return resolve_tracking_uri(uri)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores or in-memory SQLite)."""
    if not uri.startswith("sqlite:"):
        return None
    rest = uri[len("sqlite:") :]
    if not rest.startswith("///"):
        return None
    path = rest[3:].split("?", 1)[0]
    if path in ("", ":memory:"):
        return None
    return Path(path)  # relative paths are relative to the working directory, as for SQLAlchemy


def open_store(uri: str | None):
    """(MlflowClient, uri). A SQLite file that does not exist is an error (never created here)."""
    uri = resolve_uri(uri)
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        raise AnalysisError(
            f"no MLflow store at {db} (nothing tracked there yet): run 'gpdlm train' in "
            f"that directory first, or pass --tracking-uri"
        )
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri), uri


def get_experiment(client, name: str, uri: str):
    exp = client.get_experiment_by_name(name)
    if exp is None:
        raise no_experiment(name, uri, [e.name for e in client.search_experiments()])
    return exp


def no_experiment(name: str, uri: str, names: list[str]) -> AnalysisError:
    """The error for an experiment ``name`` that is not in the store at ``uri`` (``names``: those that are)."""
    return AnalysisError(
        f"experiment '{name}' does not exist in {uri}; experiments there: {', '.join(sorted(names)) or '(none)'}"
    )


def filter_error(filter_string: str, e: Exception) -> AnalysisError:
    """The one line for a ``--filter`` MLflow rejected (its message's first line)."""
    msg = str(getattr(e, "message", e)).strip().splitlines()
    return AnalysisError(f"invalid --filter {filter_string!r}: {msg[0] if msg else 'rejected by MLflow'}")


def search_all(client, experiment_id: str, filter_string: str = "") -> list:
    """Every run of the experiment matching the filter (all pages)."""
    from mlflow.exceptions import MlflowException

    runs, token = [], None
    while True:
        try:
            page = client.search_runs(
                [experiment_id], filter_string=filter_string or "", max_results=1000, page_token=token
            )
        except MlflowException as e:
            raise filter_error(filter_string, e) from None
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def is_training_run(run, include_refits: bool = False, commands: tuple[str, ...] = ("train",)) -> bool:
    """A FINISHED child or single run of one of ``commands`` (``gpdlm.command``: train, bias), not a sweep
    parent, and not a ``select --refit`` rerun unless ``include_refits``."""
    tags = run.data.tags
    return (
        run.info.status == "FINISHED"
        and tags.get("gpdlm.command") in commands
        and tags.get("gpdlm.sweep") != "parent"
        and (include_refits or not tags.get("gpdlm.refit_of"))
    )


def load_runs(
    client,
    experiment,
    filter_string: str = "",
    include_refits: bool = False,
    notes: list[str] | None = None,
    commands: tuple[str, ...] = ("train",),
) -> list[RunRecord]:
    """The FINISHED training runs of ``experiment`` that match ``filter_string``, reruns of the same
    configuration counted once; an error if none. ``commands`` widens "training" to other run kinds
    (``gpdlm report`` also reads ``gpdlm bias`` runs, for the tables that ask for them). What was left
    out and why is printed as notes (or appended to ``notes``)."""
    found = search_all(client, experiment.experiment_id, filter_string)
    runs = [RunRecord.from_run(r) for r in found if is_training_run(r, include_refits, commands)]
    said = [skipped_note(found, commands)] if skipped_note(found, commands) else []
    runs, reruns = drop_reruns(runs)
    if reruns:
        said.append(
            f"{reruns} rerun(s) of identical configurations (same gpdlm.config_hash) counted once: "
            f"the latest run of each is used"
        )
    for note in said:
        if notes is None:
            print(f"gpdlm: note: {note}", file=sys.stderr)
        else:
            notes.append(note)
    if not runs:
        where = f" matching --filter {filter_string!r}" if filter_string else ""
        raise AnalysisError(f"no FINISHED training runs in experiment '{experiment.name}'{where}")
    runs.sort(key=lambda r: (r.start_time, r.run_id))
    return runs


def skipped_note(found: list, commands: tuple[str, ...] = ("train",)) -> str:
    """'skipped N unfinished training run(s): 2 RUNNING (...), 1 FAILED, ...' for the training runs among
    ``found`` that did not finish ('' when there are none). Runs closed as orphaned (``gpdlm runs --stale
    --mark-failed``, ``gpdlm resume``: failure_reason "orphaned: ...") are counted apart, with where their
    result may still be: their process was gone, not their result."""
    counts: dict[str, int] = {}
    for r in found:
        if r.data.tags.get("gpdlm.command") in commands and r.info.status != "FINISHED":
            status = r.info.status
            if status in ("FAILED", "KILLED") and r.data.tags.get("failure_reason", "").startswith("orphaned: "):
                status += " orphaned"
            counts[status] = counts.get(status, 0) + 1
    if not counts:
        return ""
    why = {
        "RUNNING": "still running or orphaned: see `gpdlm runs --stale`",
        "FAILED": "see their failure_reason",
        "FAILED orphaned": "orphaned, closed by `gpdlm runs --mark-failed`: their process was gone, "
        "their output folders may hold a whole result",
        "KILLED": "interrupted",
        "KILLED orphaned": "closed by `gpdlm resume`, which continued them in a new run",
        "SCHEDULED": "not started",
    }
    parts = [f"{n} {status.split()[0]} ({why.get(status, 'unfinished')})" for status, n in sorted(counts.items())]
    return f"skipped {sum(counts.values())} unfinished training run(s): " + ", ".join(parts)


def drop_reruns(records: list[RunRecord]) -> tuple[list[RunRecord], int]:
    """Keep the latest run of every configuration (``tracking.identity.run_identity``: the
    ``gpdlm.config_hash`` of version 2, recomputed from the params of runs tagged with version 1, so a
    seed trained at two thread counts counts once; runs without the tag are all kept);
    (kept, number dropped)."""
    from ..tracking.identity import run_identity

    latest: dict[str, RunRecord] = {}
    kept = []
    for r in records:
        h = run_identity(r.params, r.tags)
        if not h:
            kept.append(r)
        elif h not in latest or (r.start_time, r.run_id) > (latest[h].start_time, latest[h].run_id):
            latest[h] = r
    kept += list(latest.values())
    return kept, len(records) - len(kept)


# params that never distinguish what was trained
# ----- outputs ---------------------------------------------------------------------------------------
def output_dir(out: str | None, command: str) -> Path:
    """--out, or ``outputs/<command>/<timestamp>`` (a suffix if that exists already)."""
    if out:
        path = Path(out)
    else:
        base = Path("outputs") / command / time.strftime("%Y-%m-%d_%H-%M-%S")
        path, i = base, 1
        while path.exists():
            path = base.with_name(f"{base.name}-{i}")
            i += 1
    path.mkdir(parents=True, exist_ok=True)
    return path


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def is_read_only_error(e: BaseException) -> bool:
    """A write refused because the store (its SQLite file, its folder, or its artifact folder) is read-only."""
    import errno

    if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return True
    text = str(e).lower()
    return "readonly database" in text or "read-only file system" in text


def log_analysis_run(
    client, experiment_id: str, command: str, outdir: Path, params: dict, tags: dict | None = None
) -> str:
    """A FINISHED run named after ``command`` holding the files of ``outdir`` (not its subfolders)
    as artifacts."""
    from mlflow.entities import Param

    try:
        run = client.create_run(
            experiment_id,
            run_name=command,
            tags={"gpdlm.command": command, **{k: str(v) for k, v in (tags or {}).items()}},
        )
    except Exception as e:
        if is_read_only_error(e):
            raise AnalysisError(
                f"the MLflow store is read-only ({_first_line(e)[:120]}): gpdlm {command}'s files are "
                f"in {outdir}, but they could not be logged as a run there; open a writable copy "
                f"of the store to log them"
            ) from None
        raise
    rid = run.info.run_id
    try:
        client.log_batch(rid, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        for f in sorted(outdir.iterdir()):
            if f.is_file():
                client.log_artifact(rid, str(f))
    except BaseException as e:
        client.set_terminated(rid, "FAILED")
        if isinstance(e, Exception) and is_read_only_error(e):
            raise AnalysisError(
                f"the MLflow store's artifact folder is read-only ({_first_line(e)[:120]}): gpdlm "
                f"{command}'s files are in {outdir}, but not in the store"
            ) from None
        raise
    client.set_terminated(rid, "FINISHED")
    return rid
