"""``gpdlm report``'s outputs: Markdown, LaTeX and a self-contained HTML page (figures inline as
base64 PNG), plus the CSV files of the cells and the verdicts.

A cell shows mean +- standard error over the units (seeds or splits) and n, then the paper's number
where it prints one; the best cell along the methods' axis is bold and the cells within one
standard error of it carry a dagger. Each table ends with the average ranks (gpdlm's, and the
paper's own from its printed numbers), the claims section lists every verdict with its test.
"""

from __future__ import annotations

import base64
import html
import io
import math

from . import records as R
from . import stats
from . import tables as T
from .claims import SCALE_CAUSES, SEP, is_number
from .report import FAILS, HOLDS, NOT_MEASURED, Report, TableReport, Verdict, counts

DAGGER = "\u2020"
NOTE_BEST = (
    "bold: best along the methods; " + DAGGER + ": within one standard error of the best; "
    "'paper': the printed number; '-': no run"
)


# ----- numbers ----------------------------------------------------------------------------------------
def fmt(x: float | None, decimals: int) -> str:
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "-"
    return f"{x:.{decimals}f}"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def cell_parts(cell, decimals: int) -> tuple[str, str]:
    """(gpdlm's value, the paper's value) as plain text."""
    if cell.quoted:
        ours = "quoted, not run"
    elif not cell.measured:
        ours = "-"
    else:
        ours = fmt(cell.mean, decimals)
        if math.isfinite(cell.se):
            ours += f" ± {fmt(cell.se, decimals)}"
        ours += f" (n={cell.n})"
    paper = ""
    if cell.paper is not None:
        paper = fmt(cell.paper.mean, decimals) + (
            f" ± {fmt(cell.paper.spread, decimals)}" if cell.paper.spread is not None else ""
        )
    return ours, paper


def key_label(key: tuple) -> str:
    return SEP.join(map(str, key))


def _scale_bound(v: Verdict) -> bool:
    """Is a verdict other than "holds" read from reduced-scale runs its claim's diagnosis does not cover?"""
    return v.verdict != HOLDS and v.scale in SCALE_CAUSES and v.scale not in v.claim.cause_scales


def cause_of(v: Verdict) -> str:
    """The verdict's cause label: ``claims.SCALE_CAUSES[scale]`` ("smoke scale (not evidence)") for a verdict
    other than "holds" whose table's runs are of a reduced ``gpdlm reproduce`` scale that the claim's own
    diagnosis does not cover; else the claim's cause label (``claims.CAUSES``) when its verdict is "fails";
    else ""."""
    if _scale_bound(v):
        return SCALE_CAUSES[v.scale]
    return v.claim.cause if v.verdict == FAILS else ""


def cause_evidence_of(v: Verdict) -> str:
    """What decided ``cause_of(v)``: the claim's ``cause.evidence``, or for a scale label the scale and the
    claim's diagnosis at the scales it covers (if any)."""
    c = v.claim
    if _scale_bound(v):
        text = (
            f"Table {c.table}'s runs are `gpdlm reproduce --scale {v.scale}` runs (param sweep.scale): "
            f"{SCALE_RUNS[v.scale]}, too small to decide the claim; rerun at `--scale paper` for a verdict"
        )
        if c.cause:
            text += f". gpdlm's diagnosis at scale {', '.join(c.cause_scales)}: {c.cause}" + (
                f" ({c.cause_evidence})" if c.cause_evidence else ""
            )
        return text
    return c.cause_evidence if cause_of(v) else ""


#: what the runs of a reduced ``gpdlm reproduce`` scale are (``claims/reproduce/scales.yaml``)
SCALE_RUNS = {
    "smoke": "a check that the pipeline runs (the smoke presets: a small offline grid, 2 epochs, two seeds or masks)",
    "reduced": "the paper's presets with two seeds (masks) and fewer epochs",
}


def scale_legend(report: Report) -> list[str]:
    """The report's legend line of each scale cause label its verdicts carry (none at paper scale)."""
    scales = sorted({v.scale for v in report.verdicts if _scale_bound(v)}, key=list(SCALE_CAUSES).index)
    return [
        f"cause '{SCALE_CAUSES[s]}': the claim's table was run by `gpdlm reproduce --scale {s}`, {SCALE_RUNS[s]}: "
        "a test that cannot resolve the claim, so its 'fails' or 'not measured' is no evidence against it"
        for s in scales
    ]


