"""Sweeps in MLflow: one parent run per Hydra multirun, every job a child run.

The Hydra callback ``SweepCallback`` runs in the launching process. Before any job starts it
creates the SQLite database, the experiment and the parent run (so parallel jobs never race to
create them) and writes ``gpdlm_sweep.json`` into the sweep directory; jobs -- in this process, in
joblib workers or on a cluster -- read it to attach themselves as children. Jobs never raise
into Hydra: a failed job writes ``outcomes/<job>.json`` and the sweep goes on; at the end the
callback ends the parent run (FAILED if any job failed, KILLED if one was stopped by a signal),
prints every failure with its reason, and the CLI exits non-zero.

The context also names the swept keys (command-line sweeps and ``hydra.sweeper.params``: they go
into the run names) and the sweeper. With ``hydra/sweeper=optuna`` every trial is a child run,
each job returns its ``sweep.objective`` metric to the sweeper (``job_objective``), and the parent
run records the study: tags ``gpdlm.sweeper=optuna``, ``gpdlm.swept`` (the searched keys),
``gpdlm.sweep_objective``, and at the end the best value and parameters.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from hydra.experimental.callback import Callback

from ..tracking.identity import config_hashes
from ..tracking.liveness import process_tags

SWEEP_FILE = "gpdlm_sweep.json"

# filled in the launching process, read by the CLI to set its exit code
OUTCOMES: list[dict] = []
STATUSES = ("finished", "failed", "killed", "skipped")


def objective_metric(cfg) -> str:
    """The metric a sweep job returns to its sweeper: ``sweep.objective``; ``auto`` = the metric
    ``gpdlm select`` selects by: the one the model's family declares (``methods.selection_metric``:
    val_mse for square-loss DLM, val_nll otherwise)."""
    name = str(cfg.sweep.get("objective", "auto"))
    if name == "auto":
        from ..methods import selection_metric

        return selection_metric(cfg.model.name)
    return name


def job_objective(cfg, metrics: dict | None, context: dict) -> float:
    """The job's objective value for the sweeper (hydra-optuna-sweeper minimises it). A job skipped
    by ``sweep.skip_finished`` answers with the metric of the FINISHED run it stands for; a value
    that does not exist is +inf (never the best) -- an error only when ``sweep.objective`` names a
    metric the run does not have (``auto`` asks nothing of runs without one, e.g. ``gpdlm bias``)."""
    name = objective_metric(cfg)
    if metrics is None and context.get("uri"):
        metrics = _finished_run_metrics(context["uri"], context.get("experiment"), config_hashes(cfg))
    if metrics is None and cfg.get("sweep", {}).get("finished_from"):  # recorded in a run-records file
        from ..tracking.records_file import recorded_metrics

        paths = [str(p) for p in cfg.sweep.finished_from]
        metrics = recorded_metrics(paths, str(cfg.tracking.experiment), config_hashes(cfg))
    value = (metrics or {}).get(name)
    if value is None:
        if metrics is not None and str(cfg.sweep.get("objective", "auto")) != "auto":
            from ..exceptions import ConfigError

            shown = ", ".join(sorted(k for k in metrics if k.startswith("val_"))) or ", ".join(sorted(metrics))
            raise ConfigError(f"sweep.objective={name} is not a metric of this run; choose from: {shown}")
        return float("inf")
    return float(value)


def _finished_run_metrics(uri: str, experiment: str | None, hashes: tuple[str, ...]) -> dict | None:
    """The metrics of the latest FINISHED run tagged with one of ``hashes`` (the versions of a config hash)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(str(experiment)) if experiment else None
    if exp is None:
        return None
    runs = []
    for chash in hashes:
        runs += client.search_runs(
            [exp.experiment_id],
            max_results=1,
            order_by=["attributes.start_time DESC"],
            filter_string=f"tags.`gpdlm.config_hash` = '{chash}' and attributes.status = 'FINISHED'",
        )
    runs.sort(key=lambda r: r.info.start_time, reverse=True)
    return dict(runs[0].data.metrics) if runs else None


