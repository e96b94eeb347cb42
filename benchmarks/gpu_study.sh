#!/bin/bash
# Issue 43 on a lent GPU in one call: the whole regression_logloss_pol study (DLM Fig. 1(a): 1,110 jobs, the
# paper protocol, every (model, size) group's seeds x betas as one batched model: sweep.batched) end to end with
# `gpdlm reproduce dlm`, its run records and report, then (time left) the GPU-sized RKHS Gaussian arm on pol.
# Carry .gpu/ (benchmarks/gpu_bundle.sh); results go to $OUT/<part>/ (runs.jsonl.gz, report.md, study.md, log).
#   device run: bash benchmarks/gpu_study.sh                      (carry [".gpu"], timeout_s 600)
#   here, the same path on the CPU at smoke scale (no install):
#   GPU_SETUP=0 GPU_DEVICE=cpu GPU_SCALE=smoke OUT=/tmp/gs PATH=.venv/bin:$PATH bash benchmarks/gpu_study.sh
# Budgets (reproduce --budget: it stops between jobs and says what is left; a rerun with the same $WORK continues):
# GPU_POL_BUDGET (default 7m), GPU_RKHS_BUDGET (2m; 0 skips it). GPU_PARTS: which parts (default "pol rkhs");
# GPU_POL_CLAIMS: the pol part's claims (default D1-pol,D1-beta-elbo-pol: 1,150 jobs, FITC's 40 not batched).
set -u
. benchmarks/gpu_setup.sh
DEVICE=${GPU_DEVICE:-cuda}; SCALE=${GPU_SCALE:-paper}; WORK=${GPU_WORK:-/tmp/gpu-study}
mkdir -p "$WORK"
gpdlm() { python3 -c 'import sys; from gpdlm_cli.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }
part() {  # part NAME BUDGET reproduce-args...: one reproduce into $WORK/NAME, its evidence copied to $OUT/NAME
  local name=$1 budget=$2; shift 2
  [ "$budget" = 0 ] && return 0
  local t=$(date +%s); mkdir -p "$OUT/$name"
  gpdlm reproduce "$@" --scale "$SCALE" --budget "$budget" --output "$WORK/$name" \
     device="$DEVICE" progress=false > "$OUT/$name/reproduce.log" 2>&1
  echo "rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/$name/reproduce.log"
  cp "$WORK/$name"/{report.md,study.md} "$OUT/$name/" 2>/dev/null
  # the run records without step histories (1,110 runs' learning curves would not come back from the device)
  gpdlm export --tracking-uri "sqlite:///$WORK/$name/mlflow.db" --no-histories --output "$OUT/$name/runs.jsonl.gz" \
     >> "$OUT/$name/reproduce.log" 2>&1
  grep -h "gpdlm.batched\|sweep.batched\|jobs done\|budget" "$OUT/$name/reproduce.log" | tail -n 5 >> "$S"
}
for p in ${GPU_PARTS:-pol rkhs}; do
  case $p in
    pol)  # D1-pol and D1-beta-elbo-pol: regression_logloss_pol (svgp, dlm, dlm_fixed batched) and FITC on pol
      part pol "${GPU_POL_BUDGET:-7m}" dlm --claims "${GPU_POL_CLAIMS:-D1-pol,D1-beta-elbo-pol}" trainer=paper sweep.batched=true ;;
    rkhs)  # Table 3 (NN + Gaussian kernel) on pol, masks 0-4, b = 16: SCGD/MINIMAX on RFF-1000 batched, exact BSGD
      part rkhs "${GPU_RKHS_BUDGET:-2m}" rkhs --claims T3-scgd-beats-bsgd-b16 dataset=pol trainer.batch_size=16 sweep.batched=true ;;
  esac
done
echo "all done at $(( $(date +%s) - t0 )) s" >> "$S"
