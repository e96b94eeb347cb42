"""``gpdlm compare``: tables of mean ± standard error and the DLM paper's figure types, from MLflow.

    gpdlm compare [--experiment NAME] [--tracking-uri URI] [--filter EXPR] [--by dataset,model,...]
                  [--metric test_nll ...] [--out DIR] [--select] [--include-refits] [--no-figures] [--no-log]

Runs are grouped by the ``--by`` keys; each metric is averaged over the runs of a group with its
standard error (sample standard deviation / sqrt(n)). A group holds only runs that differ in the
seed: a param that differs inside a group (``model.variant`` under ``--by model``, a second beta)
is added to the keys with a warning naming it and its values, so no mean pools different
configurations; reruns of one configuration count once (``runs.load_runs``). The table is printed (rich) and written as CSV and Markdown to
``outputs/compare/<timestamp>/`` (or ``--out``) together with PNG figures:

* ``vs_train_size_<metric>.png``: the metric against the training size per method (paper Fig. 1 a, b, d, e);
* ``vs_beta_<metric>.png``: the metric against beta, log x axis (Fig. 1 c);
* ``curve_<metric>.png``: learning curves from the step metrics (Fig. 1 f, i);

each drawn only when the data has more than one value on its x axis. Everything is also logged
as artifacts of a new MLflow run named ``compare`` (tag ``gpdlm.command=compare``).
``--select`` first replaces the runs by the validation-selected ones of ``gpdlm select``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from . import runs as R

DEFAULT_BY = ["dataset", "model", "variant", "likelihood", "estimator", "beta", "train_size"]
SELECTED_BY = ["dataset", "method", "variant", "likelihood", "estimator", "train_size"]

EPILOG = """grouping keys (--by): dataset, model, variant, likelihood, estimator, beta (objective.beta),
train_size (metric n_train), seed, method, refit, or any param key verbatim (model.num_inducing),
metrics.NAME, tags.NAME.

examples:
  gpdlm compare
  gpdlm compare --by dataset,model,train_size --metric test_nll test_rmse
  gpdlm compare --filter 'params.`model.name` = "dlm"' --by model,beta
  gpdlm compare --select            # compare the validation-selected beta of each method
