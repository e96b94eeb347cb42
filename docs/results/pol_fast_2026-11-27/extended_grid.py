"""beta-ELBO selected by validation NLL (``gpdlm select``'s rule, ``analysis.selection.pick``) over the paper's
grid and over the grid extended below 0.01 (experiment regression_logloss_pol_lowbeta), and joint DLM minus
each, paired over seeds (README.md here).

    python docs/results/pol_fast_2026-11-27/extended_grid.py sqlite:////path/to/mlflow.db
"""

import math
import statistics as st
import sys

from scipy import stats

from gpdlm_cli.analysis.selection import pick
from gpdlm_cli.analysis.store import get_experiment, load_runs, open_store

client, uri = open_store(sys.argv[1] if len(sys.argv) > 1 else None)
runs = {
    name: load_runs(client, get_experiment(client, name, uri), notes=[])
    for name in ("regression_logloss_pol", "regression_logloss_pol_lowbeta")
}


def selected(model, n, seed, experiments):
    """(test NLL, beta) of the run chosen by validation NLL among a (model, size, seed)'s betas."""
    c = [
        r
        for e in experiments
        for r in runs[e]
        if r.params.get("model.name") == model
        and r.params.get("model.variant") == "joint"
        and int(r.params["dataset.split.train_size"]) == n
        and int(r.params["seed"]) == seed
        and "val_nll" in r.metrics
    ]
    best = pick(c, "val_nll")
    return best.metrics["test_nll"], float(best.params["objective.beta"])


for n in (2000, 4000):
    dlm = [selected("dlm", n, s, ["regression_logloss_pol"]) for s in range(5)]
    for name, experiments in (("paper grid", ["regression_logloss_pol"]), ("extended", list(runs))):
        v = [selected("svgp", n, s, experiments) for s in range(5)]
        t = [x[0] for x in v]
        d = [a[0] - b for a, b in zip(dlm, t)]
        p = stats.ttest_1samp(d, 0, alternative="less").pvalue
        print(
            f"n={n} beta-ELBO {name}: betas {[round(x[1], 5) for x in v]} test NLL {st.mean(t):.4f} +- "
            f"{st.stdev(t) / math.sqrt(5):.4f}; joint DLM minus it {st.mean(d):+.4f} p={p:.2g}"
        )
