#!/bin/bash
# The GPU checks of docs/gpu.md in one call on a lent GPU machine, with .gpu/ from benchmarks/gpu_bundle.sh
# carried along; logs go to $OUT (or ./gpu-out). Each step has its own time limit (seconds, env vars below),
# so a call returns what it finished. GPU_SUITE=0 skips the whole-suite run.
set -u
. benchmarks/gpu_setup.sh   # .gpu/ installed, PYTHONPATH and GPDLM_DATA_MIRROR set, $OUT/setup.log
(timeout "${GPU_TESTS_S:-150}" python3 -m pytest tests/gpu -n 8 -v -p no:cacheprovider --tb=short > "$OUT/gpu_tests.log" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.log") &
if [ "${GPU_SUITE:-1}" = 1 ]; then
  (timeout "${GPU_SUITE_S:-240}" python3 -m pytest tests --ignore=tests/gpu --device=cuda -n 8 -v -p no:cacheprovider --tb=line -rfE --timeout 150 > "$OUT/suite_cuda.log" 2>&1; echo "rc=$?" >> "$OUT/suite_cuda.log") &
fi
wait
timeout "${GPU_BENCH_S:-120}" python3 benchmarks/bench_gpu.py --quick > "$OUT/bench_gpu.log" 2>&1; echo "rc=$?" >> "$OUT/bench_gpu.log"
timeout "${GPU_BATCHED_S:-60}" python3 benchmarks/bench_batched.py --devices cuda > "$OUT/bench_batched.log" 2>&1; echo "rc=$?" >> "$OUT/bench_batched.log"
echo "all done at $(( $(date +%s) - t0 )) s" >> "$S"
