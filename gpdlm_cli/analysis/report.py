"""A paper's tables and verdicts from an experiment's runs (``gpdlm report``).

``build(paper, records)`` turns the FINISHED training runs of one or more MLflow experiments (as
``gpdlm_cli.analysis.store.load_runs`` reads them: reruns of one configuration counted once) into

* one ``TableReport`` per table of the claims file: every cell's runs (the table's ``match`` and
  the cell's labels, see ``claims``), one value per unit (seed or split; where a unit has several
  runs the one with the lowest ``select.by``, else their mean, noted), the mean +- standard error
  over units, the paper's printed number, the best cell along the methods' axis (lowest mean when
  lower is better) and the cells within one standard error of it (|mean - best| <= SE of the best),
  and each method's average rank over the rows where every measured method has a value;
* one ``Verdict`` per claim: ``holds``, ``fails`` or ``not measured``, with its comparisons' paired
  tests (``stats``), n and p.

The renderers (Markdown, LaTeX, self-contained HTML with the figures) are in ``render``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import records as R
from . import stats
from .claims import SCALES, Claim, Paper, PaperValue, Table, condition_holds, label_name

HOLDS, FAILS, NOT_MEASURED = "holds", "fails", "not measured"


@dataclass
class Cell:
    row: tuple
    col: tuple
    metric: str
    values: dict = field(default_factory=dict)  # unit -> value
    runs: dict = field(default_factory=dict)  # unit -> the run that gave the value (or the first pooled one)
    chosen: dict = field(default_factory=dict)  # unit -> {select.over key: value of the selected run}
    paper: PaperValue | None = None
    quoted: str | None = None
    mean: float = math.nan
    se: float = math.nan
    n: int = 0
    best: bool = False
    near: bool = False  # within one SE of the best (and not the best)

    @property
    def measured(self) -> bool:
        return self.n > 0 and math.isfinite(self.mean)


@dataclass
class TableReport:
    table: Table
    labels: dict  # dimension -> its labels (declared, or the runs' values for 'auto')
    row_keys: list
    col_keys: list
    cells: dict  # (row, col) -> Cell
    method_keys: list  # the labels along the methods' axis
    ranks: list  # average rank per method key (None: not ranked)
    ranked_rows: int
    paper_ranks: list
    paper_ranked_rows: int
    n_runs: int
    notes: list = field(default_factory=list)
    scales: dict = field(default_factory=dict)  # param sweep.scale (gpdlm reproduce) -> runs; untagged runs absent

    @property
    def scale(self) -> str:
        """The smallest ``gpdlm reproduce`` scale among the table's runs ("" when none is tagged)."""
        return next((s for s in SCALES if s in self.scales), "")

    def cell(self, assign: dict) -> Cell | None:
        t = self.table
        return self.cells.get((tuple(assign[d] for d in t.rows), tuple(assign[d] for d in t.columns)))


@dataclass
class Comparison:
    a: dict
    b: dict
    cell_a: Cell | None
    cell_b: Cell | None
    result: stats.TestResult | None
    status: str
    note: str = ""


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    comparisons: list
    p: float | None
    detail: str
    scale: str = ""  # the smallest reproduce scale of its table's runs ("" when untagged); see render.cause_of

    @property
    def n_range(self) -> tuple[int, int]:
        ns = [c.result.n for c in self.comparisons if c.result is not None]
        return (min(ns), max(ns)) if ns else (0, 0)


@dataclass
class Report:
    paper: Paper
    experiments: list
    tables: list
    verdicts: list
    n_runs: int
    notes: list = field(default_factory=list)
    provenance: list = field(default_factory=list)  # one `Provenance` per experiment read
    study: str = ""  # the study's own notes (commands, budget, reductions: `gpdlm report --study FILE`)


@dataclass
class Provenance:
    """How the runs of one experiment were made, read from the runs themselves (tags, params,
    metrics): what a results page must say next to its numbers."""

    experiment: str
    n_runs: int
    protocols: dict  # tag gpdlm.protocol -> runs (paper, fast; "-" for runs older than the tag)
    datasets: dict  # param dataset.name -> runs
    commits: dict  # tag gpdlm.git_commit -> runs (the code that trained them)
    first: str  # UTC date-times of the first and last run start
    last: str
    train_hours: float  # the sum of the runs' train_seconds, in hours
    run_hours: float = 0.0  # the sum of the runs' MLflow start-to-end times (adds set-up, evaluation, logging)


