#!/usr/bin/env bash
# The prepared GPU check (bench/gpu.py says what it runs), for a machine with an NVIDIA GPU where torch
# and jax are installed and no package index is reachable; under 8 minutes, summary table last.
#   1. here:   bash scripts/gpu_check.sh --fetch-wheels    (gradci's own pure-Python deps, into .gpu-wheels)
#   2. device: bash scripts/gpu_check.sh                   (carry .gpu-wheels; results in $OUT)
# A dry run without a GPU, against a simulated inventory (its cuda cells compute on the CPU):
#   GRADCI_DEVICE_INVENTORY=gpus.json bash scripts/gpu_check.sh --quick
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || { echo "gpu_check: no $PYTHON on PATH (set PYTHON=/path/to/python)" >&2; exit 2; }
if [ "${1:-}" = "--fetch-wheels" ]; then
  # The wheels bench/gpu.py installs when they are missing (its NEEDED table, less torch, jax, numpy and
  # scipy, which come with the GPU machine), for the GPU machine's Python (GPU_PYTHON_VERSION, default 3.12).
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version "${GPU_PYTHON_VERSION:-3.12}" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .gpu-wheels \
    array-api-compat optree typer click shellingham annotated-doc rich pygments markdown-it-py mdurl \
    pydantic pydantic-core pydantic-settings python-dotenv typing-inspection annotated-types \
    typing-extensions sqlalchemy httpx httpcore h11 anyio sniffio idna certifi
  exit 0
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m bench.gpu "$@"
