"""``gpdlm export``: a store's training runs as one run-records file (``analysis.export``).

    gpdlm export [--experiment NAME ...] [--tracking-uri URI] [--output FILE] [--no-histories]
                 [--filter EXPR] [--since TIME]

Params, final metrics, tags and step-metric summaries (and points, for the learning curves) of every
``gpdlm train``/``gpdlm bias`` run of the experiments -- or of those an MLflow search filter and a start
time select (a study run in parts exports each part's runs) -- not model files. ``gpdlm report --from
FILE`` builds the same report from it as from the store.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ..analysis import records as R
from ..analysis import store
from . import _cli

EPILOG = """examples:
  gpdlm export --experiment gplstm_sysid --output runs.jsonl.gz
  gpdlm export --output all.jsonl.gz                       # every experiment of the store
  gpdlm export --experiment rkhs --since 2026-12-01T03:15 --output runs-9.jsonl.gz   # runs started since (UTC)
  gpdlm export --filter 'params.`dataset.name` = "pol"' --output pol.jsonl.gz
  gpdlm report --claims gplstm --from runs.jsonl.gz        # the report, from the file
"""


def build_parser():
    p = _cli.make_parser(
        "gpdlm export",
        "Write a store's training runs (params, metrics, tags, step-metric "
        "summaries; not model files) to a compressed, versioned, checksummed "
        "JSON-lines file.",
    )
    p.epilog = EPILOG
    p.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="experiment to export (repeatable; default: every experiment with training runs)",
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        metavar="URI",
        help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as for gpdlm train)",
    )
    p.add_argument("--output", default="runs.jsonl.gz", metavar="FILE", help="the file (default: runs.jsonl.gz)")
    p.add_argument(
        "--filter",
        default="",
        metavar="EXPR",
        help="MLflow search filter on the runs, e.g. 'params.`dataset.name` = \"pol\"' (as for compare, select, report)",
    )
    p.add_argument(
        "--since",
        default=None,
        metavar="TIME",
        help="only runs started at or after TIME: ISO 8601, e.g. 2026-12-01T03:15 (UTC unless it has an offset)",
    )
    p.add_argument(
        "--no-histories",
        action="store_true",
        help="step metrics as summaries only (no points: smaller, but no learning-curve figures)",
    )
    return p


def main(argv: list[str]) -> int:
    from ..analysis import export

    args = build_parser().parse_args(argv)
    if not args.output.endswith(".jsonl.gz"):
        raise R.AnalysisError(f"--output {args.output}: the file name must end in .jsonl.gz")
    if Path(args.output).is_dir():
        raise R.AnalysisError(f"--output {args.output} is a folder: give a file name")
    filter_string = run_filter(args.filter, args.since)
    client, uri = store.open_store(args.tracking_uri)
    names = list(dict.fromkeys(R.split_list(args.experiment)))
    if names:
        exps = [store.get_experiment(client, name, uri) for name in names]
    else:
        exps = sorted(client.search_experiments(), key=lambda e: e.name)
    entries = export.export_store(
        client, exps, histories=True, keep_points=not args.no_histories, filter_string=filter_string
    )
    kept = [e.name for e in exps if any(x["experiment"] == e.name for x in entries)]
    if not entries:
        which = f" matching {filter_string!r}" if filter_string else ""
        raise R.AnalysisError(
            f"no training runs{which} to export in {', '.join(e.name for e in exps) or '(no experiments)'}"
        )
    digest = export.write(args.output, entries, kept)
    size = Path(args.output).stat().st_size
    print(
        f"wrote {len(entries)} runs of {', '.join(kept)} to {args.output} ({size / 1024:.1f} KiB, "
        f"sha256 {digest[:16]}...)"
    )
    return 0


def run_filter(expr: str, since: str | None) -> str:
    """The MLflow filter of ``--filter`` and ``--since`` together (``attributes.start_time`` in ms since the
    epoch; a time without an offset is UTC). A ``--since`` that is not an ISO 8601 time is an error."""
    parts = [expr.strip()] if expr.strip() else []  # MLflow filters are clauses joined by "and": no "or"
    if since is not None:
        try:
            t = datetime.fromisoformat(since.strip())
        except ValueError:
            raise R.AnalysisError(
                f"--since {since!r} is not a time: give ISO 8601, e.g. 2026-12-01T03:15 (UTC) or 2026-12-01"
            ) from None
        t = t.replace(tzinfo=UTC) if t.tzinfo is None else t
        parts.append(f"attributes.start_time >= {int(t.timestamp() * 1000)}")
    return " and ".join(parts)


def cli() -> int:
    return _cli.run_cli(main)
