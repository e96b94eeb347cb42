#!/bin/bash
# Regenerate the reports of docs/results/.
#
# 1. Reports with committed run records (docs/results/smoke/<paper>/runs.jsonl.gz and the studies'
#    docs/results/<paper>_<what>_<date>/runs.jsonl.gz, written by `gpdlm export` or `gpdlm reproduce`; a study
#    run in parts adds runs-2.jsonl.gz, ...: the report reads them all):
#    rebuilt from those files alone -- on any clone, no MLflow store needed -- byte-identically
#    (tests/commands/test_reproduce.py checks it). `--records-only` stops after these.
# 2. The DLM paper's 2026-11-25 study report, from the MLflow store that made it
#    (`GPDLM_STUDY_STORE`, default sqlite:///mlflow.db in the folder the study ran in).
#    That store lived outside git and is not on this machine: this report has no run
#    records (docs/reproduce.md, "Which published reports have their run records").
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
