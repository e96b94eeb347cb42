"""Banana: joint DLM's selected runs end at the fast protocol's iteration budget -- does it matter?

Every (size, seed) of banana's joint DLM had its validation-selected beta end at the budget of
``trainer=fast`` (200 Adam + 1,000 L-BFGS iterations) before the stopping tests passed. This reruns
exactly those 25 configurations (same beta, size, seed) twice, into the experiment
``classification_banana_budget`` of the same store:

* ``fast``:  ``trainer=fast`` with a 20,000-iteration budget (to the stopping tests);
* ``paper``: ``trainer=paper``, the paper's App. D protocol (Adam, lr 0.1, 3,000 iterations, window rule),

and prints, per size, the final objective (per datum) and the test NLL of the study's run, of ``fast`` (20,000) and of
``paper``, and joint DLM minus beta-ELBO (the study's selected runs) with each.

    python docs/results/dlm_classification_2026-11-30/budget_check.py run  sqlite:////path/to/mlflow.db
    python docs/results/dlm_classification_2026-11-30/budget_check.py read sqlite:////path/to/mlflow.db
"""

import math
import os
import statistics as st
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from scipy import stats

from gpdlm_cli.analysis.selection import pick
from gpdlm_cli.analysis.store import get_experiment, load_runs, open_store

mode, uri = sys.argv[1], sys.argv[2]
client, uri = open_store(uri)
study = load_runs(client, get_experiment(client, "classification", uri), notes=[])
SIZES, SEEDS = (100, 200, 500, 1000, 2000), range(5)


def exact_beta(n, logged):
    """The grid value n / 2^k (or its floor 0.01) that MLflow logged rounded to 6 digits."""
    grid = [n / 2**k for k in range(40) if n / 2**k >= 0.01] + [0.01]
    return min(grid, key=lambda b: abs(b - float(logged)))


def selected(model, n, seed):
    c = [
        r
        for r in study
        if r.params.get("dataset.name") == "banana"
        and r.params.get("model.name") == model
        and r.params.get("model.variant", "joint") == "joint"
        and int(r.params["dataset.split.train_size"]) == n
        and int(r.params["seed"]) == seed
        and float(r.params["objective.beta"]) != 1.0
        and "val_nll" in r.metrics
    ]
    return pick(c, "val_nll")


ARMS = {"fast": "trainer=fast trainer.fast_max_iters=20000 trainer.max_iters=20000", "paper": "trainer=paper"}

if mode == "run":
    jobs = []
    for n in SIZES:
        for s in SEEDS:
            b = exact_beta(n, selected("dlm", n, s).params["objective.beta"])
            for arm, opts in ARMS.items():
                jobs.append(
                    f"gpdlm train +experiment=classification dataset=banana model=dlm objective.beta={b!r} "
                    f"dataset.split.train_size={n} seed={s} {opts} threads=1 tracking.uri={uri} "
                    f"tracking.experiment=classification_banana_budget"
                )
    with ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as pool:
        codes = list(pool.map(lambda j: subprocess.run(j, shell=True, capture_output=True).returncode, jobs))
    print(f"{len(jobs)} runs, {sum(c != 0 for c in codes)} failed")
else:
    check = load_runs(client, get_experiment(client, "classification_banana_budget", uri), notes=[])

    def rerun(arm, n, s):
        c = [
            r
            for r in check
            if r.params["trainer.protocol"] == arm
            and int(r.params["dataset.split.train_size"]) == n
            and int(r.params["seed"]) == s
        ]
        return c[-1]

    print(
        "n | arm | iterations (mean, max) | converged | final objective (mean) | test NLL | DLM - beta-ELBO, p (non-inferiority 0.02)"
    )
    for n in SIZES:
        elbo = [selected("svgp", n, s).metrics["test_nll"] for s in SEEDS]
        arms = {"study": [selected("dlm", n, s) for s in SEEDS]}
        arms.update({a: [rerun(a, n, s) for s in SEEDS] for a in ARMS})
        for a, rs in arms.items():
            it = [r.metrics["iterations"] for r in rs]
            d = [r.metrics["test_nll"] - e for r, e in zip(rs, elbo)]
            p = stats.ttest_1samp([x - 0.02 for x in d], 0, alternative="less").pvalue
            print(
                f"{n} | {a} | {st.mean(it):.0f}, {max(it):.0f} | {sum(int(r.metrics['converged']) for r in rs)}/5 | "
                f"{st.mean(r.metrics['final_loss'] for r in rs):.5f} | {st.mean(r.metrics['test_nll'] for r in rs):.4f} | "
                f"{st.mean(d):+.4f} +- {st.stdev(d) / math.sqrt(5):.4f}, p={p:.2g}"
            )
