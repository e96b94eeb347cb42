"""Diagnosis of D9-ups1-beats-bmc10 on the real 2008 airline data (issue 40): is uPS-1 behind bMC-10 because the
reduced scale trains for 1/20 of the paper's steps?

The reduced study (`sampling_methods_reduced`: the paper's airline protocol -- joint DLM, beta = 0.1, M = 200,
RBF-ARD, Adam 1e-3, batch 1000 -- on a seeded 50,000-flight sample, 20 epochs) takes 1,000 steps; the paper's 20
epochs over all 1.93M flights are ~39,000 steps of 1000 (its Fig. 10 x axis). Every estimator there ends in the
order of its gradient noise (exact < bMC-100 < uPS-100 < bMC-10 < uPS-10 < bMC-1 < uPS-1), the mark of a run
stopped before its noise floor. Here the same preset and sample train 20x longer (400 epochs = 20,000 steps, a
test evaluation every 20 epochs), uPS-1, bMC-10 and exact gradients, seeds 0-1: if the claim is budget-bound,
uPS-1's lag behind bMC-10 shrinks with the steps and, since bMC-10 is biased and uPS-1 is not, can reverse.

    python docs/results/diagnoses/dlm_d9_budget.py run  sqlite:////tmp/d9.db [ups1 bmc10 exact]
    python docs/results/diagnoses/dlm_d9_budget.py read sqlite:////tmp/d9.db
"""

import statistics as st
import subprocess
import sys

from mlflow.tracking import MlflowClient

mode, uri = sys.argv[1], sys.argv[2]
EXPERIMENT = "diag_d9_airline_long"
C = (
    "dataset=airline seed=0,1 trainer.max_epochs=400 trainer.eval_every_epochs=20 threads=1 "
    f"sweep.skip_finished=true tracking.experiment={EXPERIMENT} tracking.uri={uri} "
    "hydra/launcher=joblib hydra.launcher.n_jobs=2"
)
RUNS = {
    "ups1": f"gpdlm train -m +experiment=sampling_methods_reduced estimator=ups estimator.num_samples=1 {C}",
    "bmc10": f"gpdlm train -m +experiment=sampling_methods_reduced estimator=bmc estimator.num_samples=10 {C}",
    "exact": f"gpdlm train -m +experiment=sampling_methods_exact_reduced {C}",
}
if mode == "run":
    for key in sys.argv[3:] or RUNS:
        subprocess.run(RUNS[key], shell=True, check=True)
    sys.exit()

client = MlflowClient(tracking_uri=uri)
exp = client.get_experiment_by_name(EXPERIMENT)
curves: dict[tuple[str, str], dict[int, float]] = {}  # (arm, seed) -> {epoch: test NLL}
for run in client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'"):
    p = run.data.params
    if run.data.tags.get("gpdlm.sweep") == "parent" or "estimator.name" not in p:
        continue
    arm = {"ups": "uPS-1", "bmc": "bMC-10"}.get(p["estimator.name"], p["estimator.name"])
    history = client.get_metric_history(run.info.run_id, "test_nll")
    steps_per_epoch = run.data.metrics["iterations"] / int(p["trainer.max_epochs"])
    curves[(arm, p["seed"])] = {round(m.step / steps_per_epoch): m.value for m in history}
seeds = sorted({s for _, s in curves})
epochs = sorted(set.intersection(*(set(c) for c in curves.values()))) if curves else []
print(f"{len(curves)} runs; test NLL by epoch (steps = 50 x epoch), mean over seeds {seeds}:")
print("epoch | " + " | ".join(f"{a:>8}" for a in ("exact", "bMC-10", "uPS-1")) + " | uPS-1 - bMC-10 per seed")
for e in epochs:
    row = [
        st.mean(curves[(a, s)][e] for s in seeds) if all((a, s) in curves for s in seeds) else float("nan")
        for a in ("exact", "bMC-10", "uPS-1")
    ]
    gaps = [
        curves[("uPS-1", s)][e] - curves[("bMC-10", s)][e]
        for s in seeds
        if ("uPS-1", s) in curves and ("bMC-10", s) in curves
    ]
    print(f"{e:5d} | " + " | ".join(f"{v:8.5f}" for v in row) + " | " + ", ".join(f"{g:+.5f}" for g in gaps))
