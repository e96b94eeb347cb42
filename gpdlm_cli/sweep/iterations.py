"""How many iterations a job's stages are expected to take, for the ``--dry-run`` estimate (``sweep.plan``).

A stage with a stopping rule (the fast protocol's L-BFGS stages: window and gradient tests; a paper stage's
window rule) usually stops before its iteration cap -- the fast protocol's L-BFGS stages on pol after a
small fraction of ``trainer.fast_max_iters`` -- so the cap times the step time is an upper bound, not an
expectation (issue 42: the fast pol study estimated at 4.4x its measured time). Where they come from,
in this order (``Expected.source`` says which, per shape):

1. ``from N finished runs``: the FINISHED runs of the same shape, protocol and iteration settings
   (``MATCH_KEYS``) already in the store the plan runs into (``finished_iterations``) or recorded in run-records
   files (``gpdlm export``; ``recorded_iterations``: an earlier part, or a study of the same shapes at other
   seeds or another scale -- ``gpdlm reproduce --dry-run --iterations-from FILE``): their mean
   ``iterations`` metric, less the fixed iterations (the fast protocol's first-order starts, the stages
   without a stopping rule), shared out over the stages with a rule in proportion to their caps (exact for
   a one-stage job; the run records only its total);
2. ``observed (k jobs)``: a few jobs of the shape (``plan.OBSERVE_JOBS``, spread over its seeds and beta grid)
   trained to their stopping rules in the probe (``observe``: their real settings, no evaluations) within
   the plan's iteration budget, their iterations averaged (``combine``); a job cut short by the budget counts
   at the cap, and the source says how many (``observed (j of k jobs; m cut short ... (upper bound))``);
3. ``cap (upper bound)``: where neither is available (no such runs; no job observed to its end).

Stages without a stopping rule are counted at their cap (``cap (no stopping rule)``: their budget is what
they run).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

CAP = "cap (upper bound)"
NO_RULE = "cap (no stopping rule)"  # every stage runs its budget: the cap is exact
OBSERVED = "observed"
#: the config keys a finished run must share with a job (as MLflow params) to stand for its iterations: what
#: its shape is made of (``plan.SHAPE_KEYS``, ``model.name``) and what sets its budget and stopping rules
MATCH_KEYS = (
    "model.name",
    "model.variant",
    "trainer.protocol",
    "trainer.max_iters",
    "trainer.max_epochs",
    "trainer.stop_rule",
    "trainer.fast_max_iters",
    "trainer.fast_tol",
    "trainer.fast_grad_tol",
    "trainer.fast_window",
    "trainer.fast_adam_iters",
)
#: most finished runs read from a store (newest first; ~7 ms a run: 5,000 runs ~35 s, once per process)
MAX_RUNS = 5000


@dataclass(frozen=True)
class StageRule:
    """An iterative stage as a job trains it: its name, its iteration cap, whether a stopping rule can end
    it earlier, and the fast protocol's first-order steps before it (``training.stages.first_order_prefix``)."""

    name: str
    cap: int
    rule: bool
    prefix: int = 0


@dataclass(frozen=True)
class Expected:
    """A shape's expected iterations per stage row (None: the row's cap stands) and where they come from:
    ``observed (k jobs)`` (or partly, ``observed (j of k jobs; ...)``), ``from N finished runs``,
    ``cap (upper bound)``, ``cap (no stopping rule)``."""

    source: str
    iterations: tuple = ()
    caps: tuple = ()  # per row: its iteration cap (what the row's iterations were before)

    @property
    def upper_bound(self) -> bool:
        """Every stage with a rule at its cap (nothing observed or read)."""
        return self.source == CAP

    @property
    def partial(self) -> bool:
        """Observed, but some jobs cut short by the probe budget and counted at the cap."""
        return "cut short" in self.source

    @property
    def complete(self) -> bool:
        return not (self.upper_bound or self.partial)


def stage_rules(prepared) -> list[StageRule]:
    """The iterative stages of a prepared job (``prepare.Prepared``), in the order its rows are."""
    from ..training import stage_settings
    from ..training.stages import first_order_prefix, stage_cap

    settings, n = prepared.settings, prepared.splits.n_train
    out = []
    for stage in prepared.method.stages:
        if stage.solve is not None:
            continue
        s = stage_settings(settings, stage, n)
        cap = stage_cap(s, stage, n)
        prefix = first_order_prefix(settings, stage, n)
        out.append(StageRule(stage.name, int(cap), s.stop_rule != "none", int(prefix.max_iters or 0) if prefix else 0))
    return out


def apply(rows: list, expected: Expected) -> list:
    """The stage rows (name, shareable, iterations, ms/iteration, L-BFGS, seconds) with a row's iterations
    replaced by its expected count and its seconds by the count times its ms (its first-order start kept)."""
    out = []
    for row, it in zip(rows, expected.iterations or (None,) * len(rows)):
        name, shareable, cap, ms, lbfgs, seconds = row
        if it is None:
            out.append(row)
        else:
            out.append((name, shareable, int(it), ms, lbfgs, seconds + (it - cap) * ms / 1000))
    return out


