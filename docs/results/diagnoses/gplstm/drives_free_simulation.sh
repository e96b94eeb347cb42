#!/bin/bash
# Drives free-simulation ablations of the GP-LSTM Table 2 study on the real data (issue 40): GP-RNN and GP-LSTM,
# seeds 0-4, the study's preset with one change each (run 2026-11-29 at code 19e4a15, 1 thread, one job at a time;
# records: drives_free_simulation.jsonl.gz next to this file, `gpdlm report --from` / pandas read them).
# Run from the repository root:  bash docs/results/diagnoses/gplstm/drives_free_simulation.sh [STORE]
STORE=${1:-sqlite:///$PWD/drives_fs.db}
B="+experiment=gplstm_sysid dataset=drives dataset.mode=free_simulation model=gp_rnn,gp_lstm seed=0,1,2,3,4 threads=1 tracking.uri=$STORE progress=false"
for A in "tracking.experiment=fs_base" \
         "tracking.experiment=fs_full model.training.algorithm=full" \
         "tracking.experiment=fs_nodropout model.network.dropout=0 model.network.rec_dropout=0" \
         "tracking.experiment=fs_pretrained model.init=pretrained" \
         "tracking.experiment=fs_200epochs trainer.max_epochs=200"; do
  gpdlm train -m $B $A
done
