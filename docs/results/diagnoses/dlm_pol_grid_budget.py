"""D1-pol and D2-pol at n = 2,000 and 4,000: does the beta grid's lower edge (0.01) or the fast protocol's
iteration budget decide them? (first run 2026-11-28 against the 2026-11-27 pol study; diagnoses/dlm.md, D2-pol)

At these sizes beta-ELBO's validation-selected beta (Fig. 1(a)) and joint sq-DLM's (Fig. 1(b), selected by
validation MSE) sit at or near the grid's lower edge, and joint sq-DLM's selected runs end at the fast protocol's
budget (200 Adam + 1,000 L-BFGS iterations) with the loss still falling. Four checks, each an experiment of its
own in the store given (the study's own runs are read from its run records, docs/results/dlm_pol_fast_2026-11-30):

* ``regression_logloss_pol_lowbeta``: SVGP (beta-ELBO) at beta = 0.005, 0.0025, 0.00125, 0.000625; beta-ELBO
  selected by validation NLL over the paper's grid and over the extended one, joint DLM minus each.
* ``regression_sqloss_pol_lowbeta``: joint sq-DLM at the same four betas, selected by validation MSE over the
  paper's grid and over the extended one.
* ``regression_sqloss_pol_budget``: joint sq-DLM at beta = 0.01 with a 10,000-iteration budget (to the tests).
* ``regression_sqloss_pol_paper``: joint sq-DLM at beta = 0.01 under the paper's protocol (Adam, 5,000
  iterations per stage, the window rule).

Each joint sq-DLM variant's test MSE minus beta-ELBO's (selected by validation NLL, the report's rule), paired
over seeds 0-4, one-sided t-test (joint sq-DLM lower). 90 jobs, about an hour on 2 cores.

    PYTHONPATH=. python docs/results/diagnoses/dlm_pol_grid_budget.py run  sqlite:////tmp/polgrid.db [budget paper ...]
    PYTHONPATH=. python docs/results/diagnoses/dlm_pol_grid_budget.py read sqlite:////tmp/polgrid.db
"""

from __future__ import annotations

import math
import statistics as st
import subprocess
import sys
from pathlib import Path

from scipy import stats

from gpdlm_cli.analysis import export
from gpdlm_cli.analysis.records import AnalysisError
from gpdlm_cli.analysis.selection import pick
from gpdlm_cli.analysis.store import get_experiment, load_runs, open_store

STUDY = Path(__file__).resolve().parents[1] / "dlm_pol_fast_2026-11-30"
SIZES, SEEDS = (2000, 4000), range(5)
LOW = "0.005,0.0025,0.00125,0.000625"
CHECKS = (
    f"model=svgp objective.beta={LOW} +experiment=regression_logloss_pol tracking.experiment=regression_logloss_pol_lowbeta",
    f"model=sq_dlm objective.beta={LOW} +experiment=regression_sqloss_pol tracking.experiment=regression_sqloss_pol_lowbeta",
    "model=sq_dlm objective.beta=0.01 +experiment=regression_sqloss_pol tracking.experiment=regression_sqloss_pol_budget "
    "trainer.fast_max_iters=10000 trainer.max_iters=10000",
    "model=sq_dlm objective.beta=0.01 +experiment=regression_sqloss_pol tracking.experiment=regression_sqloss_pol_paper "
    "trainer.protocol=paper",
)  # fmt: skip


def run(uri: str, only: list[str]) -> None:
    """Train the checks (``only``: those whose experiment names one of the words, e.g. ``budget``; all without)."""
    for check in CHECKS:
        if only and not any(f"tracking.experiment=regression_{w}" in check or f"_{w} " in f"{check} " for w in only):
            continue
        protocol = "" if "trainer.protocol=" in check else "trainer.protocol=fast"
        cmd = (
            f"gpdlm train -m {check} {protocol} dataset.split.train_size=2000,4000 seed=0,1,2,3,4 threads=1 "
            f"sweep.skip_finished=true hydra/launcher=joblib hydra.launcher.n_jobs=2 tracking.uri={uri}"
        )
        print(cmd, flush=True)
        subprocess.run(cmd, shell=True, check=True)