def from_total(total: float, rules: list[StageRule], n: int) -> Expected:
    """A job's expected iterations per stage from the mean total ``iterations`` of ``n`` finished runs: the total
    less the fixed iterations (first-order starts, stages without a rule), shared out over the stages with a
    rule in proportion to their caps, each within [1, its cap]."""
    fixed = sum(r.prefix for r in rules) + sum(r.cap for r in rules if not r.rule)
    capped = sum(r.cap for r in rules if r.rule)
    left = max(0.0, total - fixed)
    its = tuple(
        (min(r.cap, max(1, round(r.cap * left / capped))) if r.rule else None) if capped else None for r in rules
    )
    return Expected(f"from {n} finished run{'s' if n != 1 else ''}", its, tuple(r.cap for r in rules))


def observe(prepared, budget_s: float, seed: int = 0) -> dict[str, int]:
    """Train ``prepared`` (a job of the shape) as the job would -- its stages, settings and first-order starts,
    without evaluations -- until its stopping rules end it or ``budget_s`` seconds have passed: the main
    iterations (after its first-order start) of every stage that ended by its rule or at its cap before the
    budget ran out (a stage cut short by it, and those after it, are left out)."""
    import torch

    from ..training import run_stages
    from ..training.callbacks import Callback

    class Deadline(Callback):
        """Ends the training call once ``budget_s`` has passed, and records every stage's iterations."""

        def __init__(self) -> None:
            self.t_end = time.perf_counter() + budget_s
            self.cut = False
            self.ended: dict[str, int] = {}

        def on_step(self, loop) -> None:
            if time.perf_counter() >= self.t_end:
                self.cut = loop.converged = True

        def on_stage_end(self, loop, run) -> None:
            if run.result is not None and not self.cut:
                self.ended[run.stage.name] = int(run.result.iterations)

    if budget_s <= 0:
        return {}
    s = dataclasses.replace(prepared.settings, eval_every=0, eval_every_epochs=None, keep_best=None, progress=False)
    clock = Deadline()
    run_stages(
        prepared.method.stages,
        prepared.data.x_train,
        prepared.data.y_train,
        s,
        generator=torch.Generator().manual_seed(seed),
        modules=prepared.method.modules,
        callbacks=[clock],
    )
    return clock.ended


def combine(observed: list[dict], rules: list[StageRule], k: int) -> Expected:
    """A shape's expected iterations from ``k`` jobs meant to be observed (``observed``: the stages' iterations of
    those that ran, ``observe``): per stage with a rule, the mean over the ``k`` jobs, a job cut short by the
    budget (or not run) counted at the stage's cap -- then the source says how many (an upper bound); with no
    job observed to its end, ``cap (upper bound)``."""
    caps = tuple(r.cap for r in rules)
    cut = (k - len(observed)) + sum(any(r.rule and r.name not in o for r in rules) for o in observed)
    if cut >= k:
        return Expected(CAP, (), caps)
    its = tuple(
        round(sum([o.get(r.name, r.cap) for o in observed] + [r.cap] * (k - len(observed))) / k) if r.rule else None
        for r in rules
    )
    jobs = f"{k} job{'s' if k != 1 else ''}"
    if not cut:
        return Expected(f"{OBSERVED} ({jobs})", its, caps)
    return Expected(
        f"{OBSERVED} ({k - cut} of {jobs}; {cut} cut short by the probe budget, counted at the {CAP})", its, caps
    )


