#!/usr/bin/env bash
# The lecture decks (slides/NN-*.md) built to HTML (and PDF where Chromium is installed), every
# figure and number regenerated first from runs of this build's scalelab. `make slides` calls this.
#   scripts/slides.sh [BUILD_DIR] [OUT_DIR] [README_PICTURES_DIR]
# With a third argument (and Chromium), the slide each deck marks <!-- readme --> is also written
# there as slides-NN.png (`make slides-pictures`: slides/README.md's pictures in docs/img), with a
# stamp of what drew it beside it, slides-NN.png.inputs (scripts/picture_stamps.py).
# 1. runs: each deck's runs on simulated A100s (sim clock: the same run gives the same numbers)
#    write a summary (data/NAME.json) and a trace (data/NAME.trace.json);
# 2. panels: one dashboard panel per picture, drawn from a trace under Xvfb (img/NAME-PANEL.png);
# 3. plots: `scalelab scale`, `bench comm` and `figure` draw the SVGs the dashboard does not;
# 4. decks: excerpts (// slide: NAME … // end slide) and numbers ({{RUN.field}}) put in
#    (scripts/slides_deck.py), then Marp (slides/node_modules, pinned in slides/package-lock.json).
set -euo pipefail
build=${1:-build/release}
out=${2:-slides/build}
pictures=${3:-}
here=$(cd "$(dirname "$0")/.." && pwd)
scalelab="$build/scalelab"
dash="$build/apps/scalelab-dash/scalelab-dash"
die() { echo "[slides] $*" >&2; exit 1; }
[ -x "$scalelab" ] || die "$scalelab not built — run make build first"
[ -x "$dash" ] || die "$dash not built (configure found no ImGui + GLFW + OpenGL) — apt-get install libimgui-dev libglfw3-dev, then make build"
command -v xvfb-run >/dev/null || die "xvfb-run not found — apt-get install xvfb xauth"
command -v python3 >/dev/null || die "python3 not found — apt-get install python3"
t0=$(date +%s)
since() { echo "$(($(date +%s) - t0)) s"; }

