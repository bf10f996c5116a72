#!/usr/bin/env bash
# The README's dashboard pictures: each strategy run live on 4 simulated A100s (NVLink), drawn
# under Xvfb after the run, plus one run caught while it trains. `make screenshots` calls this.
# Each picture gets a stamp of what drew it, NAME.png.inputs (scripts/picture_stamps.py); with
# PICTURES_PLAN=FILE set, nothing is drawn: each picture's line (NAME.png<TAB>its options) is added
# to FILE, for the test that checks the stamps (tests/readme_pictures_test.sh).
#   scripts/screenshots.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build/release}
out=${2:-docs/img}
here=$(cd "$(dirname "$0")/.." && pwd)
dash="$build/apps/scalelab-dash/scalelab-dash"
plan=${PICTURES_PLAN:-}
if [ -z "$plan" ]; then
  [ -x "$dash" ] || { echo "[screenshots] $dash not built — run make build first" >&2; exit 1; }
  command -v xvfb-run >/dev/null || { echo "[screenshots] xvfb-run not found — apt-get install xvfb xauth" >&2; exit 1; }
  mkdir -p "$out"
  # From the repository's root, so the options name its files the same way on every machine.
  build=$(cd "$build" && pwd) out=$(cd "$out" && pwd) dash=$(cd "$(dirname "$dash")" && pwd)/scalelab-dash
  cd "$here"
  drawn=$(mktemp "${TMPDIR:-/tmp}/scalelab-screenshots-XXXXXX")
  trap 'rm -f "$drawn"' EXIT
fi
# One picture: its options to the plan, or drawn (and noted for its stamp).
draw() {  # name, then the options of scalelab-dash
  local name=$1
  shift
  if [ -n "$plan" ]; then printf 'dash-%s.png\t%s\n' "$name" "$*" >>"$plan"; return; fi
  echo "[screenshots] $out/dash-$name.png"
  xvfb-run -a -s '-screen 0 1920x1200x24' "$dash" "$@" --screenshot "$out/dash-$name.png" >/dev/null
  printf 'dash-%s.png\t%s\n' "$name" "$*" >>"$drawn"
}

common=(--device sim --hw a100-nvlink-8 --model mlp:784-512-256-128-10 --size 1600x1000)
shoot() {  # name, steps, then the options of the run
  local name=$1 steps=$2
  shift 2
  draw "$name" "${common[@]}" --steps "$steps" "$@"
}

shoot single          60 --strategy single --devices 1
shoot multiprocessing 60 --strategy multiprocessing --devices 4
shoot data-parallel   60 --strategy data-parallel --devices 4 --check-equivalence
shoot model-parallel  60 --strategy model-parallel --devices 4 --check-equivalence
shoot ddp             60 --strategy ddp --devices 4 --bucket-mb 0.25 --first-bucket-mb 0.1 --check-equivalence
shoot ddp-mp          60 --strategy ddp-mp --devices 4 --bucket-mb 0.25 --first-bucket-mb 0.1 --check-equivalence
shoot pipeline        60 --strategy pipeline --devices 4 --micro-batches 4 --check-equivalence
shoot pipeline-1f1b   60 --strategy pipeline --devices 4 --micro-batches 8 --schedule 1f1b --check-equivalence
shoot zero            60 --strategy zero --devices 4 --zero-stage 2 --check-equivalence
# A 3D run (README, docs/models.md): a GPT on two nodes of 8 A100s as 2 stages × 2 replicas × 4
# tensor shards, 1F1B, ZeRO-1 over each data-parallel group (BLOOM's recipe); then its Layout panel
# alone, rank 9 hovered (its tp row, dp column, pp peer).
threed=(--device sim --hw a100-80gb-opa-48x8 --model gpt:4-128-4-64-96 --strategy tensor-parallel --devices 16 --dp 2 --pp 2
        --micro-batches 4 --schedule 1f1b --batch 16)
draw tensor-parallel-3d "${threed[@]}" --zero-stage 1 --size 1600x1000 --steps 20 --check-equivalence
draw tensor-parallel-layout "${threed[@]}" --steps 2 --panel layout --size 1200x600 --mouse 770,200
# A run in progress: paced at 500 µs of simulated time per second, drawn for 4 s as on a display.
shoot live            1000 --strategy ddp --devices 4 --bucket-mb 0.25 --first-bucket-mb 0.1 --speed 5e-4 --live-for 4
# docs/models.md's pictures: the Memory panel of a ConvNet and of a GPT (with and without
# --recompute), each layer's activations kept for backward.
models=(--device sim --hw a100-nvlink-8 --strategy ddp --devices 2 --steps 6 --panel memory --size 1200x600 --at 0.45)
draw convnet-memory "${models[@]}" --model convnet --batch 64
draw gpt-memory "${models[@]}" --model gpt:4-128-4-64-96 --batch 32
draw gpt-recompute-memory "${models[@]}" --model gpt:4-128-4-64-96 --batch 32 --recompute
# docs/gpu.md's picture: the shipped trace of DDP on 4 logical devices of an H100, replayed.
draw ddp-cuda --replay profiles/measured/h100/2026-11-25T1113-ddp-4-logical.trace.json.gz --size 1600x900 --step 16

[ -n "$plan" ] || python3 "$here/scripts/picture_stamps.py" dash --write --build "$build" --img "$out" "$drawn"
