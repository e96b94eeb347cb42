"""Is D1-pol's verdict at n = 500 budget-bound? (2026-11-30)

In the 2026-11-30 pol study (docs/results/dlm_pol_fast_2026-11-30, `--protocol fast`) every validation-selected
joint-DLM run at n = 500 and 1000 ended at the fast protocol's cap (200 Adam + 1,000 L-BFGS iterations) with the
stopping tests not passed, while beta-ELBO's selected runs all passed them. This script trains the selected
joint-DLM configurations again -- the same seed, size and beta, the same code -- with `trainer.fast_max_iters`
raised to 20,000 (until the stopping tests pass), plus the grid's betas on either side of each selected one
(x 2 and / 2, so that the selection can move), and compares joint DLM with beta-ELBO as the study's report does
(per seed the run with the lowest validation NLL; paired one-sided t-test on test NLL).

    python docs/results/diagnoses/dlm_pol_budget.py run  sqlite:////tmp/polbudget.db [500 1000] [selected]
    python docs/results/diagnoses/dlm_pol_budget.py read sqlite:////tmp/polbudget.db [500 1000]

(`selected`: the selected betas only, not their neighbours: a fifth of the time.)
"""

from __future__ import annotations

import statistics as st
import subprocess
import sys
from pathlib import Path

from scipy import stats
from study_grid import grid, selected, study_runs, to_rerun  # this folder's helper (sys.path[0])

RECORDS = Path(__file__).resolve().parents[1] / "dlm_pol_fast_2026-11-30" / "runs.jsonl.gz"
EXPERIMENT = "diag_d1_pol_budget"
CAP = 20_000


def run(uri: str, sizes: list[int], neighbours: bool = True) -> None:
    runs = study_runs([RECORDS])
    for n in sizes:
        for seed, beta in to_rerun(runs, n, neighbours):
            cmd = [
                "gpdlm",
                "train",
                "-m",
                "+experiment=regression_logloss_pol",
                "model=dlm",
                f"dataset.split.train_size={n}",
                f"seed={seed}",
                f"objective.beta={beta}",
                "trainer.protocol=fast",
                f"trainer.fast_max_iters={CAP}",
                f"trainer.max_iters={CAP}",
                "threads=1",
                "sweep.skip_finished=true",
                f"tracking.uri={uri}",
                f"tracking.experiment={EXPERIMENT}",
            ]  # fmt: skip (-m: a multirun of one job, so that sweep.skip_finished skips a configuration trained before)
            print(" ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)


def read(uri: str, sizes: list[int]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    again: dict = {}
    for r in client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=5000):
        p, m = r.data.params, r.data.metrics
        if r.data.tags.get("gpdlm.sweep") == "parent" or "objective.beta" not in p:
            continue
        key = (int(p["dataset.split.train_size"]), int(p["seed"]), float(p["objective.beta"]))
        again[key] = (m["val_nll"], m["test_nll"], m.get("iterations"))
    runs = study_runs([RECORDS])
    for n in sizes:
        joint, elbo = grid(runs, "dlm", "joint", n), selected(grid(runs, "svgp", "joint", n))
        capped = selected(joint)
        # the converged runs replace the study's capped ones at their betas; the others as the study had them
        converged = {
            s: {**bs, **{b: v for (nn, ss, b), v in again.items() if nn == n and ss == s}} for s, bs in joint.items()
        }
        now = selected(converged)
        print(f"n = {n}: seed, study (capped) beta / test NLL / it, converged beta / test NLL / it, beta-ELBO test NLL")
        for s in sorted(now):
            print(f"  {s}: {capped[s][0]:g} / {capped[s][2]:.4f} / {capped[s][3]:.0f}   "
                  f"{now[s][0]:g} / {now[s][2]:.4f} / {now[s][3]:.0f}   {elbo[s][2]:.4f}")  # fmt: skip
        for label, sel in (("study (capped)", capped), ("trained to the tests", now)):
            d = [sel[s][2] - elbo[s][2] for s in sorted(sel)]
            t = stats.ttest_1samp(d, 0.0, alternative="less")
            print(
                f"  joint DLM - beta-ELBO, {label}: mean {st.mean(d):+.4f} (sd {st.stdev(d):.4f}), p = {t.pvalue:.3g}"
            )


if __name__ == "__main__":
    mode, uri = sys.argv[1], sys.argv[2]
    sizes = [int(a) for a in sys.argv[3:] if a.isdigit()] or [500]
    if mode == "run":
        run(uri, sizes, neighbours="selected" not in sys.argv[3:])
    else:
        read(uri, sizes)
