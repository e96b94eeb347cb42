"""Selection on the validation set, as the DLM paper does: per group of runs that differ only in
beta (or in what an Optuna study searched), the run with the lowest validation metric.

The metric is what the run's model family declares (``Family.SELECTION_METRIC``, default
``val_nll``; square-loss DLM: ``val_mse``), read from the run tag ``gpdlm.selection_metric``
(``declarations``); a metric with the same arg-min stands in where a run lacks it (``val_rmse`` for
``val_mse``). A family may also declare a reference beta (``Family.REFERENCE_BETA``: svgp's plain
ELBO at beta=1), whose best run is reported as its own row ``<model> (beta=<b>)``, whatever the
validation set says. Ties go to the larger beta (the more regularised model), then the earlier run,
then the run id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import declarations as D
from . import records as R
from . import store
from .records import RunRecord

SELECT_KEYS = ["dataset", "model", "variant", "likelihood", "estimator", "train_size", "seed"]
SUMMARY_KEYS = ["dataset", "method", "variant", "likelihood", "estimator", "train_size"]


@dataclass
class Selection:
    values: tuple  # the group's values of SELECT_KEYS + --also-by keys
    method: str  # the model name, or "<model> (beta=<b>)" for a family's reference beta
    record: RunRecord  # the selected run (with extra['method'])
    val_metric: str
    val_value: float
    n_candidates: int
    betas: list


def _beta(r: RunRecord) -> float:
    b = r.value("beta")
    return b if isinstance(b, float) else math.nan


def pick(candidates: list[RunRecord], metric: str) -> RunRecord:
    """The arg-min of ``metric``; ties: larger beta, then earlier start, then run id."""

    def key(r):
        b = _beta(r)
        return (r.metrics[metric], -b if not math.isnan(b) else math.inf, r.start_time, r.run_id)

    return min(candidates, key=key)


def _varying_params(runs: list[RunRecord], tuned=()) -> list[str]:
    return R.varying_params(runs, ignore=set(tuned))


@dataclass
class Studies:
    """The Optuna studies the runs come from: parent run id -> (searched keys, objective)."""

    parents: dict

    def of(self, r: RunRecord) -> tuple[list[str], str] | None:
        return self.parents.get(r.tags.get("mlflow.parentRunId"))

    def tuned(self, runs: list[RunRecord]) -> set[str]:
        return {k for r in runs if (study := self.of(r)) for k in study[0]}

    def objective(self, runs: list[RunRecord]) -> str | None:
        """The study objective shared by all ``runs`` (None if mixed, absent or ``auto``)."""
        objs = {study[1] if (study := self.of(r)) else None for r in runs}
        obj = objs.pop() if len(objs) == 1 else None
        return None if obj in (None, "", "auto") else obj


def find_studies(client, experiment_id: str) -> Studies:
    """The Optuna sweep parents of the experiment (``gpdlm.sweeper=optuna``)."""
    found = store.search_all(client, experiment_id, "tags.`gpdlm.sweeper` = 'optuna'")
    return Studies(
        {
            r.info.run_id: (
                [k for k in r.data.tags.get("gpdlm.swept", "").split(",") if k],
                r.data.tags.get("gpdlm.sweep_objective", "auto"),
            )
            for r in found
        }
    )


def select_records(
    records: list[RunRecord],
    also_by: list[str] | None = None,
    val_metric: str | None = None,
    studies: Studies | None = None,
) -> tuple[list[Selection], list[str]]:
    """The selected run of every group (and the reference-beta row of groups whose family declares
    one, ``declarations.reference_beta``), and notes about
    groups that could not be selected or that hold repeated betas (keys an Optuna study searched
    are what the selection is over, never a note)."""
    studies = studies or Studies({})
    keys = SELECT_KEYS + list(also_by or [])
    selections: list[Selection] = []
    notes: list[str] = []
    repeated: dict[str, int] = {}
    for values, runs in R.group_records(records, keys):
        label = ", ".join(f"{k}={R.fmt_value(v)}" for k, v in zip(keys, values))
        model = values[keys.index("model")]
        study_metric = studies.objective(runs)
        wanted = [val_metric] if val_metric else [study_metric] if study_metric else D.validation_metrics(runs)
        metric = next((m for m in wanted if any(_finite(r.metrics.get(m)) for r in runs)), None)
        if metric is None:
            notes.append(f"skipped group [{label}]: no run has a finite {' or '.join(wanted)}")
            continue
        cands = [r for r in runs if _finite(r.metrics.get(metric))]
        by_beta: dict = {}
        for r in cands:
            by_beta.setdefault(r.value("beta"), []).append(r)
        for rs in by_beta.values():
            if len(rs) > 1:
                tuned = studies.tuned(rs)
                varying = _varying_params(rs, tuned)
                if tuned and not varying:
                    continue  # trials of a study that differ in what it searched
                for k in varying or ["(none: repeated runs)"]:
                    repeated[k] = repeated.get(k, 0) + 1
        betas = sorted(by_beta, key=R.sort_key)
        best = pick(cands, metric)
        rows = [(R.fmt_value(model), best, cands)]
        reference = D.reference_beta(runs)
        if reference is not None:
            row = f"{R.fmt_value(model)} (beta={R.fmt_value(reference)})"
            ones = [r for r in cands if _beta(r) == reference]
            if ones:
                rows.append((row, pick(ones, metric), ones))
            else:
                notes.append(f"no beta={R.fmt_value(reference)} run in group [{label}]: no '{row}' row")
        for method, run, pool in rows:
            selections.append(
                Selection(values, method, run.with_extra(method=method), metric, run.metrics[metric], len(pool), betas)
            )
    # rows by method (a reference-beta row right after its model's), then the remaining keys and the seed
    mi = keys.index("model")
    selections.sort(key=lambda s: tuple(R.sort_key(s.method if i == mi else v) for i, v in enumerate(s.values)))
    if repeated:
        which = ", ".join(f"{k} ({n})" for k, n in sorted(repeated.items()))
        notes.append(
            "some groups hold several runs with the same beta; the best validation run of them was "
            f"used. Params that differ between such runs (groups affected): {which}; "
            "add them with --also-by to select separately"
        )
    return selections, notes


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
