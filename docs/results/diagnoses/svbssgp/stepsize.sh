#!/bin/bash
# sVBSSGP's step size at the paper's sizes (issue 40; docs/results/diagnoses/svbssgp.md section 2): Robbins-Monro
# from 1e-2 (rm_t0 = 2p block steps, kappa 0.6) on the Table 1 / Fig. 3 presets. The default (constant 1e-3)
# runs are the published studies'; the first command re-runs one of them as a check (it matched to the last digit).
# Run 2026-11-29 from the repository root, one job at a time, 1 thread.
set -e
STORE=sqlite:///$PWD/stepsize.db
U="tracking.uri=$STORE threads=1 progress=false"
RM="trainer.lr=0.01 trainer.schedule=robbins_monro trainer.rm_kappa=0.6"
gpdlm train +experiment=svbssgp_aimpeak seed=0 $U tracking.experiment=check_default
gpdlm train -m +experiment=svbssgp_aimpeak $RM trainer.rm_t0=400 $U                          # p = 200
gpdlm train -m +experiment=svbssgp_samples model.predict_samples=5 $RM trainer.rm_t0=400 $U  # BLOG, p = 200
gpdlm train -m +experiment=svbssgp_airline_reduced model=svbssgp $RM trainer.rm_t0=420 $U     # p = 210
gpdlm export --tracking-uri $STORE --output docs/results/diagnoses/svbssgp/stepsize_runs.jsonl.gz