# Marp from npm, at the version slides/package-lock.json pins. A machine where it cannot be
# installed cannot build the decks: that is an error, not something to skip.
marp="$here/slides/node_modules/.bin/marp"
if [ ! -x "$marp" ]; then
  command -v npm >/dev/null || die "npm not found — apt-get install npm (marp-cli is installed with it)"
  echo "[slides] installing marp-cli into slides/node_modules (npm ci)"
  (cd "$here/slides" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci in slides/ failed — is registry.npmjs.org reachable?"
fi

mkdir -p "$out/data" "$out/img"
rm -f "$out"/data/* "$out"/img/* "$out"/*.md "$out"/*.html "$out"/*.pdf "$out"/*.png
# Everything this build writes is newer than this stamp (the test checks every picture is).
touch "$out/.stamp"

# ---- 1. runs -------------------------------------------------------------------------------------
common=(--device sim --hw a100-nvlink-8 --model mlp:784-512-256-128-10 --dataset fashion-mnist --steps 24 --quiet)
run() {  # name, then the options of `scalelab train`
  local name=$1
  shift
  "$scalelab" train "${common[@]}" "$@" --json "$out/data/$name.json" --trace "$out/data/$name.trace.json" >"$out/data/$name.txt"
}
echo "[slides] runs ($(since))"
run single          --strategy single --devices 1
run multiprocessing --strategy multiprocessing --devices 4
run data-parallel   --strategy data-parallel --devices 4
run model-parallel  --strategy model-parallel --devices 4
run ddp             --strategy ddp --devices 4 --bucket-mb 0.25 --first-bucket-mb 0.1
run ddp-mp          --strategy ddp-mp --devices 4 --bucket-mb 0.25 --first-bucket-mb 0.1
run gpipe           --strategy pipeline --devices 4 --micro-batches 8
run 1f1b            --strategy pipeline --devices 4 --micro-batches 8 --schedule 1f1b
run ddp-fp16        --strategy ddp --devices 4 --amp fp16
run zero2           --strategy zero --devices 4 --zero-stage 2 --optimizer adam
run ddp-adam        --strategy ddp --devices 4 --optimizer adam
# Decks 02 and 04 set the small model, whose every kernel is launch-bound, beside large ones whose
# GEMMs dominate (dry runs: shapes and times, no numerics). big: the `scale` sweep's model.
# equal: 4 stages of equal work per micro-batch — stage 0 computes no gradient for the batch, so its
# layer is 1.5× wider than the others'.
run_big() {  # name, model, then the options of `scalelab train`
  local name=$1 model=$2
  shift 2
  "$scalelab" train --device sim --hw a100-nvlink-8 --model "$model" --dataset synthetic --batch 2048 --steps 8 \
    --dry-run --quiet "$@" --json "$out/data/$name.json" --trace "$out/data/$name.trace.json" >"$out/data/$name.txt"
}
big=mlp:4096-4096-4096-4096-4096
equal=mlp:6144-4096-4096-4096-4096
run_big big-single         $big --strategy single --devices 1
run_big big-data-parallel  $big --strategy data-parallel --devices 4
run_big big-model-parallel $big --strategy model-parallel --devices 4
run_big big-ddp            $big --strategy ddp --devices 4
run_big big-gpipe          $big --strategy pipeline --devices 4 --micro-batches 8
run_big big-1f1b           $big --strategy pipeline --devices 4 --micro-batches 8 --schedule 1f1b
run_big equal-gpipe        $equal --strategy pipeline --devices 4 --micro-batches 8
run_big equal-1f1b         $equal --strategy pipeline --devices 4 --micro-batches 8 --schedule 1f1b
# Interleaved 1F1B (deck 04): 16 equal layers, so that 4 devices can hold V = 2 or 4 chunks each.
deep=mlp:4096-4096-4096-4096-4096-4096-4096-4096-4096-4096-4096-4096-4096-4096-4096-4096-4096
run_big deep-1f1b          $deep --strategy pipeline --devices 4 --micro-batches 8 --schedule 1f1b
run_big deep-interleaved2  $deep --strategy pipeline --devices 4 --micro-batches 8 --schedule interleaved --virtual-stages 2
run_big deep-interleaved4  $deep --strategy pipeline --devices 4 --micro-batches 8 --schedule interleaved --virtual-stages 4
run_big deep-zero-bubble   $deep --strategy pipeline --devices 4 --micro-batches 8 --schedule zero-bubble
# ZeRO-3 (deck 05): GPT-3 175B on 1,024 simulated H100s, a sequence each, Adam — what each GPU holds.
for z in "gpt3-zero1 1" "gpt3-zero3 3" "gpt3-zero3-recompute 3 --recompute"; do
  read -r name stage extra <<<"$z"
  "$scalelab" train --device sim --hw h100-ib-1024x8 --model gpt:96-12288-96-2048-50257 --dataset synthetic \
    --batch 1024 --devices 1024 --steps 1 --dry-run --quiet --optimizer adam --strategy zero --zero-stage "$stage" \
    $extra --json "$out/data/$name.json" >"$out/data/$name.txt"
done
# Tensor parallelism (deck 06): a small GPT split over 4 A100s (its trace draws the timeline, its
# equivalence to single the table); then one step of a larger GPT split over 1 … 16 H100s, 8 to a
# node: where the split stops paying.
"$scalelab" train --device sim --hw a100-nvlink-8 --model gpt:2-128-4-64-96 --batch 16 --steps 16 --seed 42 --quiet \
  --strategy tensor-parallel --devices 4 --check-equivalence --json "$out/data/tp.json" --trace "$out/data/tp.trace.json" \
  >"$out/data/tp.txt"
# 3D (deck 06's Layout panel): 16 A100s on two nodes as 2 stages × 2 replicas × 4 shards, one step's shapes.
"$scalelab" train --device sim --hw a100-80gb-opa-48x8 --model gpt:4-128-4-64-96 --batch 16 --steps 1 --dry-run --quiet \
  --strategy tensor-parallel --devices 16 --dp 2 --pp 2 --micro-batches 4 --schedule 1f1b \
  --trace "$out/data/tp3d.trace.json" >"$out/data/tp3d.txt"
for n in 1 2 4 8 16; do
  strategy=tensor-parallel
  [ "$n" = 1 ] && strategy=single
  "$scalelab" train --device sim --hw h100-ib-16x8 --model gpt:8-4096-32-2048-50257 --dataset synthetic --batch 4 \
    --steps 1 --dry-run --quiet --strategy "$strategy" --devices "$n" --json "$out/data/tp-sweep-$n.json" \
    >"$out/data/tp-sweep-$n.txt"
done
# Deck 6's planning slide: the published runs next to plan's prediction.
"$scalelab" plan --published --json "$out/data/plan-published.json" >"$out/data/plan-published.txt"
# Where each run's idle time goes (fill and drain, unequal stages, optimizer tail, sends): NAME-parts.
for r in single:gpipe model-parallel:gpipe gpipe:gpipe 1f1b:1f1b big-gpipe:gpipe big-1f1b:1f1b \
  equal-gpipe:gpipe equal-1f1b:1f1b; do
  python3 "$here/scripts/bubble_parts.py" "$out/data/${r%%:*}.json" "$out/data/${r%%:*}.trace.json" "${r##*:}" \
    >"$out/data/${r%%:*}-parts.json"
done
# Equivalence at the default seed (deck 3): DDP against single over 100 steps, on this deck's model
# and on the default one (mlp:784-256-128-10), where at seed 42 float32 round-off grows into a
# visible gap (and at seed 7 does not).
for eq in "equivalence-deck mlp:784-512-256-128-10 42" "equivalence mlp:784-256-128-10 42" \
  "equivalence-seed7 mlp:784-256-128-10 7"; do
  read -r name model seed <<<"$eq"
  "$scalelab" train --device sim --hw a100-nvlink-8 --dataset fashion-mnist --quiet --strategy ddp --devices 4 \
    --model "$model" --seed "$seed" --steps 100 --check-equivalence --json "$out/data/$name.json" >"$out/data/$name.txt"
done
# The communication slides (03: a real GPU run beside the sim's; 05: bytes per step by strategy):
# ZeRO-1 beside ZeRO-2, and DDP as the shipped H100 trace ran (scripts/gpu_session.sh), on the sim
# with that H100's calibrated profile; the measured trace inflated for the dashboard.
run zero1           --strategy zero --devices 4 --zero-stage 1 --optimizer adam
h100="$here/profiles/measured/h100/2026-11-25T"
"$scalelab" train --device sim --hw "${h100}1030-profile.json" --strategy ddp --devices 4 --dataset synthetic \
  --model mlp:784-1024-1024-1024-10 --batch 256 --steps 20 --trace-steps 15:17 --quiet \
  --json "$out/data/h100-sim.json" --trace "$out/data/h100-sim.trace.json" >"$out/data/h100-sim.txt"
gzip -dc "${h100}1113-ddp-4-logical.trace.json.gz" >"$out/data/h100-measured.trace.json"

# ---- 2. panels -----------------------------------------------------------------------------------
# Each panel is drawn at the width the deck shows it (its ![w:…] in slides/*.md) with a font of
# 18–20 px, so its text is at least 18 px on a 1280×720 slide (`--screenshot` writes F.png.json
# with the font and size; the slides test checks it). A whole step's picture has the cursor at the
# step's end (--at 1, the default): nothing drawn "not yet run". The timeline of DDP + model
# parallel shows its compute and comm lanes only, to keep its rows legible under the code.
# The two memory panels 05-amp-zero.md sets side by side share one axis: the larger run's peak.
# One Xvfb for all of them (a server per picture would cost a second each). Its number is
# searched from one of our own, not from xvfb-run's 99: two xvfb-runs started at once from 99
# can both pick the same free number.
echo "[slides] panels ($(since))"
memory_max=$(python3 - "$out/data/ddp-adam.json" "$out/data/zero2.json" <<'PY'
import json, sys
peaks = [d["peak_bytes"]["total"] for f in sys.argv[1:] for d in json.load(open(f))["per_device"]]
print(int(max(peaks) * 1.1))
PY
)
panels=(  # run panel size step [more options of scalelab-dash]
  "multiprocessing timeline 1150x390 12 --font-size 20"
  "multiprocessing training 560x560 23 --font-size 18"
  "data-parallel timeline 1150x340 12 --font-size 20"
  "data-parallel data-parallel 620x340 12 --font-size 18"
  "model-parallel timeline 1150x340 12 --font-size 20"
  "model-parallel pipeline 600x300 12 --font-size 18"
  "ddp timeline 1150x390 12 --font-size 20"
  "ddp buckets 640x340 12 --font-size 18"
  "ddp topology 680x600 12 --font-size 18 --at 0.7"
  "ddp-mp timeline 1000x270 12 --font-size 18 --only-lanes compute,comm"
  "gpipe pipeline 1100x290 12 --font-size 20"
  "1f1b pipeline 1100x290 12 --font-size 20"
  "deep-zero-bubble pipeline 1100x260 4 --font-size 18"
  "zero2 memory 560x300 12 --font-size 18 --memory-max $memory_max"
  "ddp-adam memory 560x300 12 --font-size 18 --memory-max $memory_max"
  "ddp-fp16 training 560x560 23 --font-size 18"
  "h100-measured timeline 1120x280 16 --font-size 20"
  "h100-sim timeline 1120x280 16 --font-size 20"
  "tp timeline 1150x290 12 --font-size 20 --only-lanes compute,comm"
  "tp3d layout 1150x440 0 --font-size 18 --mouse 790,150"
)
printf '%s\n' "${panels[@]}" >"$out/data/panels.txt"
# shellcheck disable=SC2016
xvfb-run -a -n $((100 + $$ % 800)) -s '-screen 0 1920x1200x24' bash -c '
  set -euo pipefail
  while read -r name panel size step more; do
    # shellcheck disable=SC2086
    "$0" --replay "$1/data/$name.trace.json" --panel "$panel" --size "$size" --step "$step" $more \
      --screenshot "$1/img/$name-$panel.png" >/dev/null
  done <"$1/data/panels.txt"' "$dash" "$out"

# ---- 3. plots ------------------------------------------------------------------------------------
echo "[slides] plots ($(since))"
"$scalelab" scale --strategy ddp --hw h100-ib-16x8 --model mlp:784-4096-4096-4096-10 --devices 8..128 --batch 32 \
  --json "$out/data/scale-ddp.json" >"$out/data/scale-ddp.txt"
"$scalelab" scale --strategy pipeline --hw a100-nvlink-8 --model mlp:4096-4096-4096-4096-4096 --devices 4 \
  --micro-batches 1..32 --batch 2048 --strong --json "$out/data/scale-pipeline.json" >"$out/data/scale-pipeline.txt"
"$scalelab" figure bubble --json "$out/data/scale-pipeline.json" --out "$out/img/bubble.svg" >/dev/null
zero_sweep=(--hw h100-ib-16x8 --model mlp:784-4096-4096-4096-10 --devices 2..64 --batch 16 --optimizer adam)
"$scalelab" scale --strategy ddp "${zero_sweep[@]}" --json "$out/data/scale-zero0.json" >/dev/null
"$scalelab" scale --strategy zero --zero-stage 1 "${zero_sweep[@]}" --json "$out/data/scale-zero1.json" >/dev/null
"$scalelab" scale --strategy zero --zero-stage 2 "${zero_sweep[@]}" --json "$out/data/scale-zero2.json" >/dev/null
"$scalelab" figure zero-memory --json "$out/data/scale-zero0.json" --json "$out/data/scale-zero1.json" \
  --json "$out/data/scale-zero2.json" --out "$out/img/zero-memory.svg" >/dev/null
"$scalelab" bench comm --device sim --hw a100-nvlink-8 --ranks 8 --min-bytes 1K --max-bytes 256M \
  --json "$out/data/busbw.json" >"$out/data/busbw.txt"
"$scalelab" figure busbw --json "$out/data/busbw.json" --out "$out/img/busbw.svg" >/dev/null
# The collectives primer (03): reduce-scatter, all-gather and all-reduce of one size on the same
# ranks; then the bytes each device sends per step, from the runs' traces, next to their closed
# forms, and the idle share of the measured and simulated H100 traces (data/comm.json).
for op in reduce_scatter:rs all_gather:ag all_reduce:ar; do
  "$scalelab" bench comm --device sim --hw a100-nvlink-8 --ranks 8 --op "${op%%:*}" --min-bytes 64M --max-bytes 64M \
    --json "$out/data/comm-${op##*:}.json" >/dev/null
done
# Deck 3's "at scale": the DDP sweep's step beside one all-reduce named by its algorithm at each N.
"$scalelab" figure step-time --json "$out/data/scale-ddp.json" --out "$out/img/step-time.svg" >/dev/null
python3 "$here/scripts/comm_volume.py" "$out/data" --step 12 \
  --volume single data-parallel model-parallel gpipe ddp zero1:1 zero2:2 tp --idle h100-measured h100-sim
# What each chart was drawn from: the slides test takes a chart's clock (simulated or measured)
# from these JSONs (scripts/slides_check.py clocks). A chart a deck shows must have its line here.
cat >"$out/data/plots.txt" <<'EOF'
img/bubble.svg data/scale-pipeline.json
img/zero-memory.svg data/scale-zero0.json data/scale-zero1.json data/scale-zero2.json
img/busbw.svg data/busbw.json
img/step-time.svg data/scale-ddp.json
EOF

# ---- 4. decks ------------------------------------------------------------------------------------
echo "[slides] decks ($(since))"
decks=("$here"/slides/[0-9][0-9]-*.md)
python3 "$here/scripts/slides_deck.py" expand --root "$here" --data "$out/data" --out "$out" "${decks[@]}"
theme=(--config-file "$here/slides/marp.config.js" --theme "$here/slides/scalelab.css" --allow-local-files --html)
"$marp" "${theme[@]}" --input-dir "$out" --output "$out" --no-stdin >/dev/null 2>"$out/data/marp.log" ||
  { cat "$out/data/marp.log" >&2; die "marp failed building the HTML"; }
if command -v chromium >/dev/null; then
  export CHROME_PATH=${CHROME_PATH:-$(command -v chromium)}
  "$marp" "${theme[@]}" --pdf --input-dir "$out" --output "$out" --no-stdin >/dev/null 2>>"$out/data/marp.log" ||
    { cat "$out/data/marp.log" >&2; die "marp failed building the PDFs"; }
  built="HTML and PDF"
  if [ -n "$pictures" ]; then
    mkdir -p "$pictures"
    for md in "$out"/[0-9][0-9]-*.md; do
      name=$(basename "$md" .md)
      k=$(python3 "$here/scripts/slides_deck.py" readme-slide "$here/slides/$name.md")
      "$marp" "${theme[@]}" --images png "$md" -o "$out/data/$name.png" --no-stdin >/dev/null 2>>"$out/data/marp.log"
      cp "$out/data/$name.$(printf %03d "$k").png" "$pictures/slides-${name%%-*}.png"
      echo "[slides] $pictures/slides-${name%%-*}.png (slide $k of $name)"
    done
    # Beside each picture, a stamp of what drew it (the slides test fails when one is stale).
    python3 "$here/scripts/picture_stamps.py" slides --write --root "$here" --out "$out" --img "$pictures" "${decks[@]}"
  fi
else
  built="HTML (no PDF: chromium not installed — apt-get install chromium)"
  [ -z "$pictures" ] || die "the README's pictures of the slides need chromium — apt-get install chromium"
fi
echo "[slides] ${#decks[@]} decks, $built, in $out/ ($(since))"