"""


def build_parser():
    p = R.make_parser("gpdlm compare", "Compare gpdlm runs: mean ± standard error tables and figures from MLflow.")
    p.epilog = EPILOG
    R.add_store_options(p)
    p.add_argument("--filter", default="", metavar="EXPR",
                   help="MLflow search filter, e.g. 'params.`dataset.name` = \"concrete\"' (params are "
                        "compared as strings, as MLflow stores them)")
    p.add_argument("--by", action="append", metavar="KEYS",
                   help=f"comma-separated grouping keys (default: {','.join(DEFAULT_BY)}; "
                        f"with --select: {','.join(SELECTED_BY)})")
    p.add_argument("--metric", nargs="+", action="extend", metavar="NAME",
                   help="metrics to compare (default: those of test_nll, test_rmse, test_error, test_mre that exist)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: outputs/compare/<timestamp>)")
    p.add_argument("--select", action="store_true",
                   help="compare only the runs `gpdlm select` picks (best beta by validation per group)")
    p.add_argument("--include-refits", action="store_true",
                   help="also use refit runs (tag gpdlm.refit_of); adds the 'refit' key to --by")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    p.add_argument("--no-log", action="store_true", help="do not create the `compare` MLflow run")
    return p


# ----- groups that differ only in the seed -----------------------------------------------------------
def separate_configurations(records: list[R.RunRecord], by: list[str]) -> tuple[list[str], str]:
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
    shown = "; ".join(f"{R.short_key(k)}: {'/'.join(sorted(v, key=str)[:4])}{'/...' if len(v) > 4 else ''}"
                      for k, v in sorted(found.items()))
    return by + extra, (f"runs grouped by {','.join(by)} differ in more than the seed ({shown}); grouped by "
                        f"{','.join(extra)} as well, so that no mean pools different configurations")


# ----- the table -----------------------------------------------------------------------------------
def summarise(records: list[R.RunRecord], by: list[str], metrics: list[str]) -> list[dict]:
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
    R.write_csv(csv_path, header, csv_rows)
    md_header, md_rows = display_rows(rows, by, metrics)
    from ..files import write_atomic

    write_atomic(md_path, R.markdown_table(md_header, md_rows))
    return [csv_path, md_path]


def display_rows(rows: list[dict], by: list[str], metrics: list[str]) -> tuple[list[str], list[list[str]]]:
    header = list(by) + ["n"] + list(metrics)
    out = []
    for row in rows:
        out.append([R.fmt_value(v) for v in row["values"]] + [str(row["n"])]
                   + [R.fmt_mean_se(*row["stats"][m][:2]) if row["stats"][m][2] else "-" for m in metrics])
    return header, out


# ----- figures --------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _labels(line_keys: list[str], line_values: list[tuple], fallback: str) -> dict[tuple, str]:
    """Legend labels showing only the keys whose values differ between the lines."""
    varying = [i for i in range(len(line_keys)) if len({v[i] for v in line_values}) > 1]
    out = {}
    for vals in line_values:
        parts = [f"{line_keys[i]}={R.fmt_value(vals[i])}" if line_keys[i] not in ("model", "method")
                 else R.fmt_value(vals[i]) for i in varying]
        if not parts:  # one line: name its method if a key says it
            parts = [R.fmt_value(vals[i]) for i, k in enumerate(line_keys) if k in ("method", "model")]
        out[vals] = ", ".join(parts) or fallback
    return out


def _color(i: int, n: int):
    plt = _plt()
    return plt.get_cmap("tab10" if n <= 10 else "tab20")(i % 20)


def _legend(ax, n_lines: int) -> None:
    if n_lines > 8:  # many lines: beside the axes, not over the data
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.legend(fontsize=7)


def _panels(records, by, exclude):
    panel_keys = ["dataset"] if "dataset" in by and "dataset" not in exclude else []
    line_keys = [k for k in by if k not in exclude and k not in panel_keys]
    return panel_keys, line_keys, R.group_records(records, panel_keys)


def _axes_grid(n: int):
    plt = _plt()
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return plt, fig, flat[:n]


def _layout(records, by: list[str], exclude: set, metric: str):
    """Panels (one per dataset) and lines (one per combination of the other --by keys), the lines
    in numeric order with their legend labels."""
    _, line_keys, panels = _panels(records, by, exclude)
    all_lines = sorted({tuple(r.value(k) for k in line_keys) for r in records},
                       key=lambda t: tuple(R.sort_key(v) for v in t))
    return line_keys, panels, all_lines, _labels(line_keys, all_lines, metric)


def figure_vs(records, by: list[str], x_key: str, metric: str, path: Path, logx: bool = False) -> bool:
    """``metric`` against the numeric key ``x_key``: a panel per dataset, a line per combination of
    the other --by keys, mean ± SE over the runs at each x. False (nothing drawn) unless the data
    has more than one value of ``x_key``."""
    usable = [r for r in records if metric in r.metrics and isinstance(r.value(x_key), float)
              and (not logx or r.value(x_key) > 0)]
    if len({r.value(x_key) for r in usable}) < 2:
        return False
    line_keys, panels, all_lines, labels = _layout(usable, by, {x_key}, metric)
    plt, fig, axes = _axes_grid(len(panels))
    for ax, (pvals, prunes) in zip(axes, panels):
        for lvals, lruns in R.group_records(prunes, line_keys):
            pts = []
            for (x,), xruns in R.group_records(lruns, [x_key]):
                mean, se, _ = R.mean_se([r.metrics[metric] for r in xruns])
                pts.append((x, mean, 0.0 if math.isnan(se) else se))
            xs, ys, es = zip(*pts)
            ax.errorbar(xs, ys, yerr=es, marker="o", ms=4, capsize=3, lw=1.3, label=labels[lvals],
                        color=_color(all_lines.index(lvals), len(all_lines)))
        xs_all = [r.value(x_key) for r in usable]
        if logx or (min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 10):
            ax.set_xscale("log")
        ax.set_xlabel({"train_size": "training size (n_train)", "beta": "beta"}.get(x_key, x_key))
        ax.set_ylabel(metric)
        ax.set_title(" ".join(R.fmt_value(v) for v in pvals) or metric)
        ax.grid(alpha=0.3)
        _legend(ax, len(all_lines))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def figure_curves(client, records, by: list[str], metric: str, path: Path) -> bool:
    """Learning curves of ``metric`` from its step history: a panel per dataset, a line per group
    (mean over the group's runs at the steps they all have). False unless some curve has more than
    one step."""
    histories = {}
    for r in records:
        if metric in r.metrics:
            pts = {}
            for m in client.get_metric_history(r.run_id, metric):
                pts[int(m.step)] = float(m.value)  # a step logged twice keeps the later value
            histories[r.run_id] = pts
    usable = [r for r in records if len(histories.get(r.run_id, {})) > 1]
    if not usable:
        return False
    line_keys, panels, all_lines, labels = _layout(usable, by, set(), metric)
    plt, fig, axes = _axes_grid(len(panels))
    for ax, (pvals, pruns) in zip(axes, panels):
        for lvals, lruns in R.group_records(pruns, line_keys):
            hs = [histories[r.run_id] for r in lruns]
            steps = sorted(set.intersection(*(set(h) for h in hs)))
            if len(steps) < 2:  # the runs stopped at different iterations: average what exists
                steps = sorted(set.union(*(set(h) for h in hs)))
            ys = [R.mean_se([h[s] for h in hs if s in h])[0] for s in steps]
            ax.plot(steps, ys, marker="o", ms=2.5, lw=1.2, color=_color(all_lines.index(lvals), len(all_lines)),
                    label=labels[lvals] + (f" (n={len(lruns)})" if len(lruns) > 1 else ""))
        ax.set_xlabel("iteration")
        ax.set_ylabel(metric)
        ax.set_title(" ".join(R.fmt_value(v) for v in pvals) or f"learning curves: {metric}")
        ax.grid(alpha=0.3)
        _legend(ax, len(all_lines))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def draw_figures(client, records, by: list[str], metrics: list[str], outdir: Path) -> list[Path]:
    drawn = []
    for m in metrics:
        for x_key, logx in (("train_size", False), ("beta", True)):
            if x_key in by:
                p = outdir / f"vs_{x_key}_{m}.png"
                if figure_vs(records, by, x_key, m, p, logx=logx):
                    drawn.append(p)
        p = outdir / f"curve_{m}.png"
        if figure_curves(client, records, by, m, p):
            drawn.append(p)
    return drawn


# ----- the whole analysis ---------------------------------------------------------------------------
def analyse(client, records, by: list[str], metrics: list[str], outdir: Path, basename: str, title: str,
            figures: bool = True, out=None) -> dict:
    """Table (printed, CSV, Markdown) and figures of ``records`` grouped by ``by``."""
    rows = summarise(records, by, metrics)
    files = write_summary(rows, by, metrics, outdir, basename)
    header, disp = display_rows(rows, by, metrics)
    R.print_table(title, header, disp, numeric_from=len(by), file=out)
    figs = draw_figures(client, records, by, metrics, outdir) if figures else []
    return {"rows": rows, "files": files, "figures": figs}


def write_runs_csv(records, keys: list[str], metrics: list[str], path: Path) -> Path:
    """Provenance: every run that went into the analysis with its key values and metrics."""
    header = ["run_id", "run_name"] + list(keys) + list(metrics)
    rows = [[r.run_id, r.run_name] + [R.fmt_value(r.value(k)) for k in keys] + [r.metrics.get(m) for m in metrics]
            for r in records]
    R.write_csv(path, header, rows)
    return path


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    client, uri = R.open_store(args.tracking_uri)
    exp = R.get_experiment(client, args.experiment, uri)
    notes: list[str] = []  # printed once the input is known to be good (bad input is one line)
    records = R.load_runs(client, exp, args.filter, include_refits=args.include_refits, notes=notes)
    by = R.split_list(args.by) or list(SELECTED_BY if args.select else DEFAULT_BY)
    if args.include_refits and "refit" not in by:
        by.append("refit")
    if args.select:
        from .select import select_records

        selections, select_notes = select_records([r for r in records if not r.tags.get("gpdlm.refit_of")])
        notes += select_notes
        records = [s.record for s in selections]
    R.check_keys(records, by)
    warning = ""
    if not args.select:
        by, warning = separate_configurations(records, by)
    metrics = R.choose_metrics(records, R.split_list(args.metric))
    for note in notes:
        print(f"gpdlm: note: {note}", file=sys.stderr)
    if warning:
        print(f"gpdlm: warning: {warning}", file=sys.stderr)
    outdir = R.output_dir(args.out, "compare")
    write_runs_csv(records, by, metrics, outdir / "runs.csv")
    what = "selected runs" if args.select else "runs"
    result = analyse(client, records, by, metrics, outdir, "compare", figures=not args.no_figures,
                     title=f"{exp.name}: mean ± standard error over {len(records)} {what}")
    print(f"wrote {', '.join(p.name for p in result['files'] + result['figures'])} and runs.csv to {outdir}")
    if not args.no_log:
        rid = R.log_analysis_run(client, exp.experiment_id, "compare", outdir, params={
            "by": ",".join(by), "metrics": ",".join(metrics), "filter": args.filter or "", "select": args.select,
            "n_runs": len(records), "n_groups": len(result["rows"]),
        }, tags={"gpdlm.output_dir": outdir.resolve()})
        print(f"MLflow run 'compare' {rid} in experiment '{exp.name}' ({uri})")
    return 0


def cli() -> int:
    return R.run_cli(main)
