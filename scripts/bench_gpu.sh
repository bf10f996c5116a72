#!/usr/bin/env bash
# The GPU grid of `scalelab bench compute --device cuda --vs torch`: one training step (forward,
# backward, SGD) of an MLP in scalelab on the cuda device and in PyTorch eager on the same GPU,
# next to the step's GEMMs alone (cuBLAS through scalelab's cuda executor; torch.mm in the peer).
#
#   scripts/bench_gpu.sh OUT_DIR [--steps N] [--warmup N]
#
# Cases: models 784-4096-4096-10 and 784-8192-8192-10 (the wide model), batch 512 and 4096,
# --amp off (f32, TF32 off on both sides) and bf16 (autocast, f32 master weights). One JSON and one
# log per case in OUT_DIR, then a markdown table on stdout (also OUT_DIR/table.md).
# Environment: SCALELAB = the binary (default: build/cuda/scalelab beside this script's checkout);
# SCALELAB_PYTHON = the python with CUDA torch (default: /usr/bin/python3 or PATH's python3,
# whichever imports a torch that sees the GPU).
set -uo pipefail

usage() { echo "usage: $0 OUT_DIR [--steps N] [--warmup N]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
OUT=$1; shift
STEPS=50 WARMUP=10
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) STEPS=${2:?--steps needs a value}; shift 2 ;;
    --warmup) WARMUP=${2:?--warmup needs a value}; shift 2 ;;
    *) usage ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SCALELAB:-$ROOT/build/cuda/scalelab}
if [[ ! -x $BIN ]]; then
  echo "[bench_gpu] $BIN: no scalelab binary — build it with CUDA (cmake --preset cuda && cmake --build build/cuda --target scalelab), or set SCALELAB=/path/to/scalelab" >&2
  exit 1
fi
mkdir -p "$OUT" || { echo "[bench_gpu] $OUT: cannot create the output folder — pick a writable one" >&2; exit 1; }
# Any python3 reads the JSON (standard library only); the peer's python is scalelab's choice.
PY=$(command -v python3 || echo /usr/bin/python3)

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv >&2

failed=0
cases=()
for model in 784-4096-4096-10 784-8192-8192-10; do
  for batch in 512 4096; do
    for amp in off bf16; do
      name="mlp${model//784-/}-b${batch}-${amp}"
      name=${name/-10-b/-b}
      cases+=("$name")
      echo "[bench_gpu] $name: mlp:$model batch $batch amp $amp" >&2
      "$BIN" bench compute --device cuda --model "mlp:$model" --batch "$batch" --amp "$amp" --steps "$STEPS" \
        --warmup "$WARMUP" --vs torch --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
      rc=$?
      if [[ $rc -eq 0 ]]; then
        sed 's/^/    /' "$OUT/$name.log" >&2
      else
        failed=$((failed + 1))
        echo "[bench_gpu] $name FAILED (exit $rc) — its log, $OUT/$name.log:" >&2
        sed 's/^/    /' "$OUT/$name.log" >&2
        rm -f "$OUT/$name.json"
      fi
    done
  done
done

"$PY" - "$OUT" "${cases[@]}" <<'PYEOF' | tee "$OUT/table.md"
import json, os, sys
out, cases = sys.argv[1], sys.argv[2:]
print("| case | scalelab ms | torch ms | torch/scalelab | GEMMs alone ms (cuBLAS) | GEMMs alone ms (torch.mm) "
      "| GEMMs alone / scalelab step | scalelab TFLOP/s | host gaps in step ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in cases:
    p = os.path.join(out, c + ".json")
    if not os.path.exists(p):
        print(f"| {c} | failed: see {c}.log | | | | | | | |")
        continue
    j = json.load(open(p))
    f = lambda v, s=1e3: "—" if v is None else f"{v * s:.3f}"
    busy = j["in_step_gemm_s"] + j["in_step_other_kernels_s"] + j["in_step_copy_s"]
    ratio = j.get("torch_over_scalelab")
    print(f"| {c} | {f(j['step_time_s'])} | {f(j.get('torch_step_time_s'))} | "
          f"{'—' if ratio is None else f'{ratio:.2f}'} | {f(j['gemm_time_s'])} | {f(j.get('torch_gemm_time_s'))} | "
          f"{j['ratio']:.2f} | {j['flops_per_step'] / j['step_time_s'] * 1e-12:.1f} | "
          f"{max(0.0, j['step_time_s'] - busy) * 1e3:.3f} |")
first = next((os.path.join(out, c + ".json") for c in cases if os.path.exists(os.path.join(out, c + ".json"))), None)
if first:
    j = json.load(open(first))
    t = j.get("torch") or {}
    print(f"\n{j['device_name']}; torch {t.get('torch', '?')} (CUDA {t.get('torch_cuda', '?')}), f32 TF32 "
          f"{t.get('tf32', '?')}, f32 matmul error vs f64 {t.get('f32_matmul_rel_err', float('nan')):.1e}; "
          f"median of {j['steps']} steps after {j['warmup']} warm-up, each between device synchronizations. "
          "torch/scalelab ≥ 1.00: scalelab's step is at least as fast.")
PYEOF

if [[ $failed -gt 0 ]]; then
  echo "[bench_gpu] $failed of ${#cases[@]} cases failed — their logs are in $OUT" >&2
  exit 1
fi
