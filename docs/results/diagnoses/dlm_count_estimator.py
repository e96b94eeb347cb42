"""Is D6-count-abalone's failure the bMC estimator's? (2026-11-30)

In the abalone count study (docs/results/dlm_count_2026-11-30, the preset `count`: joint and fixed DLM with bMC,
10 samples, as in the paper) joint DLM's test NLL is above beta-ELBO's at the small training sizes, though its
selected runs pass the stopping tests. bMC's estimate of log E_q[p(y|f)] is biased low (on abalone its gradient's
relative bias is 0.6-1.5 at L = 10: docs/results/dlm_estimators_2026-11-30), and the bias falls on the DLM term
only -- the SVGP baseline uses the closed-form E_q[log p]. This script trains the study's selected joint-DLM
configurations again -- the same seed, size and beta, the same code -- with the bias removed
(`estimator=quadrature`: adaptive Gauss-Hermite in log space, 20 nodes) and the same optimiser (the study's bMC
stages, stochastic, ran the paper's Adam under `trainer.protocol=fast`; a quadrature stage would run L-BFGS there,
so these run `trainer.protocol=paper`), plus the grid's betas on either side
of each selected one (x 2 and / 2, so that the selection can move), and compares joint DLM with beta-ELBO as the
report does (per seed the run with the lowest validation NLL; paired one-sided t-test on test NLL).

    PYTHONPATH=. python docs/results/diagnoses/dlm_count_estimator.py run  sqlite:////tmp/countq.db [100 200 500]
    PYTHONPATH=. python docs/results/diagnoses/dlm_count_estimator.py read sqlite:////tmp/countq.db [100 200 500]
"""

from __future__ import annotations

import statistics as st
import subprocess
import sys
from pathlib import Path

from scipy import stats
from study_grid import grid, selected, study_runs, to_rerun  # this folder's helper (sys.path[0])

STUDY = Path(__file__).resolve().parents[1] / "dlm_count_2026-11-30"
EXPERIMENT = "diag_d6_count_quadrature"


def run(uri: str, sizes: list[int]) -> None:
    runs = study_runs(sorted(STUDY.glob("runs*.jsonl.gz")))
    for n in sizes:
        jobs = to_rerun(runs, n)
        for seed in sorted({s for s, _ in jobs}):
            betas = ",".join(str(b) for s, b in jobs if s == seed)
            cmd = (
                f"gpdlm train -m +experiment=count model=dlm estimator=quadrature dataset.split.train_size={n} "
                f"seed={seed} objective.beta={betas} trainer.protocol=paper threads=1 sweep.skip_finished=true "
                f"tracking.uri={uri} tracking.experiment={EXPERIMENT}"
            )
            print(cmd, flush=True)
            subprocess.run(cmd, shell=True, check=True)


def read(uri: str, sizes: list[int]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    quad: dict = {}
    for r in client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=5000):
        p, m = r.data.params, r.data.metrics
        if r.data.tags.get("gpdlm.sweep") == "parent" or "objective.beta" not in p:
            continue
        n, s = int(p["dataset.split.train_size"]), int(p["seed"])
        quad.setdefault((n, s), {})[float(p["objective.beta"])] = (m["val_nll"], m["test_nll"], m.get("iterations"))
    runs = study_runs(sorted(STUDY.glob("runs*.jsonl.gz")))
    for n in sizes:
        bmc = selected(grid(runs, "dlm", "joint", n))
        elbo = selected(grid(runs, "svgp", "joint", n))
        q = {s: min(((b, *v) for b, v in quad[(n, s)].items()), key=lambda t: t[1]) for s in bmc if (n, s) in quad}
        print(f"n = {n}: seed, bMC-10 beta / test NLL / it, quadrature beta / test NLL / it, beta-ELBO test NLL")
        for s in sorted(q):
            print(f"  {s}: {bmc[s][0]:g} / {bmc[s][2]:.4f} / {bmc[s][3]:.0f}   "
                  f"{q[s][0]:g} / {q[s][2]:.4f} / {q[s][3]:.0f}   {elbo[s][2]:.4f}")  # fmt: skip
        for label, sel in (("bMC-10 (the study)", bmc), ("quadrature", q)):
            seeds = sorted(sel)
            if len(seeds) < 2:
                print(f"  joint DLM - beta-ELBO, {label}: not run")
                continue
            d = [sel[s][2] - elbo[s][2] for s in seeds]
            t = stats.ttest_1samp(d, 0.0, alternative="less")
            print(
                f"  joint DLM - beta-ELBO, {label}: mean {st.mean(d):+.4f} (sd {st.stdev(d):.4f}, "
                f"{len(d)} seeds), p = {t.pvalue:.3g}"
            )


if __name__ == "__main__":
    mode, uri = sys.argv[1], sys.argv[2]
    sizes = [int(a) for a in sys.argv[3:] if a.isdigit()] or [100, 200, 500]
    run(uri, sizes) if mode == "run" else read(uri, sizes)