def verdict_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    header = ["claim", "verdict", "cause", "n", "test", "p", "data", "preset", "statement"]
    rows = []
    for v in report.verdicts:
        c = v.claim
        lo, hi = v.n_range
        rows.append(
            [
                c.id,
                v.verdict,
                cause_of(v) or "-",
                "-" if not hi else (str(lo) if lo == hi else f"{lo}-{hi}"),
                describe_test(v),
                fmt_p(v.p),
                c.data,
                c.preset or "-",
                c.statement,
            ]
        )
    return header, rows


def describe_test(v: Verdict) -> str:
    c = v.claim
    what = {
        "better": "one-sided",
        "argmin": "one-sided, best vs best",
        "not_worse": f"non-inferiority, margin {c.margin:g}" if c.margin else "non-inferiority",
        "equivalent": f"TOST, margin {c.margin:g}" if c.margin else "TOST",
    }[c.kind]
    return f"{stats.TEST_NAMES[c.test]} ({what}), alpha={c.alpha:g}"


def comparison_text(comp, table) -> str:
    def name(assign):
        return ", ".join(f"{d}={assign[d]}" for d in table.dims if d in assign)

    a, b = name(comp.a), name(comp.b)
    diff = {k: v for k, v in comp.b.items() if comp.a.get(k) != v}
    b_short = ", ".join(f"{k}={v}" for k, v in diff.items()) or b
    res = comp.result
    if res is None or res.p is None:
        n = res.n if res is not None else 0
        why = comp.note or (f"n={n}" if n else "a cell has no run")
        return f"[{a}] vs [{b_short}]: not measured ({why})"
    return (
        f"[{a}] vs [{b_short}]: {comp.status}, n={res.n}, mean difference {res.mean_diff:+.4g} "
        f"(negative: first better), p={fmt_p(res.p)}" + (f"; {comp.note}" if comp.note else "")
    )


# ----- Markdown ---------------------------------------------------------------------------------------
def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|")


def _md_cell(cell, decimals: int) -> str:
    ours, paper = cell_parts(cell, decimals)
    if cell.best:
        ours = f"**{ours}**"
    elif cell.near:
        ours += DAGGER
    return ours + (f" [paper {paper}]" if paper else "")


def table_grid(tr: TableReport) -> tuple[list[str], list[list]]:
    """(header, rows) with Cell objects in the cells: the paper's layout, plus a rank row/column."""
    t = tr.table
    header = list(t.rows) + [key_label(c) for c in tr.col_keys]
    rows = []
    for r in tr.row_keys:
        rows.append(list(r) + [tr.cells[(r, c)] for c in tr.col_keys])
    return header, rows


def rank_text(tr: TableReport, i: int) -> str:
    ours = tr.ranks[i] if tr.ranks else None
    paper = tr.paper_ranks[i] if tr.paper_ranks else None
    text = "-" if ours is None else f"{ours:.2f}"
    if paper is not None:
        text += f" [paper {paper:.2f}]"
    return text


def markdown(report: Report) -> str:
    p = report.paper
    c = counts(report)
    out = [f"# {p.title or p.name}: results and claims", ""]
    if p.citation:
        out += [p.citation, ""]
    out += [
        f"Experiment(s): {', '.join(report.experiments) or '-'}; {report.n_runs} FINISHED training runs read. "
        f"Claims: {c[HOLDS]} hold, {c[FAILS]} fail, {c[NOT_MEASURED]} not measured. "
        f"Cells: mean ± standard error over {', '.join(p.units)} (n units), {NOTE_BEST}.",
        "",
    ]
    for note in report.notes:
        out.append(f"> note: {note}")
    out += _md_provenance(report)
    out += ["## Claims", ""]
    header, rows = verdict_rows(report)
    out.append(T.markdown_table(header, rows))
    legend = scale_legend(report)
    if legend:
        out += [f"> {line}." for line in legend] + [""]
    for v in report.verdicts:
        cause = cause_of(v)
        evidence = cause_evidence_of(v)
        out += [
            f"### {v.claim.id}: {v.verdict}" + (f" ({cause})" if cause else ""),
            "",
            f"{v.claim.statement} ({v.claim.source}; table {v.claim.table}, data: {v.claim.data}). {v.detail}.",
            "",
        ]
        if cause:
            out += [f"Cause: **{cause}**" + (f". {evidence}" if evidence else ""), ""]
        table = next(tr.table for tr in report.tables if tr.table.id == v.claim.table)
        out += [f"* {comparison_text(comp, table)}" for comp in v.comparisons] + [""]
    out += ["## Tables", ""]
    for tr in report.tables:
        out += _md_table(tr)
    return "\n".join(out) + "\n"


