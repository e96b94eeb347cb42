"""Summaries of runs: mean ± standard error per group, as tables (printed, CSV, Markdown) with the
figures of ``figures`` -- the work of ``gpdlm compare`` and of ``gpdlm select``'s summary.

A group holds only runs that differ in the seed: ``separate_configurations`` adds every param that
differs inside a group to the keys (with a warning naming it), so no mean pools different
configurations. The standard error is the sample standard deviation / sqrt(n).
"""

from __future__ import annotations

from pathlib import Path

from ..files import write_atomic
from . import records as R
from . import tables as T
from .figures import draw_figures
from .records import RunRecord


# ----- groups that differ only in the seed -----------------------------------------------------------
def separate_configurations(records: list[RunRecord], by: list[str]) -> tuple[list[str], str]:
    """``by`` plus every param that differs inside one of its groups (seed and bookkeeping aside),
    and the warning that says which (empty when nothing was added)."""
    ignore = {"seed"}
    for key in by:
        source, name = R.resolve_key(key)
        if source == "param":
            ignore.add(name)
    found: dict[str, set] = {}
    for _, runs in R.group_records(records, by):
        for k in R.varying_params(runs, ignore):
            found.setdefault(k, set()).update(R.fmt_value(R.canon(r.params.get(k))) for r in runs)
    if not found:
        return by, ""
    extra = [R.short_key(k) for k in sorted(found)]
    shown = "; ".join(
        f"{R.short_key(k)}: {'/'.join(sorted(v, key=str)[:4])}{'/...' if len(v) > 4 else ''}"
        for k, v in sorted(found.items())
    )
    return by + extra, (
        f"runs grouped by {','.join(by)} differ in more than the seed ({shown}); grouped by "
        f"{','.join(extra)} as well, so that no mean pools different configurations"
    )


# ----- the table -----------------------------------------------------------------------------------
def summarise(records: list[RunRecord], by: list[str], metrics: list[str]) -> list[dict]:
    """One row per group: {'values': tuple, 'n': runs, 'stats': {metric: (mean, se, n)}}."""
    rows = []
    for values, runs in R.group_records(records, by):
        stats = {m: R.mean_se([r.metrics[m] for r in runs if m in r.metrics]) for m in metrics}
        rows.append({"values": values, "n": len(runs), "stats": stats, "runs": runs})
    return rows


def write_summary(rows: list[dict], by: list[str], metrics: list[str], outdir: Path, basename: str) -> list[Path]:
    header = list(by) + ["n"]
    for m in metrics:
        header += [f"{m}_mean", f"{m}_se", f"{m}_n"]
    csv_rows = []
    for row in rows:
        line = [R.fmt_value(v) for v in row["values"]] + [row["n"]]
        for m in metrics:
            mean, se, n = row["stats"][m]
            line += [mean, se, n]
        csv_rows.append(line)
    csv_path, md_path = outdir / f"{basename}.csv", outdir / f"{basename}.md"
    T.write_csv(csv_path, header, csv_rows)
    md_header, md_rows = display_rows(rows, by, metrics)
    write_atomic(md_path, T.markdown_table(md_header, md_rows))
    return [csv_path, md_path]


def display_rows(rows: list[dict], by: list[str], metrics: list[str]) -> tuple[list[str], list[list[str]]]:
    header = list(by) + ["n"] + list(metrics)
    out = []
    for row in rows:
        out.append(
            [R.fmt_value(v) for v in row["values"]]
            + [str(row["n"])]
            + [R.fmt_mean_se(*row["stats"][m][:2]) if row["stats"][m][2] else "-" for m in metrics]
        )
    return header, out


# ----- the whole analysis ---------------------------------------------------------------------------
def analyse(
    client,
    records,
    by: list[str],
    metrics: list[str],
    outdir: Path,
    basename: str,
    title: str,
    figures: bool = True,
    out=None,
) -> dict:
    """Table (printed, CSV, Markdown) and figures of ``records`` grouped by ``by``."""
    rows = summarise(records, by, metrics)
    files = write_summary(rows, by, metrics, outdir, basename)
    header, disp = display_rows(rows, by, metrics)
    T.print_table(title, header, disp, numeric_from=len(by), file=out)
    figs = draw_figures(client, records, by, metrics, outdir) if figures else []
    return {"rows": rows, "files": files, "figures": figs}


def write_runs_csv(records, keys: list[str], metrics: list[str], path: Path) -> Path:
    """Provenance: every run that went into the analysis with its key values and metrics."""
    header = ["run_id", "run_name"] + list(keys) + list(metrics)
    rows = [
        [r.run_id, r.run_name] + [R.fmt_value(r.value(k)) for k in keys] + [r.metrics.get(m) for m in metrics]
        for r in records
    ]
    T.write_csv(path, header, rows)
    return path