def load(uri: str) -> dict[str, list]:
    """experiment -> FINISHED training runs: the study's from its run records, the checks' from the store."""
    files = [export.read(f) for f in sorted(STUDY.glob("runs*.jsonl.gz"))]
    _, runs = export.load_records(files, ["regression_logloss_pol", "regression_sqloss_pol"], notes=[])
    try:
        client, uri = open_store(uri)
    except AnalysisError:  # no check run yet
        client = None
    for e in ("logloss_pol_lowbeta", "sqloss_pol_lowbeta", "sqloss_pol_budget", "sqloss_pol_paper"):
        try:
            if client is None:
                raise AnalysisError("no store")
            runs[f"regression_{e}"] = load_runs(client, get_experiment(client, f"regression_{e}", uri), notes=[])
        except AnalysisError:  # a check not run (yet)
            runs[f"regression_{e}"] = []
    return runs


def chosen(runs, model: str, n: int, seed: int, experiments: list[str], metric: str):
    """The run of (model, joint, n, seed) with the lowest ``metric`` among ``experiments``' betas."""
    c = [
        r
        for e in experiments
        for r in runs[e]
        if r.params.get("model.name") == model
        and r.params.get("model.variant") == "joint"
        and int(r.params["dataset.split.train_size"]) == n
        and int(r.params["seed"]) == seed
        and metric in r.metrics
    ]
    return pick(c, metric)


def paired(a: list[float], b: list[float]) -> str:
    d = [x - y for x, y in zip(a, b)]
    return f"{st.mean(d):+.4g}, p = {stats.ttest_1samp(d, 0, alternative='less').pvalue:.2g}"


def read(uri: str) -> None:
    runs = load(uri)
    logloss, low_nll = ["regression_logloss_pol"], ["regression_logloss_pol", "regression_logloss_pol_lowbeta"]
    for n in SIZES:
        dlm = [chosen(runs, "dlm", n, s, logloss, "val_nll").metrics["test_nll"] for s in SEEDS]
        for name, exps in (("paper grid", logloss), ("extended grid", low_nll)):
            if name != "paper grid" and not runs[exps[-1]]:
                print(f"n={n} beta-ELBO, {name}: not run")
                continue
            rs = [chosen(runs, "svgp", n, s, exps, "val_nll") for s in SEEDS]
            t = [r.metrics["test_nll"] for r in rs]
            print(
                f"n={n} beta-ELBO, {name}: betas {[round(float(r.params['objective.beta']), 6) for r in rs]}, test NLL "
                f"{st.mean(t):.4f} +- {st.stdev(t) / math.sqrt(5):.4f}; joint DLM minus it {paired(dlm, t)}"
            )
        elbo = [chosen(runs, "svgp", n, s, logloss, "val_nll").metrics["test_mse"] for s in SEEDS]
        print(f"n={n}: beta-ELBO test MSE {st.mean(elbo):.2f} +- {st.stdev(elbo) / math.sqrt(5):.2f}")
        for name, exps in (
            ("paper grid", ["regression_sqloss_pol"]),
            ("extended grid", ["regression_sqloss_pol", "regression_sqloss_pol_lowbeta"]),
            ("10,000-iteration budget", ["regression_sqloss_pol_budget"]),
            ("paper protocol", ["regression_sqloss_pol_paper"]),
        ):
            if not runs[exps[-1]]:
                print(f"  joint sq-DLM, {name}: not run")
                continue
            rs = [chosen(runs, "sq_dlm", n, s, exps, "val_mse") for s in SEEDS]
            t = [r.metrics["test_mse"] for r in rs]
            print(
                f"  joint sq-DLM, {name}: betas {[round(float(r.params['objective.beta']), 6) for r in rs]}, "
                f"iterations {[int(r.metrics['iterations']) for r in rs]}, converged "
                f"{sum(int(r.metrics.get('converged', 0)) for r in rs)}/5, final objective "
                f"{st.mean(r.metrics['final_loss'] for r in rs):.4f}, test MSE {st.mean(t):.2f} +- "
                f"{st.stdev(t) / math.sqrt(5):.2f}; minus beta-ELBO {paired(t, elbo)}"
            )


if __name__ == "__main__":
    mode, uri = sys.argv[1], sys.argv[2]
    run(uri, sys.argv[3:]) if mode == "run" else read(uri)
