#!/usr/bin/env bash
# The prepared GPU check, for a session lent a CUDA machine (the device tool's `run`):
#   1. here:   bash scripts/gpu_check.sh --fetch-wheels      (wheels the GPU image lacks, into .gpu-wheels)
#   2. device: run(command="bash scripts/gpu_check.sh", carry=[".gpu-wheels"], timeout_s=540)
# It checks a representative part of the built-in library on cuda:0 in float32 and float64 against
# the CPU references, writes every cell to $OUT/cells.json and prints the summary table.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fetch-wheels" ]; then
  # The GPU image runs Python 3.12; these pure/abi3 wheels are all gradci's engine needs beyond it.
  pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    -d .gpu-wheels array-api-compat optree
  exit 0
fi
python3 -m pip install --quiet --no-index --find-links .gpu-wheels array-api-compat optree
export PYTHONPATH="$PWD" OUT="${OUT:-/tmp/gradci-gpu}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 - <<'PY'
import torch, jax
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "tf32 matmul", torch.backends.cuda.matmul.allow_tf32)
print("jax", jax.__version__, jax.devices(), "default matmul precision", jax.config.jax_default_matmul_precision)
PY
status=0
timeout 420 python3 -m gradci check --devices cpu,cuda:0 --dtypes float64,float32 \
  -k 'nn/*' --format json -o "$OUT/cells.json" || status=$?
python3 - "$OUT/cells.json" <<'PY'
import json, sys
from collections import Counter
cells = json.load(open(sys.argv[1]))
by = Counter((c["backend"], c["device"], c["dtype"], c["status"]) for c in cells)
for key in sorted(by): print(*key, by[key])
for c in cells:
    if c["status"] in ("fail", "error", "xpass"):
        print("FAILING", c["scenario"], c["backend"], c["device"], c["dtype"], c["status"], c["max_rel_err"], c["message"][:160])
PY
exit $status
