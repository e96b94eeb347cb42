"""``gpdlm reproduce PAPER``: the runs a paper's claims need, derived from its claims file, run resumably into
one store within a budget, and the report.

    gpdlm reproduce PAPER [--claims ID ...] [--scale smoke|reduced|paper] [--protocol paper|fast]
                    [--budget 3h] [--dry-run] [--no-estimate] [--format md|html|latex] [--output DIR]
                    [--tracking-uri URI] [--mirror DIR] [hydra overrides: hydra/launcher=joblib ...]

**The plan** (``derive``): every selected claim names a table; the table names its ``preset`` (the claim
may name its own), the claim its ``overrides`` (the paper's data set), the table its ``arms`` (further
override lists, or other presets). The scale maps each (``gpdlm_cli/claims/reproduce/scales.yaml``):
``smoke`` runs ``<preset>_smoke`` (the claims' own overrides dropped: the smoke presets pin a small offline
grid), ``reduced`` the paper's presets with fewer seeds and epochs, ``paper`` the presets as named. A table
whose select rule picks ``objective.beta`` and whose jobs do not sweep it gets the DLM paper's beta grid
(``gpdlm sweep beta``). Duplicate multiruns (claims sharing a table) are planned once. ``--dry-run`` prints
the plan: multiruns and jobs per table, the data each needs and whether it loads offline (a generator, the
cache or ``$GPDLM_DATA_MIRROR``), and the estimated wall time of the existing ``--dry-run`` estimator
(``sweep.plan``: timed sample steps of every job shape, times each job's iteration budget; only for data
that loads offline; the probes of a plan share ``PLAN_PROBE_S``, one stderr line per timed multirun).
Multiruns that run the same jobs (an override setting what the preset sets) are planned once. Before the
first job, the plan's data that is not cached is fetched (``--mirror DIR``: from a local mirror).

**The run**: every multirun is ``gpdlm train -m +experiment=PRESET ... sweep.skip_finished=true
+sweep.scale=SCALE`` into one store (``--output DIR/mlflow.db`` unless ``--tracking-uri``): rerunning an
interrupted reproduce trains only what is not FINISHED there, an interrupted job continuing from its
checkpoint (``run.resume``). A Hydra callback prints one line per ended job (``done/total``, the time left
estimated from the jobs trained so far: a resumed job is done, not trained) and logs the same to the
``reproduce`` MLflow parent run (metrics ``jobs_done``, ``jobs_left``, ``eta_s``; tag ``gpdlm.progress``).
``--budget`` stops cleanly before a job would start past it (the default launcher; with another launcher,
between multiruns) and says what is left. Other Hydra overrides (``hydra/launcher=joblib
hydra.launcher.n_jobs=2``) pass through to every multirun. At the end ``gpdlm report`` reads the store:
every table's scale, protocol and data come from the runs' own params and tags (``study.md``, written
next to the report), partial results give partial verdicts ("not measured"); the runs it read are exported
next to it (``runs.jsonl.gz``: ``gpdlm report --from`` rebuilds the same report from them).
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.claims import SCALES
from ..analysis.records import AnalysisError
from . import _cli

SCALES_FILE = Path(__file__).resolve().parents[1] / "claims" / "reproduce" / "scales.yaml"
PRESETS_DIR = Path(__file__).resolve().parents[1] / "conf" / "experiment"
PROTOCOLS = ("paper", "fast")
FORMATS = {"md": "report.md", "latex": "report.tex", "html": "report.html"}


# ----- the plan ---------------------------------------------------------------------------------------
@dataclass
class Multirun:
    """One ``gpdlm train -m`` of the plan: its overrides (``+experiment=PRESET`` first), the tables and
    claims it measures, and -- once expanded -- its jobs and experiment."""

    preset: str
    overrides: list[str]
    tables: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    beta_grid: bool = False
    command: str = "train"  # "bias" for tables of `gpdlm bias` runs (match: tags.gpdlm.command: bias)
    argvs: list[list[str]] = field(default_factory=list)  # the multiruns launched (one per beta grid)
    jobs: int | None = None
    experiment: str = ""
    datasets: dict = field(default_factory=dict)  # dataset name -> offline status
    estimate_s: float | None = None
    note: str = ""
    upper_bound: bool = True  # the estimate counts every stopping-rule stage at its cap (sweep.plan.SweepPlan.bound)
    job_lists: list[list[str]] = field(default_factory=list)  # every job's overrides (``+experiment=`` too)
    argv_jobs: list[int] = field(default_factory=list)  # the jobs of each of ``argvs``, in ``job_lists``' order
    repeats: int = 0  # jobs an earlier multirun of the plan trains too (``count_repeats``): skipped as FINISHED
    argv_repeats: list[int] = field(default_factory=list)  # ``repeats`` per launched multirun (``argvs``)
    finished: int = 0  # --dry-run: jobs FINISHED in the store or the --done files (skipped when run; not estimated)

    @property
    def key(self) -> tuple:
        return (self.preset, tuple(self.overrides))


@dataclass
class Plan:
    paper: str
    scale: str
    protocol: str
    multiruns: list[Multirun]
    left_out: list[tuple[str, str]]  # (table or claim, why)
    bases: dict = field(default_factory=dict, repr=False)  # preset -> its composed config (``preset_base``)

    @property
    def jobs(self) -> int:
        return sum(m.jobs or 0 for m in self.multiruns)

    @property
    def repeats(self) -> int:
        return sum(m.repeats for m in self.multiruns)

    @property
    def finished(self) -> int:
        return sum(m.finished for m in self.multiruns)


def load_scales() -> dict:
    import yaml

    return yaml.safe_load(SCALES_FILE.read_text())


def parse_budget(text: str | None) -> float | None:
    """'3h', '90m', '1h30m', '45s', '2.5h' -> seconds (None: no budget)."""
    if text is None:
        return None
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", text.strip().lower())
    if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s", "", text.strip().lower()):
        raise AnalysisError(f"--budget {text!r}: give a duration like 3h, 90m, 1h30m or 45s")
    seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    if seconds <= 0:
        raise AnalysisError(f"--budget {text!r}: must be positive")
    return seconds


def derive(paper, claim_ids: list[str], scale: str, protocol: str, extra: list[str] | None = None) -> Plan:
    """The multiruns that the selected claims of ``paper`` (a loaded ``claims.Paper``) need at ``scale``,
    with ``protocol`` and the ``extra`` Hydra overrides (launcher, ...): not yet expanded into jobs."""
    scales = load_scales()
    if scale not in scales:
        raise AnalysisError(f"--scale {scale}: choose from {', '.join(scales)}")
    sc = scales[scale]
    known = [c.id for c in paper.claims]
    for cid in claim_ids:
        if cid not in known:
            raise AnalysisError(f"--claims {cid}: no such claim in {paper.name}; claims: {', '.join(known)}")
    chosen = [c for c in paper.claims if not claim_ids or c.id in claim_ids]
    per_paper = sc.get("overrides") or {}
    common = list(per_paper.get(paper.name, per_paper.get("default", [])))
    common += [f"trainer.protocol={protocol}"] if protocol != "paper" else []
    multiruns: dict[tuple, Multirun] = {}
    left_out: list[tuple[str, str]] = []
    for claim in chosen:
        table = paper.tables[claim.table]
        if table.unavailable:
            left_out.append((f"{claim.id} ({table.id})", table.unavailable))
            continue
        preset = claim.preset or table.preset
        if not preset:
            left_out.append((f"{claim.id} ({table.id})", "the table names no preset"))
            continue
        drop = tuple(sc.get("drop") or ())

        def keep(o: str, drop: tuple = drop) -> bool:
            key = o.split("=", 1)[0].lstrip("+~")
            return not any(key == d or key.startswith(d + ".") for d in drop)

        own = [o for o in [*table.overrides, *(claim.overrides if sc.get("claim_overrides", True) else [])] if keep(o)]
        claim_arms = table.arms if claim.arms is None else claim.arms
        arms = [[]] + [[o for o in a if keep(o) or o.startswith("+experiment=")] for a in claim_arms]
        grid = "objective.beta" in table.select_over and sc.get("beta_grid", True)
        if grid:  # a method the beta grid never trains (the ELBO: SVGP at beta = 1): its own multirun
            arms += pinned_arms(table, preset, own, arms)
        for arm in arms:
            base = preset
            if arm and arm[0].startswith("+experiment="):
                base, arm = arm[0].split("=", 1)[1], arm[1:]
            name = (sc.get("presets") or {}).get(base) or str(sc["preset"]).format(preset=base)
            if not (PRESETS_DIR / f"{name}.yaml").is_file():
                left_out.append((f"{claim.id} ({table.id})", f"no {scale} preset {name} for {base}"))
                continue
            overrides = merge_overrides(own, arm, common, extra or [])
            m = multiruns.setdefault((name, tuple(overrides)), Multirun(name, overrides))
            m.tables = list(dict.fromkeys([*m.tables, table.id]))
            m.claims = list(dict.fromkeys([*m.claims, claim.id]))
            m.beta_grid = m.beta_grid or grid  # (a pinned method's multirun sets objective.beta: no grid)
            if table.match.get("tags.gpdlm.command") == "bias":
                m.command = "bias"
    return Plan(paper.name, scale, protocol, list(multiruns.values()), list(dict.fromkeys(left_out)))


def merge_equivalent(plan: Plan) -> None:
    """Plan once the multiruns that run the same jobs though their overrides differ: an override that sets
    what the preset already sets (``sampling_methods dataset=airline``: the preset's data is airline) is
    no override, and a claim naming it shares the multirun of a table naming none (Fig. 10's sampling
    and time tables). The first multirun stays, with every table and claim of the others."""
    merged: dict[tuple, Multirun] = {}
    for m in plan.multiruns:
        own = tuple(sorted(o for o in m.overrides if not preset_sets(preset_base(plan, m.preset), o)))
        first = merged.setdefault((m.command, m.preset, m.beta_grid, own), m)
        if first is not m:
            first.tables = list(dict.fromkeys([*first.tables, *m.tables]))
            first.claims = list(dict.fromkeys([*first.claims, *m.claims]))
    plan.multiruns = list(merged.values())


def count_repeats(plan: Plan) -> None:
    """Each multirun's ``repeats``: its jobs that an earlier multirun of the plan trains too, once each job is
    written without the overrides its preset already sets (``preset_sets``). D5-error's generators
    (``classification dataset=ringnorm,twonorm,banana``) are D4's ringnorm, twonorm and banana jobs again: the
    store skips them as FINISHED (``sweep.skip_finished``), so they cost no training and are not estimated."""
    sets: dict[tuple, bool] = {}

    def own(preset: str, o: str) -> bool:
        if (preset, o) not in sets:
            sets[(preset, o)] = not preset_sets(preset_base(plan, preset), o)
        return sets[(preset, o)]

    seen: set[tuple] = set()
    for m in plan.multiruns:
        keys = [(m.command, m.preset, frozenset(o for o in job if own(m.preset, o))) for job in m.job_lists]
        mine = set(keys)
        m.repeats = len(mine & seen) if m.jobs is not None and len(mine) == m.jobs else 0
        m.argv_repeats = []
        if m.repeats and len(m.argv_jobs) == len(m.argvs) and sum(m.argv_jobs) == len(keys):
            start = 0  # the repeats of each beta grid: counted off as its multirun launches (``_launch``)
            for n in m.argv_jobs:
                m.argv_repeats.append(sum(k in seen for k in keys[start : start + n]))
                start += n
        seen |= mine


def preset_base(plan: Plan, preset: str):
    """The preset's composed config with Hydra's keys (its first job), composed once per plan."""
    from ..sweep.plan import job_overrides

    if preset not in plan.bases:
        plan.bases[preset] = job_overrides([f"+experiment={preset}"])[1]
    return plan.bases[preset]


def preset_sets(base, override: str) -> bool:
    """Whether the preset's composed config ``base`` (with Hydra's keys) already has ``override``
    (``key=value``, not swept by the preset): a config group's choice or a scalar of the same value."""
    import yaml
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if override.startswith(("+", "~")) or "=" not in override:
        return False
    key, value = override.split("=", 1)
    if key in (base.hydra.sweeper.get("params") or {}):
        return False  # the override replaces the preset's sweep
    choices = base.hydra.runtime.choices
    if key in choices:
        return str(choices[key]) == value
    have = OmegaConf.select(base, key, default=None)
    if have is None or isinstance(have, (DictConfig, ListConfig)):
        return False
    try:
        wanted = yaml.safe_load(value)
    except yaml.YAMLError:
        return False
    return type(wanted) is type(have) and wanted == have


