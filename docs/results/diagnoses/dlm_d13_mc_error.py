"""D13 (bMC-100 ends within 0.01 nats of exact gradients on pol): how large is bMC-100's Monte Carlo error
next to the 0.01-nat margin?

Trains one joint DLM with exact gradients on pol (n = 2000, beta = 0.1, the Fig. 16 preset, `trainer=fast`
so that it sits at the exact objective's optimum), then, at that model, the bias of the bMC-L estimate of
each datum's log E_q[p(y_i | f_i)] (the DLM data term: log of the mean of L likelihood draws, against the
closed form log N(y_i | mu_i, v_i + s2)), averaged over the training data, by simulation (R repetitions),
for L = 1, 10, 100. The DLM objective is the mean of these terms (plus beta KL / n), so its bias is in the
same per-datum nats as the claim's test-NLL margin.

    python docs/results/diagnoses/dlm_d13_mc_error.py RUN_DIR      # RUN_DIR: where to train (reused if there)
"""

import math
import subprocess
import sys
from pathlib import Path

import torch

from gpdlm_cli.run.saved_model import load_run

run_dir = Path(sys.argv[1])
if not (run_dir / "model.pt").exists():
    subprocess.run(
        f"nice -n 15 gpdlm train +experiment=regression_bmc_exact seed=0 trainer=fast threads=1 "
        f"tracking.experiment=diag_d13 hydra.run.dir={run_dir}",
        shell=True,
        check=True,
    )
torch.set_num_threads(1)
run = load_run(run_dir)
model, lik, d = run.method.model, run.method.likelihood, run.data
with torch.no_grad():
    mu, var = model.marginals(d.x_train)
    s2 = float(lik.noise)
    y = d.y_train
    exact = -0.5 * (torch.log(2 * math.pi * (var + s2)) + (y - mu) ** 2 / (var + s2))
    print(
        f"n = {len(y)}, noise s2 = {s2:.4g}, mean latent variance v = {float(var.mean()):.4g}, v/s2 = {float((var / s2).mean()):.3g}"
    )
    gen = torch.Generator().manual_seed(0)
    for L, R in ((1, 2000), (10, 400), (100, 100)):
        est = torch.zeros_like(y)
        sq = torch.zeros_like(y)
        for _ in range(R):
            f = mu + var.sqrt() * torch.randn(L, len(y), generator=gen, dtype=y.dtype)
            logp = -0.5 * (math.log(2 * math.pi * s2) + (y - f) ** 2 / s2)
            e = torch.logsumexp(logp, 0) - math.log(L) - exact
            est += e / R
            sq += e**2 / R
        sd = float((sq - est**2).clamp_min(0).sqrt().mean())
        print(
            f"bMC-{L}: bias of the per-datum log-loss term, averaged over the data {float(est.mean()):+.5f} nats "
            f"(per-datum sd of one estimate {sd:.4f}); median over data {float(est.median()):+.5f}"
        )
