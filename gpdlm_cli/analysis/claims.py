"""The papers' results as data: ``gpdlm_cli/claims/<paper>.yaml``, loaded and checked.

A claims file holds, for one paper,

* ``tables``: each results table the paper prints (and, for the DLM paper, whose results are
  figures, the tables gpdlm lays its figures out as). A table is a grid of **cells**: its ``rows``
  and ``columns`` are lists of **dimensions** (dataset, batch size, method, ...), and a cell is one
  label of every dimension. How a cell finds its runs is explicit: the table's ``match`` (params
  every run of the table has), plus, per dimension label, either ``{key: value}`` of the
  dimension's ``key`` (a param key such as ``trainer.batch_size``, a short name of ``gpdlm
  compare`` such as ``train_size`` = metric ``n_train``, or ``metrics.NAME`` / ``tags.NAME``) or the
  label's own ``match``. A label may also change the cell's ``metric`` (free simulation reads
  ``test_sim_rmse``) or its ``select_by``. Runs of a cell are paired across cells by the paper's
  ``units`` (the seed, or the published split ``dataset.split.mask``); where a cell holds several
  runs of one unit (a beta or learning-rate grid), ``select`` keeps the one with the lowest
  ``select.by`` (the DLM paper's validation selection of beta; the RKHS paper's lowest NLML over
  learning rates). ``paper`` holds the printed numbers, one entry per row of the printed table.
* ``claims``: each a comparison between cells with its paired test: ``better`` (one-sided: the
  ``better`` cell beats each ``than`` cell), ``not_worse`` (non-inferiority within ``margin``),
  ``equivalent`` (two one-sided tests within ``margin``) or ``argmin`` (the best label of
  dimension ``over`` satisfies ``condition``), over every row named by ``where`` (dimensions not
  named: every label), all of them required unless ``require: {at_least: k, over: DIM}``. Each
  claim says which ``data`` it is measured on: the paper's own (``paper``), a byte-exact
  ``mirror`` of it, a ``stand-in`` or a ``generator``. A claim that fails may say why: ``cause:
  {label: LABEL, evidence: "..."}`` (or just the label), LABEL one of ``CAUSES``, the evidence the
  ablation that decided it (numbers, commands, where it is written up); the report shows it next to
  a "fails" verdict only. ``scales`` (default ``[paper]``) lists the ``gpdlm reproduce --scale`` values
  the diagnosis holds for: a verdict other than "holds" whose table's runs are tagged (param
  ``sweep.scale``) with a smaller scale than it covers reads ``smoke scale (not evidence)`` /
  ``reduced scale (not evidence)`` instead (``SCALE_CAUSES``); runs without the tag count as paper scale.

Each table names the ``preset`` (conf/experiment) that measures it, with ``overrides`` (added to
``gpdlm train -m +experiment=PRESET``; ``k=a,b`` sweeps) and ``arms``: further override lists whose
runs belong to the same table (``[model=ssgp]``; a list starting with ``+experiment=NAME`` is another
preset, e.g. an arm preset writing into the same experiment). A table that cannot be run here says
why (``unavailable``) instead. A claim may name its own ``preset``/``overrides`` (the paper's data
set rather than the table's default) and its own ``arms`` (replacing the table's: the baselines that
the claim's data set needs, e.g. a per-data-set preset of inducing-point baselines). Top-level keys starting with ``x-`` hold YAML anchors.

``load(name_or_path)`` returns a checked ``Paper``; every problem is one line (``AnalysisError``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .records import AnalysisError, canon, fmt_value

CLAIMS_DIR = Path(__file__).resolve().parents[1] / "claims"
DATA_KINDS = ("paper", "mirror", "stand-in", "generator")
KINDS = ("better", "not_worse", "equivalent", "argmin")
#: why a claim fails (issue 40): the claim itself holds up in gpdlm's measurements whatever was varied
#: (robust); a larger budget / the paper's protocol changes it (budget-bound, protocol-bound); it fails on
#: the stand-in or generator only and says nothing about the paper's data (stand-in only); a property
#: of the data set (data-specific); gpdlm's own mistake, repaired or not yet (gpdlm defect (fixed/open))
CAUSES = (
    "robust",
    "budget-bound",
    "protocol-bound",
    "stand-in only",
    "data-specific",
    "gpdlm defect (fixed)",
    "gpdlm defect (open)",
    "underpowered",  # the measured effect has the claim's sign, but the units run cannot resolve it (a power computation)
)
#: the scales of ``gpdlm reproduce --scale`` (param ``sweep.scale`` of its runs), smallest first
SCALES = ("smoke", "reduced", "paper")
#: the cause a verdict other than "holds" gets when its table's runs are of a reduced scale (and the
#: claim's own diagnosis does not cover that scale): such runs (few seeds, a tiny budget) cannot decide
#: a claim, so a "fails" there is no evidence against it
SCALE_CAUSES = {"smoke": "smoke scale (not evidence)", "reduced": "reduced scale (not evidence)"}
TESTS = ("ttest", "wilcoxon")
CONDITIONS = ("gt", "ge", "lt", "le", "in")
SEP = " / "  # joins the labels of several column dimensions in a paper entry


def available() -> list[str]:
    """The papers that have a claims file."""
    return sorted(p.stem for p in CLAIMS_DIR.glob("*.yaml"))


# ----- the objects -------------------------------------------------------------------------------------
@dataclass
class PaperValue:
    """A printed cell: its mean, its +- (a standard deviation over the paper's repetitions where the
    paper says so; see the table's ``notes``) and the text as transcribed."""

    mean: float
    spread: float | None
    text: str


@dataclass
class Label:
    """One label of a dimension: how its runs are found and what it changes in the cell."""

    name: str
    match: dict[str, Any]
    metric: str | None = None
    select_by: str | None = None
    quoted: str | None = None  # a row the paper quotes from elsewhere: never run
    note: str = ""


@dataclass
class Dimension:
    name: str
    key: str | None
    labels: list[Label] | None  # None: "auto", the values the runs have (of ``key``)

    @property
    def auto(self) -> bool:
        return self.labels is None

    def label(self, name: str) -> Label:
        if self.labels is None:
            if self.key is None:  # _dimension refuses 'auto' without a key
                raise AnalysisError(f"dimension '{self.name}': values 'auto' needs a key")
            return Label(name, {self.key: _literal(name)})
        for lab in self.labels:
            if lab.name == name:
                return lab
        raise KeyError(name)


@dataclass
class Table:
    id: str
    title: str
    preset: str | None
    overrides: list[str]
    arms: list[list[str]]
    unavailable: str | None
    metric: str
    goal: str
    rows: list[str]
    columns: list[str]
    methods: str  # "columns" or "rows": the axis along which the best and the ranks are taken
    match: dict[str, Any]
    select_over: list[str]
    select_by: str | None
    curves: bool
    decimals: int
    dimensions: dict[str, Dimension]
    paper: dict[tuple[tuple[str, ...], tuple[str, ...]], PaperValue]
    notes: str = ""

    @property
    def dims(self) -> list[str]:
        return self.rows + self.columns

    @property
    def method_dims(self) -> list[str]:
        return self.columns if self.methods == "columns" else self.rows


@dataclass
class Claim:
    id: str
    statement: str
    source: str
    table: str
    preset: str | None
    overrides: list[str]
    data: str
    kind: str
    better: list[dict[str, str]]  # each compared with each of 'than' (argmin: exactly one)
    than: list[dict[str, str]]
    where: dict[str, list[str]]
    over: str | None
    condition: tuple[str, Any] | None
    margin: float | None
    test: str
    alpha: float
    at_least: int | None
    group_over: str | None
    note: str = ""
    cause: str = ""  # one of CAUSES, or "" (not diagnosed)
    cause_evidence: str = ""
    cause_scales: tuple[str, ...] = ("paper",)  # the reproduce scales the cause was diagnosed for
    arms: list[list[str]] | None = None  # the claim's own arms (replace the table's); None: the table's


@dataclass
class Paper:
    name: str
    title: str
    citation: str
    text: str | None
    alpha: float
    test: str
    units: list[str]
    data: dict[str, dict]
    tables: dict[str, Table]
    claims: list[Claim] = field(default_factory=list)
    path: Path | None = None


# ----- loading ---------------------------------------------------------------------------------------
def load(name_or_path: str | Path) -> Paper:
    """The claims of a paper (``dlm``, ``rkhs``, ...) or of a claims file, checked."""
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        if str(name_or_path) not in available():
            raise AnalysisError(
                f"unknown paper '{name_or_path}': choose from {', '.join(available())} "
                f"(or give the path of a claims .yaml file)"
            )
        path = CLAIMS_DIR / f"{name_or_path}.yaml"
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise AnalysisError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    try:
        paper = _paper(raw)
    except AnalysisError as e:
        raise AnalysisError(f"{path.name}: {e}") from None
    paper.path = path
    return paper


def _need(d: dict, key: str, where: str):
    if not isinstance(d, dict) or key not in d:
        raise AnalysisError(f"{where}: missing '{key}'")
    return d[key]


def _only(d: dict, allowed: AbstractSet[str], where: str) -> None:
    extra = set(d) - allowed
    if extra:
        raise AnalysisError(f"{where}: unknown key(s) {', '.join(sorted(map(str, extra)))}")


def _list(v) -> list:
    return v if isinstance(v, list) else [v]


def _literal(name: str):
    """A label's value for a key comparison ('32' -> 32.0, 'pol' -> 'pol')."""
    return canon(name)


def label_name(v) -> str:
    return fmt_value(canon(v)) if not isinstance(v, str) else v


def _paper(raw: dict) -> Paper:
    if not isinstance(raw, dict):
        raise AnalysisError("the file must be a mapping")
    _only(
        {k: v for k, v in raw.items() if not str(k).startswith("x-")},  # x-...: YAML anchors to reuse
        {"paper", "title", "citation", "text", "alpha", "test", "units", "data", "tables", "claims"},
        "top level",
    )
    alpha = float(raw.get("alpha", 0.05))
    test = raw.get("test", "ttest")
    if test not in TESTS:
        raise AnalysisError(f"test '{test}': choose from {', '.join(TESTS)}")
    data = raw.get("data", {}) or {}
    for name, d in data.items():
        if _need(d, "kind", f"data.{name}") not in DATA_KINDS:
            raise AnalysisError(f"data.{name}.kind '{d['kind']}': choose from {', '.join(DATA_KINDS)}")
    tables = {}
    for t in _need(raw, "tables", "top level"):
        table = _table(t)
        if table.id in tables:
            raise AnalysisError(f"table '{table.id}' defined twice")
        tables[table.id] = table
    paper = Paper(
        name=str(_need(raw, "paper", "top level")),
        title=raw.get("title", ""),
        citation=raw.get("citation", ""),
        text=raw.get("text"),
        alpha=alpha,
        test=test,
        units=_list(raw.get("units", ["seed"])),
        data=data,
        tables=tables,
    )
    seen = set()
    for c in raw.get("claims", []) or []:
        claim = _claim(c, paper)
        if claim.id in seen:
            raise AnalysisError(f"claim '{claim.id}' defined twice")
        seen.add(claim.id)
        paper.claims.append(claim)
    return paper


def _table(t: dict) -> Table:
    tid = str(_need(t, "id", "a table"))
    where = f"table {tid}"
    _only(
        t,
        {
            "id",
            "title",
            "preset",
            "overrides",
            "arms",
            "unavailable",
            "metric",
            "goal",
            "rows",
            "columns",
            "methods",
            "match",
            "select",
            "curves",
            "decimals",
            "dimensions",
            "paper",
            "notes",
        },
        where,
    )
    goal = t.get("goal", "min")
    if goal not in ("min", "max"):
        raise AnalysisError(f"{where}: goal '{goal}': min or max")
    rows, columns = _list(_need(t, "rows", where)), _list(_need(t, "columns", where))
    methods = t.get("methods", "columns")
    if methods not in ("columns", "rows"):
        raise AnalysisError(f"{where}: methods '{methods}': columns or rows")
    if not t.get("preset") and not t.get("unavailable"):
        raise AnalysisError(f"{where}: name the preset that measures it, or say why it cannot be run (unavailable)")
    dims = {}
    for name in rows + columns:
        d = _need(_need(t, "dimensions", where), name, where)
        dims[name] = _dimension(name, d, f"{where}, dimension {name}")
    extra = set(t["dimensions"]) - set(dims)
    if extra:
        raise AnalysisError(f"{where}: dimension(s) {', '.join(sorted(extra))} in neither rows nor columns")
    select = t.get("select") or {}
    _only(select, {"over", "by"}, f"{where}, select")
    table = Table(
        id=tid,
        title=t.get("title", tid),
        preset=t.get("preset"),
        overrides=list(t.get("overrides", []) or []),
        arms=_arms(t.get("arms", []) or [], f"{where}, arms"),
        unavailable=t.get("unavailable"),
        metric=str(_need(t, "metric", where)),
        goal=goal,
        rows=rows,
        columns=columns,
        methods=methods,
        match=dict(t.get("match", {}) or {}),
        select_over=_list(select.get("over", [])),
        select_by=select.get("by"),
        curves=bool(t.get("curves", False)),
        decimals=int(t.get("decimals", 3)),
        dimensions=dims,
        paper={},
        notes=t.get("notes", ""),
    )
    table.paper = _paper_values(table, t.get("paper", []) or [], where)
    return table


def _dimension(name: str, d: dict, where: str) -> Dimension:
    if not isinstance(d, dict):
        raise AnalysisError(f"{where}: must be a mapping with 'key' and/or 'values'")
    _only(d, {"key", "values"}, where)
    key = d.get("key")
    values = d.get("values", "auto")
    if values == "auto":
        if not key:
            raise AnalysisError(f"{where}: values 'auto' needs a key")
        return Dimension(name, key, None)
    labels = []
    if isinstance(values, list):
        if not key:
            raise AnalysisError(f"{where}: a list of values needs a key (or give each value a match)")
        labels = [Label(label_name(v), {key: v}) for v in values]
    elif isinstance(values, dict):
        for lname, spec in values.items():
            spec = spec or {}
            _only(spec, {"match", "metric", "select_by", "quoted", "note"}, f"{where}, value {lname}")
            match = dict(spec.get("match", {}) or {})
            if not match and key:
                match = {key: lname}
            if not match and "match" not in spec and not spec.get("quoted"):  # match: {} = every run of the table
                raise AnalysisError(f"{where}, value {lname}: no match and no key")
            labels.append(
                Label(
                    label_name(lname),
                    match,
                    spec.get("metric"),
                    spec.get("select_by"),
                    spec.get("quoted"),
                    spec.get("note", ""),
                )
            )
    else:
        raise AnalysisError(f"{where}: values must be 'auto', a list or a mapping")
    if len({lab.name for lab in labels}) != len(labels):
        raise AnalysisError(f"{where}: repeated labels")
    return Dimension(name, key, labels)


NUMBER = r"[-\u2212]?\d+(?:\.\d+)?"
CELL = re.compile(rf"^\s*({NUMBER})\s*(?:(?:\u00b1|\+-|\+/-)\s*({NUMBER}))?\s*$")


def parse_value(text) -> PaperValue:
    """'-1.482 ± 0.249' -> PaperValue(-1.482, 0.249, ...); '4.73' -> PaperValue(4.73, None, ...)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return PaperValue(float(text), None, str(text))
    m = CELL.match(str(text))
    if not m:
        raise AnalysisError(f"paper value '{text}': expected 'MEAN' or 'MEAN ± SPREAD'")
    num = lambda s: float(s.replace("\u2212", "-"))  # noqa: E731
    return PaperValue(num(m.group(1)), num(m.group(2)) if m.group(2) else None, str(text).strip())


def _paper_values(table: Table, entries: list, where: str) -> dict:
    """{(row labels, column labels): PaperValue}: one entry per printed row of the table, its
    row-dimension labels as fields and one field per column (labels of several column dimensions
    joined by ' / ')."""
    line_dims, cross_dims = table.rows, table.columns
    cross = (
        {SEP.join(c): c for c in itertools.product(*(_labels_of(table, d) for d in cross_dims))}
        if all(not table.dimensions[d].auto for d in cross_dims)
        else None
    )
    out = {}
    for e in entries:
        if not isinstance(e, dict):
            raise AnalysisError(f"{where}: a paper entry must be a mapping")
        row = []
        for d in line_dims:
            if d not in e:
                raise AnalysisError(f"{where}: paper entry {e} has no '{d}'")
            name = label_name(e[d])
            if not table.dimensions[d].auto and name not in _labels_of(table, d):
                raise AnalysisError(f"{where}: paper entry names {d} '{name}', not a label of the dimension")
            row.append(name)
        for k, v in e.items():
            if k in line_dims:
                continue
            if cross is None or k not in cross:
                raise AnalysisError(f"{where}: paper entry column '{k}' is not a label of {SEP.join(cross_dims)}")
            if v is None:
                continue
            out[(tuple(row), tuple(cross[k]))] = parse_value(v)
    return out


def _labels_of(table: Table, dim: str) -> list[str]:
    d = table.dimensions[dim]
    return [lab.name for lab in d.labels] if d.labels is not None else []


def _selector(table: Table, sel, where: str, many: bool) -> list[dict[str, str]]:
    """A claim's cell selector {dim: label or [labels]} as a list of {dim: label} (the product)."""
    if sel is None:
        return [{}]
    if not isinstance(sel, dict):
        raise AnalysisError(f"{where}: must be a mapping of dimension -> label(s)")
    keys = list(sel)
    for k in keys:
        if k not in table.dimensions:
            raise AnalysisError(f"{where}: '{k}' is not a dimension of table {table.id} ({', '.join(table.dims)})")
        for v in _list(sel[k]):
            if not table.dimensions[k].auto and label_name(v) not in _labels_of(table, k):
                raise AnalysisError(
                    f"{where}: '{label_name(v)}' is not a label of {k} ({', '.join(_labels_of(table, k))})"
                )
    combos = [
        dict(zip(keys, (label_name(v) for v in vals))) for vals in itertools.product(*(_list(sel[k]) for k in keys))
    ]
    if not many and len(combos) != 1:
        raise AnalysisError(f"{where}: must name one label per dimension")
    return combos


#: the keys a claim may have (claims/README: the claim format)
_CLAIM_KEYS = frozenset(
    {
        "id",
        "statement",
        "source",
        "table",
        "preset",
        "overrides",
        "data",
        "kind",
        "better",
        "than",
        "where",
        "over",
        "condition",
        "margin",
        "test",
        "alpha",
        "require",
        "note",
        "cause",
        "arms",
    }
)


def _claim_table(c: dict, paper: Paper, where: str) -> tuple[str, Table]:
    """The claim's table: its id and the paper's ``Table``."""
    tid = _need(c, "table", where)
    if tid not in paper.tables:
        raise AnalysisError(f"{where}: unknown table '{tid}' ({', '.join(paper.tables)})")
    return tid, paper.tables[tid]


def _kind_data_test(c: dict, paper: Paper, where: str) -> tuple[str, str, str]:
    """The claim's ``kind`` (default better), ``data`` and ``test`` (default: the paper's), checked."""
    kind = c.get("kind", "better")
    if kind not in KINDS:
        raise AnalysisError(f"{where}: kind '{kind}': choose from {', '.join(KINDS)}")
    data = _need(c, "data", where)
    if data not in DATA_KINDS:
        raise AnalysisError(f"{where}: data '{data}': choose from {', '.join(DATA_KINDS)}")
    test = c.get("test", paper.test)
    if test not in TESTS:
        raise AnalysisError(f"{where}: test '{test}': choose from {', '.join(TESTS)}")
    return kind, data, test


def _compared(c: dict, table: Table, kind: str, where: str) -> tuple[list, list]:
    """``(better, than)``: the cells the claim compares (argmin: one ``better`` cell, no ``than``);
    ``than`` names only dimensions ``better`` names (the others are iterated for both)."""
    better = _selector(table, c.get("better"), f"{where}, better", many=kind != "argmin")
    named = set(better[0])
    if kind == "argmin":
        return better, []
    than = _selector(table, c.get("than"), f"{where}, than", many=True)
    if not c.get("than"):
        raise AnalysisError(f"{where}: kind {kind} needs 'than'")
    for t in than:
        if set(t) - named:
            raise AnalysisError(
                f"{where}: 'than' names {', '.join(sorted(set(t) - named))}, which "
                f"'better' does not (a dimension 'better' leaves out is iterated for both)"
            )
    return better, than


def _where_sets(c: dict, table: Table, named: set, where: str) -> dict[str, list[str]]:
    """The claim's ``where``: {dimension: labels} the cells are restricted to, none of them in ``better``."""
    wh = c.get("where") or {}
    _selector(table, wh, f"{where}, where", many=True)  # checks the labels
    where_sets = {k: [label_name(v) for v in _list(v)] for k, v in wh.items()}
    if set(where_sets) & named:
        raise AnalysisError(f"{where}: a dimension is in both 'where' and 'better'")
    return where_sets


def _argmin_terms(c: dict, table: Table, tid: str, named: set, where_sets: dict, where: str):
    """An argmin claim's ``(over, condition)``: the free dimension the minimum is taken over and the
    condition {op: value} its argmin must satisfy."""
    over = _need(c, "over", where)
    if over not in table.dimensions or over in named or over in where_sets:
        raise AnalysisError(f"{where}: 'over' must be a dimension of table {tid} that better/where leave free")
    cond = _need(c, "condition", where)
    if not (isinstance(cond, dict) and len(cond) == 1 and next(iter(cond)) in CONDITIONS):
        raise AnalysisError(f"{where}: condition must be one of {{{', '.join(CONDITIONS)}: value}}")
    return over, next(iter(cond.items()))


def _requirement(c: dict, table: Table, tid: str, named: set, where: str) -> tuple[Any, Any]:
    """The claim's ``require``: ``(at_least, over)``, both or neither (over: a dimension ``better`` leaves free)."""
    req = c.get("require") or {}
    _only(req, {"at_least", "over"}, f"{where}, require")
    at_least = req.get("at_least")
    group_over = req.get("over")
    if (at_least is None) != (group_over is None):
        raise AnalysisError(f"{where}: require needs both at_least and over")
    if group_over is not None and (group_over not in table.dimensions or group_over in named):
        raise AnalysisError(f"{where}: require.over must be a dimension of table {tid} that 'better' leaves free")
    return at_least, group_over


def _cause(c: dict, where: str) -> dict:
    """The claim's ``cause``: {label, evidence, scales} (a bare value is the label), the label one of CAUSES,
    the scales (default [paper]) a list of SCALES."""
    cause = c.get("cause") or {}
    if not isinstance(cause, dict):
        cause = {"label": cause}
    _only(cause, {"label", "evidence", "scales"}, f"{where}, cause")
    if cause and cause.get("label") not in CAUSES:
        raise AnalysisError(f"{where}: cause label {cause.get('label')!r}: choose from {', '.join(CAUSES)}")
    scales = cause.get("scales", ["paper"])
    if not isinstance(scales, list) or not scales or any(s not in SCALES for s in scales):
        raise AnalysisError(f"{where}: cause scales {scales!r}: a list of {', '.join(SCALES)}")
    return cause


def _claim(c: dict, paper: Paper) -> Claim:
    """One claim of a claims file, checked key by key (the first bad key raises ``AnalysisError``)."""
    cid = str(_need(c, "id", "a claim"))
    where = f"claim {cid}"
    _only(c, _CLAIM_KEYS, where)
    tid, table = _claim_table(c, paper, where)
    kind, data, test = _kind_data_test(c, paper, where)
    better, than = _compared(c, table, kind, where)
    named = set(better[0])
    where_sets = _where_sets(c, table, named, where)
    margin = c.get("margin")
    if kind in ("not_worse", "equivalent"):
        if not isinstance(margin, (int, float)) or margin <= 0:
            raise AnalysisError(f"{where}: kind {kind} needs a margin > 0 (in the metric's units)")
    over, condition = _argmin_terms(c, table, tid, named, where_sets, where) if kind == "argmin" else (None, None)
    at_least, group_over = _requirement(c, table, tid, named, where)
    preset = c.get("preset", table.preset)
    if not preset and not table.unavailable:
        raise AnalysisError(f"{where}: name the preset that measures it")
    cause = _cause(c, where)
    return Claim(
        id=cid,
        statement=str(_need(c, "statement", where)),
        source=str(c.get("source", "")),
        table=tid,
        preset=preset,
        overrides=list(c.get("overrides", table.overrides) or []),
        data=data,
        kind=kind,
        better=better,
        than=than,
        where=where_sets,
        over=over,
        condition=condition,
        margin=float(margin) if margin is not None else None,
        test=test,
        alpha=float(c.get("alpha", paper.alpha)),
        at_least=int(at_least) if at_least is not None else None,
        group_over=group_over,
        note=c.get("note", ""),
        cause=str(cause.get("label", "")),
        cause_evidence=" ".join(str(cause.get("evidence", "")).split()),
        cause_scales=tuple(cause.get("scales", ["paper"])),
        arms=_arms(c["arms"], f"{where}, arms") if "arms" in c else None,
    )


def _arms(arms, where: str) -> list[list[str]]:
    """A list of override lists (``[[model=ssgp], [+experiment=pic_airline]]``), checked."""
    if not isinstance(arms, list) or not all(
        isinstance(a, list) and all(isinstance(o, str) and "=" in o for o in a) for a in arms
    ):
        raise AnalysisError(f"{where}: must be a list of override lists, e.g. [[model=ssgp], [+experiment=NAME]]")
    return [list(a) for a in arms]


def condition_holds(condition: tuple[str, Any], label: str) -> bool:
    """Does a label of the 'over' dimension satisfy an argmin claim's condition?"""
    op, ref = condition
    if op == "in":
        return label in [label_name(v) for v in _list(ref)]
    value = canon(label)
    if not isinstance(value, float):
        return False
    ref = float(ref)
    return {"gt": value > ref, "ge": value >= ref, "lt": value < ref, "le": value <= ref}[op]


def is_number(label: str) -> bool:
    v = canon(label)
    return isinstance(v, float) and math.isfinite(v)