MODEL_CONFIGS = Path(__file__).resolve().parents[1] / "conf" / "model"


def pinned_methods(table) -> list[list[str]]:
    """The overrides of each method label of ``table`` that pins a key the table selects over (the DLM
    paper's ELBO, ``{model.name: svgp, objective.beta: 1}``, in tables that select beta on validation): the
    beta grid of a training size (n, n/2, ..., 0.01) never holds beta = 1, so the label's runs need a multirun
    of their own -- the preset's jobs with the label's model and beta. ``model.name: X`` becomes ``model=X``
    (the model's config group option); a label that pins something no override can set (a tag) has none."""
    out = []
    for dim in table.method_dims:
        d = table.dimensions.get(dim)
        for label in (d.labels or []) if d is not None else []:
            if label.quoted or not any(k in table.select_over for k in label.match):
                continue
            pin = []
            for key, value in label.match.items():
                if key == "model.name" and (MODEL_CONFIGS / f"{value}.yaml").is_file():
                    pin.append(f"model={value}")
                elif key.startswith(("tags.", "params.")):
                    break
                else:
                    pin.append(f"{key}={value}")
            else:
                out.append(pin)
    return out


def pinned_arms(table, preset: str, own: list[str], arms: list[list[str]]) -> list[list[str]]:
    """Each arm with each ``pinned_methods`` label's overrides, where the arm's preset (its ``+experiment=``,
    else ``preset``) trains the label's model over the grid: beside the DLM presets, not the FITC/SGPR
    baselines'."""
    out, pins = [], pinned_methods(table)
    for arm in arms:
        base = arm[0].split("=", 1)[1] if arm and arm[0].startswith("+experiment=") else preset
        for pin in pins:
            model = next((o.split("=", 1)[1] for o in pin if o.startswith("model=")), None)
            if model in swept_models(base, [*own, *arm]):
                out.append([*arm, *pin])
    return out


