"""``gpdlm report``: a paper's tables and a verdict per claim from an experiment's runs -- or, without
``--claims``, the experiment's own report.

    gpdlm report [--claims PAPER] [--experiment NAME ...] [--tracking-uri URI] [--format md|latex|html]
                 [--output FILE] [--out DIR] [--filter EXPR] [--no-log]
    gpdlm report --claims PAPER --from runs.jsonl.gz [--from ...] [--experiment NAME ...] ...

``--from`` reads run-records files (``gpdlm export``) instead of a store: the same report, byte for
byte, as from the store they were exported from (``--filter`` selects among the files' runs as in a store).

Without ``--claims`` the report holds what ``gpdlm compare`` computes for each experiment: the
mean ± standard error table of its FINISHED training runs grouped by compare's default keys (a
param that differs inside a group is added to them) and compare's figures (``vs_train_size``,
``vs_beta``, learning curves), with the runs' provenance -- in Markdown (figures linked), HTML
(figures embedded) or LaTeX (the tables).

The work is in ``gpdlm_cli.analysis`` (claims files, statistics, rendering); this is its shell.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..analysis import records as R
from ..analysis import store
from ..analysis import tables as T
from . import _cli

FORMATS = {"md": "report.md", "latex": "report.tex", "html": "report.html"}

EPILOG = """examples:
  gpdlm report --experiment my_study                               # its own tables and figures
  gpdlm report --experiment regression_logloss_pol --claims dlm
  gpdlm report --experiment rkhs_batch_study_pol --claims rkhs --format latex --output tables.tex
  gpdlm report --experiment sampling_methods --claims dlm --format html --output sampling.html
  gpdlm report --experiment a --experiment b --claims svbssgp    # the runs of several experiments
  gpdlm report --claims my_claims.yaml --experiment mine          # a claims file of your own
  gpdlm report --claims gplstm --from docs/results/smoke/gplstm/runs.jsonl.gz   # from exported run records

The claims files (gpdlm_cli/claims/<paper>.yaml) map every table cell onto runs (params and tags),
and give each claim its comparison, paired test and significance level: docs/analysis.md.
"""


def build_parser():
    from ..analysis import claims

    p = _cli.make_parser(
        "gpdlm report",
        "A paper's tables (mean ± SE, best, ranks, the paper's numbers) and a verdict "
        "per claim (holds / fails / not measured) from MLflow runs.",
    )
    p.epilog = EPILOG
    p.add_argument(
        "--claims",
        default=None,
        metavar="PAPER",
        help=f"the paper: {', '.join(claims.available())}, or a claims .yaml file (default: none -- "
        f"the experiment's own tables and figures, as gpdlm compare computes them)",
    )
    p.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help=f"MLflow experiment whose runs are read (repeatable; default: {R.DEFAULT_EXPERIMENT})",
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        metavar="URI",
        help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as for gpdlm train)",
    )
    p.add_argument(
        "--format",
        choices=list(FORMATS),
        default="md",
        help="md (default), latex or html (self-contained, with the figures)",
    )
    p.add_argument("--output", metavar="FILE", help="also write the report to FILE")
    p.add_argument("--out", metavar="DIR", help="output folder (default: outputs/report/<timestamp>)")
    p.add_argument(
        "--filter",
        default="",
        metavar="EXPR",
        help="MLflow search filter on the runs read (the store's or --from files')",
    )
    p.add_argument("--no-log", action="store_true", help="do not create the `report` MLflow run")
    p.add_argument(
        "--from",
        dest="from_files",
        action="append",
        metavar="FILE",
        help="read the runs from a run-records file of `gpdlm export` instead of a store (repeatable; "
        "--experiment then picks experiments in the files, default: all of them)",
    )
    p.add_argument(
        "--study",
        metavar="FILE",
        help="a Markdown file with the study's commands, protocol, budget and "
        "reductions, printed at the top of the report",
    )
    return p


def _check_paths(args) -> None:
    """``--study`` names a file and ``--output`` is not a folder (before the store is opened)."""
    if args.study and not Path(args.study).is_file():
        raise R.AnalysisError(f"--study {args.study}: no such file")
    if args.output and Path(args.output).is_dir():
        raise R.AnalysisError(f"--output {args.output} is a folder: give a file name")


def _write_output(args, text: str) -> None:
    """``--output``: the report's text also written to that file (its folder made)."""
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)


