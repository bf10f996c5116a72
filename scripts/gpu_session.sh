#!/usr/bin/env bash
# Everything issue 17 measures on a GPU, in one go, with build/cuda built (`cmake --preset cuda &&
# cmake --build --preset cuda`): the cuda tests, the grid next to PyTorch, a calibration, every
# strategy measured and predicted on it, and a DDP trace of 4 logical devices for the dashboard.
#
#   scripts/gpu_session.sh OUT_DIR
#
# Writes into OUT_DIR: ctest-cuda.log, grid/ (scripts/bench_gpu.sh), calibrate.txt, profile.json,
# bench-predict.json and .txt, and the traces ddp-4-logical, tp3d-8-logical and zero-bubble-4-logical
# (.trace.json). A step that fails is reported and the others
# still run; the exit code is 1 if any failed. Where a GPU machine lacks OpenBLAS, put its
# libopenblas.so.0 (with libgfortran.so.5 and libquadmath.so.0) on LD_LIBRARY_PATH first.
set -uo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
OUT=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
S=$ROOT/build/cuda/scalelab
[[ -x $S ]] || { echo "[gpu_session] $S not found: build it first (cmake --preset cuda && cmake --build --preset cuda)" >&2; exit 2; }
mkdir -p "$OUT"
failed=0
step() {  # step NAME COMMAND...: runs it, says how it ended
  local name=$1; shift
  echo "[gpu_session] $name"
  if ! "$@"; then echo "[gpu_session] $name FAILED" >&2; failed=1; fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
step "ctest -L cuda" bash -c "cd '$ROOT/build/cuda' && ctest -L cuda --output-on-failure -V > '$OUT/ctest-cuda.log' 2>&1"
grep -E "tests passed|Test +#[0-9]+: test_cuda" "$OUT/ctest-cuda.log"
step "bench compute vs PyTorch (the grid)" "$ROOT/scripts/bench_gpu.sh" "$OUT/grid"
step "calibrate --device cuda" bash -c "'$S' calibrate --device cuda --out '$OUT/profile.json' > '$OUT/calibrate.txt'"
step "bench predict --device cuda" bash -c "'$S' bench predict --device cuda --hw '$OUT/profile.json' --devices 4 --steps 40 \
  --json '$OUT/bench-predict.json' > '$OUT/bench-predict.txt' 2>&1"
grep -E "^mlp|^# P1" "$OUT/bench-predict.txt"
step "a DDP trace on 4 logical devices" "$S" train --device cuda --strategy ddp --devices 4 --dataset synthetic \
  --model mlp:784-1024-1024-1024-10 --batch 256 --steps 20 --quiet --trace "$OUT/ddp-4-logical.trace.json" --trace-steps 15:17
# The GPT in 3D (2 replicas × 2 tensor shards × 2 stages, ZeRO-1) and through the zero-bubble
# pipeline, on logical devices of the GPU, each checked against single on it.
step "3D tensor parallel on 8 logical devices" "$S" train --device cuda --strategy tensor-parallel --devices 8 --dp 2 \
  --pp 2 --micro-batches 2 --schedule 1f1b --zero-stage 1 --model gpt:4-256-8-128-1024 --dataset synthetic --batch 8 \
  --steps 20 --check-equivalence --trace "$OUT/tp3d-8-logical.trace.json" --trace-steps 15:17
step "zero-bubble pipeline on 4 logical devices" "$S" train --device cuda --strategy pipeline --devices 4 \
  --micro-batches 8 --schedule zero-bubble --model gpt:6-256-8-128-1024 --dataset synthetic --batch 16 --steps 20 \
  --check-equivalence --trace "$OUT/zero-bubble-4-logical.trace.json" --trace-steps 15:17
echo "[gpu_session] replay the traces here or elsewhere: scalelab-dash --replay $OUT/ddp-4-logical.trace.json"
exit $failed
