#!/bin/bash
# Regenerate the reports of docs/results/.
#
# 1. Reports with committed run records (docs/results/smoke/<paper>/runs.jsonl.gz and the studies'
#    docs/results/<paper>_<what>_<date>/runs.jsonl.gz, written by `gpdlm export` or `gpdlm reproduce`; a study
#    run in parts adds runs-2.jsonl.gz, ...: the report reads them all):
#    rebuilt from those files alone -- on any clone, no MLflow store needed -- byte-identically
#    (tests/commands/test_reproduce.py checks it). `--records-only` stops after these.
# 2. The DLM paper's 2026-11-25 study report and the 2026-11-27 pol one, from the MLflow stores that made them
#    (`GPDLM_STUDY_STORE`, default sqlite:///mlflow.db in the folder the studies ran in; `GPDLM_POL_STORE`).
#    Those stores lived outside git and are not on this machine: these reports have no run
#    records yet (docs/reproduce.md, "Which published reports have their run records").
#    The studies' commands are in docs/results/studies/<paper>.md.
set -e
cd "$(dirname "$0")/../.."
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# the smoke reports (docs/results/smoke/<paper>/) and the studies' reports with committed run records
# (docs/results/<paper>_<what>_<date>/): the paper is the folder name's first word
# (a study run in parts on several machines has one records file per part: runs.jsonl.gz, runs-2.jsonl.gz, ...)
for d in docs/results/smoke/*/ docs/results/*_20*/; do
  [ -f "$d/runs.jsonl.gz" ] || continue
  name=$(basename "$d")
  from=()
  for f in "$d"runs*.jsonl.gz; do from+=(--from "$f"); done
  gpdlm report --no-log --claims "${name%%_*}" "${from[@]}" --study "$d/study.md" --out "$OUT/$name" \
     --output "$d/report.md" > /dev/null
  echo "regenerated ${d}report.md from $((${#from[@]} / 2)) records file(s) in $d"
done
[ "$1" = "--records-only" ] && exit 0

URI=${GPDLM_STUDY_STORE:-sqlite:///$PWD/mlflow.db}
R="gpdlm report --tracking-uri $URI --no-log"
$R --claims dlm --experiment regression_logloss_pol --experiment regression_sqloss_pol --experiment classification \
   --experiment count --experiment count_curves --experiment airline_curves --experiment sampling_methods \
   --experiment bias_study --experiment regression_bmc --study docs/results/studies/dlm.md --output docs/results/dlm.md
# DLM Fig. 1(a), 1(b) on pol at the paper's whole grid (2026-11-27/28), its own store (`GPDLM_POL_STORE`; commands in its study.md)
POL=${GPDLM_POL_STORE:-$URI}
gpdlm report --tracking-uri "$POL" --no-log --claims dlm --experiment regression_logloss_pol --experiment regression_sqloss_pol \
   --study docs/results/pol_fast_2026-11-27/study.md --output docs/results/pol_fast_2026-11-27/report.md