def _claim_records(args, notes: list[str]):
    """The runs a claims report judges: ``(records, names, made, client, uri, exps, histories)``, from
    ``--from`` files (no store: client None) or from the store's experiments (``train`` and ``bias``
    runs). ``made``: each experiment's provenance; ``histories``: where metric histories are read."""
    from ..analysis import report as rep

    records, made = [], []
    if args.from_files:
        from ..analysis import export

        files = [export.read(f) for f in args.from_files]
        names, by_name = export.load_records(files, R.split_list(args.experiment), notes, filter_string=args.filter)
        for name in names:
            records += by_name[name]
            made.append(rep.provenance(name, by_name[name]))
        return records, names, made, None, None, [], export.FileHistories(files)
    client, uri = store.open_store(args.tracking_uri)
    names = list(dict.fromkeys(R.split_list(args.experiment) or [R.DEFAULT_EXPERIMENT]))
    exps = [store.get_experiment(client, name, uri) for name in names]
    for name, exp in zip(names, exps):
        runs = store.load_runs(client, exp, args.filter, notes=notes, commands=("train", "bias"))
        records += runs
        made.append(rep.provenance(name, runs))
    return records, names, made, client, uri, exps, client


def _write_claims_report(args, report, histories, outdir: Path) -> list[str]:
    """The report in ``--format`` (html: with its figures, each also a PNG), cells.csv and verdicts.csv
    in ``outdir`` (and ``--output``); returns the names of the files written."""
    from ..analysis import render

    figs = {}
    if args.format == "html":
        for tr in report.tables:
            figs[tr.table.id] = render.figures(tr, histories)
            for i, (_, png) in enumerate(figs[tr.table.id]):
                (outdir / f"{tr.table.id}_{i}.png").write_bytes(png)
    text = {"md": render.markdown, "latex": render.latex}.get(args.format, lambda r: render.html_page(r, figs))(report)
    (outdir / FORMATS[args.format]).write_text(text)
    T.write_csv(outdir / "cells.csv", *render.cells_csv_rows(report))
    T.write_csv(outdir / "verdicts.csv", *render.verdicts_csv_rows(report))
    _write_output(args, text)
    return [FORMATS[args.format], "cells.csv", "verdicts.csv"] + [
        f"{k}_{i}.png" for k, v in figs.items() for i in range(len(v))
    ]


def _print_verdicts(paper, report, records, names) -> None:
    """The verdict table on stdout: claim, verdict, cause, n, p, data and the statement's start."""
    from ..analysis import render
    from ..analysis import report as rep

    header, rows = render.verdict_rows(report)
    keep = [i for i, h in enumerate(header) if h in ("claim", "verdict", "cause", "n", "p", "data", "statement")]
    short = [[row[i] if header[i] != "statement" else row[i][:90] for i in keep] for row in rows]
    c = rep.counts(report)
    T.print_table(
        f"{paper.name}: {c[rep.HOLDS]} hold, {c[rep.FAILS]} fail, {c[rep.NOT_MEASURED]} not measured "
        f"({len(records)} runs of {', '.join(names)})",
        [header[i] for i in keep],
        short,
        numeric_from=99,
    )