def provenance_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """One row per experiment read: runs, protocol, datasets, code commit, dates, training time."""

    def counted(d: dict) -> str:
        return ", ".join(f"{k} ({n})" for k, n in d.items()) or "-"

    header = [
        "experiment",
        "runs",
        "protocol (runs)",
        "datasets (runs)",
        "code commit (runs)",
        "first run",
        "last run",
        "training hours",
        "run hours",
    ]
    rows = [
        [
            p.experiment,
            str(p.n_runs),
            counted(p.protocols),
            counted(p.datasets),
            counted(p.commits),
            p.first,
            p.last,
            f"{p.train_hours:.2f}",
            f"{p.run_hours:.2f}",
        ]
        for p in report.provenance
    ]
    return header, rows


def _md_provenance(report: Report) -> list[str]:
    out = []
    if report.study.strip():
        out += ["## The study", "", report.study.strip(), ""]
    if report.provenance:
        out += [
            "## The runs read",
            "",
            "Read from the runs' own tags, params and metrics (training hours: the sum "
            "of their `train_seconds`, one process each; run hours: the sum of their start-to-end times, "
            "which adds data loading, evaluation and logging).",
            "",
        ]
        out += [T.markdown_table(*provenance_rows(report)), ""]
    return out


def _md_table(tr: TableReport) -> list[str]:
    t = tr.table
    out = [f"### {t.title}", ""]
    out.append(_meta(tr))
    out.append("")
    header, rows = table_grid(tr)
    body = [
        [_md_escape(x) if not hasattr(x, "measured") else _md_escape(_md_cell(x, t.decimals)) for x in row]
        for row in rows
    ]
    if t.methods == "columns":
        body.append(["average rank"] + [""] * (len(t.rows) - 1) + [rank_text(tr, i) for i in range(len(tr.col_keys))])
    else:
        header = header + ["average rank"]
        for i, row in enumerate(body):
            row.append(rank_text(tr, i))
    out.append(T.markdown_table(header, body))
    for note in tr.notes:
        out.append(f"> note: {note}")
    out.append("")
    return out


def _meta(tr: TableReport) -> str:
    t = tr.table
    parts = [
        f"metric `{t.metric}` ({'lower' if t.goal == 'min' else 'higher'} is better)",
        f"preset `{t.preset}`" + (f" with `{' '.join(t.overrides)}`" if t.overrides else "")
        if t.preset
        else f"not runnable here: {t.unavailable}",
    ]
    if t.select_by:
        parts.append(
            f"per unit the run with the lowest `{t.select_by}` over {', '.join(f'`{k}`' for k in t.select_over) or 'its runs'}"
        )
    parts.append(
        f"{tr.n_runs} runs; average ranks over the {tr.ranked_rows} complete line(s) (every measured method has a value)"
    )
    text = "; ".join(parts) + "."
    if t.notes:
        text += " " + " ".join(str(t.notes).split())
    return text


# ----- LaTeX ------------------------------------------------------------------------------------------
_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def tex(s) -> str:
    s = "".join(_TEX.get(ch, ch) for ch in str(s))
    return s.replace("±", r"$\pm$").replace(DAGGER, r"$^\dagger$").replace("\u2212", "-")


def _tex_cell(cell, decimals: int) -> str:
    ours, paper = cell_parts(cell, decimals)
    ours = tex(ours)
    if cell.best:
        ours = r"\textbf{" + ours + "}"
    elif cell.near:
        ours += r"$^\dagger$"
    if paper:
        ours += r" {\scriptsize[" + tex(paper) + "]}"
    return ours