def sweep_launcher_conflict(in_process: bool, batched: bool, warm_start: bool) -> str | None:
    """Why a multirun's ``sweep.batched`` / ``sweep.warm_start`` cannot run (one line), else None: both need the
    default in-process launcher, and they exclude each other."""
    if warm_start and not in_process:
        return (
            "sweep.warm_start=true passes each beta's end state to the next job in the same process: "
            "use the default launcher (drop hydra/launcher=...) or set sweep.warm_start=false"
        )
    if batched and not in_process:
        return (
            "sweep.batched=true trains the jobs of one shape together in one process: "
            "use the default launcher (drop hydra/launcher=...) or set sweep.batched=false"
        )
    if batched and warm_start:
        return (
            "sweep.batched=true and sweep.warm_start=true exclude each other (a batch starts every "
            "member from its own initialisation): set one of them to false"
        )
    return None


def _check_finished_from(config) -> None:
    """``sweep.finished_from``'s files read and verified before any job (a bad one is one line of error),
    and one line saying how many recorded runs count as finished."""
    paths = [str(p) for p in (config.get("sweep", {}).get("finished_from") or [])]
    if not paths:
        return
    from ..tracking.records_file import RecordsError, finished_config_hashes

    experiment = str(config.tracking.experiment)
    try:
        n = len(finished_config_hashes(paths, experiment))
    except RecordsError:  # `gpdlm train` refused it before Hydra (config_check); elsewhere each job reports it
        return
    skip = bool(config.sweep.get("skip_finished", False))
    print(
        f"gpdlm: sweep.finished_from: {n} configuration(s) recorded FINISHED in experiment '{experiment}' "
        f"({len(paths)} file(s))"
        + (": their jobs are skipped" if skip else "; without sweep.skip_finished=true they train again"),
        file=sys.stderr,
    )


def _announce(config) -> None:
    """One line at the start of a multirun: jobs, protocol, what is shared (``sweep.plan``)."""
    if sweeper_name(config) != "basic":
        return
    try:
        from .plan import plan

        # the launcher is a Hydra override (hydra/launcher=joblib, hydra.launcher.n_jobs=2), not a task one
        launcher = [o for o in config.hydra.overrides.hydra if str(o).startswith(("hydra/launcher", "hydra.launcher"))]
        print(plan(list(config.hydra.overrides.task) + launcher).summary(), file=sys.stderr)
    except Exception:  # the plan is a courtesy; Hydra itself reports bad sweeps
        pass


def swept_keys(config) -> list[str]:
    """The keys a multirun varies: command-line sweeps (``a=1,2``, ``range``, ``interval`` ...) and
    ``hydra.sweeper.params`` (presets, Optuna's search space)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = []
    try:
        parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    except Exception:
        parsed = []
    for o in parsed:
        if o.is_sweep_override() or "interval(" in o.input_line or "tag(" in o.input_line:
            keys.append(o.key_or_group)
    params = config.hydra.sweeper.get("params") or {}
    keys += [str(k) for k, v in params.items() if _is_sweep_value(str(v))]
    return list(dict.fromkeys(k.lstrip("+~") for k in keys))


def _is_sweep_value(v: str) -> bool:
    return any(t in v for t in (",", "range(", "interval(", "choice(", "glob("))


def sweeper_name(config) -> str:
    """``basic`` (Hydra's, or gpdlm's default ``hydra/sweeper=gpdlm``, the same sweeper with a lighter
    check before the launch), ``optuna``, or another sweeper's class name."""
    target = str(config.hydra.sweeper.get("_target_", ""))
    if "optuna" in target.lower():
        return "optuna"
    name = target.rsplit(".", 1)[-1].removesuffix("Sweeper").lower()
    return "basic" if name in ("", "gpdlm") else name