def main(argv: list[str]) -> int:
    """``gpdlm report``: the claims report of ``--claims`` (verdicts per claim, tables, figures), or
    without it each experiment's compare tables (``experiment_report``)."""
    from ..analysis import claims
    from ..analysis import report as rep

    args = build_parser().parse_args(argv)
    if args.claims is None:
        return experiment_report(args)
    paper = claims.load(args.claims)  # an unknown paper is an error before the store is opened
    _check_paths(args)
    study = Path(args.study).read_text() if args.study else ""
    notes: list[str] = []
    records, names, made, client, uri, exps, histories = _claim_records(args, notes)
    report = rep.build(paper, records, names, made, study)
    for note in notes + report.notes:
        print(f"gpdlm: note: {note}", file=sys.stderr)

    outdir = store.output_dir(args.out, "report")
    written = _write_claims_report(args, report, histories, outdir)
    _print_verdicts(paper, report, records, names)
    print(f"wrote {', '.join(written)} to {outdir}" + (f" and {args.output}" if args.output else ""))
    if not args.no_log and client is not None:
        c = rep.counts(report)
        params = {
            "claims": paper.name,
            "experiments": ",".join(names),
            "format": args.format,
            "filter": args.filter or "",
            "n_runs": len(records),
            "n_claims": len(report.verdicts),
            "holds": c[rep.HOLDS],
            "fails": c[rep.FAILS],
            "not_measured": c[rep.NOT_MEASURED],
        }
        tags = {"gpdlm.output_dir": outdir.resolve(), "gpdlm.claims": str(paper.path)}
        rid = store.log_analysis_run(client, exps[0].experiment_id, "report", outdir, params=params, tags=tags)
        print(f"MLflow run 'report' {rid} in experiment '{exps[0].name}' ({uri})")
    return 0


def _latex_escape(s) -> str:
    """``s`` as LaTeX text (backslash, _, &, %, and ± as $\\pm$)."""
    return (
        str(s)
        .replace("\\", "\\textbackslash{}")
        .replace("_", "\\_")
        .replace("&", "\\&")
        .replace("%", "\\%")
        .replace("±", "$\\pm$")
    )


def _html_section(name: str, about: str, header, rows, figures) -> str:
    """One experiment's HTML: heading, provenance, the table and its figures inlined as PNG data."""
    import base64
    import html

    cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    imgs = "".join(
        f'<figure><img alt="{html.escape(p.stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{html.escape(p.stem)}</figcaption></figure>'
        for p in figures
    )
    return (
        f"<h1>{html.escape(name)}</h1><p>{html.escape(about)}</p><table><thead><tr>{cells}</tr></thead>"
        f"<tbody>{body}</tbody></table>{imgs}"
    )


def _latex_section(name: str, about: str, header, rows, num_keys: int) -> list[str]:
    """One experiment's LaTeX lines: a section, provenance and the table (``num_keys`` left columns)."""
    esc = _latex_escape
    tex = [
        f"\\section*{{{esc(name)}}}",
        esc(about),
        "",
        "\\begin{tabular}{" + "l" * num_keys + "r" * (len(header) - num_keys) + "}",
        " & ".join(esc(h) for h in header) + " \\\\ \\hline",
    ] + [" & ".join(esc(c) for c in row) + " \\\\" for row in rows]
    return tex + ["\\end{tabular}", ""]


@dataclass
class _Section:
    """One experiment of an experiment report, in each format, and the files it wrote."""

    md: list[str]
    html: str
    tex: list[str]
    written: list[str]  # paths relative to the report's folder
    n_runs: int


