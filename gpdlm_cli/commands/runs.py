"""Reading gpdlm's training runs back from MLflow, for ``gpdlm compare`` and ``gpdlm select``.

What is loaded: the FINISHED runs of one experiment that ``gpdlm train`` made (tag
``gpdlm.command=train``), through ``MlflowClient.search_runs`` (every page), optionally narrowed
by an MLflow filter expression. Sweep parents, ``compare``/``select`` runs and unfinished runs are
left out -- and the unfinished training runs are counted in a note (RUNNING, possibly orphaned:
``gpdlm runs --stale``; FAILED; KILLED) -- refits (tag ``gpdlm.refit_of``) only when asked for.
Reruns of an identical configuration (the same ``gpdlm.config_hash``, seed included) count once:
the latest of them is kept, so a rerun never passes for another seed.

Grouping keys are short names (``dataset``, ``model``, ``beta``, ``train_size``, ...) or any param
key verbatim. Values are compared as numbers whenever they parse as finite numbers, so "10" sorts
after "9" and ``objective.beta=1`` groups with ``objective.beta=1.0``.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..exceptions import GpdlmError

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1

DEFAULT_EXPERIMENT = "gpdlm"

# short name -> (source, key); source is "param", "metric" or "tag"
ALIASES: dict[str, tuple[str, str]] = {
    "dataset": ("param", "dataset.name"),
    "model": ("param", "model.name"),
    "variant": ("param", "model.variant"),
    "likelihood": ("param", "likelihood.name"),
    "estimator": ("param", "estimator.name"),
    "beta": ("param", "objective.beta"),
    "train_size": ("metric", "n_train"),
    "seed": ("param", "seed"),
}
# keys computed by gpdlm itself rather than read from MLflow
DERIVED = ("method", "refit")

# the task metrics shown when --metric is not given (those that some run has)
DEFAULT_METRICS = ("test_nll", "test_rmse", "test_error", "test_mre")


class AnalysisError(GpdlmError, ValueError):
    """Bad input to compare/select/ui: printed as one line, exit code 2."""


# ----- values ----------------------------------------------------------------------------------------
def canon(raw: Any) -> float | str | None:
    """A param/metric/tag value as a comparable value: a float when it parses as a finite number,
    else the string; None when absent."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        return str(raw)
    if isinstance(raw, (int, float)):
        return float(raw) if math.isfinite(raw) else str(raw)
    s = str(raw)
    try:
        x = float(s)
    except ValueError:
        return s
    return x if math.isfinite(x) else s


def sort_key(v: float | str | None) -> tuple:
    """Numbers first (by value), then strings, then missing values."""
    if v is None:
        return (2, 0.0, "")
    if isinstance(v, float):
        return (0, v, "")
    return (1, 0.0, v)


def fmt_value(v: float | str | None) -> str:
    """A group value for tables: integers without '.0', other numbers by repr, '-' when absent."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    return v


def fmt_num(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.4g}"


def fmt_mean_se(mean: float, se: float) -> str:
    if se is None or math.isnan(se):
        return fmt_num(mean)
    return f"{fmt_num(mean)} ± {se:.2g}"


def mean_se(values: list[float]) -> tuple[float, float, int]:
    """Mean, standard error (sample std / sqrt(n); nan for n < 2) and n."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    mean = statistics.fmean(values)
    if n < 2 or not all(math.isfinite(v) for v in values):
        return mean, math.nan, n
    return mean, statistics.stdev(values) / math.sqrt(n), n


# ----- runs --------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """One MLflow run, reduced to what the analysis needs. ``extra`` holds derived values (the
    method label of a selection, a refit's original training size) that override lookups."""

    run_id: str
    run_name: str
    start_time: int
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_run(cls, run) -> "RunRecord":
        return cls(run.info.run_id, run.info.run_name or "", int(run.info.start_time or 0),
                   dict(run.data.params), dict(run.data.metrics), dict(run.data.tags))

    def raw(self, key: str):
        """The raw value behind a grouping key (None if the run does not have it)."""
        if key in self.extra:
            return self.extra[key]
        if key == "method":
            return self.params.get("model.name")
        if key == "refit":
            return "yes" if self.tags.get("gpdlm.refit_of") else "no"
        source, name = resolve_key(key)
        return {"param": self.params, "metric": self.metrics, "tag": self.tags}[source].get(name)

    def value(self, key: str) -> float | str | None:
        return canon(self.raw(key))

    def with_extra(self, **extra) -> "RunRecord":
        return RunRecord(self.run_id, self.run_name, self.start_time, self.params, self.metrics, self.tags,
                         {**self.extra, **extra})