def swept_models(preset: str, overrides: list[str]) -> list[str]:
    """The ``model`` options the jobs of ``+experiment=PRESET OVERRIDES`` train: a ``model=`` override, else
    the preset's ``hydra.sweeper.params.model`` (or its ``model`` default), looked up through the presets
    it extends (their ``defaults``), read from the files without composing."""
    import yaml

    for o in reversed(overrides):
        if o.startswith("model="):
            return o.split("=", 1)[1].split(",")
    path = PRESETS_DIR / f"{preset}.yaml"
    if not path.is_file():
        return []
    raw = yaml.safe_load(path.read_text()) or {}
    params = ((raw.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    if "model" in params:
        return [m.strip() for m in str(params["model"]).split(",")]
    defaults = raw.get("defaults") or []
    for d in defaults:  # its own model choice before its parents'
        if isinstance(d, dict) and isinstance(d.get("override /model"), str):
            return [d["override /model"]]
    for d in defaults:
        if isinstance(d, str) and (PRESETS_DIR / f"{d}.yaml").is_file():
            return swept_models(d, [])
    return []


def merge_overrides(*lists: list[str]) -> list[str]:
    """The override lists in order, a later ``key=value`` replacing an earlier one of the same key (an arm's
    ``kernel=rbf`` replaces the table's ``kernel=rff``), in the place of the first."""
    out: dict[str, str] = {}
    for o in (o for lst in lists for o in lst):
        out[o.split("=", 1)[0]] = o
    return list(out.values())


DATASET_CONFIGS = Path(__file__).resolve().parents[1] / "conf" / "dataset"


def dataset_name(option: str) -> str:
    """The registry name of the dataset config ``option`` (``dataset=OPTION``): a config may name another
    set with its own options (``airline_nyc_class``: ``airline_nyc`` with ``target: delayed``; ``airline_reg``:
    ``airline``); ``option`` itself when no such config file exists."""
    import yaml

    path = DATASET_CONFIGS / f"{option}.yaml"
    if not path.is_file():
        return option
    raw = yaml.safe_load(path.read_text()) or {}
    if isinstance(raw.get("dataset"), dict):  # a ``# @package _global_`` config: its keys under ``dataset:``
        raw = raw["dataset"]
    return str(raw.get("name") or option)


def data_label(option: str) -> str:
    """``option``, with its registry name when it differs (``airline_nyc_class (airline_nyc)``)."""
    name = dataset_name(option)
    return option if name == option else f"{option} ({name})"


def data_status(name: str) -> str:
    """Whether dataset ``name`` loads without a network: ``generator``/``package``, ``cached``, ``mirror``
    (``$GPDLM_DATA_MIRROR`` holds every file), else ``download`` (or ``user file``)."""
    from ..data import get_dataset_info
    from ..data.download import file_path, mirror_path, resolve_mirror
    from ..exceptions import GpdlmError

    try:
        info = get_dataset_info(name)
    except GpdlmError:
        return "unknown dataset"
    if info.source_kind in ("package", "generator"):
        return f"offline ({info.source_kind})"
    if info.files and all(file_path(info.name, f).exists() for f in info.files):
        return "offline (cached)"
    try:
        mirror = resolve_mirror()
    except GpdlmError:
        mirror = None
    if mirror and info.files and all(f.url and mirror_path(mirror, f.url).exists() for f in info.files):
        return "offline (mirror)"
    return "download" if info.source_kind == "download" else "user file"


def offline(status: str) -> bool:
    return status.startswith("offline")


def use_mirror(folder: str) -> None:
    """``--mirror DIR``: the data mirror of this process and the jobs it starts (``$GPDLM_DATA_MIRROR``); a
    folder that does not exist is a one-line error."""
    import os

    from ..data.download import resolve_mirror
    from ..data.paths import ENV_MIRROR
    from ..exceptions import GpdlmError

    try:
        os.environ[ENV_MIRROR] = str(resolve_mirror(folder))
    except GpdlmError as e:
        raise AnalysisError(str(e)) from None


def to_fetch(plan: Plan) -> dict[str, list[str]]:
    """The registry names of the plan's data sets that are not in the cache, by status: ``offline (mirror)``
    (copied from the mirror before the run) and ``download``."""
    out: dict[str, list[str]] = {}
    for m in plan.multiruns:
        for option, status in m.datasets.items():
            if status in ("offline (mirror)", "download"):
                names = out.setdefault(status, [])
                if dataset_name(option) not in names:
                    names.append(dataset_name(option))
    return out


def fetch_command(names: list[str]) -> str:
    return f"gpdlm datasets fetch {' '.join(names)}"


def fetch_data(plan: Plan) -> None:
    """Before any job: the plan's data that is not cached is fetched into the cache (``gpdlm datasets fetch``:
    from the mirror, else the network), so that no job fails on its data half-way through a reproduce; data
    that cannot be fetched is a one-line error naming the command that fetches it."""
    from .datasets import main as datasets_main

    todo = to_fetch(plan)
    names = [n for status in ("offline (mirror)", "download") for n in todo.get(status, [])]
    if not names:
        return
    print(f"gpdlm reproduce: fetching {', '.join(names)} into the data cache first", file=sys.stderr, flush=True)
    if datasets_main(["fetch", *names], out=sys.stderr) != 0:
        raise AnalysisError(
            f"the plan's data could not be fetched ({', '.join(names)}): run `{fetch_command(names)}` "
            "(with --mirror DIR to copy it from a local mirror), or give gpdlm reproduce --mirror DIR"
        )


#: ``--dry-run``: the probes' time budget of a whole plan (seconds), shared among its multiruns with offline
#: data (at least ``MIN_PROBE_S`` each; a multirun's first job shape is always timed)
PLAN_PROBE_S = 40.0
MIN_PROBE_S = 2.0


def expand(
    plan: Plan,
    estimate: bool = False,
    store_uri: str | None = None,
    records: list | tuple = (),
    done: list | tuple = (),
) -> None:
    """Fill in every multirun's jobs (the beta grids expanded), experiment, data and -- with ``estimate``,
    for data that loads offline -- the ``sweep.plan`` estimate of its wall time (its stopping rules'
    iterations from the finished runs of the store at ``store_uri``, the one the plan runs into, and of the
    run-records files ``records`` and ``done``, where they hold runs of its shapes) less the jobs FINISHED in
    that store or in the ``done`` files (``--done``: the run skips them too; counted in ``finished``), one
    progress line per timed multirun on stderr."""
    from ..sweep.compose import memoized_composes

    with memoized_composes():  # a preset's first job is composed once, not up to three times
        merge_equivalent(plan)
        for m in plan.multiruns:
            _expand_jobs(m)
    count_repeats(plan)
    if not estimate:
        return
    timed = [
        m
        for m in plan.multiruns
        if any(offline(st) for st in m.datasets.values()) and not (m.jobs and m.repeats == m.jobs)
    ]
    budget = max(MIN_PROBE_S, PLAN_PROBE_S / max(1, len(timed)))
    for m in plan.multiruns:
        if m.jobs and m.repeats == m.jobs:
            m.estimate_s = 0.0  # every job is an earlier multirun's: skipped as FINISHED
            continue
        if m not in timed:
            m.note = (m.note + "; " if m.note else "") + "no estimate: data not offline"
            continue
        t0 = time.perf_counter()
        _estimate(m, budget, store_uri, records, done)
        if m.repeats and m.estimate_s is not None:  # the repeats are skipped: the others' share of the time
            m.estimate_s *= max(0, m.jobs - m.repeats - m.finished) / max(1, m.jobs - m.finished)
        print(
            f"gpdlm reproduce: timed multirun {timed.index(m) + 1}/{len(timed)} (+experiment={m.preset} "
            f"{' '.join(m.overrides)}".rstrip()
            + f"): {'estimated ' + duration(m.estimate_s) if m.estimate_s is not None else 'no estimate'} "
            f"({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )


def _expand_jobs(m: Multirun) -> None:
    """A multirun's jobs (its beta grids expanded: each training size's own multirun), experiment and data."""
    from ..sweep.beta_free import beta_free_options
    from ..sweep.plan import job_overrides, sweep_jobs
    from .sweep import beta_grid, sweep_overrides

    argv = [f"+experiment={m.preset}", *m.overrides]
    try:
        jobs, cfg = job_overrides(argv)
    except Exception as e:  # a bad override or preset: one line
        raise AnalysisError(f"{m.preset} {' '.join(m.overrides)}: {str(e).strip().splitlines()[0]}") from None
    m.experiment = str(cfg.tracking.experiment)
    names = {o.split("=", 1)[1] for j in jobs for o in j if o.startswith("dataset=")} or {
        str(cfg.hydra.runtime.choices.get("dataset") or cfg.dataset.name)
    }
    m.datasets = {n: data_status(dataset_name(n)) for n in sorted(names)}  # n: the dataset= option
    sweeps_beta = any(o.startswith("objective.beta=") for j in jobs for o in j)
    m.beta_grid = m.beta_grid and not sweeps_beta
    if not m.beta_grid:
        m.argvs, m.jobs, m.job_lists = [argv], len(jobs), [list(j) for j in jobs]
        m.argv_jobs = [m.jobs]
    elif all(offline(s) for s in m.datasets.values()):
        m.argvs = [[a for a in args if a not in ("-m", "--multirun")] for args in sweep_overrides("beta", argv)]
        # each argv is ``argv`` with a beta list and its data pins (dataset=, dataset.*): the same preset, so
        # the same sweeper params as the first job composed above (only presets set them) -- counted
        # without composing each argv again (~0.3 s each; 88 of them in `reproduce dlm`)
        params = cfg.hydra.sweeper.get("params")
        grids = [sweep_jobs(a, params) for a in m.argvs]
        m.job_lists = [list(j) for g in grids for j in g]
        m.jobs, m.argv_jobs = len(m.job_lists), [len(g) for g in grids]
    else:  # the grid's length from each job's training size (the data itself is not here)
        grid_min, factor = float(cfg.sweep.grid_min), float(cfg.sweep.factor)
        sizes = [
            next(
                (o.split("=", 1)[1] for o in j if o.startswith("dataset.split.train_size=")),
                cfg.dataset.split.get("train_size"),
            )
            for j in jobs
        ]
        if any(s in (None, "null") for s in sizes):
            m.jobs, m.note = None, "beta grid: needs the data's size (not offline)"
        else:  # a model that ignores beta runs once per configuration (sweep.beta_free), as when launched
            free, default = beta_free_options(), str(cfg.hydra.runtime.choices.get("model"))
            models = [
                next((o.split("=", 1)[1] for o in j if o.split("=", 1)[0].lstrip("+~") == "model"), default)
                for j in jobs
            ]
            m.jobs = sum(
                1 if model in free else len(beta_grid(int(float(s)), grid_min, factor))
                for model, s in zip(models, sizes)
            )
        m.argvs = [["gpdlm sweep beta", *argv]]


def _estimate(
    m: Multirun, budget_s: float, store_uri: str | None = None, records: list | tuple = (), done: list | tuple = ()
) -> None:
    """``m.estimate_s``: the ``sweep.plan`` estimate of the jobs on its offline data (the others counted, not
    timed; a beta grid of data not offline: none), its timing probes within ``budget_s`` seconds and its
    probe runs to the stopping rules within as many again (the finished runs in ``store_uri`` and in the
    run-records files ``records`` first); the note says how many shapes' iterations were observed, taken
    from finished runs or left at their cap."""
    from ..sweep.plan import plan as sweep_plan

    here = [n for n, st in m.datasets.items() if offline(st)]
    all_offline = len(here) == len(m.datasets)
    if m.beta_grid and not all_offline:
        m.note = (m.note + "; " if m.note else "") + "no estimate: data not offline"
        return
    pins = [] if all_offline else [f"dataset={','.join(here)}"]
    notes = []
    try:
        share = budget_s / len(m.argvs)
        plans = [
            sweep_plan(
                merge_overrides(a, pins),
                estimate=True,
                probe_budget_s=share,
                iteration_budget_s=share,
                store_uri=store_uri,
                records=records,
                done=done,
                skip_finished=True,
            )
            for a in m.argvs
        ]
        m.estimate_s = sum(p.estimate_s or 0.0 for p in plans)
        m.finished = sum(getattr(p, "finished", 0) for p in plans)
        timed, extrapolated = sum(p.timed_shapes for p in plans), sum(len(p.extrapolated) for p in plans)
        if extrapolated:
            notes.append(f"{timed} of {timed + extrapolated} job shapes timed, the others scaled from a timed shape")
        expected = [e for p in plans for e in getattr(p, "iterations", {}).values()]
        if expected:
            notes.append(_iteration_note(expected))
        m.upper_bound = all(e.upper_bound for e in expected)
    except Exception as e:  # noqa: BLE001 -- the estimate is advisory (a GpdlmError, a failing step)
        notes.append(f"no estimate ({str(e).strip().splitlines()[0][:80]})")
    if pins and m.estimate_s is not None:
        notes.append(
            f"estimate for {', '.join(here)} only: the jobs on {len(m.datasets) - len(here)} "
            "other data sets not offline"
        )
    m.note = "; ".join([m.note, *notes] if m.note else notes)


def _iteration_note(expected: list) -> str:
    """How the timed shapes' stopping-rule iterations were counted (``sweep.iterations.Expected``)."""
    from ..sweep.iterations import NO_RULE

    kinds = {
        "observed": sum(e.complete and e.source.startswith("observed") for e in expected),
        "from finished runs": sum(e.source.startswith("from ") for e in expected),
        "observed with jobs cut short at their cap": sum(e.partial for e in expected),
        "at their cap (upper bound)": sum(e.upper_bound for e in expected),
        "without a stopping rule (their budget)": sum(e.source == NO_RULE for e in expected),
    }
    return "iterations: " + ", ".join(f"{n} shapes {k}" for k, n in kinds.items() if n)


def duration(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "?"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def describe(plan: Plan) -> str:
    """The plan as text (``--dry-run``): per multirun its tables, jobs, data and estimate; per table the
    job count; what was left out and why; the totals."""
    out = [
        f"gpdlm reproduce {plan.paper}: scale {plan.scale}, protocol {plan.protocol}, "
        f"{len(plan.multiruns)} multiruns, {plan.jobs} jobs"
        + ("" if all(m.jobs is not None for m in plan.multiruns) else " (+ jobs of unknown count)")
    ]
    per_table: dict[str, int] = {}
    for i, m in enumerate(plan.multiruns, 1):
        data = ", ".join(f"{data_label(n)} [{s}]" for n, s in m.datasets.items())
        est = f", estimated {duration(m.estimate_s)}" if m.estimate_s is not None else ""
        grid = ", beta grid per training size" if m.beta_grid else ""
        out.append(f"  {i}. gpdlm {m.command} -m +experiment={m.preset} {' '.join(m.overrides)}".rstrip())
        again = f" ({m.repeats} of them an earlier multirun's: skipped as FINISHED)" if m.repeats else ""
        if m.finished:
            again += f" ({m.finished} FINISHED in the store or the --done files: skipped)"
        out.append(
            f"     tables {', '.join(m.tables)}; claims {', '.join(m.claims)}; "
            f"{m.jobs if m.jobs is not None else '?'} jobs{again}{grid} -> experiment {m.experiment}; "
            f"data {data}{est}" + (f"; {m.note}" if m.note else "")
        )
        for t in m.tables:
            per_table[t] = per_table.get(t, 0) + (m.jobs or 0)
    out.append(
        "jobs per table (a multirun shared by tables counts for each): "
        + ", ".join(f"{t} {n}" for t, n in per_table.items())
    )
    if plan.repeats or plan.finished:
        why = [f"{plan.repeats} jobs are in two multiruns; the second skips them as FINISHED"] if plan.repeats else []
        why += [f"{plan.finished} are FINISHED in the store or the --done files"] if plan.finished else []
        out.append(
            f"jobs to train: {max(0, plan.jobs - plan.repeats - plan.finished)} ({'; '.join(why)}; "
            "the estimates leave them out)"
        )
    if plan.left_out:
        out.append("left out: " + "; ".join(f"{what}: {why}" for what, why in plan.left_out))
    todo = to_fetch(plan)
    if todo.get("offline (mirror)"):
        out.append(
            f"data copied from the mirror into the cache before the first job: {', '.join(todo['offline (mirror)'])}"
        )
    if todo.get("download"):
        out.append(
            f"data not offline (downloaded before the first job): {', '.join(todo['download'])}; "
            f"to fetch it now: {fetch_command(todo['download'])} (--mirror DIR: from a local mirror)"
        )
    known = [m.estimate_s for m in plan.multiruns if m.estimate_s is not None]
    if known:
        missing = sum(m.estimate_s is None for m in plan.multiruns)
        bound = all(m.upper_bound for m in plan.multiruns if m.estimate_s is not None)
        out.append(
            f"estimated wall time on this machine: {duration(sum(known))} "
            + ("(an upper bound" if bound else "(expected: the notes say how each multirun's iterations were counted")
            + (f"; {missing} multiruns without an estimate" if missing else "")
            + ")"
        )
    return "\n".join(out)


# ----- progress and budget: a Hydra callback of every multirun ----------------------------------------
class BudgetReached(BaseException):
    """Raised before a job would start past ``--budget``: the multirun stops there (not an error)."""


#: how many recently trained jobs give the time per job of the time left (``Progress.left_s``)
RECENT = 30
#: the reason of a job skipped because it would have started past the budget (``hydra_apps.past_deadline``)
LATE = "past the budget of gpdlm reproduce"

#: override keys that tell one job of a grid from another without changing what it costs (``job_shape``)
PER_JOB_KEYS = frozenset({"seed", "objective.beta", "dataset.split.mask"})
_NOT_SHAPE = ("sweep.", "tracking.", "threads=", "hydra", "progress=")


def job_shape(overrides) -> frozenset:
    """What a job costs to train is told by its overrides less those of ``PER_JOB_KEYS`` (seed, beta, mask)
    and the bookkeeping (store, sweep, threads): ``+experiment=regression_logloss_pol model=dlm
    dataset.split.train_size=4000`` is one shape, whatever its seed and beta. The same for a job as the plan
    lists it (``Multirun.job_lists``) and as its outcome record or Hydra's task overrides name it."""
    out = set()
    for o in overrides:
        o = str(o).lstrip("+")
        if o.startswith(_NOT_SHAPE) or o.split("=", 1)[0] in PER_JOB_KEYS:
            continue
        out.add(o)
    return frozenset(out)


_TRAIN_SIZE = "dataset.split.train_size="


def _train_size(shape: frozenset) -> tuple[float | None, frozenset]:
    """(the training size a job shape names, or None; the shape without it)."""
    sizes = [o for o in shape if o.startswith(_TRAIN_SIZE)]
    try:
        size = float(sizes[0].split("=", 1)[1]) if len(sizes) == 1 else None
    except ValueError:
        size = None
    return (size if size and size > 0 else None), shape.difference(sizes)


@dataclass
class Progress:
    total: int
    deadline: float | None
    client: object = None
    run_id: str | None = None
    done: int = 0
    trained: int = 0
    started: float = field(default_factory=time.monotonic)
    job_started: float = 0.0
    resumed: int = 0  # jobs that continued a stopped run from its checkpoint (run.resume)
    resumed_s: float = 0.0  # their wall time (in this process)
    repeats: int = 0  # jobs of multiruns not started yet that an earlier multirun trains (``count_repeats``)
    read: set = field(default_factory=set)  # the outcome records ``_count_before_launch`` has read
    swept: set = field(default_factory=set)  # sweep folders whose left-out jobs the basic launcher's callback counted
    trained_at: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # the last trained jobs' end times
    shapes_left: Counter = field(default_factory=Counter)  # the plan's jobs not ended yet, per ``job_shape``
    shape_seconds: dict = field(default_factory=dict)  # shape -> [seconds, jobs] of its trained jobs (own time)
    recent_seconds: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # the last trained jobs' own s

    def left_s(self) -> float | None:
        """The jobs left times the wall time per trained job (their overhead included; skipped jobs count as
        free, and so do the jobs left that are an earlier multirun's: ``repeats``, D5-error's are D4's jobs
        again, half of `reproduce dlm --claims D4-ringnorm,D4-comparable,D5-error`; a resumed job, which trained
        only what its checkpoint had left, is done but neither a trained job nor its time counts), None before
        the first job trained. The time per job is the recent one once ``RECENT`` jobs have trained (the span of
        the last ``RECENT`` over their count: a study's later jobs -- larger training sizes -- cost more than its
        first; the classification study's whole-run average said 38 minutes for 1,491 jobs, of which 824 were
        left 49 minutes later), else the run's so far."""
        if not self.trained:
            return None
        left = max(0, self.total - self.done - self.repeats)
        ends = self.trained_at
        if len(ends) >= RECENT and ends[-1] > ends[0]:
            per_job = (ends[-1] - ends[0]) / (len(ends) - 1)
        else:
            per_job = max(0.0, time.monotonic() - self.started - self.resumed_s) / self.trained
        return per_job * self.mix_factor() * left

    def mix_factor(self) -> float:
        """What a job left costs against the recent trained jobs, from their shapes (``job_shape``): the mean
        own time of the jobs left -- each at its shape's mean time so far (``shape_time``: a shape not trained yet
        from the same shape at another training size, else at the recent jobs' mean) -- over the recent jobs' mean. 1 without shapes or job times. The rate alone follows whatever
        the recent jobs trained: 4.0 h for 1,860 pol jobs after a joint-DLM grid at n = 2,000, 65 minutes after
        a fixed-DLM grid of the same size."""
        recent = [t for t in self.recent_seconds if t is not None]
        jobs = sum(n for n in self.shapes_left.values() if n > 0)
        if not recent or not jobs:
            return 1.0
        now = sum(recent) / len(recent)
        if now <= 0:
            return 1.0
        cost = 0.0
        for shape, n in self.shapes_left.items():
            if n > 0:
                cost += n * self.shape_time(shape, now)
        return cost / jobs / now

    def shape_time(self, shape: frozenset, now: float) -> float:
        """A job's own time at ``shape``: its shape's mean so far; for a shape not trained yet, that of the trained
        shape equal to it but for the training size nearest to its own, scaled by the sizes' ratio (first order:
        pol's joint DLM took 30 s a job at n = 4000 against 9.3 s at 2000, 3.2x for 2x the rows, so it is still
        low, but no longer the recent jobs' mean); else ``now``, the recent jobs' mean."""
        spent, count = self.shape_seconds.get(shape, (0.0, 0))
        if count:
            return spent / count
        size, rest = _train_size(shape)
        if size:
            near = []
            for other, (spent, count) in self.shape_seconds.items():
                their, others = _train_size(other)
                if count and their and others == rest:
                    near.append((abs(math.log(size / their)), spent / count * size / their))
            if near:
                return min(near)[1]
        return now

    def ended(self, overrides, seconds: float | None = None, trained: bool = False) -> None:
        """A job of the plan ended (any status): one job fewer of its shape left; a trained one with its own
        time (``seconds``, in the process that ran it) adds to its shape's times."""
        shape = job_shape(overrides)
        if self.shapes_left.get(shape, 0) > 0:
            self.shapes_left[shape] -= 1
        if trained:
            self.recent_seconds.append(seconds)
            if seconds is not None:
                spent = self.shape_seconds.setdefault(shape, [0.0, 0])
                spent[0] += float(seconds)
                spent[1] += 1

    def trained_one(self) -> None:
        """A job trained (not resumed): counted, its end time kept for the recent rate."""
        self.trained += 1
        self.trained_at.append(time.monotonic())

    def restart_clock(self) -> None:
        """Before the first job trains, the time spent so far (planning, composing, leaving out the finished
        jobs) is not a job's: the time left is estimated from here."""
        if not self.trained and not self.resumed:
            self.started = time.monotonic()

    def count(self, outcome: dict, overrides=None, took: float | None = None) -> bool:
        """One ended job, from its outcome record: done, and trained unless it resumed; False (not counted) for
        a job a parallel launcher started past the budget (``hydra_apps.past_deadline``): it was not run, it is
        still left (a 2h10m pol study stopped saying "2650 of 2670 jobs done, 20 left": ~330 of them had been
        skipped so). The one rule for both launchers: the default launcher's callback passes the job's Hydra
        ``overrides`` and its wall time in this process (``took``: a resumed job's adds to ``resumed_s``, time
        no job trained in), a parallel launcher's watcher neither (the record's own ``overrides`` and
        ``seconds``)."""
        if outcome["status"] == "skipped" and str(outcome.get("reason", "")).startswith(LATE):
            return False
        resumed = outcome["status"] == "finished" and bool(outcome.get("resumed"))
        self.done += 1
        if resumed:
            self.resumed += 1
            self.resumed_s += took or 0.0
        trained = outcome["status"] == "finished" and not resumed
        if trained:
            self.trained_one()
        seconds = took if took is not None else outcome.get("seconds")
        self.ended(outcome.get("overrides", ()) if overrides is None else overrides, seconds, trained)
        return True

    def line(self, what: str) -> str:
        left = max(0, self.total - self.done)
        eta = self.left_s()
        return f"gpdlm reproduce: {self.done}/{self.total} jobs done ({what}), {left} left, " + (
            f"about {duration(eta)} left" if eta is not None else "time left not known yet (no job trained)"
        )

    def log(self, line: str) -> None:
        if self.client is None or self.run_id is None:
            return
        from mlflow.entities import Metric, RunTag

        ts = int(time.time() * 1000)
        eta = self.left_s()
        metrics = [
            Metric("jobs_done", self.done, ts, self.done),
            Metric("jobs_left", max(0, self.total - self.done), ts, self.done),
        ]
        if eta is not None:
            metrics.append(Metric("eta_s", eta, ts, self.done))
        self.client.log_batch(self.run_id, metrics=metrics, tags=[RunTag("gpdlm.progress", line)])


PROGRESS: Progress | None = None  # set by `main` while it runs multiruns in this process


def _after_job(progress: Progress, status: str) -> None:
    """Called after each ended job (a test hook: an interruption is injected here)."""


_BOOKKEEPING = ("sweep.", "tracking.", "experiment=", "threads=", "hydra")


class ReproduceCallback:
    """Hydra callback (``+hydra.callbacks.reproduce._target_=...``): budget check before a job, one
    progress line after it. A no-op in processes where ``gpdlm reproduce`` is not running (joblib workers)."""

    def on_job_start(self, config, **kwargs) -> None:
        p = PROGRESS
        if p is None:
            return
        if p.deadline is not None and time.monotonic() >= p.deadline:
            raise BudgetReached()
        sweep_dir = str(config.hydra.sweep.dir)
        if sweep_dir not in p.swept:  # the jobs left out are all recorded before the first job starts
            p.swept.add(sweep_dir)
            where = " or the --done records" if config.get("sweep", {}).get("finished_from") else ""
            _count_before_launch(p, _outcome_files(Path(sweep_dir)), where)
        p.restart_clock()
        p.job_started = time.monotonic()

    def on_job_end(self, config, job_return=None, **kwargs) -> None:
        import json

        p = PROGRESS
        if p is None:
            return
        from ..sweep.callback import job_number

        path = Path(config.hydra.sweep.dir) / "outcomes" / f"{job_number(config.hydra)}.json"
        outcome = json.loads(path.read_text()) if path.is_file() else {"status": "failed"}
        overrides = list(config.hydra.overrides.task)
        p.count(outcome, overrides, time.monotonic() - p.job_started)
        where = " or the --done records" if config.get("sweep", {}).get("finished_from") else ""
        _job_line(p, outcome, overrides, where)
        _after_job(p, outcome["status"])

    # the rest of Hydra's callback interface
    def on_run_start(self, config, **kwargs) -> None: ...
    def on_run_end(self, config, **kwargs) -> None: ...
    def on_multirun_start(self, config, **kwargs) -> None: ...
    def on_multirun_end(self, config, **kwargs) -> None: ...


CALLBACK = f"+hydra.callbacks.reproduce._target_={__name__}.ReproduceCallback"


def _outcome_files(sweep_dir: Path) -> list[Path]:
    """A sweep's outcome records (``sweep.callback.record_outcome``) in job order."""
    d = sweep_dir / "outcomes"
    return sorted(d.glob("*.json"), key=lambda f: (len(f.name), f.name)) if d.is_dir() else []


def _count_before_launch(p: Progress, files: list[Path], where: str = "") -> list[Path]:
    """Count, with one progress line, the jobs among the outcome records ``files`` not read before that the
    sweeper left out before the launch (FINISHED: ``sweep.callback.leave_out_finished``); the clock restarts
    when none has trained yet. Returns the other records not read before (jobs that ran), each read once."""
    import json

    others, new = [], 0
    for path in files:
        if str(path) in p.read:
            continue
        p.read.add(str(path))
        outcome = json.loads(path.read_text())  # written atomically (files.write_atomic)
        if not outcome.get("before_launch"):
            others.append(path)
            continue
        p.count(outcome)
        new += 1
    if new:
        p.restart_clock()
        line = p.line(f"{new} skipped before the launch: FINISHED in the store{where}")
        print(line, file=sys.stderr, flush=True)
        p.log(line)
    return others


def _job_line(p: Progress, outcome: dict, overrides: list[str], where: str = "") -> None:
    """The progress line of an ended job (its outcome record: status, reason, resumed), printed and logged."""
    status = outcome["status"]
    what = {"skipped": f"skipped: {outcome.get('reason') or 'FINISHED in the store' + where}"}.get(status, status)
    if outcome.get("resumed"):
        what = f"{what}, resumed {outcome['resumed']}"
    job = [o for o in overrides if not o.lstrip("+").startswith(_BOOKKEEPING)]
    line = p.line(f"{what}: {' '.join(job)}")
    print(line, file=sys.stderr, flush=True)
    p.log(line)


#: how often the reproduce process looks for the outcomes of jobs a parallel launcher runs elsewhere (s)
WATCH_S = 2.0


class OutcomeWatcher:
    """A progress line per ended job of a multirun whose jobs run in other processes (joblib, Slurm, Ray: the
    Hydra callback runs there, without this process's ``Progress``): a thread of the reproduce process reads the
    sweep's outcome records (``sweep.callback.record_outcome``) as they appear, every ``WATCH_S`` seconds, and
    once more when the multirun has returned."""

    def __init__(self, progress: Progress, sweep_dir: Path, where: str = ""):
        import threading

        self.progress, self.dir, self.where = progress, Path(sweep_dir) / "outcomes", where
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gpdlm-reproduce-outcomes", daemon=True)

    def __enter__(self) -> OutcomeWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_S):
            self.poll()

    def poll(self) -> None:
        import json

        if not self.dir.is_dir():
            return
        for path in _count_before_launch(self.progress, _outcome_files(self.dir.parent), self.where):
            outcome = json.loads(path.read_text())  # written atomically (files.write_atomic)
            self.progress.count(outcome)
            _job_line(self.progress, outcome, list(outcome.get("overrides", [])), self.where)


def _parallel(launch: list[str]) -> bool:
    """Whether a multirun's jobs run in other processes (a ``hydra/launcher=`` other than ``basic``)."""
    return any(a.startswith("hydra/launcher=") and a.split("=", 1)[1] != "basic" for a in launch)


def which_multirun(i: int, n: int, k: int, argvs: list[list[str]]) -> str:
    """ "multirun 2 of 3", and for a multirun launched as one beta grid per training size, which grid:
    "multirun 1 of 1, beta grid 2 of 5 (dataset.split.train_size=200)" (its data pins)."""
    if len(argvs) < 2:
        return f"multirun {i} of {n}"
    pins = [o for o in argvs[k - 1] if o.split("=", 1)[0].startswith("dataset") and "," not in o]
    return f"multirun {i} of {n}, beta grid {k} of {len(argvs)}" + (f" ({' '.join(pins)})" if pins else "")


def _count_outcomes(p: Progress, sweep_dir: Path, what: str) -> None:
    """Progress after a multirun whose jobs ran in other processes (a parallel launcher): its outcomes."""
    from ..sweep.callback import read_outcomes

    outcomes = read_outcomes(sweep_dir)
    if not outcomes:
        return
    for o in outcomes:
        p.count(o)
    resumed = sum(o["status"] == "finished" and bool(o.get("resumed")) for o in outcomes)
    counts = ", ".join(
        f"{n} {s}"
        for s in ("finished", "skipped", "failed", "killed")
        if (n := sum(o["status"] == s for o in outcomes))
    ) + (f" ({resumed} of them resumed from a checkpoint)" if resumed else "")
    line = p.line(f"{what}: {counts}")
    print(line, file=sys.stderr, flush=True)
    p.log(line)


# ----- the study section: what the runs say about themselves -------------------------------------------
def study_text(paper, records: list, settings: dict) -> str:
    """Markdown: the reproduce settings and, per table, its runs' scale (param ``sweep.scale``), protocol
    (tag ``gpdlm.protocol``), data (param ``dataset.name``), seeds/masks and epochs -- read from the runs."""
    from collections import Counter

    from ..analysis.report import COMMAND, matches

    def values(runs, get) -> str:
        c = Counter(get(r) for r in runs)
        return ", ".join(f"{k} ({n})" for k, n in sorted(c.items(), key=lambda kv: str(kv[0])))

    lines = [
        f"**Reproduced with `gpdlm reproduce {paper.name}`**: "
        + ", ".join(f"{k} {v}" for k, v in settings.items())
        + ". Per table, from the runs' own params and tags "
        "(value (runs)):",
        "",
        "| table | runs | scale | protocol | data | seeds | masks | epochs |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def p(key: str):
        return lambda r: r.params.get(key, "-")

    for t in paper.tables.values():
        mine = [
            r
            for r in records
            if matches(r, t.match) and (COMMAND in t.match or r.tags.get("gpdlm.command", "train") == "train")
        ]
        declared = [d for d in t.dimensions.values() if not d.auto and any(lab.match for lab in d.labels)]
        runs = [r for r in mine if all(any(lab.match and matches(r, lab.match) for lab in d.labels) for d in declared)]
        if not runs:
            why = f"not run here: {t.unavailable}" if t.unavailable else "not measured (no runs)"
            lines.append(f"| {t.id} | 0 | {why} | | | | | |")
            continue
        lines.append(
            f"| {t.id} | {len(runs)} | {values(runs, p('sweep.scale'))} | "
            f"{values(runs, lambda r: r.tags.get('gpdlm.protocol', '-'))} | {values(runs, p('dataset.name'))} | "
            f"{len({r.params.get('seed') for r in runs})} | "
            f"{len({r.params.get('dataset.split.mask') for r in runs} - {None, 'None'}) or '-'} | "
            f"{values(runs, p('trainer.max_epochs'))} |"
        )
    return "\n".join(lines) + "\n"


# ----- the command ------------------------------------------------------------------------------------
EPILOG = """examples:
  gpdlm reproduce gplstm --scale smoke                  # CI-sized, a few minutes
  gpdlm reproduce dlm --dry-run                         # the paper-scale plan: jobs, data, estimated time
  gpdlm reproduce rkhs --claims T2-scgd-beats-bsgd-b32 --scale reduced --budget 3h
  gpdlm reproduce svbssgp --scale smoke hydra/launcher=joblib hydra.launcher.n_jobs=2
Rerun the same command after an interruption or a spent budget: finished jobs are not run again.
On a machine with a new store, name the run records of the earlier parts (--done): their jobs are skipped.
  gpdlm reproduce dlm --claims D1-pol --protocol fast --budget 2h --done part1/runs.jsonl.gz --output part2
A dry run counts the stopping rules at the iterations of recorded runs of the same shapes (other seeds, scale):
  gpdlm reproduce dlm --claims D4-thyroid --protocol fast --dry-run --iterations-from reduced/runs.jsonl.gz
"""


def build_parser():
    from ..analysis import claims

    p = _cli.make_parser(
        "gpdlm reproduce",
        "Run what a paper's claims need (from its claims file), resumably and "
        "within a budget, into one store, and write the report.",
    )
    p.epilog = EPILOG
    p.add_argument("paper", help=f"the paper: {', '.join(claims.available())}, or a claims .yaml file")
    p.add_argument("--claims", action="append", metavar="ID", help="only these claims (repeatable, comma-separated)")
    p.add_argument("--scale", choices=SCALES, default="paper", help="smoke (CI), reduced (a laptop), paper (default)")
    p.add_argument(
        "--protocol", choices=PROTOCOLS, default="paper", help="trainer.protocol of every run (default paper)"
    )
    p.add_argument("--budget", metavar="TIME", help="stop cleanly between jobs after this long (3h, 90m, 45s)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated wall time; run nothing")
    p.add_argument("--no-estimate", action="store_true", help="with --dry-run: count jobs only (no timed steps)")
    p.add_argument("--format", choices=list(FORMATS), default="md", help="the report's format (default md)")
    p.add_argument(
        "--output", metavar="DIR", help="folder of the store, report and study (default reproduce/<paper>-<scale>)"
    )
    p.add_argument("--tracking-uri", metavar="URI", help="the store (default sqlite:///<output>/mlflow.db)")
    p.add_argument(
        "--done",
        action="append",
        default=[],
        metavar="FILE",
        help="run records (gpdlm export) of parts run before, elsewhere: their FINISHED jobs are skipped and "
        "counted in the report (repeatable; sweep.finished_from)",
    )
    p.add_argument(
        "--iterations-from",
        action="append",
        default=[],
        metavar="FILE",
        help="with --dry-run: run records (gpdlm export) of earlier runs of the plan's shapes -- other seeds, "
        "another scale -- whose iterations stand for the stopping rules' in the estimate (repeatable; the "
        "--done files count too); nothing is skipped for them",
    )
    p.add_argument(
        "--mirror",
        metavar="DIR",
        help="a local data mirror (as $GPDLM_DATA_MIRROR): the plan's data is copied from it into the cache first",
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every multirun (hydra/launcher=joblib, ...)")
    return p


def main(argv: list[str]) -> int:
    from ..analysis import claims, export
    from ..analysis.records import split_list

    args = build_parser().parse_intermixed_args(argv)
    if args.mirror is not None:
        use_mirror(args.mirror)
    paper = claims.load(args.paper)
    budget = parse_budget(args.budget)
    for o in args.overrides:
        if "=" not in o:
            raise AnalysisError(f"unexpected argument {o!r}: overrides are key=value")
    plan = derive(paper, split_list(args.claims), args.scale, args.protocol, args.overrides)
    if not plan.multiruns:
        raise AnalysisError(
            f"nothing to run for {paper.name} at scale {args.scale}: "
            + "; ".join(f"{w}: {y}" for w, y in plan.left_out)
        )
    # verified before anything runs (a missing or changed file is one line): path -> its experiments
    args.done = {str(Path(f).resolve()): set(export.read(f).experiments) for f in args.done}
    if args.iterations_from and not args.dry_run:
        raise AnalysisError("--iterations-from feeds --dry-run's estimate; to skip recorded jobs in a run, use --done")
    calibration = [str(Path(f).resolve()) for f in args.iterations_from]
    for f in calibration:
        export.read(f)
    expand(
        plan,
        estimate=args.dry_run and not args.no_estimate,
        store_uri=_store_uri(plan, args),
        records=calibration,
        done=list(args.done),
    )
    if args.dry_run:
        print(describe(plan))
        return 0
    fetch_data(plan)
    return run(plan, paper, args, budget)


def _store_uri(plan: Plan, args) -> str:
    """The store a reproduce runs into: ``--tracking-uri``, else ``<output>/mlflow.db``."""
    from ..tracking import resolve_tracking_uri

    outdir = Path(args.output or f"reproduce/{plan.paper}-{plan.scale}")
    return resolve_tracking_uri(args.tracking_uri or f"sqlite:///{outdir.resolve()}/mlflow.db")


def run(plan: Plan, paper, args, budget: float | None) -> int:
    """Run the plan's multiruns into one store under a ``reproduce`` parent run (progress, budget), then
    write the study, the exported runs and the report from whatever the store holds."""
    global PROGRESS
    from ..sweep import callback as sweep_mod

    outdir = Path(args.output or f"reproduce/{plan.paper}-{plan.scale}")
    outdir.mkdir(parents=True, exist_ok=True)
    settings = {
        "scale": plan.scale,
        "protocol": plan.protocol,
        "budget": args.budget or "none",
        "claims": ",".join(sorted({c for m in plan.multiruns for c in m.claims})),
    }
    client, uri, parent_id = _parent_run(plan, args, outdir, settings)
    PROGRESS = Progress(plan.jobs, time.monotonic() + budget if budget else None, client, parent_id)
    PROGRESS.repeats = plan.repeats
    PROGRESS.shapes_left = Counter(job_shape(j) for m in plan.multiruns for j in m.job_lists)
    print(describe(plan), file=sys.stderr)
    stopped = None
    try:
        _launch(plan, uri, outdir, PROGRESS, getattr(args, "done", {}))
    except BudgetReached:
        sweep_mod.abort_active_sweeps("KILLED", f"stopped by gpdlm reproduce --budget {args.budget}")
        p = PROGRESS
        stopped = (
            f"gpdlm reproduce: budget {args.budget} reached: {p.done} of {p.total} jobs done, "
            f"{p.total - p.done} left{_repeats_note(p.repeats)} (about {duration(p.left_s())}); rerun the same "
            "command to continue"
        )
        print(stopped, file=sys.stderr)
        client.set_tag(parent_id, "gpdlm.progress", stopped)
    except BaseException as e:
        client.set_tag(parent_id, "failure_reason", f"interrupted: {type(e).__name__}: {e}"[:5000])
        client.set_terminated(parent_id, "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
        raise
    finally:
        PROGRESS = None
    _report(plan, paper, args, client, uri, outdir, settings)
    client.set_terminated(parent_id, "KILLED" if stopped else "FINISHED")
    return 0


def _repeats_note(repeats: int) -> str:
    """What the stop line says of the jobs left that an earlier multirun trains (free: skipped as FINISHED)."""
    return f", {repeats} of them an earlier multirun's (skipped as FINISHED)" if repeats else ""


def _parent_run(plan: Plan, args, outdir: Path, settings: dict) -> tuple:
    """(MLflow client, store URI, run id) of the reproduce's parent run (experiment ``reproduce_<paper>``),
    with the settings and the job count as params."""
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    from ..tracking import ensure_experiment

    uri = _store_uri(plan, args)
    client = MlflowClient(tracking_uri=uri)
    exp_id = ensure_experiment(client, f"reproduce_{plan.paper}", uri)
    parent = client.create_run(
        exp_id,
        run_name=f"reproduce-{plan.paper}-{plan.scale}",
        tags={"gpdlm.command": "reproduce", "gpdlm.sweep": "parent", "gpdlm.output_dir": str(outdir.resolve())},
    )
    client.log_batch(
        parent.info.run_id,
        params=[Param(k, str(v)[:6000]) for k, v in settings.items()] + [Param("jobs", str(plan.jobs))],
    )
    return client, uri, parent.info.run_id


def _launch(plan: Plan, uri: str, outdir: Path, progress: Progress, done: dict | None = None) -> None:
    """Every multirun of the plan, in this process (``gpdlm train|bias -m ...`` into the store at ``uri``),
    each its own sweep folder; ``BudgetReached`` before one would start past the deadline. ``done``: run
    records of earlier parts, each with its experiments (``sweep.finished_from`` of the multiruns that track into
    one of them: their FINISHED jobs are skipped)."""
    from .bias import bias_main
    from .sweep import sweep_overrides
    from .train import train_main

    launched = 0
    tail = ["sweep.skip_finished=true", f"+sweep.scale={plan.scale}", f"tracking.uri={uri}", CALLBACK]
    if progress.deadline is not None:  # for the jobs a parallel launcher runs in other processes (hydra_apps)
        tail.append(f"+sweep.deadline={time.time() + progress.deadline - time.monotonic():.0f}")
    for i, m in enumerate(plan.multiruns, 1):
        for k, argv in enumerate(m.argvs, 1):
            if progress.deadline is not None and time.monotonic() >= progress.deadline:
                raise BudgetReached()
            # this launch's repeats are skipped as they come, now (a budget stop between D5-error's beta grids
            # counted the grids not launched yet as work: "2505 left, about 2.2 h", all of them FINISHED)
            mine_again = m.argv_repeats[k - 1] if len(m.argv_repeats) == len(m.argvs) else m.repeats * (k == 1)
            progress.repeats = max(0, progress.repeats - mine_again)
            if argv[0] == "gpdlm sweep beta":  # data not offline: `gpdlm sweep beta` loads it (downloads)
                launches = [[*a, *tail] for a in sweep_overrides("beta", argv[1:])]
            else:
                launches = [["-m", *argv, *tail]]
            mine = [f for f, exps in (done or {}).items() if m.experiment in exps]
            if mine:
                launches = [[*a, f"sweep.finished_from=[{','.join(mine)}]"] for a in launches]
            for launch in launches:
                launched += 1  # every multirun its own sweep folder (its outcomes, its parent run)
                sweep_dir = outdir.resolve() / "multirun" / f"{time.strftime('%Y%m%d-%H%M%S')}-{launched}"
                sys.argv = [f"gpdlm {m.command}", *launch, f"hydra.sweep.dir={sweep_dir}"]
                before = progress.done
                if _parallel(launch):  # a line per job as its outcome appears
                    where = " or the --done records" if mine else ""
                    with OutcomeWatcher(progress, sweep_dir, where):
                        bias_main() if m.command == "bias" else train_main()
                else:
                    bias_main() if m.command == "bias" else train_main()
                if progress.done == before:  # jobs ran in other processes (joblib, Slurm, Ray): count them now
                    _count_outcomes(progress, sweep_dir, which_multirun(i, len(plan.multiruns), k, m.argvs))


def _report(plan: Plan, paper, args, client, uri: str, outdir: Path, settings: dict) -> None:
    """The study section, the exported runs and the report (``gpdlm report``) of the plan's experiments that
    hold finished runs -- in the store, or in the run records of earlier parts (``--done``: the report then
    reads this part's exported runs and those files) -- a line saying there is none yet otherwise."""
    from ..analysis import export, store
    from .report import main as report_main

    done = getattr(args, "done", {}) or {}
    names, recorded = [], []
    for m in plan.multiruns:
        exp = client.get_experiment_by_name(m.experiment)
        if m.experiment in names:
            continue
        if exp is not None and any(
            r.data.tags.get("gpdlm.command") in ("train", "bias")
            for r in store.search_all(client, exp.experiment_id, "attributes.status = 'FINISHED'")
        ):
            names.append(m.experiment)
        elif any(m.experiment in exps for exps in done.values()):
            recorded.append(m.experiment)
    if not names and not recorded:
        print("gpdlm reproduce: no finished runs yet: no report", file=sys.stderr)
        return
    exps = [client.get_experiment_by_name(n) for n in names]
    records = [r for e in exps for r in store.load_runs(client, e, notes=[], commands=("train", "bias"))]
    files = [export.read(f) for f in done]
    if files:
        wanted = [n for n in [*names, *recorded] if any(n in f.experiments for f in files)]
        records += [r for rs in export.load_records(files, wanted, [])[1].values() for r in rs]
    (outdir / "study.md").write_text(study_text(paper, records, settings))
    runs_file = outdir / "runs.jsonl.gz"
    if names:  # this part's runs; the report is rebuilt from them
        export.write(runs_file, export.export_store(client, exps), names)
    if done:
        source = [*(["--from", str(runs_file)] if names else []), *[a for f in done for a in ("--from", f)]]
        source += [a for n in [*names, *recorded] for a in ("--experiment", n)]
    else:
        source = ["--tracking-uri", uri, *[a for n in names for a in ("--experiment", n)]]
    report_main(
        [
            "--claims",
            args.paper,
            *source,
            "--format",
            args.format,
            "--out",
            str(outdir / "report"),
            "--study",
            str(outdir / "study.md"),
            "--output",
            str(outdir / FORMATS[args.format]),
            "--no-log",
        ]
    )


def cli() -> int:
    return _cli.run_cli(main)
