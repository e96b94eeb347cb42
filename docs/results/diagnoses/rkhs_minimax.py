"""RKHS MINIMAX against BSGD at 100 epochs (issue 40, item 4): MINIMAX with gpdlm's exact penalty
(`model=minimax`) and with the paper's mu = 1 (`model=minimax_paper`) next to BSGD, NN + linear kernel, on SET
(default pol), mask MASK, ROWS training rows of the mask's training part (default 3000: minutes on a shared
2-core machine; the study used all), b = 32, AdaDelta lr 1.0 (the study's Table 2 cell, 10 epochs there), for the paper's
100 epochs; then the full-data NLML (train_nlml, evaluated every epoch) and penalty_gap ||A - F|| / ||F|| read
from each run's per-epoch history at epochs 10, 25, 50, 100, and the best iterate (the paper's selection).

    python docs/results/diagnoses/rkhs_minimax.py run  sqlite:////tmp/minimax.db [SET] [MASK] [ROWS]
    python docs/results/diagnoses/rkhs_minimax.py read sqlite:////tmp/minimax.db
"""

import subprocess
import sys

from mlflow.tracking import MlflowClient

mode, uri = sys.argv[1], sys.argv[2]
if mode == "run":
    data, mask = (sys.argv[3] if len(sys.argv) > 3 else "pol"), (sys.argv[4] if len(sys.argv) > 4 else "0")
    rows = sys.argv[5] if len(sys.argv) > 5 else "3000"
    subprocess.run(
        f"nice -n 15 gpdlm train -m +experiment=rkhs_batch_study_pol dataset={data} dataset.split.mask={mask} "
        f"dataset.split.train_size={rows} "
        "trainer.batch_size=32 trainer.lr=1.0 trainer.max_epochs=100 model=minimax_paper,minimax,bsgd threads=1 "
        f"sweep.skip_finished=true tracking.uri={uri} tracking.experiment=diag_minimax",
        shell=True,
        check=True,
    )
    sys.exit()
c = MlflowClient(uri)
exp = c.get_experiment_by_name("diag_minimax")
for r in sorted(c.search_runs([exp.experiment_id]), key=lambda r: r.info.start_time):
    if r.data.tags.get("gpdlm.sweep") == "parent":
        continue
    p, m = r.data.params, r.data.metrics
    hist = {k: {h.step: h.value for h in c.get_metric_history(r.info.run_id, k)} for k in ("train_nlml", "penalty_gap")}
    nl = hist["train_nlml"]
    steps = sorted(nl)
    at = {}
    if steps:
        per_epoch = steps[-1] / max(1, len(steps))  # steps are iterations; one evaluation per epoch
        for e in (10, 25, 50, 100):
            s = min(steps, key=lambda s, e=e: abs(s - e * per_epoch))
            at[e] = (nl[s], hist["penalty_gap"].get(s))
    print(
        f"{p.get('dataset.name')} mask {p.get('dataset.split.mask')} {p.get('model.name')} "
        f"(mu {p.get('model.mu')}, exact {p.get('model.exact_penalty')}): status {r.info.status}, "
        f"best train_nlml {m.get('train_nlml')}, test_rmse {m.get('test_rmse')}, train {m.get('train_seconds')} s; "
        + "; ".join(
            f"epoch {e}: nlml {v:.4f}" + (f", gap {g:.3f}" if g is not None else "") for e, (v, g) in at.items()
        )
    )