def jobs_to_compose(batch, is_group) -> list[int]:
    """The jobs of ``batch`` (each a list of override strings) whose configs the sweeper composes
    before the launch: the first of each config *structure* (``hydra_plugins/gpdlm_sweeper``).

    Two jobs share a structure when their overrides are the same except for plain values of the same
    keys, of the same type: an override ``key=value`` without ``+``/``~`` whose key is neither a
    config group (``is_group(key)``) nor a ``hydra.`` key other than ``hydra.sweep.subdir`` (the job folder
    ``leave_out_finished`` keeps), and whose value is a number, bool, null or
    string. Such jobs walk the same defaults tree and set the same keys, so they compose or fail
    together. An override Hydra cannot parse keeps its job (the composition reports it)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    seen, picked = set(), []
    for i, job in enumerate(batch):
        try:
            parsed = parser.parse_overrides(list(job))
        except Exception:
            picked.append(i)
            continue
        shape = []
        for line, o in zip(job, parsed):
            key = o.key_or_group
            value = o.value() if not o.is_sweep_override() else None
            plain = (
                not o.is_add()
                and not o.is_force_add()
                and not o.is_delete()
                and not o.is_sweep_override()
                and (not key.startswith("hydra") or key == "hydra.sweep.subdir")
                and isinstance(value, (int, float, bool, str, type(None)))
                and not is_group(key)
            )
            shape.append((key, type(value).__name__) if plain else line)
        if tuple(shape) not in seen:
            seen.add(tuple(shape))
            picked.append(i)
    return picked


def read_context(sweep_dir) -> dict:
    p = Path(sweep_dir) / SWEEP_FILE
    return json.loads(p.read_text()) if p.exists() else {}


def record_outcome(
    sweep_dir,
    job_num: int,
    status: str,
    overrides: list[str],
    reason: str = "",
    resumed: str | None = None,
    before_launch: bool = False,
    seconds: float | None = None,
) -> None:
    """A job's outcome as a file (jobs may run in other processes or on other machines); ``resumed``: a
    job that continued a stopped run from its checkpoint (``run.resume``) says which run and step;
    ``before_launch``: a FINISHED job the sweeper left out (``leave_out_finished``); ``seconds``: the job's
    wall time in the process that ran it (`gpdlm reproduce` weighs the jobs left by it: ``Progress.mix_factor``)."""
    d = Path(sweep_dir) / "outcomes"
    d.mkdir(parents=True, exist_ok=True)
    from ..files import write_atomic

    record = {"job": job_num, "status": status, "overrides": overrides, "reason": reason}
    if resumed:
        record["resumed"] = resumed
    if before_launch:
        record["before_launch"] = True
    if seconds is not None:
        record["seconds"] = round(float(seconds), 3)
    write_atomic(d / f"{job_num}.json", json.dumps(record))


def leave_out_finished(config, jobs: list[list[str]]) -> list[list[str]]:
    """The jobs of a ``gpdlm train`` multirun with ``sweep.skip_finished`` that have something to do: those
    whose configuration has a FINISHED run -- in the store or the ``sweep.finished_from`` records, matched by
    config hash as the job itself would (``sweep.plan.finished_jobs``) -- are left out before the launch, with a
    ``skipped`` outcome record each (``before_launch``), so that the summary, the exit code and `gpdlm
    reproduce`'s progress count them as before. Launched only to skip itself, a job cost ~0.7 s (composition,
    job folder, data, model): 45 minutes for the 3,825 jobs of a resumed classification study. With Hydra's
    default job folders every job keeps the folder and number it has without any left out
    (``_default_folders``); with folders named otherwise (not from the job number) the records of the jobs left
    out are numbered after the launched ones. A sweep whose jobs train together (``sweep.batched``) keeps them
    all (its groups skip their finished members), and so do one whose folders are named from the job number
    otherwise than by default (leaving out would renumber them) and one whose check fails (said on stderr: each
    job checks itself)."""
    sweep = config.get("sweep", {})
    renumbered = not _default_folders(config) and "hydra.job.num" in _subdir(config)
    if not jobs or not sweep.get("skip_finished", False) or sweep.get("batched", False) or renumbered:
        return jobs
    try:
        from .plan import finished_jobs

        done = finished_jobs([list(j) for j in jobs], sweep.get("finished_from") or ())
    except Exception as e:  # the jobs then skip themselves, as without this check
        print(f"gpdlm: note: the finished jobs are checked in each job ({type(e).__name__}: {e})", file=sys.stderr)
        return jobs
    own = _default_folders(config)
    left = [list(j) + ([f"hydra.sweep.subdir={i}"] if own else []) for i, (j, d) in enumerate(zip(jobs, done)) if not d]
    skipped = [(i, list(j)) for i, (j, d) in enumerate(zip(jobs, done)) if d]
    where = "the store" + (" or the sweep.finished_from records" if sweep.get("finished_from") else "")
    for k, (i, job) in enumerate(skipped):  # numbered as without any left out, else after the launched jobs
        record_outcome(config.hydra.sweep.dir, i if own else len(left) + k, "skipped", job, before_launch=True)
    if skipped:
        print(
            f"gpdlm: {len(skipped)} of {len(jobs)} jobs have a FINISHED run of their configuration in {where}: "
            "left out before the launch (sweep.skip_finished)",
            file=sys.stderr,
        )
    return left


#: Hydra's default job folder (gpdlm's config.yaml): the job's number in its sweep
JOB_NUM_SUBDIR = "${hydra.job.num}"


def _subdir(config) -> str:
    """The sweep's ``hydra.sweep.subdir`` as written (unresolved)."""
    from omegaconf import OmegaConf

    return str(OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir"))


def _default_folders(config) -> bool:
    """Whether the job folders are Hydra's default (``hydra.sweep.subdir`` = the job number): a launched job
    then keeps the folder and number it has without any job left out (``hydra.sweep.subdir=<its index>``;
    ``job_number``), so a sweep run again into the same folder puts each job where its own earlier files are,
    never into a finished job's folder."""
    return _subdir(config) == JOB_NUM_SUBDIR


def job_number(hc) -> int:
    """A multirun job's number in its sweep (``hc``: its HydraConfig): Hydra's, or for a job launched after others
    were left out (``leave_out_finished``: ``hydra.sweep.subdir=<its index>``) the number of its own folder."""
    subdir = str(hc.sweep.get("subdir"))
    own = subdir.isdigit() and f"hydra.sweep.subdir={subdir}" in list(hc.get("overrides", {}).get("hydra") or [])
    return int(subdir) if own else int(hc.job.num)


def read_outcomes(sweep_dir) -> list[dict]:
    d = Path(sweep_dir) / "outcomes"
    if not d.exists():
        return []
    return sorted((json.loads(p.read_text()) for p in d.glob("*.json")), key=lambda o: o["job"])


class SweepCallback(Callback):
    """Parent run at multirun start; summary, parent status and exit code at multirun end."""

    def __init__(self):
        self.client = None
        self.parent_run_id = None

    def on_multirun_start(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        swept, sweeper = swept_keys(config), sweeper_name(config)
        _check_finished_from(config)
        context = {"parent_run_id": None, "swept": swept, "sweeper": sweeper}
        if config.tracking.enabled:
            from mlflow.tracking import MlflowClient

            from ..tracking.tracker import (
                RetryingClient,
                check_store,
                ensure_experiment,
                locked_retry,
                resolve_tracking_uri,
                store_lock,
            )

            uri = resolve_tracking_uri(config.tracking.uri)
            check_store(uri)
            with store_lock(uri):  # the schema is created or migrated when the client opens the store
                self.client = RetryingClient(locked_retry(lambda: MlflowClient(tracking_uri=uri), uri), uri)
                exp_id = ensure_experiment(self.client, config.tracking.experiment, uri)
            overrides = " ".join(config.hydra.overrides.task)
            kind = "study" if sweeper == "optuna" else "sweep"
            run = self.client.create_run(
                exp_id,
                run_name=f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}",
                tags={
                    "gpdlm.sweep": "parent",
                    "gpdlm.overrides": overrides,
                    "gpdlm.output_dir": str(sweep_dir.resolve()),
                    "gpdlm.sweeper": sweeper,
                    "gpdlm.swept": ",".join(swept),
                    "gpdlm.sweep_objective": str(config.sweep.get("objective", "auto")),
                    **process_tags(),
                },
            )
            self.parent_run_id = run.info.run_id
            context.update(parent_run_id=self.parent_run_id, uri=uri, experiment=str(config.tracking.experiment))
            _ACTIVE.append(self)
        if config.get("sweep", {}).get("batched", False) and sweeper == "basic":
            try:  # sweep.batched: the first job of a shape trains every job of its shape (sweep.batched)
                from .plan import sweep_jobs

                context["jobs"] = sweep_jobs(list(config.hydra.overrides.task), config.hydra.sweeper.get("params"))
            except Exception:  # the jobs then train separately, saying why
                pass
        from ..files import write_atomic

        write_atomic(sweep_dir / SWEEP_FILE, json.dumps(context))
        _announce(config)
        warm_data_cache(config)

    def on_multirun_end(self, config, **kwargs) -> None:  # noqa: D401
        outcomes = read_outcomes(config.hydra.sweep.dir)
        failed = [o for o in outcomes if o["status"] in ("failed", "killed")]
        counts = {s: sum(o["status"] == s for o in outcomes) for s in STATUSES}
        OUTCOMES.extend(outcomes)
        best = _optuna_best(config.hydra.sweep.dir)
        status = "FAILED" if counts["failed"] else "KILLED" if counts["killed"] else "FINISHED"
        self.end(status, counts, best, failure_reason(outcomes))
        killed = f", {counts['killed']} killed" if counts["killed"] else ""
        resumed = sum(bool(o.get("resumed")) for o in outcomes)
        print(
            f"gpdlm: sweep done: {counts['finished']} finished"
            + (f" ({resumed} resumed from a checkpoint)" if resumed else "")
            + f", {counts['skipped']} skipped, "
            f"{counts['failed']} failed{killed}  ({config.hydra.sweep.dir})",
            file=sys.stderr,
        )
        if best:
            params = " ".join(f"{k}={v}" for k, v in best["best_params"].items())
            print(
                f"gpdlm: best trial: {objective_metric(config)} = {best['best_value']:.6g} with {params}",
                file=sys.stderr,
            )
        for o in failed:
            print(f"gpdlm: {o['status']} job {o['job']} [{' '.join(o['overrides'])}]: {o['reason']}", file=sys.stderr)

    def end(self, status: str, counts: dict | None = None, best: dict | None = None, reason: str | None = None) -> None:
        """End the parent run with ``status``; a FAILED or KILLED parent carries ``failure_reason``
        (which jobs failed and why), like every gpdlm run that did not finish."""
        if self.client is None or self.parent_run_id is None:
            return
        from mlflow.entities import Metric, Param, RunTag

        ts = int(time.time() * 1000)
        metrics = [Metric(f"jobs_{k}", v, ts, 0) for k, v in (counts or {}).items()]
        params = []
        if best:
            metrics.append(Metric("best_value", float(best["best_value"]), ts, 0))
            params = [Param(f"best.{k}", str(v)) for k, v in best["best_params"].items()]
        tags = [RunTag("failure_reason", (reason or "stopped")[:5000])] if status != "FINISHED" else []
        if metrics or params or tags:
            self.client.log_batch(self.parent_run_id, metrics=metrics, params=params, tags=tags)
        if status != "FINISHED":
            try:
                close_dead_children(self.client, self.parent_run_id)
            except Exception:  # the store itself may be what failed; `gpdlm runs --stale` still finds them
                pass
        self.client.set_terminated(self.parent_run_id, status)
        self.parent_run_id = None
        if self in _ACTIVE:
            _ACTIVE.remove(self)


_ACTIVE: list[SweepCallback] = []

#: how long an interrupted sweep waits for its workers' processes to end before it closes their runs (s)
CHILDREN_WAIT_S = 5.0


def close_dead_children(client, parent_run_id: str, wait_s: float | None = None) -> int:
    """End KILLED the RUNNING child runs of an interrupted sweep whose process on this host is gone (a joblib
    worker killed with its sweep before its run could close: a Ctrl-C to `gpdlm reproduce ... hydra/launcher=joblib`
    left one RUNNING), waiting up to ``wait_s`` (``CHILDREN_WAIT_S``) for processes still ending; a child alive
    after it, or of another host, is left to its own handler (``gpdlm runs --stale`` lists it). How many closed."""
    from ..tracking.liveness import close_orphan, process_state

    experiment = client.get_run(parent_run_id).info.experiment_id
    children = client.search_runs(
        [experiment], f"tags.`mlflow.parentRunId` = '{parent_run_id}' and attributes.status = 'RUNNING'"
    )
    deadline = time.monotonic() + (CHILDREN_WAIT_S if wait_s is None else wait_s)
    closed = 0
    for run in children:
        if run.data.tags.get("gpdlm.pid") == str(os.getpid()):
            continue  # this process's own run: its handler closes it
        while process_state(run.data.tags) == "alive" and time.monotonic() < deadline:
            time.sleep(0.1)
        if process_state(run.data.tags) == "gone":
            close_orphan(client, run, "its sweep, interrupted")
            closed += 1
    return closed


def warm_data_cache(config) -> None:
    """Parse the sweep's dataset once, here, before the jobs start: parallel workers then all read
    the parsed-table cache instead of parsing the same file at the same time. Quietly nothing when
    it cannot load (each job reports its own data errors)."""
    try:
        from ..data import load_table

        d = config.dataset
        load_table(d.name, **{k: v for k, v in d.items() if k not in ("name", "split", "standardize_y")})
    except Exception:
        pass


def _optuna_best(sweep_dir) -> dict | None:
    """{'best_value', 'best_params'} from hydra-optuna-sweeper's ``optimization_results.yaml``."""
    path = Path(sweep_dir) / "optimization_results.yaml"
    if not path.exists():
        return None
    from omegaconf import OmegaConf

    res = OmegaConf.to_container(OmegaConf.load(path))
    if "best_value" not in res:
        return None
    return {"best_value": res["best_value"], "best_params": res.get("best_params") or {}}


def failure_reason(outcomes: list[dict]) -> str | None:
    """``3 of 4 jobs failed: job 1 [seed=-1]: <reason>; ...`` (None when every job finished)."""
    bad = [o for o in outcomes if o["status"] in ("failed", "killed")]
    if not bad:
        return None
    failed = sum(o["status"] == "failed" for o in bad)
    head = f"{failed} of {len(outcomes)} jobs failed" if failed else f"{len(bad)} of {len(outcomes)} jobs killed"
    return head + ": " + "; ".join(f"job {o['job']} [{' '.join(o['overrides'])}]: {o['reason']}" for o in bad)


def abort_active_sweeps(status: str = "KILLED", reason: str | None = None) -> None:
    """End parent runs still open (Ctrl-C during a sweep, an error in the launching process), so
    none is left RUNNING."""
    for cb in list(_ACTIVE):
        try:
            cb.end(status, reason=reason or ("interrupted" if status == "KILLED" else None))
        except Exception:  # the store itself may be what failed
            pass