def resolve_key(key: str) -> tuple[str, str]:
    """('param'|'metric'|'tag', name) for a short name, ``params.X``/``metrics.X``/``tags.X``, or a
    param key given verbatim."""
    if key in ALIASES:
        return ALIASES[key]
    for prefix, source in (("params.", "param"), ("metrics.", "metric"), ("tags.", "tag")):
        if key.startswith(prefix):
            return source, key[len(prefix):]
    return "param", key


def check_keys(records: list[RunRecord], keys: Iterable[str], option: str = "--by") -> None:
    """Every grouping key must be a short name or be present in at least one run."""
    for key in keys:
        if key in ALIASES or key in DERIVED:
            continue
        if not any(r.raw(key) is not None for r in records):
            short = ", ".join(list(ALIASES) + list(DERIVED))
            raise AnalysisError(f"unknown {option} key '{key}': not a short name ({short}) and no run has a "
                                f"param of that name (metrics.NAME / tags.NAME for other sources)")


def group_records(records: list[RunRecord], keys: list[str]) -> list[tuple[tuple, list[RunRecord]]]:
    """[(values, runs)] per distinct combination of ``keys``, sorted (numbers as numbers)."""
    groups: dict[tuple, list[RunRecord]] = {}
    for r in records:
        groups.setdefault(tuple(r.value(k) for k in keys), []).append(r)
    return sorted(groups.items(), key=lambda kv: tuple(sort_key(v) for v in kv[0]))


def split_list(values: Iterable[str] | None) -> list[str]:
    """['a,b', 'c'] -> ['a', 'b', 'c'] (options may be repeated and/or comma-separated)."""
    out: list[str] = []
    for v in values or []:
        out.extend(p.strip() for p in v.split(",") if p.strip())
    return out


