"""What a multirun will do, before it does it (issue 21, item 6): the jobs, the protocol, what is
shared, and -- for ``--dry-run`` -- the estimated wall time on this machine.

The job list is Hydra's basic sweeper's: the cartesian product of the preset's
``hydra.sweeper.params`` and the command line's sweep overrides. The estimate times a few
iterations of one job of every *shape* (model x training size x batch size) in this process and
multiplies by each job's iterations: a stage without a stopping rule its cap, one with a rule (the fast
protocol's L-BFGS stages, a paper stage's window rule) its expected iterations (``sweep.iterations``: from the
finished runs of its shape in the store the plan runs into, else probe runs of a few of its jobs to their rules,
else its cap -- an upper bound, and the dry run says which per shape). Jobs whose SVGP stage is shared count it
once per key.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass
class SweepPlan:
    jobs: list[list[str]]
    protocol: str
    share_stages: bool
    warm_start: bool
    launcher: str
    parallel: int
    per_shape: dict = field(
        default_factory=dict
    )  # shape -> [(stage, shareable, iterations, ms/iteration, L-BFGS, seconds)]
    estimate_s: float | None = None
    batched: bool = False  # sweep.batched
    batch_sizes: list[int] = field(default_factory=list)  # sweep.batched: the members of each batch (sweep.batched)
    separate: int = 0  # sweep.batched: jobs trained one by one (out of scope, or alone in their shape)
    timed_shapes: int = 0  # --dry-run: the job shapes timed (or reused from an earlier plan's probe)
    extrapolated: dict = field(default_factory=dict)  # shape -> stage rows scaled from a timed shape (budget spent)
    probe_s: float = 0.0  # seconds spent timing
    iterations: dict = field(
        default_factory=dict
    )  # timed shape -> its stages' expected iterations (iterations.Expected)
    iteration_s: float = 0.0  # seconds spent on the expected iterations (finished runs read, probe runs)
    records: tuple = ()  # run-records files whose FINISHED runs of a shape give its iterations (``plan(records=)``)
    done: tuple = ()  # run-records files whose FINISHED runs' jobs the sweep skips (``--done``, ``sweep.finished_from``)
    skip_finished: bool = False  # the sweep skips the jobs FINISHED in its store or ``done`` (``sweep.skip_finished``)
    finished: int = 0  # --dry-run: the jobs so skipped, left out of the estimate (``_skipped``)

    def batching(self) -> str:
        """``not batched``, or ``batched: K groups of B members`` (and how many jobs train separately)."""
        if not self.batched:
            return "not batched"
        if not self.batch_sizes:
            return f"batched: none ({self.separate} jobs trained separately)"
        lo, hi = min(self.batch_sizes), max(self.batch_sizes)
        k = len(self.batch_sizes)
        line = f"batched: {k} group{'s' if k > 1 else ''} of {lo if lo == hi else f'{lo}-{hi}'} members"
        return line + (f", {self.separate} jobs separately" if self.separate else "")

    def probe_note(self) -> str:
        """How many job shapes were timed, and that the others were extrapolated (the probe budget spent)."""
        n = self.timed_shapes + len(self.extrapolated)
        return (
            f"{self.timed_shapes} of {n} job shapes timed, the others scaled from the nearest timed shape "
            "of the same model"
        )

    def bound(self) -> str:
        """What the estimate is: ``an upper bound`` when every timed shape's stopping-rule stages are counted at
        their cap, ``expected`` when none is, else how many shapes are at their cap or partly (some jobs cut short
        by the probe budget)."""
        n = len(self.iterations)
        capped = sum(e.upper_bound for e in self.iterations.values())
        partial = sum(e.partial for e in self.iterations.values())
        if not self.iterations or capped == n:
            return "an upper bound"
        if capped == partial == 0:
            return "expected: no stage counted at a cap it may stop before"
        parts = [f"{capped} of {n} timed shapes at their cap"] if capped else []
        parts += [f"{partial} of {n} with jobs cut short at it"] if partial else []
        return f"expected; {' and '.join(parts)} (upper bounds there)"

    def summary(self) -> str:
        shared = "shared beta-free stages" if self.share_stages else "no shared stages"
        warm = ", warm-started beta paths" if self.warm_start else ""
        line = (
            f"gpdlm: sweep of {len(self.jobs)} jobs"
            + (f" ({self.finished} FINISHED in the store or run records: skipped)" if self.finished else "")
            + f", trainer.protocol={self.protocol}, {shared}{warm}, "
            f"launcher {self.launcher}" + (f" x{self.parallel}" if self.parallel > 1 else "") + f", {self.batching()}"
        )
        if self.estimate_s is not None:
            line += f"; estimated wall time on this machine: {_duration(self.estimate_s)} ({self.bound()})"
            if self.extrapolated:
                line += f" ({self.probe_note()})"
        return line


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def job_overrides(overrides: list[str]) -> tuple[list[list[str]], object]:
    """(the override list of every job, the composed config of the first job with Hydra's keys); composed
    once per ``compose.memoized_composes`` block."""
    from .compose import memoized

    return memoized("job_overrides", overrides, lambda: _job_overrides(overrides))


def _job_overrides(overrides: list[str]) -> tuple[list[list[str]], object]:
    from hydra import compose

    from .compose import config_module, overrides_parser

    with config_module():
        cmd = overrides_parser().parse_overrides([o for o in overrides if o != "-m"])
        first = [
            f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_discrete_sweep() else o.input_line
            for o in cmd
        ]
        cfg = compose(config_name="config", overrides=first, return_hydra_config=True)
    return sweep_jobs(overrides, cfg.hydra.sweeper.get("params")), cfg


def sweep_jobs(overrides: list[str], params) -> list[list[str]]:
    """The override list of every job of a basic sweep: the command line's ``overrides`` and the
    preset's ``hydra.sweeper.params`` (no config composed: safe inside a running Hydra app)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    from .compose import config_module, overrides_parser

    with config_module():  # the config loader expands glob(...) over a group's options
        parser = overrides_parser()
        cmd = parser.parse_overrides([o for o in overrides if o != "-m"])
        params = [f"{k}={v}" for k, v in (params or {}).items()]
        jobs = [list(j) for j in BasicSweeper.split_arguments(parser.parse_overrides(params) + cmd, None)[0]]
    from .beta_free import collapse_beta_free

    return collapse_beta_free(jobs)[0]  # gpdlm's sweeper launches a beta-free model once per configuration


def plan(
    overrides: list[str],
    *,
    estimate: bool = False,
    sample_iterations: int = 2,
    probe_budget_s: float | None = None,
    iteration_budget_s: float | None = None,
    store_uri: str | None = None,
    records: list | tuple = (),
    done: list | tuple = (),
    skip_finished: bool | None = None,
) -> SweepPlan:
    """The sweep of ``overrides`` (``gpdlm train -m``'s command line): its jobs, protocol, sharing, launcher,
    batching and, with ``estimate``, its wall time from probes of every job shape (``sample_iterations``: the
    least steps timed after a probe's first; ``probe_budget_s``: the
    probes' time budget, ``PROBE_BUDGET_S`` by default; the shapes left are extrapolated) and the expected
    iterations of their stages with a stopping rule (``_iteration_model``: the finished runs of the store at
    ``store_uri`` -- by default the jobs' ``tracking.uri`` -- and in the run-records files ``records`` and
    ``sweep.finished_from`` (``gpdlm export``: earlier parts or studies of the same shapes, any seeds or
    scale), else probe runs within ``iteration_budget_s``, ``ITERATION_BUDGET_S`` by default). With
    ``skip_finished`` (default: the config's ``sweep.skip_finished``) the jobs a FINISHED run of the store or of
    the run-records files ``done`` and ``sweep.finished_from`` holds are counted in ``finished``, not estimated
    (``_skipped``: a resumed study's dry run says what is left); ``done`` files give iterations as ``records``."""
    jobs, cfg = job_overrides(overrides)
    launcher = str(cfg.hydra.launcher.get("_target_", "basic")).rsplit(".", 1)[-1].replace("Launcher", "").lower()
    n_jobs = cfg.hydra.launcher.get("n_jobs") or 1
    p = SweepPlan(
        jobs,
        str(cfg.trainer.get("protocol", "paper")),
        bool(cfg.sweep.get("share_stages", True)),
        bool(cfg.sweep.get("warm_start", False)),
        launcher or "basic",
        int(n_jobs) if n_jobs > 0 else 1,
    )
    p.done = tuple(dict.fromkeys([*map(str, done), *map(str, cfg.sweep.get("finished_from") or [])]))
    p.records = tuple(dict.fromkeys([*map(str, records), *p.done]))
    p.skip_finished = bool(cfg.sweep.get("skip_finished", False) if skip_finished is None else skip_finished)
    if cfg.sweep.get("batched", False):
        p.batched = True
        p.batch_sizes, p.separate = batch_groups(jobs)
    if estimate:
        budgets = (
            PROBE_BUDGET_S if probe_budget_s is None else probe_budget_s,
            ITERATION_BUDGET_S if iteration_budget_s is None else iteration_budget_s,
        )
        p.estimate_s = _estimate(p, sample_iterations, budgets, store_uri)
    return p


def batch_groups(jobs: list[list[str]]) -> tuple[list[int], int]:
    """``sweep.batched``: (the member count of every batch, the number of jobs trained separately) --
    jobs grouped by ``sweep.batched.shape_key``; a job out of scope or alone in its shape is separate."""
    from .batched import out_of_scope, shape_key
    from .compose import compose_jobs

    shapes: dict[str, int] = {}
    separate = 0
    for cfg in compose_jobs(jobs):
        if out_of_scope(cfg) is not None:
            separate += 1
        else:
            key = shape_key(cfg)
            shapes[key] = shapes.get(key, 0) + 1
    sizes = [n for n in shapes.values() if n > 1]
    return sizes, separate + sum(n for n in shapes.values() if n == 1)


#: the probes' time budget per plan (seconds): job shapes left when it is spent are not timed but scaled from
#: the nearest timed shape of their model (``_extrapolate``); every model's first shape is timed whatever the budget
PROBE_BUDGET_S = 10.0
#: over the budget, a shape whose nearest timed shape would be scaled by more than this factor (the product of
#: its rows', scaled fields' and cap's factors, each either way: ``_scale``) is timed anyway, the farthest first, until ``EXTRA_PROBE_FACTOR`` x the budget is
#: spent: the first-order step model is no better than that (airline DLM, M = 200, batch 1000: bMC-1 -> bMC-100
#: steps 28.7 -> 28.9 ms, uPS-1 -> uPS-100 25.7 -> 41.0 ms; the model scales a step by the samples, 100x, and
#: `reproduce dlm --scale reduced` said 4.0 h for twelve airline jobs of ~6 min)
MAX_SCALE = 2.0
EXTRA_PROBE_FACTOR = 3.0
#: the wall time of a job outside its training steps (seconds): composing its config, its MLflow run, loading
#: its data from the parsed cache, its evaluations -- measured 0.6-1.0 s a job for the small GP-LSTM baselines
#: in one process (docs/reproduce.md, "How good are the estimates"); added once per job
JOB_OVERHEAD_S = 1.0
#: the job overrides that may change a job's shape (``_shape``): a config group's choice (``model=``,
#: ``dataset=``, ``trainer=``: a key without a dot) but ``NEUTRAL``'s, and these keys; jobs that differ only
#: in others (seed, mask, beta, learning rate, ...) are composed once (a paper's sweep: thousands of jobs,
#: a few dozen shapes), the first of them standing for all (its iteration cap, its probe)
NEUTRAL = ("seed", "threads", "progress", "device")
SHAPE_KEYS = (
    "dataset.name",
    "dataset.mode",
    "dataset.lag",
    "dataset.split.train_size",
    "trainer.batch_size",
    "model.name",
    "model.variant",
    "model.num_inducing",
    "model.network.units",
    "model.network.layers",
    "kernel.name",
    "kernel.num_features",
    "estimator.name",
    "estimator.num_samples",
)
_PROBES: dict = {}  # (shape, the config it was timed with) -> its stage rows: reused by later plans (reproduce)
_LOADED: dict = {}  # the data of the last probes' configs (``load_data``): reused by later probes
_LOADED_KEEP = 3
_LOAD_S = [0.0]  # seconds spent loading probes' data (``_load_data``): not charged to the probe budget


class Shape(NamedTuple):
    """What a job's cost depends on (``_shape``): its model (and variant) first, then its data and sizes.
    Jobs of one shape differ only in seed, mask, beta, learning rate and the like: one probe times them all."""

    model: str
    dataset: str
    train_size: int | None
    batch_size: int | None
    num_inducing: int | None
    estimator: str
    mode: str | None = None  # dataset.mode (the GP-LSTM presets' regression | autoregression | free_simulation)
    lag: int | None = None  # dataset.lag: the length of every training sequence
    units: int | None = None  # model.network.units
    kernel: str | None = None  # kernel.name
    num_features: int | None = None  # kernel.num_features (random features)
    samples: int | None = None  # estimator.num_samples
    epochs: bool = False  # the iteration cap is epochs x batches (trainer.max_epochs, no max_iters)


#: the fields of a shape a step's cost is taken to be proportional to (``_step_ratio``; with the rows per step --
#: the batch, else the training size -- where they grow): sequence length, width, inducing points, random
#: features, samples
SCALED = ("lag", "units", "num_inducing", "num_features", "samples")
#: the fields compared to find a timed shape's nearest neighbour (``_extrapolate``)
NEIGHBOUR_FIELDS = ("dataset", "mode", "lag", "units", "train_size", "batch_size", "num_inducing", "estimator")
NEIGHBOUR_FIELDS += ("kernel", "num_features", "samples")


def _estimate(p: SweepPlan, k: int, budgets: tuple = (PROBE_BUDGET_S, 0.0), store_uri: str | None = None) -> float:
    """The sweep's estimated seconds; the probes run at each job's torch threads, and the calling process's
    thread count is put back after (a test process or a reproduce that goes on to run the jobs)."""
    import torch

    threads = torch.get_num_threads()
    try:
        return _estimate_at_job_threads(p, k, budgets, store_uri)
    finally:
        torch.set_num_threads(threads)


def _estimate_at_job_threads(p: SweepPlan, k: int, budgets: tuple, store_uri: str | None = None) -> float:
    """Time one job of every shape (``_probe_order``; every anchor's first shape, then the others until
    ``budgets[0]`` seconds are spent, those left scaled from a timed one: ``_extrapolate``; a shape timed by an
    earlier plan with the same config is not timed again), count the stopping-rule stages of the timed shapes
    at their expected iterations (``_iteration_model``, within ``budgets[1]`` seconds), then add up every
    job's stages (``_total``)."""
    budget_s, iteration_budget_s = budgets
    jobs = _job_configs(p.jobs)
    if p.skip_finished:  # a resumed study: the jobs FINISHED in its store or run records are skipped
        jobs = _skipped(p, jobs, store_uri)
        if not jobs:
            return 0.0
    counts: dict[Shape, int] = {}
    first, members = {}, {}
    for job, cfg, _seed in jobs:
        shape = _shape(cfg)
        counts[shape] = counts.get(shape, 0) + 1
        first.setdefault(shape, cfg)
        members.setdefault(shape, []).append(job)
    t0, loaded0 = time.perf_counter(), _LOAD_S[0]

    def spent() -> float:  # the probes' seconds, their data's first load left out (a 2M-row table: ~12 s)
        return time.perf_counter() - t0 - (_LOAD_S[0] - loaded0)

    def timed(shape: Shape) -> list:
        key = (shape, _probe_key(first[shape], p.parallel))
        if key not in _PROBES:
            _PROBES[key] = _probe_shape(first[shape], k, p.parallel)
        return _PROBES[key]

    for shape in _probe_order(counts):
        if shape in p.per_shape:
            continue
        cached = (shape, _probe_key(first[shape], p.parallel)) in _PROBES
        anchored = any(_anchor(sh) == _anchor(shape) for sh in p.per_shape)
        if not cached and anchored and spent() >= budget_s:
            continue  # over the budget, and a shape of its anchor is timed: scaled from it below
        p.per_shape[shape] = timed(shape)
    while spent() < EXTRA_PROBE_FACTOR * budget_s:  # the shapes too far from a timed one, the farthest first
        far = [(_scale(sh, p.per_shape), repr(sh), sh) for sh in counts if sh not in p.per_shape]
        far = [t for t in far if t[0] > MAX_SCALE]
        if not far:
            break
        shape = max(far)[2]
        p.per_shape[shape] = timed(shape)
    p.timed_shapes, p.probe_s = len(p.per_shape), time.perf_counter() - t0
    t1 = time.perf_counter()
    _iteration_model(p, first, members, iteration_budget_s, store_uri)
    p.iteration_s = time.perf_counter() - t1
    sizes: dict = {}

    def n_train(shape: Shape) -> int | None:
        """The training rows of a shape whose size is the whole data set (its data loaded, not trained)."""
        if shape not in sizes:
            sizes[shape] = _n_train(first[shape])
        return sizes[shape]

    p.extrapolated = {sh: _extrapolate(sh, p.per_shape, n_train) for sh in counts if sh not in p.per_shape}
    return _total([(_shape(cfg), seed) for _job, cfg, seed in jobs], {**p.per_shape, **p.extrapolated}, p)


#: the expected iterations' time budget per plan (seconds): probe runs of the timed shapes to their stopping
#: rules (``iterations.observe``); a shape reached when it is spent, or a stage it cuts short, keeps its cap
ITERATION_BUDGET_S = 60.0
#: no probe run to the stopping rules on more training rows than this (a full-batch L-BFGS step on the 1.9M
#: airline rows: ~20 s): those shapes' stopping-rule stages keep their cap, unless the store has finished runs
OBSERVE_MAX_ROWS = 50_000
#: the jobs of a shape observed to their stopping rules, spread over its jobs (a beta grid's iterations vary
#: 10-1000 on pol, n = 500: large betas stop in tens of L-BFGS iterations, betas <= 1 at the cap)
OBSERVE_JOBS = 3
_OBSERVED: dict = {}  # (shape, the config observed) -> its iterations.Expected: reused by later plans


def _iteration_model(p: SweepPlan, first: dict, members: dict, budget_s: float, store_uri: str | None) -> None:
    """Count each timed shape's stages with a stopping rule at their expected iterations (``iterations``:
    from the finished runs of its shape in the store, else observed by probe runs of ``OBSERVE_JOBS`` of its
    jobs to their stopping rules within ``budget_s`` (``_observe_shapes``), else the cap), in ``p.iterations``
    and ``p.per_shape``'s rows. ``budget_s`` covers reading the store and preparing the jobs as well: a shape
    reached after it is spent, with no finished runs, is left at its cap without preparing anything."""
    from ..prepare import prepare
    from . import iterations as itm

    if not p.per_shape:
        return
    t0 = time.perf_counter()  # the budget covers reading the store and preparing the jobs too
    runs = _finished_runs(p, first, store_uri)
    pending: dict = {}  # shape -> (cache key, its picks' configs, its stage rules)
    for shape, rows in p.per_shape.items():
        jobs = members[shape]
        k = min(OBSERVE_JOBS, len(jobs))
        picks = [jobs[int((j + 0.5) * len(jobs) / k)] for j in range(k)]  # spread over its seeds and beta grid
        key = (shape, p.parallel, tuple(tuple(j) for j in picks), len(runs.get(shape, ())))
        expected = _OBSERVED.get(key)
        if expected is None and not runs.get(shape) and time.perf_counter() - t0 >= budget_s:
            expected = itm.Expected(itm.CAP, (), tuple(r[2] for r in rows))  # no time to look: not prepared
        if expected is None:
            cfgs = [_compose(j) for j in picks]
            rules = itm.stage_rules(prepare(_probe_config(cfgs[0]), load_data=_load_data))
            if len(rules) != len(rows):
                continue  # rows of another shape (a caller's table): left at their cap
            if not any(r.rule for r in rules):
                expected = itm.Expected(itm.NO_RULE, (), tuple(r.cap for r in rules))
            elif runs.get(shape):
                expected = itm.from_total(sum(runs[shape]) / len(runs[shape]), rules, len(runs[shape]))
            elif _n_train(cfgs[0]) > OBSERVE_MAX_ROWS:
                expected = itm.Expected(itm.CAP, (), tuple(r.cap for r in rules))
            else:
                pending[shape] = (key, cfgs, rules)
                continue
        p.iterations[shape] = expected
    for shape, expected in _observe_shapes(p, pending, members, budget_s - (time.perf_counter() - t0)).items():
        p.iterations[shape] = expected
        if expected.complete:
            _OBSERVED[pending[shape][0]] = expected
    for shape, expected in p.iterations.items():
        p.per_shape[shape] = itm.apply(p.per_shape[shape], expected)


def _observe_shapes(p: SweepPlan, pending: dict, members: dict, budget_s: float) -> dict:
    """The observed iterations of the ``pending`` shapes (shape -> (key, its picks' configs, its stage rules)):
    their picks trained to their stopping rules in rounds -- every shape's first pick (the shapes of the most
    jobs first, then the cheapest at their caps), then every shape's second, ... -- each within an equal share
    of what is left of ``budget_s`` (a pick cut short counts at the cap: the most a pick that long can take)."""
    from ..build import configure_threads
    from ..prepare import prepare
    from . import iterations as itm

    t0 = time.perf_counter()
    order = sorted(pending, key=lambda sh: (-len(members[sh]), sum(r[-1] for r in p.per_shape[sh])))
    observed: dict = {shape: [] for shape in pending}
    left_picks = sum(len(pending[sh][1]) for sh in pending)
    for r in range(OBSERVE_JOBS):
        for shape in order:
            cfgs = pending[shape][1]
            if r >= len(cfgs):
                continue
            share = (budget_s - (time.perf_counter() - t0)) / left_picks
            left_picks -= 1
            if share > 0:
                configure_threads(cfgs[r].get("threads", "auto"), p.parallel)  # as the job's (a timing probe reused)
                prepared = prepare(cfgs[r], load_data=_load_data)
                observed[shape].append(itm.observe(prepared, share, seed=int(cfgs[r].seed)))
    return {shape: itm.combine(observed[shape], pending[shape][2], len(pending[shape][1])) for shape in pending}


def _finished_runs(p: SweepPlan, first: dict, store_uri: str | None) -> dict:
    """Per timed shape, the ``iterations`` of the FINISHED runs of its shape in the store (``store_uri``, or
    the jobs' ``tracking.uri``; none with ``tracking.enabled=false`` or a store that does not exist yet) and
    in the run-records files ``p.records`` (each verified: a missing or changed file is an error)."""
    from . import iterations as itm

    cfg0 = first[next(iter(p.per_shape))]
    experiment = str(cfg0.tracking.experiment)
    keys = tuple(dict.fromkeys(itm.MATCH_KEYS + SHAPE_KEYS))
    wanted = {sh: itm.job_params(first[sh]) for sh in p.per_shape}
    found: dict = {sh: [] for sh in wanted}
    if p.records:
        for sh, its in itm.recorded_iterations(p.records, experiment, wanted, keys).items():
            found[sh].extend(its)
    store_uri, client = _store(cfg0, store_uri)
    if client is not None:
        for sh, its in itm.finished_iterations(client, experiment, wanted, keys, store_uri).items():
            found[sh].extend(its)
    return {sh: its for sh, its in found.items() if its}


def _store(cfg0, store_uri: str | None) -> tuple[str | None, object]:
    """(the store a plan reads: ``store_uri``, else the jobs' ``tracking.uri`` unless tracking is off; an MLflow
    client of it, None when it does not exist yet -- never created here -- or is remote)."""
    from ..tracking import resolve_tracking_uri
    from . import iterations as itm

    if store_uri is None and cfg0.tracking.get("enabled", True):
        store_uri = resolve_tracking_uri(cfg0.tracking.get("uri"))
    return store_uri, itm.store_client(store_uri) if store_uri is not None else None


def _compose(job: list[str]):
    """One job's config."""
    from hydra import compose

    from .compose import config_module

    with config_module():
        return compose(config_name="config", overrides=list(job))


def _total(jobs: list[tuple], rows_of: dict, p: SweepPlan) -> float:
    """The sweep's seconds from its jobs' (shape, seed) and every shape's stage rows: each job's stages (a
    shareable stage once per shape, seed and training size when ``p.share_stages``) plus ``JOB_OVERHEAD_S``,
    over the launcher's parallel jobs."""
    total, shared_seen = 0.0, set()
    for shape, seed in jobs:
        total += JOB_OVERHEAD_S
        for name, shareable, _cap, _ms, _, seconds in rows_of[shape]:
            key = (shape, name, seed, shape.train_size)
            if shareable and p.share_stages:
                if key in shared_seen:
                    continue
                shared_seen.add(key)
            total += seconds
    return total / max(1, p.parallel)


def _shape_override(o: str) -> bool:
    key = o.split("=", 1)[0].lstrip("+~")
    return key in SHAPE_KEYS or ("." not in key and key not in NEUTRAL)


def _anchor(shape: Shape) -> str:
    """The shapes one timed shape can be scaled to (``_extrapolate``): its model's."""
    return shape.model


def _probe_order(counts: dict[Shape, int]) -> list[Shape]:
    """The shapes in the order they are timed: every anchor's (``_anchor``: a model) most frequent shape first -- these are timed whatever the budget, so that every shape
    left untimed has a timed one to be scaled from -- then every anchor's second, ...; by job count within."""
    rank: dict[tuple, int] = {}
    order = []
    for sh in sorted(counts, key=lambda sh: -counts[sh]):
        rank[_anchor(sh)] = rank.get(_anchor(sh), -1) + 1
        order.append((rank[_anchor(sh)], -counts[sh], sh))
    return [sh for *_, sh in sorted(order, key=lambda t: t[:2])]


def _job_configs(jobs: list[list[str]]) -> list[tuple]:
    """(job, its config, its seed) of every job, composing once the jobs whose shape overrides
    (``_shape_override``) are the same."""
    from hydra import compose

    from .compose import config_module

    composed: dict[tuple, object] = {}
    out = []
    with config_module():
        for job in jobs:
            rest = tuple(o for o in job if _shape_override(o))
            if rest not in composed:
                composed[rest] = compose(config_name="config", overrides=list(job))
            cfg = composed[rest]
            seed = next((o.split("=", 1)[1] for o in job if o.split("=", 1)[0].lstrip("+") == "seed"), cfg.seed)
            out.append((job, cfg, str(seed)))
    return out


def _skipped(p: SweepPlan, jobs: list[tuple], store_uri: str | None) -> list[tuple]:
    """``_job_configs``' jobs less those with a FINISHED run in the store (``store_uri``, else the jobs'
    ``tracking.uri``; a store that does not exist is not created) or in the run-records files ``p.done`` (each
    verified), matched by config hash as ``sweep.skip_finished`` matches them; ``p.finished`` counts them."""
    finished = _finished_hashes(jobs[0][1], p.done, store_uri)
    if not finished:
        return jobs
    left = [j for j, hashes in zip(jobs, job_hashes(jobs)) if finished.isdisjoint(hashes)]
    p.finished = len(jobs) - len(left)
    return left


def _finished_hashes(cfg0, done, store_uri: str | None) -> set[str]:
    """The config hashes of the FINISHED runs of ``cfg0``'s experiment in the store (``store_uri``, else its
    ``tracking.uri``; never created here) and in the run-records files ``done`` that hold that experiment."""
    from ..tracking.records_file import finished_config_hashes, read_cached
    from . import iterations as itm

    experiment = str(cfg0.tracking.experiment)
    mine = [f for f in done if experiment in read_cached(f)[2].get("experiments", [])]
    finished = set(finished_config_hashes(mine, experiment)) if mine else set()
    store_uri, client = _store(cfg0, store_uri)
    if client is not None:
        finished |= itm.finished_config_hashes(client, experiment, store_uri)
    return finished


def finished_jobs(jobs: list[list[str]], done=()) -> list[bool]:
    """Whether each job of a ``gpdlm train`` multirun (its override list, as the sweeper launches it) has a
    FINISHED run of its configuration -- in its ``tracking.uri`` store or in the run-records files ``done``
    (``sweep.finished_from``) -- matched by config hash (``job_hashes``) as ``sweep.skip_finished`` matches it in
    the job: the jobs the sweeper leaves out before the launch (``hydra_plugins/gpdlm_sweeper``). ~10 ms a job
    and one composition per shape, where launching a job to skip itself costs ~0.7 s."""
    if not jobs:
        return []
    configs = _job_configs(jobs)
    hashes = None
    out = [False] * len(jobs)
    wheres = [_tracked_where(job, cfg) for job, cfg, _seed in configs]
    for where in dict.fromkeys(wheres):  # a sweep over experiments or stores: each job against its own
        first = next(cfg for (_job, cfg, _seed), w in zip(configs, wheres) if w == where)
        finished = _finished_hashes(_tracking_as(first, *where), [str(f) for f in done], None)
        if not finished:
            continue
        hashes = job_hashes(configs) if hashes is None else hashes
        for i, w in enumerate(wheres):
            out[i] = out[i] or (w == where and not finished.isdisjoint(hashes[i]))
    return out


def _tracked_where(job: list[str], cfg) -> tuple[str, str | None, bool]:
    """(experiment, store uri, tracking enabled) of a job: its own ``tracking.*`` overrides, else its shape's."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    mine = [o for o in job if o.lstrip("+").startswith("tracking.")]
    own = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(mine)} if mine else {}
    t = cfg.tracking
    uri = own.get("tracking.uri", t.get("uri"))
    return (
        str(own.get("tracking.experiment", t.experiment)),
        None if uri is None else str(uri),
        bool(own.get("tracking.enabled", t.get("enabled", True))),
    )


def _tracking_as(cfg, experiment: str, uri, enabled: bool):
    """A config whose ``tracking`` is ``cfg``'s with that experiment, store and switch (for ``_finished_hashes``)."""
    from omegaconf import OmegaConf

    t = OmegaConf.to_container(cfg.tracking, resolve=True)
    t.update(experiment=experiment, uri=uri, enabled=enabled)
    return OmegaConf.create({"tracking": t})


def job_hashes(jobs: list[tuple]) -> list[tuple[str, ...]]:
    """The config hashes (``tracking.identity.config_hashes``: every version) of ``_job_configs``' jobs, as
    ``sweep.skip_finished`` computes them in each job. A job's config is its shape's composed config with the
    job's own value overrides (seed, beta, ...) set in it (``_values``; ~10 ms a job, where composing it took
    ~0.3 s), the composed job's values put back after; per shape one other job is composed in full and must hash
    the same, else (or where the jobs do not set the same keys, or one sets more than a value) every job of that
    shape is composed."""
    from hydra import compose
    from omegaconf import OmegaConf, open_dict

    from ..tracking.identity import config_hashes
    from .compose import config_module

    by_cfg: dict[int, list[int]] = {}
    for i, (_job, cfg, _seed) in enumerate(jobs):
        by_cfg.setdefault(id(cfg), []).append(i)
    out: list = [None] * len(jobs)
    with config_module():
        for members in by_cfg.values():
            cfg = jobs[members[0]][1]
            values = [_values(jobs[i][0]) for i in members]
            keys = {tuple(k for k, _ in v) if v is not None else None for v in values}
            if len(keys) == 1 and None not in keys:
                with open_dict(cfg):
                    for i, v in zip(members, values):
                        for key, value in v:
                            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
                        out[i] = config_hashes(cfg)
                    for key, value in values[0]:  # the composed job's own values again (its probe reads them)
                        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
            check = members[1] if len(members) > 1 else None
            if out[members[0]] is None or (
                check is not None
                and out[check] != config_hashes(compose(config_name="config", overrides=jobs[check][0]))
            ):
                for i in members:
                    out[i] = config_hashes(compose(config_name="config", overrides=list(jobs[i][0])))
    return out


def _values(job: list[str]) -> list[tuple] | None:
    """``job``'s value overrides (those not of its shape: seed, beta, ...) as (key, value); None when one is not
    a plain ``key=value`` (a deletion, a package, a config group not in the shape)."""
    from .compose import overrides_parser

    values = []
    for text in job:
        if _shape_override(text):
            continue
        if text not in _PARSED:  # a sweep repeats its few seeds and betas over thousands of jobs
            (o,) = overrides_parser().parse_overrides([text])
            plain = not (o.is_delete() or o.package or "." not in o.key_or_group and o.key_or_group not in NEUTRAL)
            _PARSED[text] = (o.key_or_group, o.value()) if plain else None
        if _PARSED[text] is None:
            return None
        values.append(_PARSED[text])
    return values


_PARSED: dict = {}  # an override's text -> (key, value), None when it is not a plain value (``_values``)


def _shape(cfg) -> Shape:
    """What a job's step time and iteration cap depend on: model (and variant), data set and its mode and
    lag, training size, batch size, network width, inducing points, kernel and its random features, the
    gradient estimator and its samples, and whether its cap counts epochs."""
    est = cfg.get("estimator") or {}
    network = cfg.model.get("network") or {}
    kernel = cfg.get("kernel") or {}
    trainer = cfg.trainer
    return Shape(
        f"{cfg.model.name}" + (f"_{cfg.model.variant}" if cfg.model.get("variant") else ""),
        cfg.dataset.name,
        cfg.dataset.split.get("train_size"),
        trainer.batch_size,
        cfg.model.get("num_inducing"),
        f"{est.get('name', '')}" + (f"-{est.get('num_samples')}" if est.get("num_samples") is not None else ""),
        cfg.dataset.get("mode"),
        cfg.dataset.get("lag"),
        network.get("units"),
        kernel.get("name"),
        kernel.get("num_features"),
        est.get("num_samples"),
        trainer.get("max_iters") is None and trainer.get("max_epochs") is not None,
    )


def _probe_key(cfg, parallel: int) -> str:
    """The config a shape is timed with (all but its seed, mask, beta and learning rate) and the launcher's
    parallel jobs: a later plan's shape with the same key reuses the timing."""
    from omegaconf import OmegaConf

    keep = ("model", "kernel", "likelihood", "trainer", "estimator", "features", "dataset", "threads", "dtype")
    d = {k: OmegaConf.to_container(cfg, resolve=False).get(k) for k in keep}
    if isinstance(d.get("dataset"), dict):
        d["dataset"] = {**d["dataset"], "split": {**d["dataset"].get("split", {}), "mask": None}}
    return f"{parallel}|{OmegaConf.to_yaml(OmegaConf.create(d))}"


def _extrapolate(shape: Shape, timed: dict, n_train=None) -> list:
    """The stage rows of a shape that was not timed: those of the nearest timed shape of the same model (the
    same data set, the most fields of ``NEIGHBOUR_FIELDS`` equal, then the smallest size ratio), each stage's ms per step scaled
    by ``_step_ratio`` and its iteration cap by ``_cap_ratio`` (a shape on another data set of the whole data
    set's size: the training rows of both from ``n_train(shape)``). Without a timed shape of its model (every
    anchor's first shape is timed, so only when a caller passes such a table): the timed shape of the median
    job time, unscaled -- neither the slowest nor the fastest of the others."""
    ref = _nearest(shape, timed)
    if ref is None:
        by_cost = sorted(timed, key=lambda sh: (sum(r[-1] for r in timed[sh]), repr(sh)))
        return list(timed[by_cost[(len(by_cost) - 1) // 2]])
    rows = timed[ref]
    if ref.dataset != shape.dataset and n_train is not None and None in (shape.train_size, ref.train_size):
        # another data set of the whole-data size: its training rows, from its data (loaded, not trained)
        shape = shape._replace(train_size=shape.train_size or n_train(shape))
        ref = ref._replace(train_size=ref.train_size or n_train(ref))
    step, caps = _step_ratio(shape, ref), _cap_ratio(shape, ref)
    return [
        (name, shareable, max(1, round(cap * caps)), ms * step, lbfgs, seconds * step * caps)
        for name, shareable, cap, ms, lbfgs, seconds in rows
    ]


def _nearest(shape: Shape, timed) -> Shape | None:
    """The timed shape ``_extrapolate`` scales ``shape`` from: of the same model, on the same data set first,
    then with the most fields of ``NEIGHBOUR_FIELDS`` equal, then the smallest step ratio; None without one."""
    same = [sh for sh in timed if sh.model == shape.model]
    if not same:
        return None
    return min(
        same,
        key=lambda sh: (
            sh.dataset != shape.dataset,  # the same data first (its size, its steps)
            _differences(shape, sh),
            abs(math.log(_step_ratio(shape, sh))),
            repr(sh),
        ),
    )


def _scale(shape: Shape, timed) -> float:
    """How far ``_extrapolate`` reaches to scale ``shape`` from its nearest timed shape: the product of the
    factors, each at least 1 either way, between their rows a step, their ``SCALED`` fields and their caps (a
    step of fewer rows is *taken* to be as long, but that is the model's guess too); 1 without a timed shape of
    its model (nothing to scale; another data set's rows, not loaded here, count as the same)."""
    ref = _nearest(shape, timed)
    if ref is None:
        return 1.0
    pairs = [(_rows(shape), _rows(ref)), *((getattr(shape, f), getattr(ref, f)) for f in SCALED)]
    factor = _cap_ratio(shape, ref)
    factor = max(factor, 1 / factor)
    for a, b in pairs:
        r = _ratio(a, b)
        factor *= max(r, 1 / r)
    return factor


def _n_train(cfg) -> int | None:
    """A config's training rows: its data loaded (``_load_data``, as a probe would) and split, nothing trained."""
    return int(_load_data(cfg)[1].n_train)


def _differences(a: Shape, b: Shape) -> int:
    return sum(getattr(a, f) != getattr(b, f) for f in NEIGHBOUR_FIELDS)


def _rows(shape: Shape):
    """Rows per training step: the batch, else the training size (None: the whole data set, size unknown)."""
    return shape.batch_size or shape.train_size


def _ratio(a, b) -> float:
    """a / b for two positive sizes; 1 where either is unknown (None) or not a positive number."""
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return 1.0
    return a / b if a > 0 and b > 0 else 1.0


def _step_ratio(shape: Shape, ref: Shape) -> float:
    """How much longer a step of ``shape`` is taken to be than one of ``ref``: proportional to every field of
    ``SCALED`` (sequence length, width, inducing points, features, samples) -- a first-order model (a
    recurrent step is linear in its sequence length; a width or M enters squared in parts of a step, linearly
    where per-row work dominates) -- and to the rows per step where they grow; a step of fewer rows is taken
    to be as long (an upper bound: the fixed cost of a minibatch step does not shrink with its rows)."""
    r = max(1.0, _ratio(_rows(shape), _rows(ref)))  # fewer rows: no faster (a minibatch step's fixed cost)
    for f in SCALED:
        r *= _ratio(getattr(shape, f), getattr(ref, f))
    return r


def _cap_ratio(shape: Shape, ref: Shape) -> float:
    """How many more iterations ``shape``'s cap is than ``ref``'s: for caps in epochs (both), the ratio of
    batches per epoch (training size over batch size, where both are known); else 1 (the same max_iters)."""
    if not (shape.epochs and ref.epochs):
        return 1.0
    if shape.batch_size and ref.batch_size:
        return _ratio(shape.train_size, ref.train_size) * _ratio(ref.batch_size, shape.batch_size)
    return 1.0


def _load_data(cfg):
    """``build.load_data``, reusing the data of an earlier probe with the same data set, split and seed
    (the 2M-row airline table took ~12 s a probe)."""
    from omegaconf import OmegaConf

    from ..build import load_data

    key = OmegaConf.to_yaml(
        OmegaConf.create(
            {
                "dataset": OmegaConf.to_container(cfg.dataset),
                "seed": cfg.seed,
                "lik": cfg.likelihood.name,
                "device": str(cfg.device),
                "dtype": str(cfg.dtype),
            }
        )
    )
    if key not in _LOADED:
        while len(_LOADED) >= _LOADED_KEEP:
            _LOADED.pop(next(iter(_LOADED)))
        t0 = time.perf_counter()
        _LOADED[key] = load_data(cfg)
        _LOAD_S[0] += time.perf_counter() - t0
    return _LOADED[key]


def _probe_config(cfg):
    """The config a shape is timed with: what only its setup or its predictions need made cheap, its training
    step unchanged -- random initial inducing points instead of k-means (the same M points; k-means on
    200,000 airline rows took ~60 s a probe), and one prediction cell where k-means cells serve predictions
    only (sVBSSGP with random training blocks: ``train_partitions`` keeps their size; SSGP's
    ``predict=local``): 2,000 k-means cells of the airline rows took minutes a probe."""
    from omegaconf import OmegaConf, open_dict

    from ..methods import declaration

    m = cfg.model
    kmeans_init = m.get("inducing_init") == "kmeans"
    probe_overrides = declaration(m.name, "PROBE_MODEL_OVERRIDES")
    cell_overrides = probe_overrides(m) if probe_overrides is not None else {}
    if not (kmeans_init or cell_overrides):
        return cfg
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(cfg):
        if kmeans_init:
            cfg.model.inducing_init = "random"
        for key, value in cell_overrides.items():
            cfg.model[key] = value
    return cfg


def _probe_shape(cfg, k: int, parallel: int) -> list:
    """Time one job of a shape: per iterative stage (name, shareable, iteration cap, ms per iteration,
    fast L-BFGS, seconds) -- the cap times the ms, plus the fast protocol's first-order prefix."""
    from ..build import configure_threads
    from ..prepare import prepare
    from ..training import stage_settings
    from ..training.stages import first_order_prefix, stage_cap, uses_lbfgs

    # the job's own torch threads (``threads``, shared among the launcher's parallel jobs): timed at the
    # process default (every core) on a loaded machine, a minibatch step took ~13x longer
    configure_threads(cfg.get("threads", "auto"), parallel)
    prepared = prepare(_probe_config(cfg), load_data=_load_data)
    splits, data, settings = prepared.splits, prepared.data, prepared.settings
    quick = dataclasses.replace(
        settings,
        max_iters=2,
        max_epochs=None,
        eval_every=0,
        fast_adam_iters=0,
        eval_every_epochs=None,
        keep_best=None,
        stop_rule="none",
        progress=False,
    )
    rows = []
    for stage in prepared.method.stages:
        if stage.solve is not None:
            continue
        s = stage_settings(settings, stage, splits.n_train)
        cap = stage_cap(s, stage, splits.n_train)
        ms = _ms_per_iteration(stage, data, quick, k)
        seconds = cap * ms / 1000
        prefix = first_order_prefix(settings, stage, splits.n_train)
        if prefix is not None:  # the fast protocol's first-order start, at the paper optimiser's speed
            seconds += (
                prefix.max_iters
                * _ms_per_iteration(stage, data, dataclasses.replace(quick, protocol="paper"), k)
                / 1000
            )
        lbfgs = uses_lbfgs(stage, settings, splits.n_train) and s.protocol == "fast"
        rows.append((stage.name, bool(getattr(stage, "shareable", False)), cap, ms, lbfgs, seconds))
    return rows


def _ms_per_iteration(stage, data, q, k: int) -> float:
    """ms per iteration of ``stage``: the mean step of one ``run_stages`` call after its first step, timed
    step by step (``_StepClock``), so that what the call costs once is left out (building the stage's
    optimiser and state: ~0.2 s for an RKHS stage, whose minibatch step is ~3 ms -- timing a whole call of
    5 steps made it 40 ms, and a 100-epoch job's estimate 8-50x too long; ~4 s for a GP-LSTM theta stage
    of 30 ms steps). The call ends once at least ``k`` steps after the first took ``STEP_SPAN_S`` (a 1 s
    step: 2 steps after the first) or after ``MAX_PROBE_STEPS``; a first step over ``SLOW_STEP_S`` is timed
    alone."""
    from ..training import run_stages

    clock = _step_clock(data.x_train.device.type == "cuda", max(1, k))
    run_stages(
        [stage],
        data.x_train,
        data.y_train,
        dataclasses.replace(q, max_iters=MAX_PROBE_STEPS + 1),
        generator=_gen(),
        callbacks=[clock],
    )
    steps = [b - a for a, b in zip(clock.stamps[1:], clock.stamps[2:])]
    if not steps:  # a stage of one step, or a slow first step timed alone
        steps = [clock.stamps[-1] - clock.stamps[0]]
    return 1000 * sum(steps) / len(steps)


#: a probe call ends once its steps after the first took this long (s) ...
STEP_SPAN_S = 0.3
#: ... or after this many steps; a first step at least SLOW_STEP_S long ends it at once, and is the step time
#: (a full-batch L-BFGS step on the 1.9M airline rows: ~20 s)
MAX_PROBE_STEPS = 200
SLOW_STEP_S = 2.0


def _step_clock(sync: bool, min_steps: int):
    """A training-loop callback of the probes: the time at the start of each ``train`` call and after each
    of its steps (after a device sync on a GPU); it ends the call (``loop.converged``) once at least
    ``min_steps`` steps after the first took ``STEP_SPAN_S`` in all."""
    from ..training.callbacks import Callback

    class StepClock(Callback):
        stamps: list = []

        def on_train_start(self, loop) -> None:
            self.stamps = [time.perf_counter()]

        def on_step(self, loop) -> None:
            if sync:
                import torch

                torch.cuda.synchronize()
            self.stamps.append(time.perf_counter())
            if len(self.stamps) == 2 and self.stamps[1] - self.stamps[0] >= SLOW_STEP_S:
                loop.converged = True  # a first step this slow is the step (its first-call costs are small)
            elif len(self.stamps) - 2 >= min_steps and self.stamps[-1] - self.stamps[1] >= STEP_SPAN_S:
                loop.converged = True

    return StepClock()


def _gen():
    import torch

    return torch.Generator().manual_seed(0)


__all__ = ["SweepPlan", "batch_groups", "job_overrides", "plan", "sweep_jobs"]