def _experiment_section(client, uri, name: str, records, where: Path, outdir: Path, notes: list[str]) -> _Section:
    """One experiment's compare table (grouped by ``compare``'s keys, mean ± standard error over
    seeds), its figures and runs.csv in ``where``, and its section of the report."""
    from ..analysis import report as rep
    from ..analysis.summary import analyse, display_rows, separate_configurations, write_runs_csv
    from .compare import DEFAULT_BY

    where.mkdir(parents=True, exist_ok=True)
    by, warning = separate_configurations(records, list(DEFAULT_BY))
    if warning:
        notes.append(warning)
    metrics = R.choose_metrics(records, [])
    result = analyse(
        client,
        records,
        by,
        metrics,
        where,
        "summary",
        title=f"{name}: mean ± standard error over {len(records)} runs",
    )
    write_runs_csv(records, by, metrics, where / "runs.csv")
    header, rows = display_rows(result["rows"], by, metrics)
    made = rep.provenance(name, records)
    about = (
        f"{len(records)} FINISHED training runs of experiment '{name}' ({uri}), {made.first} to {made.last}, "
        f"{made.train_hours:.2f} h of training ({made.run_hours:.2f} h start to end); protocol {', '.join(map(str, made.protocols))}; code "
        f"{', '.join(map(str, made.commits))}. Grouped by {', '.join(by)}: mean ± standard error over seeds."
    )

    def rel(p):
        return p.relative_to(outdir).as_posix()

    md = [f"# {name}", "", about, "", T.markdown_table(header, rows), ""]
    md += [f"![{p.stem}]({rel(p)})" for p in result["figures"]] + [""]
    return _Section(
        md,
        _html_section(name, about, header, rows, result["figures"]),
        _latex_section(name, about, header, rows, len(by)),
        [rel(p) for p in result["files"] + result["figures"]] + [rel(where / "runs.csv")],
        len(records),
    )


def _report_text(fmt: str, names: list[str], study: str, sections: list[_Section]) -> str:
    """The experiment report as one document in ``fmt`` (md: ``study`` first; html; latex)."""
    import html

    if fmt == "md":
        return "\n".join(([study] if study else []) + [line for s in sections for line in s.md])
    if fmt == "html":
        style = (
            "body{font-family:sans-serif;max-width:70em;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}"
        )
        return (
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(', '.join(names))}</title>"
            f"<style>{style}</style></head><body>{''.join(s.html for s in sections)}</body></html>\n"
        )
    return "\n".join(line for s in sections for line in s.tex)


def experiment_report(args) -> int:
    """``gpdlm report`` without ``--claims``: each experiment's compare table and figures as one
    report (module docstring), written to ``--out`` (and ``--output``) and logged as a ``report`` run."""
    _check_paths(args)
    client, uri = store.open_store(args.tracking_uri)
    names = list(dict.fromkeys(R.split_list(args.experiment) or [R.DEFAULT_EXPERIMENT]))
    exps = [store.get_experiment(client, name, uri) for name in names]
    notes: list[str] = []
    loaded = [store.load_runs(client, exp, args.filter, notes=notes) for exp in exps]  # all read before writing
    outdir = store.output_dir(args.out, "report")
    study = Path(args.study).read_text() if args.study else ""
    sections = [
        _experiment_section(client, uri, name, records, outdir / name if len(names) > 1 else outdir, outdir, notes)
        for name, records in zip(names, loaded)
    ]
    for note in notes:
        print(f"gpdlm: note: {note}", file=sys.stderr)
    text = _report_text(args.format, names, study, sections)
    (outdir / FORMATS[args.format]).write_text(text)
    _write_output(args, text)
    written = [FORMATS[args.format]] + [w for s in sections for w in s.written]
    print(f"wrote {', '.join(written)} to {outdir}" + (f" and {args.output}" if args.output else ""))
    if not args.no_log:
        params = {
            "claims": "none",
            "experiments": ",".join(names),
            "format": args.format,
            "filter": args.filter or "",
            "n_runs": sum(s.n_runs for s in sections),
        }
        tags = {"gpdlm.output_dir": outdir.resolve()}
        rid = store.log_analysis_run(client, exps[0].experiment_id, "report", outdir, params=params, tags=tags)
        print(f"MLflow run 'report' {rid} in experiment '{exps[0].name}' ({uri})")
    return 0


def cli() -> int:
    return _cli.run_cli(main)
