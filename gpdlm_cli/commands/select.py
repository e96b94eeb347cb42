"""``gpdlm select``: choose beta on the validation set, as the DLM paper does, and report test metrics.

    gpdlm select [--experiment NAME] [--tracking-uri URI] [--filter EXPR] [--also-by KEYS]
                 [--metric test_nll ...] [--val-metric NAME] [--out DIR] [--refit] [--no-figures] [--no-log]

For every group of runs with the same dataset, model, variant, likelihood, estimator, training
size (metric ``n_train``) and seed -- plus any ``--also-by`` keys -- the run with the lowest
validation metric is selected: the metric the model's family declares (run tag
``gpdlm.selection_metric``: ``val_mse`` for sq_dlm (square loss), ``val_nll`` for everything else
-- log-loss DLM, the ELBO, SGPR, FITC, exact); ``--val-metric`` overrides it for all models.
Ties go to the larger beta (the more regularised model), then the earlier run, then the run id.
Groups of a model whose family declares a reference beta also get its row: ``svgp (beta=1)``, the
plain ELBO, whatever the validation set says.

Optuna studies (``gpdlm train -m hydra/sweeper=optuna ...``: a parent run tagged
``gpdlm.sweeper=optuna`` whose trials are its child runs) are understood: the searched keys
(``gpdlm.swept``, e.g. ``objective.beta,trainer.lr``) are what selection chooses over, never a
reason to split or to warn about repeated betas, and the study's ``sweep.objective`` (when not
``auto``) is the validation metric of its trials.

Outputs (``outputs/select/<timestamp>/`` or ``--out``, and artifacts of an MLflow run named
``select``): ``selected.csv/.md`` (one row per group and seed: the chosen beta, its validation
value and the selected run's test metrics) and ``summary.csv/.md`` (mean ± standard error over
seeds of the selected runs, per method) with the figures of ``gpdlm compare``.

``--refit`` trains every selected configuration again on train+validation (validation fraction 0,
the training size grown by the validation rows; the test rows stay exactly the same, which is
checked before training) and tags the new run ``gpdlm.refit_of=<selected run id>``. A FINISHED
refit that already exists is reused. Its results are in ``summary_refit.csv/.md`` and in the
``refit_*`` columns of ``selected.csv``.

The selection is ``gpdlm_cli.analysis.selection``, the summary and figures ``analysis.summary``;
this is their shell (and the refit).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ..analysis import records as R
from ..analysis import store
from ..analysis import tables as T
from ..analysis.records import RunRecord
from ..analysis.selection import SELECT_KEYS, SUMMARY_KEYS, Studies, find_studies, select_records
from ..analysis.summary import analyse, write_runs_csv
from ..files import write_atomic
from . import _cli

EPILOG = """examples:
  gpdlm select
  gpdlm select --filter 'params.`dataset.name` = "concrete"' --metric test_nll test_rmse
  gpdlm select --also-by model.num_inducing     # a separate selection per M
  gpdlm select --refit                          # retrain the selected configurations on train+validation
