#!/bin/bash
# Held-out segments on the AIMPEAK-like generator (diagnosis section 1, docs/results/diagnoses/svbssgp.md): sVBSSGP
# (gammas 0 and 1, the svbssgp_aimpeak preset), PIC++ (10 epochs, and the preset's 30) and DTC++ (model=svgp,
# 10 epochs), both with the pic_aimpeak preset, with dataset.holdout=segments: 5% of the segments are the whole
# test set, drawn by dataset.holdout_seed, set to the run's seed (the run's seed alone only reshuffles training and
# validation rows).
# Run 2026-11-29 at code 08d3cd3 into /work/studies/svbssgp-segments (1 thread, one job at a time, nice -n 10);
# records: segments_runs.jsonl.gz next to this file; the table: python docs/results/diagnoses/svbssgp/segments_table.py
# (--anchors adds the constant and 2-NN anchors). Run from the repository root:
#   bash docs/results/diagnoses/svbssgp/segments.sh [STORE]
STORE=${1:-sqlite:///$PWD/segments.db}
C="trainer.eval_every_epochs=5 dataset.holdout=segments threads=1 trainer=fast sweep.skip_finished=true tracking.uri=$STORE"
for S in 0 1 2 3 4; do
  gpdlm train -m +experiment=svbssgp_aimpeak seed=$S dataset.holdout_seed=$S 'model.gammas=[0,1]' $C
  gpdlm train -m +experiment=pic_aimpeak model=pic seed=$S dataset.holdout_seed=$S trainer.max_epochs=10 $C
done
for S in 0 1 2 3 4; do
  gpdlm train -m +experiment=pic_aimpeak model=svgp seed=$S dataset.holdout_seed=$S trainer.max_epochs=10 $C
  python -m gpdlm_cli.commands.anchors dataset=aimpeak dataset.holdout=segments dataset.holdout_seed=$S seed=$S
done
for S in 0 1 2 3 4; do  # PIC++ at the preset's 30 epochs (run after the rest, as time allowed)
  gpdlm train -m +experiment=pic_aimpeak model=pic seed=$S dataset.holdout_seed=$S $C
done
gpdlm export --tracking-uri $STORE --output docs/results/diagnoses/svbssgp/segments_runs.jsonl.gz