def job_params(cfg) -> dict[str, str]:
    """A job's config as the MLflow params of its run would hold it (flattened, resolved, ``str``; None as
    ``None``), for the keys a finished run must match (``MATCH_KEYS`` and ``shape_keys``)."""
    from omegaconf import OmegaConf

    from ..tracking import flatten

    flat = flatten(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    return {k: "None" if v is None else str(v) for k, v in flat.items()}


def store_client(uri: str | None):
    """An MLflow client of the store at ``uri`` when it exists (a SQLite file or a local folder); None for a
    store not yet created (never created here) or a remote one (a dry run makes no network calls)."""
    from pathlib import Path

    if not uri:
        return None
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///") :].split("?", 1)[0])
        if not path.is_file():
            return None
    elif uri.startswith("file:"):
        if not Path(uri[len("file:") :].removeprefix("//")).is_dir():
            return None
    elif "://" in uri or not Path(uri).is_dir():
        return None
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def finished_iterations(client, experiment: str, wanted: dict, keys: tuple, uri: str = "") -> dict:
    """Per wanted shape (``wanted``: shape -> its job's params, ``job_params``), the ``iterations`` metric of
    every FINISHED training run of ``experiment`` whose params equal the job's on ``keys``. The runs are read
    once per store (``uri``, unchanged since), experiment and keys in a process (``_stored_runs``)."""
    index = {tuple(p.get(k, "None") for k in keys): shape for shape, p in wanted.items()}
    found: dict = {shape: [] for shape in wanted}
    for values, its in _stored_runs(client, experiment, keys, uri):
        shape = index.get(values)
        if shape is not None:
            found[shape].append(its)
    return found


def _stored_runs(client, experiment: str, keys: tuple, uri: str) -> list[tuple[tuple, float]]:
    """(the values of ``keys``, the ``iterations`` metric) of the newest ``MAX_RUNS`` FINISHED training runs of
    ``experiment`` (MLflow reads ~7 ms a run on this machine: a reproduce plans many multiruns from one read)."""
    from pathlib import Path

    db = Path(uri[len("sqlite:///") :].split("?", 1)[0]) if uri.startswith("sqlite:///") else None
    stamp = db.stat().st_mtime_ns if db is not None and db.is_file() else None
    cache_key = (uri, experiment, keys, stamp)
    if uri and cache_key in _READ:
        return _READ[cache_key]
    exp = client.get_experiment_by_name(experiment)
    out: list = []
    token = None
    while exp is not None and len(out) < MAX_RUNS:
        page = client.search_runs(
            [exp.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=1000, page_token=token
        )
        for run in page:
            its = run.data.metrics.get("iterations")
            if its is not None and run.data.tags.get("gpdlm.command", "train") == "train":
                out.append((tuple(run.data.params.get(k, "None") for k in keys), float(its)))
        token = page.token
        if not token:
            break
    if uri:
        _READ[cache_key] = out
    return out


_READ: dict = {}  # (store, experiment, keys, its file's mtime) -> _stored_runs' list: one read per process


def finished_config_hashes(client, experiment: str, uri: str) -> frozenset[str]:
    """The ``gpdlm.config_hash`` tags of every FINISHED run of ``experiment`` in the store (``uri``): the jobs
    a sweep with ``sweep.skip_finished`` skips (read once per process while the store's file is unchanged). A
    SQLite store is read with one query (``tracking.sqlite_runs``; MLflow, which loads every run whole, took
    ~8 s a sweep on the 2,400 runs of the classification study), another store or an unreadable file through
    ``client``."""
    from pathlib import Path

    from ..tracking.sqlite_runs import SqliteRuns, SqliteStoreUnreadable

    db = Path(uri[len("sqlite:///") :].split("?", 1)[0]) if uri.startswith("sqlite:///") else None
    stamp = db.stat().st_mtime_ns if db is not None and db.is_file() else None
    cache_key = (uri, experiment, "config_hash", stamp)
    if cache_key in _READ:
        return _READ[cache_key]
    if db is not None and stamp is not None:
        try:
            store = SqliteRuns(db)
            found = store.get_experiment_by_name(experiment)
            hashes = store.tag_values(found.experiment_id, "gpdlm.config_hash", "FINISHED") if found else set()
            _READ[cache_key] = frozenset(hashes)
            return _READ[cache_key]
        except SqliteStoreUnreadable:  # another schema, locked: MLflow's answer
            pass
    exp = client.get_experiment_by_name(experiment)
    out: set[str] = set()
    token = None
    while exp is not None:
        page = client.search_runs(
            [exp.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=1000, page_token=token
        )
        out |= {str(h) for run in page if (h := run.data.tags.get("gpdlm.config_hash"))}
        token = page.token
        if not token:
            break
    _READ[cache_key] = frozenset(out)
    return _READ[cache_key]


def recorded_iterations(paths, experiment: str, wanted: dict, keys: tuple) -> dict:
    """As ``finished_iterations``, from the FINISHED training runs of ``experiment`` recorded in the run-records
    files ``paths`` (``gpdlm export``; each verified: ``tracking.records_file.RecordsError`` for a missing,
    changed or foreign file). A file without runs of ``experiment`` adds none (it may hold another multirun's)."""
    index = {tuple(p.get(k, "None") for k in keys): shape for shape, p in wanted.items()}
    found: dict = {shape: [] for shape in wanted}
    for path in paths:
        for e in _finished_training_runs(path):
            its = e.get("metrics", {}).get("iterations")
            params = e.get("params", {})
            shape = index.get(tuple(str(params.get(k, "None")) for k in keys))
            if e.get("experiment") == experiment and its is not None and shape is not None:
                found[shape].append(float(its))
    return found


def _finished_training_runs(path) -> list[dict]:
    """The FINISHED ``gpdlm train`` runs of a run-records file (read and verified once per process while the
    file is unchanged: a reproduce plans many multiruns from the same files)."""
    from ..tracking.records_file import read_cached

    return [
        e
        for e in read_cached(path)[3]
        if e.get("status") == "FINISHED" and e.get("tags", {}).get("gpdlm.command", "train") == "train"
    ]


__all__ = [
    "CAP",
    "Expected",
    "StageRule",
    "apply",
    "combine",
    "finished_iterations",
    "from_total",
    "job_params",
    "observe",
    "recorded_iterations",
]
