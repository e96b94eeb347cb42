"""D10 (uPS-10 slower than bMC-10 per training iteration): the estimators timed back to back in one process,
on the same data and the same minibatches, in rotating order, so machine load hits all of them alike.

Joint DLM of the airline protocol (`sampling_methods`: M = 200, batch 1000, beta = 0.1) on DATASET (default:
the real 2008 airline data, `airline`), a forward and backward pass of the training objective per iteration;
prints the median ms of each estimator, the ratio uPS-10 / bMC-10 and in how many paired iterations uPS-10 was
the slower. ESTIMATORS: comma-separated NAME-L (exact has no L).

    python docs/results/diagnoses/dlm_d10_timing.py [DATASET] [REPS] [ESTIMATORS]
"""

import statistics as st
import sys
import time

import torch

from gpdlm_cli.prepare import prepare
from gpdlm_cli.sweep.compose import compose_jobs

dataset = sys.argv[1] if len(sys.argv) > 1 else "airline"
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
names = (sys.argv[3] if len(sys.argv) > 3 else "bmc-10,ups-10").split(",")
base = ["+experiment=sampling_methods", f"dataset={dataset}", "dataset.split.train_size=20000", "threads=1", "seed=0"]
runs = {}
for name in names:
    est, _, L = name.partition("-")
    (cfg,) = compose_jobs([[*base, f"estimator={est}", *([f"estimator.num_samples={L}"] if L else [])]])
    p = prepare(cfg)
    stage = p.method.stages[-1]
    runs[name] = (p, stage.objective, [q for g in stage.groups.values() for q in g])
torch.set_num_threads(1)
x, y = runs[names[0]][0].data.x_train, runs[names[0]][0].data.y_train
gen = torch.Generator().manual_seed(0)
times = {n: [] for n in names}
for i in range(reps):
    idx = torch.randint(0, x.shape[0], (1000,), generator=gen)
    for name in names[i % len(names) :] + names[: i % len(names)]:
        _, obj, params = runs[name]
        for q in params:
            q.grad = None
        t0 = time.perf_counter()
        obj(x[idx], y[idx]).backward()
        times[name].append(1000 * (time.perf_counter() - t0))
print(
    f"on {dataset}, {reps} iterations of batch 1000: "
    + ", ".join(f"{n} {st.median(t):.1f} ms" for n, t in times.items())
)
if "bmc-10" in times and "ups-10" in times:
    b, u = times["bmc-10"], times["ups-10"]
    print(
        f"D10: uPS-10 / bMC-10 = {st.median(u) / st.median(b):.2f}; uPS-10 the slower in "
        f"{sum(tu > tb for tb, tu in zip(b, u))} of {reps} paired iterations"
    )
