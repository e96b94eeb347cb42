#!/bin/bash
# Regenerate the reports of docs/results/.
#
# Every report has committed run records (docs/results/smoke/<paper>/runs.jsonl.gz and the studies'
# docs/results/<paper>_<what>_<date>/runs.jsonl.gz, written by `gpdlm export` or `gpdlm reproduce`; a study
# run in parts adds runs-2.jsonl.gz, ...: the report reads them all) and is rebuilt from those files alone --
# on any clone, no MLflow store needed -- byte-identically (tests/commands/test_reproduce.py checks it).
# A study's commands, protocol and reductions are in its folder's study.md, printed at the top of its report.
# `--records-only` is accepted as before: until 2026-11-30 it skipped the last report rebuilt from an MLflow
# store outside git (the 2026-11-25 DLM study's dlm.md, retired for the studies with run records).
set -e
cd "$(dirname "$0")/../.."
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# the smoke reports (docs/results/smoke/<paper>/) and the studies' reports with committed run records
# (docs/results/<paper>_<what>_<date>/): the paper is the folder name's first word
# (a study run in parts on several machines has one records file per part: runs.jsonl.gz, runs-2.jsonl.gz, ...)
for d in docs/results/smoke/*/ docs/results/*_20*/; do
  if [ ! -f "$d/runs.jsonl.gz" ]; then  # every published report ships its run records
    [ -f "$d/report.md" ] && { echo "regenerate.sh: ${d}report.md has no run records (${d}runs.jsonl.gz)" >&2; exit 1; }
    continue
  fi
  name=$(basename "$d")
  from=()
  for f in "$d"runs*.jsonl.gz; do from+=(--from "$f"); done
  gpdlm report --no-log --claims "${name%%_*}" "${from[@]}" --study "$d/study.md" --out "$OUT/$name" \
     --output "$d/report.md" > /dev/null
  echo "regenerated ${d}report.md from $((${#from[@]} / 2)) records file(s) in $d"
done
