#!/usr/bin/env bash
# The README's scaling pictures, drawn by `scalelab scale` (dry runs on simulated H100 clusters):
# DDP and ZeRO-1 of a 1.09e9-parameter MLP from 8 to 4096 (1024) devices, and a 4-stage pipeline
# over 1…64 micro-batches. `make scale-pictures` calls this.
#   scripts/scale-pictures.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build/release}
out=${2:-docs/img}
scalelab="$build/scalelab"
[ -x "$scalelab" ] || { echo "[scale-pictures] $scalelab not built — run make build first" >&2; exit 1; }
mkdir -p "$out"
big=mlp:784-16384-16384-16384-16384-16384-10
run() {  # name, then the options of the sweep
  local name=$1
  shift
  echo "[scale-pictures] $out/scale-$name.svg"
  "$scalelab" scale --hw h100-ib-1024x8 "$@" --plot "$out/scale-$name.svg" >"$out/scale-$name.txt"
}
run ddp --strategy ddp --model $big --devices 8..4096 --batch 16
run zero --strategy zero --zero-stage 1 --optimizer adam --model $big --devices 8..1024 --batch 16
run pipeline --strategy pipeline --model mlp:8192-8192-8192-8192-8192 --devices 4 --micro-batches 1..64 --batch 4096 --strong