"""


# ----- refit ----------------------------------------------------------------------------------------
def _load_config(client, record: RunRecord, tmp: Path):
    """The selected run's composed config: its ``config.yaml`` artifact (or the file in its output
    folder)."""
    import os

    from omegaconf import OmegaConf

    quiet = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update(quiet)
    try:
        path = client.download_artifacts(record.run_id, "config.yaml", str(tmp))
    except Exception:
        local = Path(record.tags.get("gpdlm.output_dir", "")) / "config.yaml"
        if not record.tags.get("gpdlm.output_dir") or not local.exists():
            raise R.AnalysisError(f"cannot refit run {record.run_id}: it has no config.yaml artifact") from None
        path = str(local)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return OmegaConf.load(path)


def refit_config(cfg, uri: str, experiment: str, run_name: str):
    """(config, overrides) training ``cfg`` on its train+validation rows with the same test rows;
    checked on the actual splits, an error when that cannot be done exactly."""
    import numpy as np
    from omegaconf import OmegaConf

    from .. import build

    _, splits, _ = build.load_data(cfg)
    train, val, test = (np.asarray(splits.indices[k]) for k in ("train", "val", "test"))
    if val.size == 0:
        raise R.AnalysisError("cannot refit: the selected run has no validation rows")
    new = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    overrides = ["dataset.split.val_fraction=0.0"]
    OmegaConf.update(new, "dataset.split.val_fraction", 0.0, merge=False)
    if cfg.dataset.split.get("mask") is not None:  # a published mask: validation is carved from its training rows
        OmegaConf.update(new, "dataset.split.mask_val_fraction", 0.0, merge=False)
        overrides.append("dataset.split.mask_val_fraction=0.0")
    if cfg.dataset.split.get("train_size") is not None:
        size = int(cfg.dataset.split.train_size) + int(val.size)
        OmegaConf.update(new, "dataset.split.train_size", size, merge=False)
        overrides.append(f"dataset.split.train_size={size}")
    OmegaConf.update(new, "tracking.enabled", True, merge=False)
    OmegaConf.update(new, "tracking.uri", uri, merge=False)
    OmegaConf.update(new, "tracking.experiment", experiment, merge=False)
    OmegaConf.update(new, "tracking.run_name", run_name, merge=False)
    _, rsplits, _ = build.load_data(new)
    rtrain, rval, rtest = (np.asarray(rsplits.indices[k]) for k in ("train", "val", "test"))
    if (
        rval.size
        or set(rtrain.tolist()) != set(train.tolist()) | set(val.tolist())
        or sorted(rtest.tolist()) != sorted(test.tolist())
    ):
        raise R.AnalysisError(
            f"cannot refit dataset '{cfg.dataset.name}' exactly: with validation fraction 0 the "
            f"training rows are not the old train+validation rows (or the test rows change)"
        )
    return new, overrides


def refit(client, uri: str, experiment, record: RunRecord, outdir: Path) -> tuple[RunRecord, bool]:
    """The refit run of ``record`` (an existing FINISHED one, or a new one); (record, reused)."""
    found = client.search_runs(
        [experiment.experiment_id],
        max_results=1,
        order_by=["attributes.start_time DESC"],
        filter_string=f"tags.`gpdlm.refit_of` = '{record.run_id}' and attributes.status = 'FINISHED'",
    )
    if found:
        return RunRecord.from_run(found[0]), True
    from ..run.train import run_train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = _load_config(client, record, Path(tmp))
    new, overrides = refit_config(cfg, uri, experiment.name, f"refit-{record.run_name or record.run_id[:8]}")
    original = record.tags.get("gpdlm.overrides", "").split()
    tracker = _tagging_tracker(uri, experiment.name, {"gpdlm.refit_of": record.run_id})
    run_train(new, outdir / "refit" / record.run_id, overrides=original + overrides, tracker=tracker)
    return RunRecord.from_run(client.get_run(tracker.run_id)), False


def _tagging_tracker(uri: str, experiment: str, extra_tags: dict):
    """An MlflowTracker whose run also carries ``extra_tags`` (MLflow is imported only here)."""
    from ..tracking import MlflowTracker

    class TaggingTracker(MlflowTracker):
        def run(self, run_name=None, params=None, tags=None, parent_run_id=None):
            return super().run(
                run_name=run_name, params=params, tags={**(tags or {}), **extra_tags}, parent_run_id=parent_run_id
            )

    return TaggingTracker(uri, experiment)


# ----- the command ----------------------------------------------------------------------------------
def build_parser():
    p = _cli.make_parser("gpdlm select", "Pick beta by the validation metric per group and report test metrics.")
    p.epilog = EPILOG
    _cli.add_store_options(p)
    p.add_argument("--filter", default="", metavar="EXPR", help="MLflow search filter for the candidate runs")
    p.add_argument(
        "--also-by",
        action="append",
        metavar="KEYS",
        help="extra comma-separated grouping keys (params that distinguish methods, e.g. model.num_inducing)",
    )
    p.add_argument(
        "--metric",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="test metrics to report (default: those of test_nll, test_rmse, test_error, test_mre that exist)",
    )
    p.add_argument(
        "--val-metric",
        metavar="NAME",
        help="select every model by this metric (default: the one its "
        "family declares: val_mse for sq_dlm, val_nll otherwise)",
    )
    p.add_argument("--out", metavar="DIR", help="output folder (default: outputs/select/<timestamp>)")
    p.add_argument("--refit", action="store_true", help="retrain each selected configuration on train+validation")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    p.add_argument("--no-log", action="store_true", help="do not create the `select` MLflow run")
    return p


def _candidates(client, exp, args) -> tuple[list, list[str], list[str], Studies]:
    """``(records, also, notes, studies)``: the candidate runs, the extra grouping keys (checked), the
    notes to print once the input is known to be good, and the Optuna studies the runs belong to."""
    notes: list[str] = []  # printed once the input is known to be good (bad input is one line)
    records = store.load_runs(client, exp, args.filter, notes=notes)
    also = [k for k in R.split_list(args.also_by) if k not in SELECT_KEYS]
    R.check_keys(records, also, "--also-by")
    if args.val_metric and not any(args.val_metric in r.metrics for r in records):
        R.choose_metrics(records, [args.val_metric])  # raises the "no run has metric" error
    studies = find_studies(client, exp.experiment_id)
    from_studies = sum(1 for r in records if studies.of(r))
    if from_studies:
        keys = sorted({k for ks, _ in studies.parents.values() for k in ks})
        notes.append(
            f"{from_studies} run(s) are trials of {len(studies.parents)} Optuna study(ies); "
            f"selecting over the searched keys {', '.join(keys) or '(none)'}"
        )
    return records, also, notes, studies


def _refit_all(client, uri, exp, selections, keys, outdir) -> dict[str, RunRecord]:
    """``--refit``: each selected run (once) retrained on train+validation; {run id: refit record}."""
    refits: dict[str, RunRecord] = {}
    for s in selections:
        rid = s.record.run_id
        if rid in refits:
            continue
        desc = ", ".join(f"{k}={R.fmt_value(v)}" for k, v in zip(keys, s.values))
        print(
            f"refit of {rid} ({desc}, beta={R.fmt_value(s.record.value('beta'))}) on train+validation ...",
            file=sys.stderr,
        )
        rec, reused = refit(client, uri, exp, s.record, outdir)
        if reused:
            print(f"  reusing the FINISHED refit run {rec.run_id}", file=sys.stderr)
        refits[rid] = rec
    return refits


def _selection_rows(selections, keys, metrics, refits: dict | None) -> tuple[list, list, list]:
    """``(header, csv_rows, display_rows)``: one row per group and seed (the refit's metrics appended
    when ``refits`` is not None)."""
    header = ["method" if k == "model" else k for k in keys] + ["beta", "selected_by", "val_value", "n_candidates"]
    header += list(metrics) + ["run_id"]
    if refits is not None:
        header += [f"refit_{m}" for m in metrics] + ["refit_run_id"]
    csv_rows, disp = [], []
    for s in selections:
        vals = [s.method if k == "model" else R.fmt_value(v) for k, v in zip(keys, s.values)]
        tm = [s.record.metrics.get(m) for m in metrics]
        line = (
            vals
            + [R.fmt_value(s.record.value("beta")), s.val_metric, s.val_value, s.n_candidates]
            + tm
            + [s.record.run_id]
        )
        show = vals + [R.fmt_value(s.record.value("beta")), s.val_metric, R.fmt_num(s.val_value), str(s.n_candidates)]
        show += ["-" if v is None else R.fmt_num(v) for v in tm] + [s.record.run_id]
        if refits is not None:
            rr = refits[s.record.run_id]
            line += [rr.metrics.get(m) for m in metrics] + [rr.run_id]
            show += ["-" if rr.metrics.get(m) is None else R.fmt_num(rr.metrics[m]) for m in metrics] + [rr.run_id]
        csv_rows.append(line)
        disp.append(show)
    return header, csv_rows, disp


def _summaries(client, args, selections, refits, also, metrics, outdir) -> list[str]:
    """runs.csv and the summary tables and figures over seeds (and, with ``--refit``, of the refits);
    returns the names of the files written."""
    selected = [s.record for s in selections]
    summary_keys = SUMMARY_KEYS + also
    write_runs_csv(selected, summary_keys + ["seed", "beta"], metrics, outdir / "runs.csv")
    result = analyse(
        client,
        selected,
        summary_keys,
        metrics,
        outdir,
        "summary",
        figures=not args.no_figures,
        title="selected runs: mean ± standard error over seeds",
    )
    files = ["runs.csv"] + [p.name for p in result["files"] + result["figures"]]
    if args.refit:
        refit_records = [
            refits[s.record.run_id].with_extra(method=s.method, train_size=s.record.raw("train_size"))
            for s in selections
        ]
        result_r = analyse(
            client,
            refit_records,
            summary_keys,
            metrics,
            outdir,
            "summary_refit",
            figures=False,
            title="refits on train+validation: mean ± standard error over seeds "
            "(train_size = the selection's training size)",
        )
        files += [p.name for p in result_r["files"]]
    return files


def main(argv: list[str]) -> int:
    """``gpdlm select``: select beta per group by the validation metric, tabulate the test metrics of
    the selections (and of their refits), summarise over seeds, and log the `select` run."""
    args = build_parser().parse_args(argv)
    client, uri = store.open_store(args.tracking_uri)
    exp = store.get_experiment(client, args.experiment, uri)
    records, also, notes, studies = _candidates(client, exp, args)
    selections, select_notes = select_records(records, also, args.val_metric, studies)
    notes += select_notes
    if not selections:
        raise R.AnalysisError("no group could be selected: no run has a validation metric")
    metrics = R.choose_metrics([s.record for s in selections], R.split_list(args.metric))
    for note in notes:
        print(f"gpdlm: note: {note}", file=sys.stderr)
    outdir = store.output_dir(args.out, "select")
    keys = SELECT_KEYS + also
    refits = _refit_all(client, uri, exp, selections, keys, outdir) if args.refit else None

    header, csv_rows, disp = _selection_rows(selections, keys, metrics, refits)
    T.write_csv(outdir / "selected.csv", header, csv_rows)
    write_atomic(outdir / "selected.md", T.markdown_table(header, disp))
    short = [[c[:8] if h.endswith("run_id") else c for h, c in zip(header, row)] for row in disp]
    T.print_table(
        f"{exp.name}: beta selected by validation ({len(selections)} rows from {len(records)} runs)",
        header,
        short,
        numeric_from=len(keys),
    )
    files = ["selected.csv", "selected.md"] + _summaries(client, args, selections, refits, also, metrics, outdir)
    print(f"wrote {', '.join(files)} to {outdir}")
    if not args.no_log:
        params = {
            "also_by": ",".join(also),
            "metrics": ",".join(metrics),
            "filter": args.filter or "",
            "val_metric": args.val_metric or "auto",
            "refit": args.refit,
            "n_runs": len(records),
            "n_selected": len(selections),
        }
        tags = {"gpdlm.output_dir": outdir.resolve()}
        rid = store.log_analysis_run(client, exp.experiment_id, "select", outdir, params=params, tags=tags)
        print(f"MLflow run 'select' {rid} in experiment '{exp.name}' ({uri})")
    return 0


def cli() -> int:
    return _cli.run_cli(main)
