#!/usr/bin/env bash
# The README's dashboard pictures: each strategy run live on 4 simulated A100s (NVLink), drawn
# under Xvfb after the run, plus one run caught while it trains. `make screenshots` calls this.
#   scripts/screenshots.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build/release}
out=${2:-docs/img}
dash="$build/apps/scalelab-dash/scalelab-dash"
[ -x "$dash" ] || { echo "[screenshots] $dash not built — run make build first" >&2; exit 1; }
command -v xvfb-run >/dev/null || { echo "[screenshots] xvfb-run not found — apt-get install xvfb xauth" >&2; exit 1; }
mkdir -p "$out"

common=(--device sim --hw a100-nvlink-8 --model mlp:784-512-256-128-10 --size 1600x1000)
shoot() {  # name, steps, then the options of the run
  local name=$1 steps=$2
  shift 2
  echo "[screenshots] $out/dash-$name.png"
  xvfb-run -a -s '-screen 0 1920x1200x24' "$dash" "${common[@]}" --steps "$steps" "$@" --screenshot "$out/dash-$name.png" >/dev/null
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
# A run in progress: paced at 500 µs of simulated time per second, drawn for 4 s as on a display.
shoot live            1000 --strategy ddp --devices 4 --bucket-mb 0.25 --first-bucket-mb 0.1 --speed 5e-4 --live-for 4