def provenance(experiment: str, records: list) -> Provenance:
    """The `Provenance` of ``records``, the FINISHED training runs of ``experiment``."""
    import datetime as dt
    from collections import Counter

    def stamp(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if ms else "-"

    starts = sorted(r.start_time for r in records)
    seconds = sum(
        float(r.metrics.get("train_seconds", 0.0)) for r in records if _finite(r.metrics.get("train_seconds", 0.0))
    )

    def count(values: Iterable[str]) -> dict[str, int]:
        return dict(Counter(values).most_common())

    return Provenance(
        experiment,
        len(records),
        count(r.tags.get("gpdlm.protocol", "-") for r in records),
        count(r.params.get("dataset.name", "-") for r in records),
        count((r.tags.get("gpdlm.git_commit") or "-")[:10] for r in records),
        stamp(starts[0]) if starts else "-",
        stamp(starts[-1]) if starts else "-",
        seconds / 3600.0,
        sum(max(0, r.end_time - r.start_time) for r in records if r.end_time) / 3.6e6,
    )


# ----- matching runs to cells --------------------------------------------------------------------------
COMMAND = "tags.gpdlm.command"


def _same(have, want) -> bool:
    if want is None:
        return have is None or have in ("None", "null")
    return have == R.canon(want)


def matches(record: R.RunRecord, match: dict) -> bool:
    """Does the run have every ``key: value`` of ``match`` (a list of values: any of them)?"""
    for key, want in match.items():
        have = record.value(key)
        if not any(_same(have, w) for w in (want if isinstance(want, list) else [want])):
            return False
    return True


def unit_of(record: R.RunRecord, units: list[str]) -> tuple:
    return tuple(record.value(u) for u in units)


def _short_grids(by_unit: dict, select_by: str | None, over) -> set:
    """The units of a selected cell whose candidates (runs with a finite ``select_by``) cover fewer values of the
    ``over`` keys (beta, the learning rate) than the cell's fullest unit: an interrupted study's seed whose beta
    grid stopped after 5 of 17 values would otherwise be "selected" from the five largest betas."""
    if not select_by or not over or len(by_unit) < 2:
        return set()
    grids = {
        u: {tuple(r.value(k) for k in over) for r in g if _finite(r.metrics.get(select_by))} for u, g in by_unit.items()
    }
    full = max(len(g) for g in grids.values())
    return {u for u, g in grids.items() if g and len(g) < full}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _labels(table: Table, records: list) -> dict:
    """Each dimension's labels: the declared ones, or for ``values: auto`` the values of the runs
    that belong to the table -- those matching a label of every declared dimension (so the pol
    runs' training sizes do not become rows of a classification table read from the same store)."""
    declared = [
        dim.labels
        for dim in table.dimensions.values()
        if dim.labels is not None and any(lab.match for lab in dim.labels)
    ]
    inside = [r for r in records if all(any(lab.match and matches(r, lab.match) for lab in dim) for dim in declared)]
    out = {}
    for name, dim in table.dimensions.items():
        if dim.labels is not None:  # not dim.auto
            out[name] = [lab.name for lab in dim.labels]
        else:
            vals = {r.value(dim.key) for r in inside} - {None}
            out[name] = [label_name(v) for v in sorted(vals, key=R.sort_key)]
    return out


def build_table(table: Table, records: list, units: list[str]) -> TableReport:
    """The cells of ``table`` from ``records`` (the experiment's training runs). A table reads the
    runs of ``gpdlm train`` unless its ``match`` names another command (``tags.gpdlm.command: bias``)."""
    mine = [
        r
        for r in records
        if matches(r, table.match) and (COMMAND in table.match or r.tags.get("gpdlm.command", "train") == "train")
    ]
    labels = _labels(table, mine)
    row_keys = list(itertools.product(*(labels[d] for d in table.rows)))
    col_keys = list(itertools.product(*(labels[d] for d in table.columns)))
    cells: dict[tuple, Cell] = {}
    used: set[str] = set()
    pooled = varying = unselected = partial = 0
    differing: dict[str, int] = {}
    ignore = set(units) | set(table.select_over) | {"seed"}
    for row in row_keys:
        for col in col_keys:
            assign = dict(zip(table.rows, row)) | dict(zip(table.columns, col))
            labs = [table.dimensions[d].label(assign[d]) for d in table.dims]
            match, metric, select_by, quoted = {}, table.metric, table.select_by, None
            for lab in labs:
                match.update(lab.match)
                metric = lab.metric or metric
                select_by = lab.select_by or select_by
                quoted = quoted or lab.quoted
            cell = Cell(row, col, metric, paper=table.paper.get((row, col)), quoted=quoted)
            cells[(row, col)] = cell
            if quoted:
                continue
            runs = [r for r in mine if matches(r, match)]
            used.update(r.run_id for r in runs)
            by_unit: dict = {}
            for r in runs:
                by_unit.setdefault(unit_of(r, units), []).append(r)
            short = _short_grids(by_unit, select_by, table.select_over)
            partial += len(short)
            u, p = _fill_cell(cell, by_unit, short, table.select_over, select_by)
            unselected += u
            pooled += p
            keys = R.varying_params(runs, ignore=ignore)
            if keys:
                varying += 1
                for k in keys:
                    differing[k] = differing.get(k, 0) + 1
            cell.mean, cell.se, cell.n = R.mean_se(list(cell.values.values()))
    notes = _build_notes(table, pooled, unselected, partial, varying, differing)
    method_keys, ranks, ranked, pranks, pranked = _best_and_ranks(table, cells, row_keys, col_keys)
    scales = run_scales([r for r in mine if r.run_id in used])
    return TableReport(
        table, labels, row_keys, col_keys, cells, method_keys, ranks, ranked, pranks, pranked, len(used), notes, scales
    )


def run_scales(runs: list) -> dict[str, int]:
    """``gpdlm reproduce`` scale (param ``sweep.scale``) -> the table's runs counted at it. A run tagged with a smaller
    scale counts at the largest scale of a run whose configuration is its own but for the seed: a study continued at
    a larger scale over a smaller one's records (``gpdlm reproduce --done``; the abalone counts at the paper's five
    seeds over the reduced study's seeds 0-1) skips those very configurations as FINISHED, so its reduced runs are
    the paper plan's runs at their seeds. A reduced run of another configuration (fewer epochs) keeps its scale."""
    from ..tracking.identity import params_hash

    tagged = [(r, sc) for r in runs if (sc := r.params.get("sweep.scale")) in SCALES]
    if len({sc for _r, sc in tagged}) > 1:
        command = [r.tags.get("gpdlm.command") for r, _sc in tagged]
        shape = [
            params_hash({k: v for k, v in r.params.items() if k != "seed"}, c) for (r, _sc), c in zip(tagged, command)
        ]
        top: dict[str, str] = {}
        for (_r, sc), h in zip(tagged, shape):
            top[h] = max(top.get(h, sc), sc, key=SCALES.index)
        tagged = [(r, top[h]) for (r, _sc), h in zip(tagged, shape)]
    scales: dict[str, int] = {}
    for _r, sc in tagged:
        scales[sc] = scales.get(sc, 0) + 1
    return scales


def _fill_cell(
    cell: Cell, by_unit: dict, short: set, select_over: Sequence[str], select_by: str | None
) -> tuple[int, int]:
    """Set ``cell``'s value per unit (seed/split): the run best by ``select_by`` over the grid of
    ``select_over``, or without a rule the mean over the unit's runs. Units in ``short`` (a partial grid) are left
    out. Returns (units with no finite ``select_by``, units whose value pooled several runs)."""
    unselected = pooled = 0
    for unit, group in by_unit.items():
        if unit in short:
            continue
        if select_by:
            cands = [r for r in group if _finite(r.metrics.get(select_by))]
            if not cands:
                unselected += 1
                continue
            pick = min(cands, key=lambda r: (r.metrics[select_by], r.start_time, r.run_id))
            if _finite(pick.metrics.get(cell.metric)):
                cell.values[unit] = pick.metrics[cell.metric]
                cell.runs[unit] = pick
                cell.chosen[unit] = {k: pick.value(k) for k in select_over}
        else:
            vals = [r.metrics[cell.metric] for r in group if _finite(r.metrics.get(cell.metric))]
            if vals:
                cell.values[unit] = statistics.fmean(vals)
                cell.runs[unit] = group[0]
                pooled += len(group) > 1
    return unselected, pooled


def _build_notes(table: Table, pooled: int, unselected: int, partial: int, varying: int, differing: dict) -> list[str]:
    """The table's notes on how its cells were filled: pooled units, units left out, pooled differing runs."""
    notes: list[str] = []
    if pooled:
        notes.append(f"{pooled} cell unit(s) held several runs and no selection rule: their mean was used")
    if unselected:
        notes.append(f"{unselected} cell unit(s) had no run with a finite {table.select_by}: left out")
    if partial:
        notes.append(
            f"{partial} cell unit(s) had runs at fewer values of {', '.join(table.select_over)} than the cell's other "
            "units (an interrupted or partial grid): left out, since their selection would be over part of the grid"
        )
    if differing:
        shown = ", ".join(f"{k} ({n})" for k, n in sorted(differing.items()))
        notes.append(
            f"{varying} cell(s) pool runs that differ in more than the seed/split and "
            f"{', '.join(table.select_over) or 'the selection'}: {shown}"
        )
    return notes


def _lines(table: Table, cells: dict, row_keys: list, col_keys: list) -> tuple[list, list]:
    """(method keys, lines): a line is the list of cells along the methods' axis."""
    if table.methods == "columns":
        return col_keys, [[cells[(r, c)] for c in col_keys] for r in row_keys]
    return row_keys, [[cells[(r, c)] for r in row_keys] for c in col_keys]


def _best_and_ranks(table: Table, cells, row_keys, col_keys):
    method_keys, lines = _lines(table, cells, row_keys, col_keys)
    sign = 1.0 if table.goal == "min" else -1.0
    for line in lines:
        measured = [c for c in line if c.measured]
        if not measured:
            continue
        best = min(measured, key=lambda c: sign * c.mean)
        best.best = True
        if math.isfinite(best.se):
            for c in measured:
                if c is not best and abs(c.mean - best.mean) <= best.se:
                    c.near = True
    ranks, ranked = stats.average_ranks([[c.mean if c.measured else None for c in line] for line in lines], table.goal)
    # the paper's own ranks from its printed numbers (rows it quotes from elsewhere, like RGP, left out)
    pranks, pranked = stats.average_ranks(
        [[c.paper.mean if c.paper and not c.quoted else None for c in line] for line in lines], table.goal
    )
    return method_keys, ranks, ranked, pranks, pranked


# ----- verdicts ---------------------------------------------------------------------------------------
def _assignments(tr: TableReport, claim: Claim):
    """Every assignment of the dimensions that 'better' leaves to iterate (where: its labels; others:
    all labels; argmin: 'over' stays free)."""
    free = [d for d in tr.table.dims if d not in claim.better[0] and d != claim.over]
    choices = [claim.where.get(d, tr.labels[d]) for d in free]
    for values in itertools.product(*choices):
        yield dict(zip(free, values))


def _status(result: stats.TestResult | None, alpha: float) -> str:
    if result is None or result.p is None:
        return NOT_MEASURED
    return HOLDS if result.p < alpha else FAILS


def evaluate(claim: Claim, tr: TableReport | None) -> Verdict:
    if tr is None or tr.table.unavailable and not tr.n_runs:
        why = tr.table.unavailable if tr is not None else "no table"
        return Verdict(claim, NOT_MEASURED, [], None, f"cannot be run here: {why}")
    t = tr.table
    comps: list[Comparison] = []
    for base in _assignments(tr, claim):
        if claim.kind == "argmin":
            comps.append(_argmin(claim, tr, base))
            continue
        for better in claim.better:
            a = base | better
            for than in claim.than:
                b = a | than
                ca, cb = tr.cell(a), tr.cell(b)
                result = None
                if ca is not None and cb is not None and ca.measured and cb.measured:
                    result = stats.compare(claim.kind, ca.values, cb.values, t.goal, claim.test, claim.margin)
                comps.append(Comparison(a, b, ca, cb, result, _status(result, claim.alpha)))
    return _aggregate(claim, comps)


def _argmin(claim: Claim, tr: TableReport, base: dict) -> Comparison:
    t = tr.table
    condition = claim.condition
    if condition is None:  # the claims loader requires one for kind argmin
        raise R.AnalysisError(f"claim '{claim.id}': kind argmin needs a condition")
    sign = 1.0 if t.goal == "min" else -1.0
    along = []
    for label in tr.labels[claim.over]:
        assign = base | claim.better[0] | {claim.over: label}
        c = tr.cell(assign)
        if c is not None and c.measured:
            along.append((label, assign, c))
    sat = [x for x in along if condition_holds(condition, x[0])]
    non = [x for x in along if not condition_holds(condition, x[0])]
    if not sat or not non:
        return Comparison(
            base | claim.better[0],
            base | claim.better[0],
            None,
            None,
            None,
            NOT_MEASURED,
            f"needs measured {claim.over} values on both sides of the condition",
        )
    best = min(along, key=lambda x: sign * x[2].mean)
    best_sat = min(sat, key=lambda x: sign * x[2].mean)
    best_non = min(non, key=lambda x: sign * x[2].mean)
    result = stats.compare("better", best_sat[2].values, best_non[2].values, t.goal, claim.test)
    op, ref = condition
    note = f"best {claim.over} = {best[0]} ({'satisfies' if best in sat else 'violates'} {op} {ref})"
    if result.p is None:
        status = NOT_MEASURED
    else:
        status = HOLDS if best in sat and result.p < claim.alpha else FAILS
    return Comparison(best_sat[1], best_non[1], best_sat[2], best_non[2], result, status, note)


def _fold(statuses: list[str]) -> str:
    if any(s == FAILS for s in statuses):
        return FAILS
    if statuses and all(s == HOLDS for s in statuses):
        return HOLDS
    return NOT_MEASURED


def _max_p(comps: list[Comparison]) -> float | None:
    ps = [c.result.p for c in comps if c.result is not None and c.result.p is not None]
    return max(ps) if ps and len(ps) == len(comps) else None


def _held_p(comps: list[Comparison]) -> float:
    """The largest p-value of comparisons whose statuses say they were tested (each has a p)."""
    p = _max_p(comps)
    if p is None:
        raise ValueError("a comparison that holds or fails has no p-value")
    return p


def _aggregate(claim: Claim, comps: list[Comparison]) -> Verdict:
    measured = sum(c.status != NOT_MEASURED for c in comps)
    if not comps:
        return Verdict(claim, NOT_MEASURED, comps, None, "no runs for the cells it compares")
    if claim.at_least is None:
        verdict = _fold([c.status for c in comps])
        p = _max_p(comps)
        if verdict == FAILS:
            p = _held_p([c for c in comps if c.status == FAILS])
        detail = f"{sum(c.status == HOLDS for c in comps)} of {len(comps)} comparisons hold"
        if measured < len(comps):
            detail += f", {len(comps) - measured} not measured"
        return Verdict(claim, verdict, comps, p, detail)
    groups: dict = {}
    for c in comps:
        groups.setdefault(c.a.get(claim.group_over), []).append(c)
    folded = {g: _fold([c.status for c in cs]) for g, cs in groups.items()}
    held = [g for g, s in folded.items() if s == HOLDS]
    failed = [g for g, s in folded.items() if s == FAILS]
    k, total = claim.at_least, len(groups)
    if len(held) >= k:
        verdict = HOLDS
    elif len(failed) > total - k:
        verdict = FAILS
    else:
        verdict = NOT_MEASURED
    group_p = sorted(_held_p(groups[g]) for g in held)
    p = group_p[k - 1] if verdict == HOLDS else None
    detail = (
        f"holds for {len(held)} of {total} {claim.group_over} values (needs {k}): "
        f"{', '.join(map(str, held)) or 'none'}; fails for {', '.join(map(str, failed)) or 'none'}"
    )
    return Verdict(claim, verdict, comps, p, detail)


# ----- the whole report -------------------------------------------------------------------------------
def build(
    paper: Paper, records: list, experiments: list[str] | None = None, provenance: list | None = None, study: str = ""
) -> Report:
    tables = [build_table(t, records, paper.units) for t in paper.tables.values()]
    by_id = {tr.table.id: tr for tr in tables}
    verdicts = [evaluate(c, by_id.get(c.table)) for c in paper.claims]
    for v in verdicts:
        if (tr := by_id.get(v.claim.table)) is not None:
            v.scale = tr.scale
    notes = []
    if records and not any(tr.n_runs for tr in tables):
        notes.append(f"no run matches any table of the {paper.name} claims: is this the right paper?")
    return Report(paper, list(experiments or []), tables, verdicts, len(records), notes, list(provenance or []), study)


def counts(report: Report) -> dict[str, int]:
    out = {HOLDS: 0, FAILS: 0, NOT_MEASURED: 0}
    for v in report.verdicts:
        out[v.verdict] += 1
    return out