def latex(report: Report) -> str:
    p = report.paper
    c = counts(report)
    out = [
        r"% gpdlm report: needs \usepackage{booktabs}",
        r"\section*{" + tex(p.title or p.name) + "}",
        tex(
            f"Experiment(s): {', '.join(report.experiments) or '-'}; {report.n_runs} runs. Claims: {c[HOLDS]} hold, "
            f"{c[FAILS]} fail, {c[NOT_MEASURED]} not measured. Cells: mean ± standard error over "
            f"{', '.join(p.units)}, {NOTE_BEST}."
        )
        + "",
        "",
    ]
    header, rows = provenance_rows(report)
    out += [f"% runs read -- {'; '.join(f'{h}: {v}' for h, v in zip(header, row))}" for row in rows]
    for tr in report.tables:
        t = tr.table
        header, rows = table_grid(tr)
        ncols = len(header) + (1 if t.methods == "rows" else 0)
        out += [
            r"\begin{table}[ht]\centering\small",
            r"\caption{" + tex(t.title) + "}",
            r"\begin{tabular}{" + "l" * len(t.rows) + "r" * (ncols - len(t.rows)) + "}",
            r"\toprule",
            " & ".join(tex(h) for h in header + (["average rank"] if t.methods == "rows" else [])) + r" \\",
            r"\midrule",
        ]
        for i, row in enumerate(rows):
            cells = [tex(x) if not hasattr(x, "measured") else _tex_cell(x, t.decimals) for x in row]
            if t.methods == "rows":
                cells.append(tex(rank_text(tr, i)))
            out.append(" & ".join(cells) + r" \\")
        if t.methods == "columns":
            out += [
                r"\midrule",
                " & ".join(
                    ["average rank"]
                    + [""] * (len(t.rows) - 1)
                    + [tex(rank_text(tr, i)) for i in range(len(tr.col_keys))]
                )
                + r" \\",
            ]
        out += [r"\bottomrule", r"\end{tabular}", r"\par\footnotesize " + tex(_meta(tr)), r"\end{table}", ""]
    header, rows = verdict_rows(report)
    out += [
        r"\begin{table}[ht]\centering\footnotesize",
        r"\caption{Claims}",
        r"\begin{tabular}{lllllllp{6cm}}",
        r"\toprule",
        " & ".join(tex(h) for h in header if h != "preset") + r" \\",
        r"\midrule",
    ]
    for row in rows:
        out.append(" & ".join(tex(x) for h, x in zip(header, row) if h != "preset") + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    out += [r"\par\footnotesize " + tex(line) + "." for line in scale_legend(report)]
    out += [r"\end{table}", ""]
    return "\n".join(out)


# ----- figures ----------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _grid(n: int):
    plt = _plt()
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.8 * ncols, 3.5 * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def figures(tr: TableReport, client=None) -> list[tuple[str, bytes]]:
    """The paper's figure types for a table: its metric against every numeric row dimension (training
    size, beta, batch size; a panel per combination of the other row dimensions, a line per method,
    mean +- SE), and learning curves from the selected runs' step metrics (tables with curves)."""
    t = tr.table
    out = []
    if t.methods == "columns":
        for d in t.rows:
            labels = tr.labels[d]
            if len(labels) < 2 or not all(is_number(x) for x in labels):
                continue
            png = _figure_vs(tr, d)
            if png:
                out.append((f"{t.metric} vs {d}", png))
    if t.curves and client is not None:
        png = _figure_curves(tr, client)
        if png:
            out.append((f"learning curves: {t.metric}", png))
    return out


def _number(label: str) -> float:
    """A label of a dimension whose labels are all numbers (``is_number``), as the number."""
    v = R.canon(label)
    if not isinstance(v, float):
        raise ValueError(f"label {label!r} is not a number")
    return v


def _figure_vs(tr: TableReport, dim: str) -> bytes | None:
    t = tr.table
    others = [d for d in t.rows if d != dim]
    panels = list(dict.fromkeys(tuple(r[t.rows.index(d)] for d in others) for r in tr.row_keys))
    series = []
    for panel in panels:
        lines = []
        for col in tr.col_keys:
            pts = []
            for row in tr.row_keys:
                if tuple(row[t.rows.index(d)] for d in others) != panel:
                    continue
                c = tr.cells[(row, col)]
                if c.measured:
                    pts.append((_number(row[t.rows.index(dim)]), c.mean, 0.0 if math.isnan(c.se) else c.se))
            if pts:
                lines.append((key_label(col), sorted(pts)))
        series.append((panel, lines))
    if not any(len(pts) >= 2 for _, lines in series for _, pts in lines):
        return None
    fig, axes = _grid(len(series))
    for ax, (panel, lines) in zip(axes, series):
        for i, (name, pts) in enumerate(lines):
            xs, ys, es = zip(*pts)
            ax.errorbar(
                xs, ys, yerr=es, marker="o", ms=4, capsize=3, lw=1.2, label=name, color=_plt().get_cmap("tab10")(i % 10)
            )
        xs_all = [x for _, pts in lines for x, _, _ in pts]
        if xs_all and min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 10:
            ax.set_xscale("log")
        ax.set_xlabel(dim)
        ax.set_ylabel(t.metric)
        ax.set_title(", ".join(panel) or t.title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def _figure_curves(tr: TableReport, client) -> bytes | None:
    t = tr.table
    series = []
    for row in tr.row_keys:
        lines = []
        for col in tr.col_keys:
            c = tr.cells[(row, col)]
            hs = []
            for run in c.runs.values():
                pts = {int(m.step): float(m.value) for m in client.get_metric_history(run.run_id, c.metric)}
                if len(pts) > 1:
                    hs.append(pts)
            if not hs:
                continue
            steps = sorted(set.intersection(*(set(h) for h in hs)))
            if len(steps) < 2:
                steps = sorted(set.union(*(set(h) for h in hs)))
            ys = [R.mean_se([h[s] for h in hs if s in h])[0] for s in steps]
            lines.append((key_label(col) + (f" (n={len(hs)})" if len(hs) > 1 else ""), steps, ys))
        if lines:
            series.append((key_label(row), lines))
    if not series:
        return None
    fig, axes = _grid(len(series))
    for ax, (title, lines) in zip(axes, series):
        for i, (name, xs, ys) in enumerate(lines):
            ax.plot(xs, ys, marker="o", ms=2.5, lw=1.2, label=name, color=_plt().get_cmap("tab10")(i % 10))
        ax.set_xlabel("iteration")
        ax.set_ylabel(t.metric)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


# ----- HTML -------------------------------------------------------------------------------------------
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f2f2f2}td.k{text-align:left}.paper{color:#777;font-size:11px}.best{font-weight:bold}
.holds{background:#d8f0d8}.fails{background:#f6d5d5}.not-measured{background:#eee}.meta,.note{color:#555;font-size:12px}
td.s{text-align:left;max-width:40em}img{max-width:100%;border:1px solid #ddd;margin:.4em 0}"""


def _h(s) -> str:
    return html.escape(str(s))


def _html_cell(cell, decimals: int) -> str:
    ours, paper = cell_parts(cell, decimals)
    text = _h(ours) + (DAGGER if cell.near else "")
    cls = ' class="best"' if cell.best else ""
    return f"<td{cls}>{text}" + (f'<br><span class="paper">paper {_h(paper)}</span>' if paper else "") + "</td>"


def html_page(report: Report, figs: dict | None = None) -> str:
    """The report as one HTML file: no external resources (figures inline as base64 PNG)."""
    p = report.paper
    c = counts(report)
    figs = figs or {}
    out = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{_h(p.title or p.name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{_h(p.title or p.name)}: results and claims</h1>",
    ]
    if p.citation:
        out.append(f"<p>{_h(p.citation)}</p>")
    out.append(
        f'<p class="meta">Experiment(s): {_h(", ".join(report.experiments) or "-")}; {report.n_runs} FINISHED '
        f"training runs. Claims: {c[HOLDS]} hold, {c[FAILS]} fail, {c[NOT_MEASURED]} not measured. Cells: mean "
        f"± standard error over {_h(', '.join(p.units))}; {_h(NOTE_BEST)}.</p>"
    )
    out += [f'<p class="note">note: {_h(n)}</p>' for n in report.notes]
    if report.study.strip():
        out += ["<h2>The study</h2>", f"<pre>{_h(report.study.strip())}</pre>"]
    if report.provenance:
        header, rows = provenance_rows(report)
        out += ["<h2>The runs read</h2>", "<table><tr>" + "".join(f"<th>{_h(x)}</th>" for x in header) + "</tr>"]
        out += ["<tr>" + "".join(f"<td>{_h(x)}</td>" for x in row) + "</tr>" for row in rows]
        out.append("</table>")
    out.append("<h2>Claims</h2>")
    header, rows = verdict_rows(report)
    out.append("<table><tr>" + "".join(f"<th>{_h(x)}</th>" for x in header) + "</tr>")
    for row, v in zip(rows, report.verdicts):
        cls = v.verdict.replace(" ", "-")
        tds = []
        for h, x in zip(header, row):
            klass = (
                f' class="{cls}"'
                if h == "verdict"
                else (' class="s"' if h == "statement" else ' class="k"' if h == "claim" else "")
            )
            tds.append(f"<td{klass}>{_h(x)}</td>")
        out.append("<tr>" + "".join(tds) + "</tr>")
    out.append("</table>")
    out += [f'<p class="note">{_h(line)}.</p>' for line in scale_legend(report)]
    out.append("<details><summary>every comparison</summary><ul>")
    for v in report.verdicts:
        table = next(tr.table for tr in report.tables if tr.table.id == v.claim.table)
        out.append(f"<li><b>{_h(v.claim.id)}</b> ({_h(v.verdict)}): {_h(v.detail)}<ul>")
        out += [f"<li>{_h(comparison_text(comp, table))}</li>" for comp in v.comparisons]
        out.append("</ul></li>")
    out.append("</ul></details>")
    out.append("<h2>Tables</h2>")
    for tr in report.tables:
        t = tr.table
        out += [f"<h3>{_h(t.title)}</h3>", f'<p class="meta">{_h(_meta(tr))}</p>']
        header, rows = table_grid(tr)
        extra = ["average rank"] if t.methods == "rows" else []
        out.append("<table><tr>" + "".join(f"<th>{_h(x)}</th>" for x in header + extra) + "</tr>")
        for i, row in enumerate(rows):
            tds = [
                f'<td class="k">{_h(x)}</td>' if not hasattr(x, "measured") else _html_cell(x, t.decimals) for x in row
            ]
            if t.methods == "rows":
                tds.append(f"<td>{_h(rank_text(tr, i))}</td>")
            out.append("<tr>" + "".join(tds) + "</tr>")
        if t.methods == "columns":
            out.append(
                '<tr><td class="k">average rank</td>'
                + "<td></td>" * (len(t.rows) - 1)
                + "".join(f"<td>{_h(rank_text(tr, i))}</td>" for i in range(len(tr.col_keys)))
                + "</tr>"
            )
        out.append("</table>")
        out += [f'<p class="note">note: {_h(n)}</p>' for n in tr.notes]
        for title, png in figs.get(t.id, []):
            out.append(f"<h4>{_h(title)}</h4>")
            out.append(f'<img alt="{_h(title)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ----- CSV --------------------------------------------------------------------------------------------
def cells_csv_rows(report: Report) -> tuple[list[str], list[list]]:
    header = [
        "table",
        "row",
        "column",
        "metric",
        "mean",
        "se",
        "n",
        "best",
        "within_1se",
        "paper_mean",
        "paper_spread",
        "units",
        "run_ids",
    ]
    rows = []
    for tr in report.tables:
        for (r, c), cell in tr.cells.items():
            rows.append(
                [
                    tr.table.id,
                    key_label(r),
                    key_label(c),
                    cell.metric,
                    cell.mean if cell.measured else None,
                    cell.se if cell.measured else None,
                    cell.n,
                    int(cell.best),
                    int(cell.near),
                    cell.paper.mean if cell.paper else None,
                    cell.paper.spread if cell.paper else None,
                    ";".join(",".join(R.fmt_value(x) for x in u) for u in sorted(cell.values, key=repr)),
                    ";".join(run.run_id for run in cell.runs.values()),
                ]
            )
    return header, rows


def verdicts_csv_rows(report: Report) -> tuple[list[str], list[list]]:
    header = [
        "claim",
        "table",
        "kind",
        "verdict",
        "cause",
        "n_min",
        "n_max",
        "p",
        "test",
        "alpha",
        "margin",
        "data",
        "preset",
        "detail",
        "cause_evidence",
        "statement",
    ]
    rows = []
    for v in report.verdicts:
        c = v.claim
        lo, hi = v.n_range
        cause = cause_of(v)
        rows.append(
            [
                c.id,
                c.table,
                c.kind,
                v.verdict,
                cause,
                lo,
                hi,
                v.p,
                c.test,
                c.alpha,
                c.margin,
                c.data,
                c.preset or "",
                v.detail,
                cause_evidence_of(v),
                c.statement,
            ]
        )
    return header, rows
