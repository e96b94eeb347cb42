"""Which run a command means: ``gpdlm predict``, ``eval`` and ``resume`` take RUN as an output
folder, a full MLflow run id, a unique prefix of one (the 8 characters ``gpdlm runs`` prints), or a
run name.

A reference that several runs match is refused with the candidates (id prefix, name, status,
start, experiment) -- except when they all share one output folder (a run and its resumed
continuations): that folder is the run, and the newest of them is used. The run used is named on
stderr (``gpdlm: run 3f2a9c1b (dlm-s0, FINISHED, experiment gpdlm) -> <folder>``).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from ..analysis.records import AnalysisError
from ..analysis.store import open_store

MIN_PREFIX = 4  # shorter hex strings are taken as names only
MAX_LISTED = 8  # candidates listed in the message of an ambiguous reference


def _describe(run, experiments: dict[str, str]) -> str:
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime((run.info.start_time or 0) / 1000))
    exp = experiments.get(run.info.experiment_id, run.info.experiment_id)
    return f"{run.info.run_id[:8]} ({run.info.run_name or '-'}, {run.info.status}, {started}, experiment {exp})"


def _all_runs(client, exp_ids: list[str], filter_string: str = "") -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(exp_ids, filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def matching_runs(client, ref: str) -> tuple[list, dict[str, str]]:
    """(the runs ``ref`` names, {experiment id: name}): the run with that id; else the runs whose id
    starts with ``ref`` (a hex string of at least ``MIN_PREFIX`` characters) and the runs named
    ``ref``, over every active experiment of the store."""
    from mlflow.exceptions import MlflowException

    from ..tracking.tracker import quote

    experiments = {e.experiment_id: e.name for e in client.search_experiments()}
    ids = list(experiments)
    if not ids:
        return [], experiments
    if re.fullmatch(r"[0-9a-f]{32}", ref):
        try:
            return [client.get_run(ref)], experiments
        except MlflowException:
            pass
    found: dict[str, object] = {}
    literal = quote(ref)
    if literal is not None:
        named = _all_runs(client, ids, f"attributes.run_name = {literal}")
    else:  # a name with both kinds of quote: compared here
        named = [r for r in _all_runs(client, ids) if r.info.run_name == ref]
    for r in named:
        found[r.info.run_id] = r
    if len(ref) >= MIN_PREFIX and re.fullmatch(r"[0-9a-f]+", ref):
        for r in _all_runs(client, ids):
            if r.info.run_id.startswith(ref):
                found[r.info.run_id] = r
    return list(found.values()), experiments


def resolve_run(ref: str, uri: str | None, *, announce: bool = True) -> tuple[Path, str | None]:
    """(output folder, MLflow run id or None) of the run ``ref`` names (module docstring); one-line
    ``AnalysisError`` when nothing or several runs match, or the run's folder is not on this machine."""
    p = Path(ref)
    if p.is_dir():
        return p, None
    client, uri = open_store(uri)
    runs, experiments = matching_runs(client, ref)
    if not runs:
        raise AnalysisError(f"no run '{ref}': not a folder, nor a run id, id prefix or run name in {uri}")
    runs.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id), reverse=True)
    folders = {r.data.tags.get("gpdlm.output_dir") for r in runs}
    if len(runs) > 1 and (len(folders) > 1 or None in folders):
        listed = "; ".join(_describe(r, experiments) for r in runs[:MAX_LISTED])
        more = f"; and {len(runs) - MAX_LISTED} more" if len(runs) > MAX_LISTED else ""
        raise AnalysisError(
            f"'{ref}' is ambiguous: {len(runs)} runs match: {listed}{more}; "
            f"give a longer run id prefix (gpdlm runs lists them)"
        )
    run = runs[0]  # the only one, or the newest run of the one folder they share
    folder = run.data.tags.get("gpdlm.output_dir")
    if not folder or not Path(folder).is_dir():
        raise AnalysisError(
            f"run {run.info.run_id} has no output folder on this machine ({folder or 'no gpdlm.output_dir tag'})"
        )
    if announce:
        also = f"; the newest of {len(runs)} runs of that folder" if len(runs) > 1 else ""
        print(f"gpdlm: run {_describe(run, experiments)} -> {folder}{also}", file=sys.stderr)
    return Path(folder), run.info.run_id


__all__ = ["matching_runs", "resolve_run"]
