"""Two checks of D2-pol (square loss): joint sq-DLM's validation-selected beta is the grid's lower edge,
0.01, for every seed at n = 2,000 and 4,000, and those runs end at the fast protocol's iteration budget.

* Extended grid: joint sq-DLM at beta = 0.005, 0.0025, 0.00125, 0.000625 (experiment
  ``regression_sqloss_pol_lowbeta``), selected by validation MSE (the study's rule) over the paper's grid
  and over the extended one.
* Budget: the selected runs again with a 10,000-iteration budget (experiment ``regression_sqloss_pol_budget``)
  and with the paper's protocol, Adam for 5,000 iterations with the window rule (``regression_sqloss_pol_paper``).

For each, joint sq-DLM's test MSE and its difference from beta-ELBO (SVGP selected by validation NLL, the
report's rule), paired over seeds, one-sided t-test (joint sq-DLM lower).

    python docs/results/pol_fast_2026-11-27/sqloss_checks.py run  sqlite:////path/to/mlflow.db
    python docs/results/pol_fast_2026-11-27/sqloss_checks.py read sqlite:////path/to/mlflow.db
"""

import math
import statistics as st
import subprocess
import sys

from scipy import stats

from gpdlm_cli.analysis.records import AnalysisError
from gpdlm_cli.analysis.selection import pick
from gpdlm_cli.analysis.store import get_experiment, load_runs, open_store

mode, uri = sys.argv[1], sys.argv[2]
SIZES, SEEDS = (2000, 4000), range(5)
C = f"trainer=fast threads=1 tracking.uri={uri}"
if mode == "run":
    subprocess.run(
        "gpdlm train -m +experiment=regression_sqloss_pol model=sq_dlm objective.beta=0.005,0.0025,0.00125,0.000625 "
        f"dataset.split.train_size=2000,4000 seed=0,1,2,3,4 tracking.experiment=regression_sqloss_pol_lowbeta "
        f"hydra/launcher=joblib hydra.launcher.n_jobs=2 {C}",
        shell=True,
        check=True,
    )
    subprocess.run(
        "gpdlm train -m +experiment=regression_sqloss_pol model=sq_dlm objective.beta=0.01 "
        "dataset.split.train_size=2000,4000 seed=0,1,2,3,4 tracking.experiment=regression_sqloss_pol_budget "
        f"trainer.fast_max_iters=10000 trainer.max_iters=10000 hydra/launcher=joblib hydra.launcher.n_jobs=2 {C}",
        shell=True,
        check=True,
    )
    subprocess.run(
        "gpdlm train -m +experiment=regression_sqloss_pol model=sq_dlm objective.beta=0.01 "
        "dataset.split.train_size=2000,4000 seed=0,1,2,3,4 tracking.experiment=regression_sqloss_pol_paper "
        f"hydra/launcher=joblib hydra.launcher.n_jobs=2 {C.replace('trainer=fast', 'trainer=paper')}",
        shell=True,
        check=True,
    )
    sys.exit()

client, uri = open_store(uri)
runs = {}
for e in (
    "regression_logloss_pol",
    "regression_sqloss_pol",
    "regression_sqloss_pol_lowbeta",
    "regression_sqloss_pol_budget",
    "regression_sqloss_pol_paper",
):
    try:
        runs[e] = load_runs(client, get_experiment(client, e, uri), notes=[])
    except AnalysisError:  # a check not run (yet)
        runs[e] = []


def chosen(model, n, seed, experiments, metric):
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


for n in SIZES:
    elbo = [chosen("svgp", n, s, ["regression_logloss_pol"], "val_nll").metrics["test_mse"] for s in SEEDS]
    print(f"n={n}: beta-ELBO test MSE {st.mean(elbo):.2f} +- {st.stdev(elbo) / math.sqrt(5):.2f}")
    for name, exps in (
        ("paper grid", ["regression_sqloss_pol"]),
        ("extended grid", ["regression_sqloss_pol", "regression_sqloss_pol_lowbeta"]),
        ("10,000-iteration budget", ["regression_sqloss_pol_budget"]),
        ("paper protocol", ["regression_sqloss_pol_paper"]),
    ):
        if not any(runs[e] for e in exps):
            print(f"  joint sq-DLM, {name}: not run")
            continue
        rs = [chosen("sq_dlm", n, s, exps, "val_mse") for s in SEEDS]
        t = [r.metrics["test_mse"] for r in rs]
        d = [a - b for a, b in zip(t, elbo)]
        p = stats.ttest_1samp(d, 0, alternative="less").pvalue
        print(
            f"  joint sq-DLM, {name}: betas {[round(float(r.params['objective.beta']), 6) for r in rs]}, "
            f"iterations {[int(r.metrics['iterations']) for r in rs]}, converged "
            f"{sum(int(r.metrics.get('converged', 0)) for r in rs)}/5, final objective "
            f"{st.mean(r.metrics['final_loss'] for r in rs):.4f}, test MSE {st.mean(t):.2f} +- "
            f"{st.stdev(t) / math.sqrt(5):.2f}; minus beta-ELBO {st.mean(d):+.2f}, p={p:.2g}"
        )
