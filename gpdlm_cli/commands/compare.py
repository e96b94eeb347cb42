"""``gpdlm compare``: tables of mean ± standard error and the DLM paper's figure types, from MLflow.

    gpdlm compare [--experiment NAME] [--tracking-uri URI] [--filter EXPR] [--by dataset,model,...]
                  [--metric test_nll ...] [--out DIR] [--select] [--include-refits] [--no-figures] [--no-log]

Runs are grouped by the ``--by`` keys; each metric is averaged over the runs of a group with its
standard error (sample standard deviation / sqrt(n)). A group holds only runs that differ in the
seed: a param that differs inside a group (``model.variant`` under ``--by model``, a second beta)
is added to the keys with a warning naming it and its values, so no mean pools different
configurations; reruns of one configuration count once (``analysis.store.load_runs``). The table is printed (rich) and written as CSV and Markdown to
``outputs/compare/<timestamp>/`` (or ``--out``) together with PNG figures:

* ``vs_train_size_<metric>.png``: the metric against the training size per method (paper Fig. 1 a, b, d, e);
* ``vs_beta_<metric>.png``: the metric against beta, log x axis (Fig. 1 c);
* ``curve_<metric>.png``: learning curves from the step metrics (Fig. 1 f, i);

each drawn only when the data has more than one value on its x axis. Everything is also logged
as artifacts of a new MLflow run named ``compare`` (tag ``gpdlm.command=compare``).
``--select`` first replaces the runs by the validation-selected ones of ``gpdlm select``.

The work is in ``gpdlm_cli.analysis`` (``summary``, ``figures``, ``selection``); this is its shell.
"""

from __future__ import annotations

import sys

from ..analysis import records as R
from ..analysis import store
from ..analysis.selection import select_records
from ..analysis.summary import analyse, separate_configurations, write_runs_csv
from . import _cli

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
  gpdlm compare --hyperparameters   # also the learned noise, outputscale, lengthscales (hp.* metrics)
"""


def build_parser():
    p = _cli.make_parser("gpdlm compare", "Compare gpdlm runs: mean ± standard error tables and figures from MLflow.")
    p.epilog = EPILOG
    _cli.add_store_options(p)
    p.add_argument(
        "--filter",
        default="",
        metavar="EXPR",
        help="MLflow search filter, e.g. 'params.`dataset.name` = \"concrete\"' (params are "
        "compared as strings, as MLflow stores them)",
    )
    p.add_argument(
        "--by",
        action="append",
        metavar="KEYS",
        help=f"comma-separated grouping keys (default: {','.join(DEFAULT_BY)}; with --select: {','.join(SELECTED_BY)})",
    )
    p.add_argument(
        "--metric",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="metrics to compare (default: those of test_nll, test_rmse, test_error, test_mre that exist)",
    )
    p.add_argument("--out", metavar="DIR", help="output folder (default: outputs/compare/<timestamp>)")
    p.add_argument(
        "--select",
        action="store_true",
        help="compare only the runs `gpdlm select` picks (best beta by validation per group)",
    )
    p.add_argument(
        "--include-refits",
        action="store_true",
        help="also use refit runs (tag gpdlm.refit_of); adds the 'refit' key to --by",
    )
    p.add_argument(
        "--hyperparameters",
        action="store_true",
        help="also compare the learned hyperparameters (every hp.* metric the runs logged: "
        "hp.noise, hp.outputscale, hp.lengthscale[.i], hp.num_inducing)",
    )
    p.add_argument("--no-figures", action="store_true", help="tables only")
    p.add_argument("--no-log", action="store_true", help="do not create the `compare` MLflow run")
    return p


def hyperparameter_metrics(records, chosen: list[str]) -> list[str]:
    """The ``hp.*`` metrics (learned hyperparameters, ``run.hyperparameters``) of ``records`` not already in
    ``chosen``, in natural order (``hp.lengthscale.2`` before ``hp.lengthscale.10``); AnalysisError when no
    run logged any (runs trained before gpdlm logged them: ``gpdlm eval`` does not add them)."""
    import re

    present = {k for r in records for k in r.metrics if k.startswith("hp.") and k not in chosen}
    if not present:
        raise R.AnalysisError(
            "--hyperparameters: no run has hp.* metrics (runs log them since issue 47; retrain to get them)"
        )
    return sorted(present, key=lambda k: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)])


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    client, uri = store.open_store(args.tracking_uri)
    exp = store.get_experiment(client, args.experiment, uri)
    notes: list[str] = []  # printed once the input is known to be good (bad input is one line)
    records = store.load_runs(client, exp, args.filter, include_refits=args.include_refits, notes=notes)
    by = R.split_list(args.by) or list(SELECTED_BY if args.select else DEFAULT_BY)
    if args.include_refits and "refit" not in by:
        by.append("refit")
    if args.select:
        selections, select_notes = select_records([r for r in records if not r.tags.get("gpdlm.refit_of")])
        notes += select_notes
        records = [s.record for s in selections]
    R.check_keys(records, by)
    warning = ""
    if not args.select:
        by, warning = separate_configurations(records, by)
    metrics = R.choose_metrics(records, R.split_list(args.metric))
    if args.hyperparameters:
        metrics += hyperparameter_metrics(records, metrics)
    for note in notes:
        print(f"gpdlm: note: {note}", file=sys.stderr)
    if warning:
        print(f"gpdlm: warning: {warning}", file=sys.stderr)
    outdir = store.output_dir(args.out, "compare")
    write_runs_csv(records, by, metrics, outdir / "runs.csv")
    what = "selected runs" if args.select else "runs"
    result = analyse(
        client,
        records,
        by,
        metrics,
        outdir,
        "compare",
        figures=not args.no_figures,
        title=f"{exp.name}: mean ± standard error over {len(records)} {what}",
    )
    print(f"wrote {', '.join(p.name for p in result['files'] + result['figures'])} and runs.csv to {outdir}")
    if not args.no_log:
        rid = store.log_analysis_run(
            client,
            exp.experiment_id,
            "compare",
            outdir,
            params={
                "by": ",".join(by),
                "metrics": ",".join(metrics),
                "filter": args.filter or "",
                "select": args.select,
                "n_runs": len(records),
                "n_groups": len(result["rows"]),
            },
            tags={"gpdlm.output_dir": outdir.resolve()},
        )
        print(f"MLflow run 'compare' {rid} in experiment '{exp.name}' ({uri})")
    return 0


def cli() -> int:
    return _cli.run_cli(main)