# ----- the store -------------------------------------------------------------------------------------
def resolve_uri(uri: str | None) -> str:
    from ..tracking import resolve_tracking_uri

    return resolve_tracking_uri(uri)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores or in-memory SQLite)."""
    if not uri.startswith("sqlite:"):
        return None
    rest = uri[len("sqlite:"):]
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
        raise AnalysisError(f"no MLflow store at {db} (nothing tracked there yet): run 'gpdlm train' in "
                            f"that directory first, or pass --tracking-uri")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri), uri


def get_experiment(client, name: str, uri: str):
    exp = client.get_experiment_by_name(name)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments())
        raise AnalysisError(f"experiment '{name}' does not exist in {uri}; experiments there: "
                            f"{', '.join(names) or '(none)'}")
    return exp


def search_all(client, experiment_id: str, filter_string: str = "") -> list:
    """Every run of the experiment matching the filter (all pages)."""
    from mlflow.exceptions import MlflowException

    runs, token = [], None
    while True:
        try:
            page = client.search_runs([experiment_id], filter_string=filter_string or "", max_results=1000,
                                      page_token=token)
        except MlflowException as e:
            msg = str(e.message if hasattr(e, "message") else e).strip().splitlines()
            raise AnalysisError(f"invalid --filter {filter_string!r}: {msg[0] if msg else 'rejected by MLflow'}") from None
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def is_training_run(run, include_refits: bool = False) -> bool:
    tags = run.data.tags
    return (run.info.status == "FINISHED" and tags.get("gpdlm.command") == "train"
            and tags.get("gpdlm.sweep") != "parent"
            and (include_refits or not tags.get("gpdlm.refit_of")))


def load_runs(client, experiment, filter_string: str = "", include_refits: bool = False,
              notes: list[str] | None = None) -> list[RunRecord]:
    """The FINISHED training runs of ``experiment`` that match ``filter_string``, reruns of the same
    configuration counted once; an error if none. What was left out and why is printed as notes
    (or appended to ``notes``)."""
    found = search_all(client, experiment.experiment_id, filter_string)
    runs = [RunRecord.from_run(r) for r in found if is_training_run(r, include_refits)]
    said = [skipped_note(found)] if skipped_note(found) else []
    runs, reruns = drop_reruns(runs)
    if reruns:
        said.append(f"{reruns} rerun(s) of identical configurations (same gpdlm.config_hash) counted once: "
                    f"the latest run of each is used")
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


def skipped_note(found: list) -> str:
    """'skipped N training runs: 2 RUNNING (...), 1 FAILED, ...' for the unfinished training runs
    among ``found`` ('' when there are none)."""
    counts: dict[str, int] = {}
    for r in found:
        if r.data.tags.get("gpdlm.command") == "train" and r.info.status != "FINISHED":
            counts[r.info.status] = counts.get(r.info.status, 0) + 1
    if not counts:
        return ""
    why = {"RUNNING": "still running or orphaned: see `gpdlm runs --stale`", "FAILED": "see their failure_reason",
           "KILLED": "interrupted", "SCHEDULED": "not started"}
    parts = [f"{n} {status} ({why.get(status, 'unfinished')})" for status, n in sorted(counts.items())]
    return f"skipped {sum(counts.values())} unfinished training run(s): " + ", ".join(parts)


def drop_reruns(records: list[RunRecord]) -> tuple[list[RunRecord], int]:
    """Keep the latest run of every ``gpdlm.config_hash`` (runs without the tag are all kept);
    (kept, number dropped)."""
    latest: dict[str, RunRecord] = {}
    kept = []
    for r in records:
        h = r.tags.get("gpdlm.config_hash")
        if not h:
            kept.append(r)
        elif h not in latest or (r.start_time, r.run_id) > (latest[h].start_time, latest[h].run_id):
            latest[h] = r
    kept += list(latest.values())
    return kept, len(records) - len(kept)


# params that never distinguish what was trained
BOOKKEEPING = ("tracking.", "progress", "sweep.", "device", "threads", "hydra.", "bias.")


def varying_params(runs: list[RunRecord], ignore: Iterable[str] = ("seed",)) -> list[str]:
    """Param keys (bookkeeping and ``ignore`` aside) whose value differs between ``runs`` (as
    values: "1" and "1.0" are equal); a key missing from some runs counts as a difference."""
    ignore = set(ignore)
    keys = set().union(*(r.params for r in runs)) if runs else set()
    return sorted(k for k in keys if k not in ignore and not k.startswith(BOOKKEEPING)
                  and len({canon(r.params.get(k)) for r in runs}) > 1)


def short_key(param: str) -> str:
    """The short grouping name of a param key (``model.variant`` -> ``variant``), or the key itself."""
    for short, (source, name) in ALIASES.items():
        if source == "param" and name == param:
            return short
    return param


def choose_metrics(records: list[RunRecord], requested: list[str]) -> list[str]:
    """The requested metrics (each must exist in some run), or the default task metrics present."""
    present = set().union(*(r.metrics for r in records))
    if requested:
        for m in requested:
            if m not in present:
                shown = ", ".join(sorted(k for k in present if k.startswith(("test_", "val_")))) or ", ".join(sorted(present))
                raise AnalysisError(f"no run has metric '{m}'; metrics present: {shown}")
        return list(dict.fromkeys(requested))
    chosen = [m for m in DEFAULT_METRICS if m in present]
    if not chosen:
        chosen = sorted(k for k in present if k.startswith("test_"))
    if not chosen:
        raise AnalysisError("the runs have no test_* metrics; name the metrics with --metric")
    return chosen


# ----- tables ---------------------------------------------------------------------------------------
def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for row in rows:
            w.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def print_table(title: str, header: list[str], rows: list[list[str]], numeric_from: int = 0, file=None) -> None:
    from rich.console import Console
    from rich.table import Table

    out = file or sys.stdout
    console = Console(file=out, width=None if out.isatty() else 200)
    table = Table(title=title, show_lines=False)
    for i, h in enumerate(header):
        table.add_column(h, justify="right" if i >= numeric_from else "left", overflow="fold")
    for row in rows:
        table.add_row(*[str(c) for c in row])
    console.print(table)


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


def log_analysis_run(client, experiment_id: str, command: str, outdir: Path, params: dict, tags: dict | None = None) -> str:
    """A FINISHED run named after ``command`` holding the files of ``outdir`` (not its subfolders)
    as artifacts."""
    from mlflow.entities import Param

    run = client.create_run(experiment_id, run_name=command,
                            tags={"gpdlm.command": command, **{k: str(v) for k, v in (tags or {}).items()}})
    rid = run.info.run_id
    try:
        client.log_batch(rid, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        for f in sorted(outdir.iterdir()):
            if f.is_file():
                client.log_artifact(rid, str(f))
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    client.set_terminated(rid, "FINISHED")
    return rid


# ----- the command-line frame ------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2 instead of argparse's usage dump
        raise AnalysisError(f"{self.prog}: {message}")


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    return _Parser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="MLflow experiment (default: gpdlm)")
    p.add_argument("--tracking-uri", default=None, metavar="URI",
                   help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as for gpdlm train)")


def run_cli(fn: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """Call ``fn(argv)``; a GpdlmError becomes ``gpdlm: error: ...`` (one line) and exit code 2, an
    MLflow failure one line and exit code 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(fn(argv) or 0)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    except GpdlmError as e:
        print(f"gpdlm: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:
        from mlflow.exceptions import MlflowException

        if isinstance(e, MlflowException):
            print(f"gpdlm: error: MLflow: {_one_line(e)}", file=sys.stderr)
            return EXIT_FAILED
        raise


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__
