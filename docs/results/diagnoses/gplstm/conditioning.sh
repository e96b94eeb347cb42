#!/bin/bash
# The conditioning ablation of diagnosis section 7a (docs/results/diagnoses/gplstm.md): the 4 GP models on the real
# Actuator set, free simulation trained on their own rollouts (model.training.feedback=own_predictions) exactly as
# the own-rollouts study (docs/results/gplstm_own_rollouts_2026-11-29/study.md), except that the GP conditions on
# the true-target windows (model.training.feedback_conditioning=true_targets); 5 seeds, 1 thread, one job at a time.
# Run 2026-11-29 at code 61a0232 into /work/studies/gplstm-conditioning (seeds 0-2 first, then 3-4); records:
# conditioning_runs.jsonl.gz next to this file (pandas read_json(lines=True), or `gpdlm report --from`); the table:
# python docs/results/diagnoses/gplstm/conditioning_table.py.
# Run from the repository root:  bash docs/results/diagnoses/gplstm/conditioning.sh [STORE]
STORE=${1:-sqlite:///$PWD/conditioning.db}
for SEEDS in 0,1,2 3,4; do
  gpdlm train -m +experiment=gplstm_sysid dataset=actuator dataset.mode=free_simulation \
    model=gp_narx,gp_rnn,gp_gru,gp_lstm seed=$SEEDS \
    model.training.feedback=own_predictions model.training.feedback_conditioning=true_targets \
    threads=1 sweep.skip_finished=true tracking.uri=$STORE
done
gpdlm export --experiment gplstm_sysid --tracking-uri $STORE --output docs/results/diagnoses/gplstm/conditioning_runs.jsonl.gz
