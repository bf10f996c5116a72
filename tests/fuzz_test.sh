#!/usr/bin/env bash
# Hostile input and faults (issue 13), in four parts ctest runs apart (label fuzz):
#   cli        bad command lines and bad paths: each exits 2 (usage) or 1 (failure) with a
#              [component] in its message — never 0, never a signal, never a hang (run under timeout)
#   inputs     the seeded mutation fuzzer (fuzz/fuzz_inputs.cpp) over real checkpoints, profiles and
#              IDX files: every case a success or a clear error; crashes and hangs must be 0
#   kill_save  runs SIGKILLed while they checkpoint: what they leave loads or is absent, and the next
#              save removes the temporaries of dead processes (and only those)
#   faults     a procs rank SIGKILLed or SIGSTOPped, the run SIGTERMed or SIGINTed: each ends in
#              bounded time naming the rank, leaves no process or /dev/shm segment, a whole checkpoint
#   bash fuzz_test.sh PART <scalelab> <fuzz_inputs> <source dir> [<scalelab-dash>]
set -u

PART=${1:?usage: fuzz_test.sh cli|inputs|kill_save|faults <scalelab> <fuzz_inputs> <source dir>}
SCALELAB=${2:?}
FUZZ=${3:?}
SRC=${4:?}
DASH=${5:-}   # the cli part tries the dashboard's options too when it is built
PROG=$SCALELAB  # what `bad` runs
. "$(dirname "$0")/support/checks.sh" "fuzz-$PART"

# A training run small enough to start in a moment.
T="train --dataset synthetic --quiet --model mlp:784-16-10 --steps 2"
T0="train --dataset synthetic --quiet"  # for cases that set --steps or --model themselves

# bad NAME CODE COMPONENT FRAGMENT -- ARGS...: scalelab ARGS exits CODE (2 or 1) within 30 s, its
# message carries [COMPONENT] and FRAGMENT.
tried=0 clear=0 accepted=0 crashes=0 hangs=0
bad() {
  local name=$1 want=$2 component=$3 fragment=$4
  shift 5
  local out rc
  tried=$((tried + 1))
  out=$(timeout -s KILL 30 "$PROG" "$@" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" -eq 137 ]; then hangs=$((hangs + 1)); fail "$name: hung (killed after 30 s): $(basename "$PROG") $*"; return; fi
  if [ "$rc" -gt 128 ]; then
    crashes=$((crashes + 1))
    fail "$name: died of signal $((rc - 128)): scalelab $*; $(printf '%s' "$out" | tail -n 2)"
    return
  fi
  [ "$rc" -eq 0 ] && accepted=$((accepted + 1))
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit $rc, wanted $want (scalelab $*); output: $(printf '%s' "$out" | tail -n 2)"
    return
  fi
  if ! printf '%s' "$out" | grep -qF -- "[$component]"; then
    fail "$name: no [$component] in: $(printf '%s' "$out" | tail -n 2)"
    return
  fi
  if [ -n "$fragment" ] && ! printf '%s' "$out" | grep -qF -- "$fragment"; then
    fail "$name: output lacks '$fragment': $(printf '%s' "$out" | tail -n 2)"
    return
  fi
  clear=$((clear + 1))
  pass "$name"
}

# Paths of every wrong kind: a directory, a FIFO (reading it would block), a device that reads
# without end, a symbolic-link loop, an empty file, a missing one.
make_hostile_paths() {
  mkdir -p "$WORK/dir"
  mkfifo "$WORK/fifo"
  ln -s "$WORK/loop-b" "$WORK/loop-a"
  ln -s "$WORK/loop-a" "$WORK/loop-b"
  : >"$WORK/empty"
}

if [ "$PART" = cli ]; then
  make_hostile_paths
  # Optimizer numbers that cannot train.
  for v in nan inf -1 0; do bad "--lr $v" 2 optim "--lr" -- $T --lr "$v"; done
  for v in nan inf -0.5; do bad "--weight-decay $v" 2 optim "--weight-decay" -- $T --weight-decay "$v"; done
  for v in nan 1 -0.1 inf; do bad "--momentum $v" 2 optim "--momentum" -- $T --momentum "$v"; done
  # Values that used to mean something else silently.
  bad "--steps 0 points to --epochs" 2 train "--epochs" -- $T0 --steps 0
  bad "--steps -1" 2 train "--steps" -- $T0 --steps -1
  bad "--epochs 0" 2 train "--epochs" -- train --dataset synthetic --quiet --epochs 0
  bad "--zero-stage 0 with zero" 2 zero "pass 1, 2 or 3" -- $T --strategy zero --devices 2 --zero-stage 0
  bad "--zero-stage 4" 2 zero "1, 2 or 3" -- $T --strategy zero --devices 2 --zero-stage 4
  bad "--strategy fsdp --zero-stage 2" 2 zero "fsdp is zero stage 3" -- $T --strategy fsdp --devices 2 --zero-stage 2
  bad "--dry-run --check-equivalence" 2 train "--dry-run" -- $T --device sim --hw a100-nvlink-8 --dry-run --check-equivalence
  bad "--checkpoint-every 0" 2 checkpoint "--checkpoint-every" -- $T --checkpoint "$WORK/c" --checkpoint-every 0
  bad "--checkpoint-every without --checkpoint" 2 checkpoint "--checkpoint" -- $T --checkpoint-every 2
  # Options that do not apply, given at their default value (validation alone cannot see these).
  bad "--bucket-mb with pipeline" 2 ddp "--bucket-mb" -- $T --strategy pipeline --devices 2 --bucket-mb 25
  bad "--micro-batches with ddp" 2 pipeline "--micro-batches" -- $T --strategy ddp --devices 2 --micro-batches 1
  bad "--schedule with single" 2 pipeline "--schedule" -- $T --schedule gpipe
  bad "--data-dir with synthetic" 2 data "--data-dir" -- $T --data-dir /tmp
  bad "--shm-sharing with threads" 2 train "--shm-sharing" -- $T --strategy ddp --devices 2 --shm-sharing fd_passing
  bad "--amp-initial-scale without fp16" 2 amp "--amp fp16" -- $T --amp-initial-scale 65536
  bad "--hw without sim" 2 train "--device sim" -- $T --hw a100-nvlink-8
  # Counts out of range, overflowing, or not numbers.
  bad "--devices 99999999999" 2 cli "--devices" -- $T --devices 99999999999
  bad "--devices 0" 2 train "--devices" -- $T --devices 0
  bad "--batch 0" 2 train "--batch" -- $T --batch 0
  bad "--batch larger than the data" 2 data "--batch" -- $T --batch 100000
  bad "--batch 99999999999999" 2 memory "--batch" -- $T --batch 99999999999999
  bad "--steps text" 2 cli "--steps" -- $T0 --steps many
  bad "--comm-timeout 0" 2 train "--comm-timeout" -- $T --strategy ddp --devices 2 --comm-timeout 0
  bad "--trace-steps 5:2" 2 train "--trace-steps" -- $T --trace "$WORK/t.json" --trace-steps 5:2
  bad "--model garbage" 2 model "--model" -- $T0 --steps 1 --model lstm:3
  bad "--model of 10^18 weights" 2 memory "--dry-run" -- $T0 --steps 1 --model mlp:784-999999999-999999999-10
  bad "--model input of 10^9 features" 2 memory "GB" -- $T0 --steps 1 --model mlp:999999999-10
  bad "--nodes without sim" 2 train "--nodes" -- $T --nodes 2
  bad "--nodes 99999999 on sim" 2 hw "2^20" -- $T --device sim --hw h100-ib-16x8 --dry-run --nodes 99999999 --devices-per-node 8
  # Paths of the wrong kind, for every reader: checkpoints, data, profiles.
  for p in dir fifo loop-a empty missing; do bad "--resume $p" 1 checkpoint "" -- $T --resume "$WORK/$p"; done
  for p in dir fifo loop-a; do bad "--hw $p" 1 hw "" -- $T --device sim --hw "$WORK/$p" --dry-run; done
  bad "--hw empty" 2 hw "not valid JSON" -- $T --device sim --hw "$WORK/empty" --dry-run  # content: bad input
  bad "--hw missing" 2 hw "no hardware profile" -- $T --device sim --hw "$WORK/missing"
  bad "--resume /dev/zero" 1 checkpoint "device" -- $T --resume /dev/zero
  bad "--resume a FIFO does not block" 1 checkpoint "FIFO" -- $T --resume "$WORK/fifo"
  bad "--resume a directory" 1 checkpoint "directory" -- $T --resume "$WORK/dir"
  bad "--resume a symlink loop" 1 checkpoint "loop" -- $T --resume "$WORK/loop-a"
  bad "--hw /dev/zero" 1 hw "device" -- $T --device sim --hw /dev/zero --dry-run
  bad "--data-dir a file" 1 data "not a directory" -- train --quiet --steps 1 --data-dir "$WORK/empty"
  mkdir -p "$WORK/idx-fifo" "$WORK/idx-loop" "$WORK/idx-empty"
  mkfifo "$WORK/idx-fifo/train-images-idx3-ubyte"
  ln -s "$WORK/idx-loop/x" "$WORK/idx-loop/train-images-idx3-ubyte.gz"
  ln -s "$WORK/idx-loop/train-images-idx3-ubyte.gz" "$WORK/idx-loop/x"
  : >"$WORK/idx-empty/train-images-idx3-ubyte"
  bad "--data-dir with a FIFO" 1 data "FIFO" -- train --quiet --steps 1 --data-dir "$WORK/idx-fifo"
  bad "--data-dir with a symlink loop" 1 data "loop" -- train --quiet --steps 1 --data-dir "$WORK/idx-loop"
  bad "--data-dir with an empty file" 1 data "truncated" -- train --quiet --steps 1 --data-dir "$WORK/idx-empty"
  mkdir -p "$WORK/idx-no-test"
  python3 - "$WORK/idx-no-test" <<'EOF'
import struct, sys
d = sys.argv[1]
for prefix, n in (("train", 300), ("t10k", 0)):
    open(f"{d}/{prefix}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(n * 784))
    open(f"{d}/{prefix}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, n) + bytes(n))
EOF
  bad "--data-dir missing" 1 data "not found" -- train --quiet --steps 1 --data-dir "$WORK/missing"
  # Profiles with numbers that are not what they claim.
  python3 - "$SRC/tests/data/tiny.json" "$WORK" <<'EOF'
import json, sys
base = json.load(open(sys.argv[1]))
def write(name, edit):
    j = json.loads(json.dumps(base)); edit(j); open(f"{sys.argv[2]}/{name}.json", "w").write(json.dumps(j))
write("nodes-frac", lambda j: j.__setitem__("nodes", 1.5))
write("dpn-huge", lambda j: j.__setitem__("devices_per_node", 1e12))
write("name-number", lambda j: j.__setitem__("name", 7))
write("eff-2", lambda j: j["device"].__setitem__("gemm_efficiency", 2))
write("latency-huge", lambda j: j["links"]["host"].__setitem__("latency_s", 1e9))
open(f"{sys.argv[2]}/overflow.json", "w").write(json.dumps(base).replace('"nodes": 2', '"nodes": 1e999', 1))
open(f"{sys.argv[2]}/array.json", "w").write("[1, 2]")
EOF
  bad "profile nodes 1.5" 2 hw "whole number" -- $T --device sim --hw "$WORK/nodes-frac.json" --dry-run
  bad "profile devices_per_node 1e12" 2 hw "devices_per_node" -- $T --device sim --hw "$WORK/dpn-huge.json" --dry-run
  bad "profile name a number" 2 hw "must be a string" -- $T --device sim --hw "$WORK/name-number.json" --dry-run
  bad "profile gemm_efficiency 2" 2 hw "gemm_efficiency" -- $T --device sim --hw "$WORK/eff-2.json" --dry-run
  bad "profile latency 1e9 s" 2 hw "latency_s" -- $T --device sim --hw "$WORK/latency-huge.json" --dry-run
  bad "profile 1e999" 2 hw "" -- $T --device sim --hw "$WORK/overflow.json" --dry-run
  bad "profile an array" 2 hw "JSON object" -- $T --device sim --hw "$WORK/array.json" --dry-run
  # bench comm: counts and sizes that measured nothing or ran something else.
  B="bench comm --iters 1 --warmup 0 --max-bytes 4K"
  bad "bench --ranks 0" 2 bench "--ranks" -- $B --ranks 0
  bad "bench --ranks 100000" 2 bench "--ranks ≤ 1024" -- $B --ranks 100000
  bad "bench --ranks -3" 2 bench "--ranks" -- $B --ranks -3
  bad "bench --ranks past the host's memory" 2 bench "GB of buffers" -- bench comm --ranks 1000 --max-bytes 16G
  bad "bench --ranks past the profile" 2 bench "--ranks ≤ 8" -- $B --ranks 1000 --device sim --hw a100-nvlink-8
  bad "bench --min-bytes 3" 2 bench "0 bytes" -- $B --min-bytes 3
  bad "bench all_gather of 8 bytes on 4 ranks" 2 bench "per rank" -- $B --op all_gather --min-bytes 8
  bad "bench --max-bytes 1P" 2 bench "--max-bytes" -- bench comm --max-bytes 1P
  bad "bench --min-bytes > --max-bytes" 2 bench "--min-bytes" -- $B --min-bytes 8K
  bad "bench --hw without sim" 2 bench "--device sim" -- $B --hw a100-nvlink-8
  bad "bench --shm-sharing without shm" 2 bench "--shm-sharing" -- $B --shm-sharing named_file
  bad "bench --op nope" 2 comm "all_reduce" -- $B --op nope
  bad "bench --iters 0" 2 bench "--iters" -- bench comm --max-bytes 4K --iters 0
  bad "bench --hw /dev/zero" 1 hw "device" -- $B --device sim --hw /dev/zero
  bad "bench compute --steps 0" 2 cli "--steps" -- bench compute --steps 0
  bad "bench compute --model garbage" 2 model "--model" -- bench compute --model nope --steps 1
  bad "bench compute of 10^18 weights" 2 memory "GB" -- bench compute --model mlp:784-999999999-999999999-10 --steps 1
  bad "bench compute --json a directory" 1 bench "directory" -- bench compute --json "$WORK/dir" --steps 1
  bad "bench comm --json a directory" 1 bench "directory" -- $B --json "$WORK/dir"
  bad "scale --json a directory" 1 scale "directory" -- scale --json "$WORK/dir"
  bad "scale --plot in a missing directory" 1 scale "does not exist" -- scale --plot "$WORK/missing/x.svg"
  # Outputs that would fail only after the last step.
  bad "--checkpoint a directory" 1 checkpoint "directory" -- $T --checkpoint "$WORK/dir"
  bad "--trace in a missing directory" 1 trace "does not exist" -- $T --trace "$WORK/missing/t.json"
  bad "--json a directory" 1 train "directory" -- $T --json "$WORK/dir"
  # Options another choice ignores, and values out of range.
  bad "--momentum with adam" 2 optim "--momentum" -- $T --optimizer adam --momentum 0.5
  bad "--nodes 0 on sim" 2 train "--nodes" -- $T --device sim --hw h100-ib-16x8 --dry-run --nodes 0
  bad "--bucket-mb inf" 2 ddp "--bucket-mb" -- $T --strategy ddp --devices 2 --bucket-mb inf
  bad "--comm-timeout of centuries" 2 train "--comm-timeout" -- $T --strategy ddp --devices 2 --comm-timeout 99999999999999
  bad "--epochs past counting" 2 train "--epochs" -- $T0 --epochs 9999999999999999
  # tour, profiles, grade.
  bad "tour --devices 0" 2 cli "--devices" -- tour --devices 0
  bad "tour --hw a FIFO" 1 hw "FIFO" -- tour --hw "$WORK/fifo" --dataset synthetic --steps 1 --out "$WORK/tour"
  bad "tour --batch 0" 2 train "--batch" -- tour --batch 0 --dataset synthetic --steps 1 --out "$WORK/tour"
  mkdir -p "$WORK/profiles-bad"
  cp "$WORK/nodes-frac.json" "$WORK/profiles-bad/"
  out=$(SCALELAB_PROFILES="$WORK/profiles-bad" timeout -s KILL 30 "$SCALELAB" profiles 2>&1)
  rc=$?
  tried=$((tried + 1))
  if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -qF "[hw]"; then clear=$((clear + 1)); pass "profiles with a bad profile file"; else fail "profiles with a bad profile file: exit $rc: $out"; fi
  bad "grade --timeout 0" 2 grade "--timeout" -- grade 01-collectives --timeout 0
  bad "grade an unknown lab" 2 grade "" -- grade no-such-lab
  # A rubric that is a FIFO (reading it would block), not JSON, or of the wrong shape.
  for kind in fifo broken wrong-type; do
    mkdir -p "$WORK/labs-$kind/01-collectives"
    cp -r "$SRC/labs/01-collectives/." "$WORK/labs-$kind/01-collectives/"
    rm -f "$WORK/labs-$kind/01-collectives/checks.json"
  done
  mkfifo "$WORK/labs-fifo/01-collectives/checks.json"
  echo '{"checks": [' >"$WORK/labs-broken/01-collectives/checks.json"
  echo '[]' >"$WORK/labs-wrong-type/01-collectives/checks.json"
  bad "grade a FIFO rubric" 2 grade "FIFO" -- grade 01-collectives --labs-dir "$WORK/labs-fifo"
  bad "grade a broken rubric" 2 grade "not valid JSON (parse error" -- grade 01-collectives --labs-dir "$WORK/labs-broken"
  bad "grade a rubric of the wrong shape" 2 grade "wrong type" -- grade 01-collectives --labs-dir "$WORK/labs-wrong-type"
  mkdir -p "$WORK/class/alice"
  cp "$SRC/labs/01-collectives/ring.cpp" "$WORK/class/alice/"
  bad "grade --out under a file" 2 grade "cannot create it" -- grade 01-collectives --submissions "$WORK/class" --out "$WORK/empty/x"
  bad "grade --submissions a FIFO" 2 grade "not a folder" -- grade 01-collectives --submissions "$WORK/fifo"
  bad "a test set of 0 images" 1 data "holds 0 images" -- train --quiet --steps 1 --data-dir "$WORK/idx-no-test"
  # Divergence: a real run whose loss goes non-finite stops with exit 1 naming the step.
  bad "divergence stops the run" 1 train "diverged" -- train --dataset synthetic --quiet --model mlp:784-64-10 --steps 30 --lr 1e30
  bad "divergence stops every rank of a procs launch" 1 train "diverged" -- train --dataset synthetic --quiet \
    --model mlp:784-64-10 --steps 10 --lr 1e30 --strategy ddp --devices 2 --launch procs
  # (a procs launch's summary crosses a process boundary as JSON, which has no NaN)
  for launch in threads procs; do
    tried=$((tried + 1))
    out=$(timeout -s KILL 60 "$SCALELAB" train --dataset synthetic --quiet --model mlp:784-64-10 --steps 10 --lr 1e30 \
      --strategy ddp --devices 2 --launch $launch --allow-divergence 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -qF "diverged" && ! printf '%s' "$out" | grep -qF "dry run"; then
      accepted=$((accepted + 1))  # as asked
      pass "--allow-divergence ($launch) keeps going, and the summary says it diverged"
    else
      fail "--allow-divergence ($launch): exit $rc: $(printf '%s' "$out" | head -n 3)"
    fi
  done
  # Bad input that every rank of a procs launch meets alike: exit 2, said once (not once a rank).
  bad "--batch too large under --launch procs" 2 data "--batch" -- $T --strategy ddp --devices 2 --launch procs --batch 100000
  tried=$((tried + 1))
  out=$(timeout -s KILL 30 "$SCALELAB" $T --strategy ddp --devices 2 --launch procs --batch 100000 2>&1)
  said=$(printf '%s\n' "$out" | grep -cF -- "--batch 100000")
  if [ "$said" -eq 1 ] && ! printf '%s' "$out" | grep -qF "[rank"; then clear=$((clear + 1)); pass "a procs launch's usage error is said once"
  else fail "a procs launch's usage error: said $said times: $out"; fi
  bad "--seed -1" 2 cli "--seed" -- $T --seed -1
  bad "tour --seed -1" 2 cli "--seed" -- tour --seed -1
  # The dashboard's options: refused before a window opens (no display here), never a hang.
  if [ -n "$DASH" ]; then
    PROG=$DASH
    echo '{"traceEvents":' >"$WORK/trunc.trace.json"
    for v in 0x0 99999x99999 abc 100x; do bad "dash --size $v" 2 dash "--size" -- --size "$v" --describe; done
    for v in 0 -1 abc; do bad "dash --bench-frames $v" 2 cli "--bench-frames" -- --bench-frames "$v"; done
    for v in 0 5000; do bad "dash --bench-copies $v" 2 cli "--bench-copies" -- --replay "$WORK/empty" --bench-copies "$v"; done
    for v in 0 200 nan; do bad "dash --font-size $v" 2 cli "--font-size" -- --font-size "$v" --describe; done
    for v in 2 -0.5 nan; do bad "dash --at $v" 2 dash "--at" -- --at "$v" --describe; done
    for v in -1 nan 1e99; do bad "dash --live-for $v" 2 dash "--live-for" -- --live-for "$v" --describe; done
    for v in -1 nan; do bad "dash --speed $v" 2 dash "--speed" -- --speed "$v" --describe; done
    for v in garbage 1,2,3 -5,10; do bad "dash --mouse $v" 2 dash "--mouse" -- --mouse "$v" --describe; done
    bad "dash --view sideways" 2 dash "--view" -- --view sideways --describe
    for v in x 1-0 0,,1; do bad "dash --only-devices $v" 2 dash "--only-devices" -- --only-devices "$v" --describe; done
    bad "dash --only-lanes gpu" 2 dash "--only-lanes" -- --only-lanes gpu --describe
    for v in 0 12MB auto1; do bad "dash --memory-max $v" 2 dash "--memory-max" -- --memory-max "$v" --describe; done
    bad "dash --step -1" 2 cli "--step" -- --step -1 --describe
    bad "dash --seed -1" 2 cli "--seed" -- --seed -1 --describe
    bad "dash --strategy nope" 2 strategy "--strategy" -- --strategy nope --describe
    bad "dash --device tpu" 2 device "tpu" -- --device tpu --describe
    bad "dash --batch 0" 2 train "--batch" -- --batch 0 --describe
    bad "dash --zero-stage 7" 2 zero "--zero-stage" -- --strategy zero --zero-stage 7 --describe
    bad "dash --amp fp8" 2 train "--amp" -- --amp fp8 --describe
    bad "dash --bucket-mb -1" 2 ddp "--bucket-mb" -- --strategy ddp --bucket-mb -1 --describe
    bad "dash --replay a FIFO does not block" 1 trace "FIFO" -- --replay "$WORK/fifo" --describe
    bad "dash --replay a directory" 1 trace "directory" -- --replay "$WORK/dir" --describe
    bad "dash --replay a symlink loop" 1 trace "loop" -- --replay "$WORK/loop-a" --describe
    bad "dash --replay /dev/zero" 1 trace "device" -- --replay /dev/zero --describe
    bad "dash --replay missing" 1 trace "cannot open" -- --replay "$WORK/missing" --describe
    bad "dash --replay empty" 1 trace "not valid JSON" -- --replay "$WORK/empty" --describe
    bad "dash --replay truncated" 1 trace "not valid JSON" -- --replay "$WORK/trunc.trace.json" --describe
    PROG=$SCALELAB
  fi
  # --- outputs and temporaries ---
  # Two outputs of one command that are one file, or an output onto a file the command reads, are
  # refused naming both options — spelled the same, through ./ or .., or through a symbolic link.
  mkdir -p "$WORK/same/sub"
  S="$WORK/same"
  : >"$S/in"
  ln -s "$S/in" "$S/in-link"
  cp "$SRC/tests/data/tiny.json" "$S/hw.json"
  bad "train --trace X --checkpoint X" 2 train "name the same file" -- $T --trace "$S/x" --checkpoint "$S/x"
  bad "train --trace X --json ./X" 2 train "--trace and --json" -- $T --trace "$S/x" --json "$S/./x"
  bad "train --json X --dump-batches sub/../X" 2 train "--json and --dump-batches" -- $T --json "$S/x" --dump-batches "$S/sub/../x"
  bad "train --json onto --init-weights" 2 train "--json would overwrite --init-weights" -- $T --init-weights "$S/in" --json "$S/in"
  bad "train --trace onto --resume through a symlink" 2 train "--trace would overwrite --resume" -- $T --resume "$S/in" --trace "$S/in-link"
  bad "train --trace onto --hw" 2 train "--trace would overwrite --hw" -- $T --device sim --hw "$S/hw.json" --dry-run --trace "$S/hw.json"
  bad "train --checkpoint onto --init-weights" 2 train "--checkpoint would overwrite" -- $T --init-weights "$S/in" --checkpoint "$S/in"
  bad "train --json onto --predict" 2 train "--json would overwrite --predict" -- $T --predict "$S/hw.json" --json "$S/hw.json"
  bad "export CK --out CK" 2 export "--out would overwrite checkpoint" -- export "$S/in" --out "$S/in"
  bad "bench predict --json onto --measured" 2 bench "--json would overwrite --measured" -- bench predict --hw "$S/hw.json" --measured "$S/in" --json "$S/in"
  bad "bench predict --json onto --hw" 2 bench "--json would overwrite --hw" -- bench predict --hw "$S/hw.json" --json "$S/hw.json"
  bad "bench comm --json onto --hw" 2 bench "--json would overwrite --hw" -- $B --device sim --hw "$S/hw.json" --json "$S/hw.json"
  bad "bench sim --json onto --hw" 2 bench "--json would overwrite --hw" -- bench sim --hw "$S/hw.json" --json "$S/hw.json"
  bad "scale --json X --plot X" 2 scale "--json and --plot" -- scale --json "$S/x" --plot "$S/x"
  bad "scale --plot onto --hw" 2 scale "--plot would overwrite --hw" -- scale --hw "$S/hw.json" --plot "$S/hw.json"
  bad "figure --out onto --json" 2 figure "--out would overwrite --json" -- figure bubble --json "$S/in" --out "$S/in-link"
  bad "grade --results X --junit X" 2 grade "--results and --junit" -- grade 01-collectives --results "$S/x" --junit "$S/x"
  bad "grade --results onto --submission" 2 grade "--results would overwrite --submission" -- grade 01-collectives --submission "$S/in" --results "$S/in"
  bad "grade --out onto --submissions" 2 grade "--out would overwrite --submissions" -- grade 01-collectives --submissions "$S/sub" --out "$S/sub/"
  # Outputs that would fail only after the grading.
  bad "grade --results a directory" 1 grade "is a directory" -- grade 01-collectives --results "$S/sub"
  bad "grade --junit in a missing directory" 1 grade "does not exist" -- grade 01-collectives --junit "$S/missing/j.xml"
  # Continuing a run into the checkpoint it resumed from stays allowed.
  tried=$((tried + 1))
  if "$SCALELAB" $T --checkpoint "$S/run.ckpt" >/dev/null 2>&1 &&
     out=$("$SCALELAB" train --dataset synthetic --quiet --model mlp:784-16-10 --steps 4 --resume "$S/run.ckpt" --checkpoint "$S/run.ckpt" 2>&1) &&
     "$FUZZ" load "$S/run.ckpt" >/dev/null 2>&1; then
    accepted=$((accepted + 1)); pass "--resume X --checkpoint X continues the run in its file"
  else fail "--resume X --checkpoint X: $(printf '%s' "$out" | tail -n 2)"; fi
  # A path option given as '' names no file: refused naming the option, never taken as left out.
  for o in --trace --json --checkpoint --resume --init-weights --dump-batches --data-dir --hw --predict; do
    bad "train $o ''" 2 cli "$o is empty" -- $T "$o" ''
  done
  bad "bench compute --json ''" 2 cli "--json is empty" -- bench compute --json ''
  for o in --json --hw; do
    bad "bench comm $o ''" 2 cli "$o is empty" -- $B "$o" ''
    bad "bench sim $o ''" 2 cli "$o is empty" -- bench sim "$o" ''
  done
  for o in --hw --json --measured; do bad "bench predict $o ''" 2 cli "$o is empty" -- bench predict --hw "$S/hw.json" "$o" ''; done
  bad "bench repeat ''" 2 cli "tables is empty" -- bench repeat '' "$S/in"
  for o in --hw --out; do bad "tour $o ''" 2 cli "$o is empty" -- tour "$o" ''; done
  bad "export ''" 2 cli "checkpoint is empty" -- export '' --out "$S/w.npz"
  bad "export --out ''" 2 cli "--out is empty" -- export "$S/run.ckpt" --out ''
  for o in --hw --json --plot; do bad "scale $o ''" 2 cli "$o is empty" -- scale "$o" ''; done
  bad "figure --json ''" 2 cli "--json is empty" -- figure bubble --json '' --out "$S/f.svg"
  bad "figure --out ''" 2 cli "--out is empty" -- figure bubble --json "$S/in" --out ''
  for o in --submission --submissions --out --results --junit --labs-dir --toolchain --release; do
    bad "grade $o ''" 2 cli "$o is empty" -- grade 01-collectives "$o" ''
  done
  bad "calibrate --out ''" 2 cli "--out is empty" -- calibrate --out ''
  if [ -n "$DASH" ]; then
    PROG=$DASH
    bad "dash --screenshot onto --replay" 2 dash "--screenshot would overwrite --replay" -- --replay "$S/in" --screenshot "$S/in-link"
    bad "dash --screenshot's .json onto --replay" 2 dash "would overwrite --replay" -- --replay "$S/in.json" --screenshot "$S/in"
    for o in --replay --screenshot --hw; do bad "dash $o ''" 2 cli "$o is empty" -- "$o" '' --describe; done
    PROG=$SCALELAB
  fi
  # --- values accepted and silently ignored or misread ---
  # Whole numbers in decimal, within their type: CLI11 alone clamps 2^64, wraps -1, reads 010 as 8.
  bad "--seed 2^64" 2 cli "out of range — give a whole number from 0 to 18446744073709551615" -- $T --seed 18446744073709551616
  bad "--seed 0x10" 2 cli "not a whole number in decimal" -- $T --seed 0x10
  bad "--seed 010" 2 cli "leading zero" -- $T --seed 010
  bad "--seed ' 5'" 2 cli "not a whole number in decimal" -- $T --seed " 5"
  bad "--steps 2^63" 2 cli "out of range — give a whole number from -9223372036854775808" -- $T0 --steps 9223372036854775808
  bad "--steps 1.5" 2 cli "not a whole number in decimal" -- $T0 --steps 1.5
  bad "--batch 1e3" 2 cli "--batch" -- $T --batch 1e3
  bad "--devices 0x2" 2 cli "--devices" -- $T --devices 0x2
  bad "--comm-timeout 2^66" 2 cli "out of range" -- $T --comm-timeout 73786976294838206464
  bad "tour --seed 2^64" 2 cli "--seed" -- tour --seed 18446744073709551616
  bad "tour --steps 0" 2 cli "0 is below 1" -- tour --steps 0
  bad "tour --devices 010" 2 cli "leading zero" -- tour --devices 010
  bad "scale --batch 0" 2 cli "0 is below 1" -- scale --batch 0
  bad "scale --steps 0x3" 2 cli "--steps" -- scale --steps 0x3
  bad "bench sim --steps -1" 2 cli "-1 is below 1" -- bench sim --steps -1
  bad "bench compute --warmup -1" 2 cli "-1 is below 0" -- bench compute --warmup -1
  bad "bench comm --iters 1.5" 2 cli "--iters" -- bench comm --iters 1.5
  bad "calibrate --devices 2^64" 2 cli "--devices" -- calibrate --devices 18446744073709551616
  bad "--lr 0x1p-4" 2 cli "is hexadecimal" -- $T --lr 0x1p-4
  # Numbers a float or a byte count cannot hold, read as something else (0, inf, a 1-byte bucket).
  bad "--lr 1e-50" 2 optim "--lr 1e-50 is below the smallest float" -- $T --lr 1e-50
  bad "--weight-decay 1e-50" 2 optim "--weight-decay 1e-50 is below" -- $T --weight-decay 1e-50
  bad "--amp-initial-scale 1e-300" 2 amp "got 1e-300" -- $T --amp fp16 --amp-initial-scale 1e-300
  bad "--bucket-mb 1e308" 2 ddp "at most 1048576" -- $T --strategy ddp --devices 2 --bucket-mb 1e308
  bad "--first-bucket-mb 1e13" 2 ddp "at most 1048576" -- $T --strategy ddp --devices 2 --first-bucket-mb 1e13
  # Values that were ignored: grade's time limit, scale's options its strategy does not take.
  for v in nan inf 0 -1 1e9; do
    bad "grade --timeout $v" 2 grade "--timeout $v: a check's time limit" -- grade 01-collectives --timeout "$v"
  done
  bad "scale ddp --zero-stage 2" 2 zero "--zero-stage 2 does not apply to --strategy ddp" -- scale --strategy ddp --zero-stage 2
  bad "scale ddp --schedule 1f1b" 2 pipeline "--schedule 1f1b does not apply" -- scale --strategy ddp --schedule 1f1b
  bad "scale zero --micro-batches 4" 2 pipeline "--micro-batches 4 does not apply" -- scale --strategy zero --micro-batches 4
  bad "bench comm broadcast --redop max" 2 bench "--redop max" -- bench comm --op broadcast --redop max
  bad "bench comm mpi --comm-algo" 2 bench "--comm-algo direct" -- bench comm --comm mpi --comm-algo direct
  bad "bench comm barrier --max-bytes" 2 bench "--op barrier moves no data" -- bench comm --op barrier --max-bytes 4K
  bad "bench comm barrier --dtype" 2 bench "--dtype bf16: --op barrier" -- bench comm --op barrier --dtype bf16
  M="$SRC/profiles/measured/2026-11-27T0012"
  for o in "--batch 7" "--steps 5" "--repeat 9"; do
    bad "bench predict --measured $o" 2 bench "${o%% *} ${o#* } with --measured" -- \
      bench predict --hw "$M-profile.json" --measured "$M-bench-predict.json" $o
  done
  # A model's export into a smaller model: the extra arrays are named, not dropped.
  if timeout 60 "$SCALELAB" train --dataset synthetic --quiet --model mlp:784-32-10-10 --steps 1 \
      --checkpoint "$WORK/deep.ckpt" >/dev/null 2>&1 &&
     timeout 60 "$SCALELAB" export "$WORK/deep.ckpt" --out "$WORK/deep.npz" >/dev/null 2>&1; then
    bad "--init-weights of 784-32-10-10 into 784-32-10" 2 init-weights "'4.bias', '4.weight'" -- \
      $T0 --steps 1 --model mlp:784-32-10 --init-weights "$WORK/deep.npz"
    bad "--init-weights of 784-32-10-10 into 784-32-10-10-10" 2 init-weights "no array '6.weight'" -- \
      $T0 --steps 1 --model mlp:784-32-10-10-10 --init-weights "$WORK/deep.npz"
    bad "--init-weights of 784-32-10-10 into 784-16-10-10" 2 init-weights "'0.weight' has shape (32, 784)" -- \
      $T0 --steps 1 --model mlp:784-16-10-10 --init-weights "$WORK/deep.npz"
    # A NaN as 0.weight's first value (the first entry; read_npz checks no zip CRC).
    if command -v python3 >/dev/null 2>&1; then
      python3 - "$WORK/deep.npz" "$WORK/nan.npz" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
data = b.index(b"\n", b.index(b"{'descr': '<f4'")) + 1
b[data:data + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(b)
PY
      bad "--init-weights holding a NaN" 2 init-weights "'0.weight' holds nan at index 0" -- \
        $T0 --steps 1 --model mlp:784-32-10-10 --init-weights "$WORK/nan.npz"
    fi
  else
    fail "could not write the 784-32-10-10 export"
  fi
  # A CRC-valid fp16 checkpoint whose loss scale no run writes (re-summed by python, where there is one).
  if command -v python3 >/dev/null 2>&1 &&
     timeout 60 "$SCALELAB" train --dataset synthetic --quiet --model mlp:784-16-10 --steps 2 --amp fp16 \
       --checkpoint "$WORK/fp16.ckpt" >/dev/null 2>&1; then
    for v in nan inf 0 -1; do
      python3 - "$WORK/fp16.ckpt" "$WORK/scale-$v.ckpt" "$v" <<'PY'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
# The end: ... loss scale (f64), good steps (i64), CRC-32 of all before it (u32).
b[-20:-12] = struct.pack("<d", float(sys.argv[3]))
b[-4:] = struct.pack("<I", zlib.crc32(bytes(b[:-4])))
open(sys.argv[2], "wb").write(b)
PY
      bad "--resume fp16 loss scale $v" 1 checkpoint "the fp16 loss scale is" -- \
        train --dataset synthetic --quiet --model mlp:784-16-10 --steps 4 --amp fp16 --resume "$WORK/scale-$v.ckpt"
    done
  fi
  # A dry run's progress has no loss to show: "loss —", never "loss nan".
  tried=$((tried + 1))
  out=$(timeout -s KILL 60 "$SCALELAB" train --strategy ddp --device sim --hw h100-nvswitch-8 --devices 8 --dry-run \
    --steps 20 --dataset synthetic 2>&1 >/dev/null)
  if printf '%s' "$out" | grep -qF "loss —" && ! printf '%s' "$out" | grep -qF "loss nan"; then
    accepted=$((accepted + 1))  # as asked
    pass "a dry run's progress says loss —"
  else
    fail "a dry run's progress: $(printf '%s' "$out" | tail -n 2)"
  fi
  if [ -n "$DASH" ]; then
    PROG=$DASH
    bad "dash --steps 0" 2 dash "--steps 0: a live run trains at least one step" -- --steps 0 --describe
    bad "dash --steps 0x10" 2 cli "--steps" -- --steps 0x10 --describe
    bad "dash --seed 2^64" 2 cli "out of range" -- --seed 18446744073709551616 --describe
    bad "dash --devices 99999999999" 2 cli "--devices" -- --devices 99999999999 --describe
    bad "dash --font-size 0x10" 2 cli "is hexadecimal" -- --font-size 0x10 --describe
    for o in --start "--steps 50" "--strategy ddp" "--speed 1" "--seed 7"; do
      bad "dash --replay with the live run's $o" 2 dash "${o%% *} sets the live run" -- --replay "$WORK/empty" $o --describe
    done
    bad "dash --bench-copies without --replay" 2 dash "there is no --replay" -- --bench-copies 2 --describe
    for v in 4294967296 0-4294967296 1048576 0x1 +1; do
      bad "dash --only-devices $v" 2 dash "from 0 to 1048575" -- --only-devices "$v" --describe
    done
    PROG=$SCALELAB
  fi
  # --- figures ---
  # Tiny or absurd figures: a profile figure outside its physical range (the corpus's profiles of
  # this kind), a measured table of impossible times, a run past the sim clock's horizon, and a
  # --trace-steps window past the run's end.
  for f in "$SRC"/tests/fuzz/corpus/profile/tiny-*.json "$SRC"/tests/fuzz/corpus/profile/huge-*.json; do
    bad "profile $(basename "$f" .json)" 2 hw "its range is" -- $T --device sim --hw "$f" --dry-run
  done
  bad "bench comm on a link of 1e-300 B/s" 2 hw "links.inter_node.bandwidth_Bps' is 1e-300" -- \
    bench comm --device sim --hw "$SRC/tests/fuzz/corpus/profile/tiny-link-bandwidth.json" --max-bytes 4K
  bad "scale on a peak of 5e-324 FLOP/s" 2 hw "1 GFLOP/s to 1 EFLOP/s" -- \
    scale --hw "$SRC/tests/fuzz/corpus/profile/tiny-peak-flops.json"
  python3 - "$SRC/tests/data/tiny.json" "$WORK/slowest.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
# Every figure at the slow end of its range: 1 GFLOP/s at 1e-6 of peak, memory and links at 1 MB/s.
j["device"].update({"peak_flops": {"f32": 1e9}, "gemm_efficiency": 1e-6, "mem_bandwidth_Bps": 1e6, "mem_capacity_bytes": 2**50})
for link in j["links"].values(): link["bandwidth_Bps"] = 1e6
json.dump(j, open(sys.argv[2], "w"))
EOF
  bad "a sim run past the clock's horizon" 1 sim "horizon" -- $T0 --device sim --hw "$WORK/slowest.json" --dry-run \
    --model mlp:784-4096-4096-10 --batch 4096 --steps 50
  for f in "$SRC"/tests/fuzz/corpus/measured/*.json; do
    bad "bench predict --measured $(basename "$f" .json)" 2 bench "--measured" -- \
      bench predict --hw "$SRC/profiles/measured/2026-11-27T0016-profile.json" --measured "$f"
  done
  bad "--trace-steps past --steps" 2 train "--steps 2 runs steps 0–1" -- $T --trace "$WORK/past.json" --trace-steps 5:8
  bad "--trace-steps past --epochs" 2 train "--epochs 1 runs steps 0–1" -- \
    $T0 --model mlp:784-16-10 --epochs 1 --batch 4096 --device sim --hw a100-nvlink-8 --dry-run --trace "$WORK/past.json" --trace-steps 2:3
  "$SCALELAB" $T --checkpoint "$WORK/at-2.ckpt" >/dev/null || fail "making a checkpoint at step 2"
  bad "--trace-steps before the step --resume goes on from" 2 train "ends before step 2" -- \
    $T0 --model mlp:784-16-10 --steps 4 --resume "$WORK/at-2.ckpt" --trace "$WORK/past.json" --trace-steps 0:1
  tried=$((tried + 1))
  out=$(timeout -s KILL 30 "$SCALELAB" $T --device sim --hw a100-nvlink-8 --dry-run --trace "$WORK/part.json" --trace-steps 1:8 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && python3 - "$WORK/part.json" <<'EOF'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
times = [e[k] for e in events for k in ("ts", "dur") if isinstance(e.get(k), (int, float))]
assert times and all(0 <= t < 1e15 for t in times), [t for t in times if not 0 <= t < 1e15][:3]
assert all(e["args"]["step"] == 1 for e in events if e.get("ph") == "X" and "step" in e.get("args", {}))
EOF
  then
    accepted=$((accepted + 1))  # as asked
    pass "--trace-steps 1:8 of 2 steps keeps step 1, every timestamp in range"
  else
    fail "--trace-steps 1:8 of 2 steps: exit $rc: $(printf '%s' "$out" | tail -n 2)"
  fi
  # --- the machine's limits ---
  # Threads the system will not start (a process limit), address space it will not give (ulimit -v)
  # and gzip bombs: each ends within the timeout, exit 1 (or 0 where the limit was enough), saying
  # what to lower — never a signal, a hang or std::terminate. limited.sh LIMIT PROGRAM ARGS… runs
  # PROGRAM under `ulimit LIMIT`; "-u N" allows N threads beyond those the user runs already, as
  # user nobody when root (root is exempt from the process limit).
  printf '%s\n' '#!/usr/bin/env bash' \
    'limit=$1 user=$(id -un)' \
    'shift' \
    '[ "$(id -u)" = 0 ] && [ "${limit% *}" = -u ] && user=nobody' \
    '[ "${limit% *}" = -u ] && limit="-u $(($(ps -L -u "$user" --no-headers | wc -l) + ${limit#* }))"' \
    'cd / || exit 1' \
    '[ "$user" != "$(id -un)" ] && exec setpriv --reuid="$user" --regid=nogroup --clear-groups bash -c "ulimit $limit && exec \"\$@\"" limited "$@"' \
    'ulimit $limit && exec "$@"' >"$WORK/limited.sh"
  chmod +x "$WORK/limited.sh"
  # within_limits NAME LIMIT ARGS…: scalelab ARGS under LIMIT exits 0, or 1 with [memory] or [threads].
  within_limits() {
    local name=$1 limit=$2 out rc
    shift 2
    tried=$((tried + 1))
    out=$(timeout -s KILL 60 "$WORK/limited.sh" "$limit" "$SCALELAB" "$@" 2>&1 </dev/null)
    rc=$?
    if [ "$rc" -eq 137 ]; then hangs=$((hangs + 1)); fail "$name: hung (killed after 60 s): ulimit $limit; scalelab $*"; return; fi
    if [ "$rc" -gt 128 ]; then crashes=$((crashes + 1)); fail "$name: died of signal $((rc - 128)): $(printf '%s' "$out" | tail -n 2)"; return; fi
    if [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && printf '%s' "$out" | grep -qE '\[(memory|threads|proc)\]'; }; then
      clear=$((clear + 1)); pass "$name: exit $rc"
    else fail "$name: exit $rc: $(printf '%s' "$out" | tail -n 2)"; fi
  }
  PROG=$WORK/limited.sh
  # Under AddressSanitizer: no address-space limit (its shadow memory needs terabytes of it), and no
  # leak check at exit (it needs a thread of its own).
  asan=0
  grep -qa __asan_init "$SCALELAB" && asan=1
  asan_before=${ASAN_OPTIONS-}
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  if [ "$(id -u)" != 0 ] || setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$SCALELAB"; then
    # OPENBLAS_NUM_THREADS=1: OpenBLAS starts no thread of its own, so the count is the run's.
    for n in 0 2; do
      bad "ddp on 4 thread ranks, $n more threads allowed" 1 threads "of 4 (" -- \
        "-u $n" env OPENBLAS_NUM_THREADS=1 "$SCALELAB" $T --strategy ddp --devices 4
    done
    bad "--launch procs, no process allowed" 1 proc "ulimit -u" -- \
      "-u 0" env OPENBLAS_NUM_THREADS=1 "$SCALELAB" $T --strategy ddp --devices 2 --launch procs
    bad "multiprocessing, no process allowed" 1 proc "ulimit -u" -- \
      "-u 0" env OPENBLAS_NUM_THREADS=1 "$SCALELAB" $T --strategy multiprocessing --devices 2
    for n in 1 3 6 10; do
      within_limits "ddp --launch procs with $n more threads" "-u $n" $T --strategy ddp --devices 4 --launch procs --comm-timeout 5000
      within_limits "multiprocessing with $n more threads" "-u $n" $T --strategy multiprocessing --devices 4
      within_limits "bench comm with $n more threads" "-u $n" bench comm --ranks 4 --max-bytes 1M --iters 2 --warmup 1 --comm-timeout 5000
    done
  else
    echo "SKIP: user nobody cannot run $SCALELAB: the process-limit cases need it when run as root"
  fi
  # The address space this build takes running (its libraries, OpenBLAS's buffers), then less and more.
  [ "$asan" = 1 ] && echo "SKIP: the ulimit -v cases (AddressSanitizer)"
  "$SCALELAB" $T0 --model mlp:784-16-10 --steps 100000 >/dev/null 2>&1 &
  sleep 2
  base=$(awk '/^VmPeak/ {print $2}' "/proc/$!/status")
  kill -KILL $! 2>/dev/null
  wait $! 2>/dev/null
  for delta in -300000 -150000 -50000 0 100000 300000; do
    [ "$asan" = 1 ] && break
    v=$((base + delta))
    within_limits "train under ulimit -v base$delta" "-v $v" $T
    within_limits "ddp on 4 threads under ulimit -v base$delta" "-v $v" $T --strategy ddp --devices 4 --comm-timeout 5000
    within_limits "ddp --launch procs under ulimit -v base$delta" "-v $v" $T --strategy ddp --devices 4 --launch procs --comm-timeout 5000
    within_limits "multiprocessing under ulimit -v base$delta" "-v $v" $T --strategy multiprocessing --devices 4
    within_limits "bench comm under ulimit -v base$delta" "-v $v" bench comm --ranks 4 --max-bytes 64M --iters 2 --warmup 1 --comm-timeout 5000
  done
  # Gzip bombs: 50 MB of zeros in 0.2 MB; the same with a trailer that promises 1000 bytes.
  PROG=$SCALELAB
  head -c 50000000 /dev/zero | gzip -1 >"$WORK/bomb.gz"
  cp "$WORK/bomb.gz" "$WORK/liar.gz"
  printf '\350\003\000\000' | dd of="$WORK/liar.gz" bs=1 seek=$(($(stat -c %s "$WORK/liar.gz") - 4)) conv=notrunc 2>/dev/null
  bad "--init-weights a gzip bomb" 1 npz "more than the" -- $T --init-weights "$WORK/bomb.gz"
  bad "--init-weights a gzip trailer that lies" 1 npz "trailer promises" -- $T --init-weights "$WORK/liar.gz"
  # An IDX file whose header promises 2^28 images of 1×1 pixel, from 300 MB of zeros.
  mkdir -p "$WORK/idx-bomb"
  { printf '\000\000\010\003\020\000\000\000\000\000\000\001\000\000\000\001'; head -c 300000000 /dev/zero; } | gzip -1 \
    >"$WORK/idx-bomb/train-images-idx3-ubyte.gz"
  PROG=$WORK/limited.sh
  [ "$asan" = 0 ] && bad "--data-dir an IDX gzip bomb under ulimit -v" 1 data "is it the right file" -- \
    "-v $((base + 400000))" "$SCALELAB" train --quiet --steps 1 --model mlp:1-10 --data-dir "$WORK/idx-bomb"
  if [ -n "$DASH" ]; then
    PROG=$DASH
    bad "dash --replay a gzip trailer that lies" 1 trace "trailer promises" -- --replay "$WORK/liar.gz" --describe
    # A trailer that promises nearly 4 GiB: more than a quarter of the address space left to it.
    printf '\000\000\000\370' | dd of="$WORK/bomb.gz" bs=1 seek=$(($(stat -c %s "$WORK/bomb.gz") - 4)) conv=notrunc 2>/dev/null
    PROG=$WORK/limited.sh
    [ "$asan" = 0 ] && bad "dash --replay a gzip bomb under ulimit -v" 1 trace "more than the" -- \
      "-v 12000000" "$DASH" --replay "$WORK/bomb.gz" --describe
  fi
  PROG=$SCALELAB
  if [ -n "$asan_before" ]; then export ASAN_OPTIONS=$asan_before; else unset ASAN_OPTIONS; fi
  # --- messages ---
  # Said as a user reads them: no library's raw text, the kind of a path that is not a file or a
  # folder, and a sweep's bad point refused before its first row.
  bad "grade --submission a symlink loop" 2 grade "Too many levels of symbolic links) — pass the folder" -- \
    grade 01-collectives --submission "$WORK/loop-a"
  bad "grade --submission /dev/zero" 2 grade "is a character device" -- grade 01-collectives --submission /dev/zero
  head -c 300 "$SRC/profiles/measured/2026-11-27T0016-bench-predict.json" >"$WORK/trunc-measured.json"
  tried=$((tried + 1))
  out=$(timeout -s KILL 30 "$SCALELAB" bench predict --hw "$SRC/profiles/measured/2026-11-27T0016-profile.json" \
    --measured "$WORK/trunc-measured.json" 2>&1)
  rc=$?
  if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -qF "not JSON (parse error" && ! printf '%s' "$out" | grep -qF "json.exception"; then
    clear=$((clear + 1)); pass "a truncated --measured table, without the JSON library's code"
  else fail "a truncated --measured table: exit $rc: $out"; fi
  tried=$((tried + 1))
  out=$(timeout -s KILL 60 "$SCALELAB" scale --strategy pipeline --devices 4 --micro-batches 1..100000 \
    --model mlp:784-64-64-64-10 --batch 128 2>&1)
  rc=$?
  if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -qF "[pipeline] --batch 512 cannot be cut" && ! printf '%s' "$out" | grep -q "^ *4 "; then
    clear=$((clear + 1)); pass "scale refuses a bad micro-batch count before its first row"
  else fail "scale --micro-batches 1..100000: exit $rc: $(printf '%s' "$out" | tail -n 3)"; fi
  # --- models ---
  # The ConvNet's and the GPT's specs, and what they refuse to be combined with.
  bad "gpt heads that do not divide the hidden size" 2 model "must be a multiple of the heads (5)" -- \
    train --model gpt:2-128-5-64-96 --dataset synthetic --steps 1
  bad "gpt of four sizes" 2 model "a GPT takes five sizes, got 4" -- train --model gpt:2-128-4-64 --steps 1
  bad "gpt vocabulary without a tokenizer" 2 data "V = 100 has no text tokenizer" -- train --model gpt:1-32-4-16-100 --steps 1
  bad "text for an image model" 2 data "reads images" -- train --model convnet --dataset text --steps 1
  bad "images for a gpt" 2 data "reads tokens, not images" -- train --model gpt:1-32-4-16-96 --dataset fashion-mnist --steps 1
  bad "recompute without blocks" 2 train "has no blocks" -- train --model convnet --recompute --steps 1
  bad "a corpus that is not there" 1 data "$WORK/no-corpus" -- train --model gpt:1-32-4-16-96 --data-dir "$WORK/no-corpus" --steps 1
  bad "more pipeline stages than a gpt's layers" 2 pipeline "has only 3 layers" -- \
    train --model gpt:1-32-4-16-96 --dataset synthetic --strategy pipeline --devices 4 --steps 1
  bad "a gpt batch the data-parallel devices cannot share" 2 data-parallel "" -- \
    train --model gpt:1-32-4-16-96 --dataset synthetic --strategy data-parallel --devices 3 --batch 16 --steps 1
  echo "cli         cases tried $tried / clear errors $clear / accepted $accepted / crashes $crashes / hangs $hangs" \
       "/ other failures $((failures - crashes - hangs))"
  finish
fi

if [ "$PART" = inputs ]; then
  # Real files to mutate: checkpoints of sgd (momentum) and adam runs, the shipped profiles, IDX
  # images and labels (raw; the fuzzer gzips half of its cases), a DDP trace.
  for opt in sgd adam; do
    "$SCALELAB" train --dataset synthetic --quiet --model mlp:784-8-10 --steps 2 --optimizer "$opt" \
      --checkpoint "$WORK/$opt.ckpt" >/dev/null || fail "making a $opt checkpoint"
  done
  python3 - "$WORK" <<'EOF'
import struct, sys
w = sys.argv[1]
n, r, c = 6, 28, 28
open(f"{w}/images", "wb").write(struct.pack(">IIII", 0x803, n, r, c) + bytes((i * 7) % 256 for i in range(n * r * c)))
open(f"{w}/labels", "wb").write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
EOF
  summary=""
  run_kind() {
    local kind=$1 cases=$2
    shift 2
    local line
    line=$(timeout -s KILL 120 "$FUZZ" "$kind" "$@" --cases "$cases" --seed 13 --budget-s 25 --keep "$WORK" 2>"$WORK/$kind.err")
    local rc=$?
    echo "$line"
    summary="$summary$line"$'\n'
    grep FAIL "$WORK/$kind.err" | head -n 5
    if [ "$rc" -eq 0 ]; then pass "$kind: no crash, no hang, every error clear"; else fail "$kind: see above (rc $rc)"; fi
  }
  run_kind checkpoint 2500 "$WORK/sgd.ckpt" "$WORK/adam.ckpt"
  run_kind profile 2500 "$SRC"/profiles/*.json "$SRC/tests/data/tiny.json"
  run_kind idx-images 1500 "$WORK/images"
  run_kind idx-labels 1000 "$WORK/labels"
  "$SCALELAB" train --strategy ddp --devices 2 --device sim --hw a100-nvlink-8 --dataset synthetic --quiet \
    --model mlp:16-8-4 --steps 2 --trace "$WORK/ddp.trace.json" >/dev/null || fail "making a trace"
  run_kind trace 1500 "$WORK/ddp.trace.json"
  # --- values accepted and silently ignored or misread ---
  # An fp16 checkpoint whose loss scaler's numbers are set to extremes (its CRC made right): each is
  # refused, or loads with numbers a run could have written.
  "$SCALELAB" train --dataset synthetic --quiet --model mlp:784-8-10 --steps 2 --amp fp16 \
    --checkpoint "$WORK/fp16.ckpt" >/dev/null || fail "making an fp16 checkpoint"
  run_kind checkpoint 800 "$WORK/fp16.ckpt"
  # --- figures ---
  # The corpus of every input that ever failed (tests/fuzz/corpus/KIND), replayed as it is; its
  # measured tables go through bench predict in the cli part.
  for dir in "$SRC"/tests/fuzz/corpus/*/; do
    kind=$(basename "$dir")
    [ "$kind" = measured ] && continue
    run_kind "$kind" 0 --corpus "$dir"
  done
  echo "--- summary (per input kind) ---"
  printf '%s' "$summary"
  finish
fi

if [ "$PART" = kill_save ]; then
  # A run saving a checkpoint every step (a few MB each), SIGKILLed at a random moment, N times.
  CK="$WORK/run.ckpt"
  RUN="train --dataset synthetic --quiet --model mlp:784-512-512-10 --steps 100000 --checkpoint $CK --checkpoint-every 1"
  left_tmp=0
  for i in $(seq 1 12); do
    "$SCALELAB" $RUN >/dev/null 2>&1 &
    pid=$!
    sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    ls "$CK".tmp-* >/dev/null 2>&1 && left_tmp=$((left_tmp + 1))
    if [ -e "$CK" ]; then
      if "$FUZZ" load "$CK" >/dev/null 2>"$WORK/load.err"; then pass "kill $i: the checkpoint left loads"
      else fail "kill $i: the checkpoint left does not load: $(cat "$WORK/load.err")"; fi
    else
      pass "kill $i: no checkpoint yet (killed before the first save)"
    fi
  done
  echo "kill_save: $left_tmp of 12 kills left a temporary behind"
  # Temporaries of a dead process (a pid just exited) and of a living one (this shell).
  dead=$(sh -c 'echo $$')
  : >"$CK.tmp-$dead"
  : >"$CK.tmp-$$"
  "$SCALELAB" train --dataset synthetic --quiet --model mlp:784-512-512-10 --steps 1 --checkpoint "$CK" >/dev/null 2>&1 ||
    fail "the next save failed"
  stale=$(ls "$CK".tmp-* 2>/dev/null | grep -v "\.tmp-$$\$")
  if [ -z "$stale" ]; then pass "the next save removed every dead process's temporary"; else fail "temporaries left: $stale"; fi
  if [ -e "$CK.tmp-$$" ]; then pass "a living process's temporary is left alone"; else fail "the temporary of a living pid was removed"; fi
  rm -f "$CK.tmp-$$"
  if "$FUZZ" load "$CK" >/dev/null; then pass "the last checkpoint loads"; else fail "the last checkpoint does not load"; fi
  # --- outputs and temporaries ---
  # SIGTERM or SIGINT while a large checkpoint is being written (its temporary seen on disk): the
  # run ends as before (exit 128 + signal) and removes its temporary; the previous checkpoint stays
  # whole. Under --launch procs rank 0, a child of the run, is the one writing. (perl restores
  # SIGINT's default action, which a background job of a script ignores.)
  BIG="train --dataset synthetic --quiet --model mlp:784-1024-1024-10 --steps 100000 --checkpoint-every 1"
  for launch in threads procs; do
    for sig in TERM INT TERM; do
      CK="$WORK/big-$launch.ckpt"
      L=""
      [ "$launch" = procs ] && L="--launch procs --strategy ddp --devices 2"
      perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV' -- "$SCALELAB" $BIG $L --checkpoint "$CK" >"$WORK/big.log" 2>&1 &
      pid=$!
      # into a save after the first one: a whole checkpoint is there, the next being written
      for _ in $(seq 1 600); do [ -e "$CK" ] && break; sleep 0.05; done
      for _ in $(seq 1 600); do ls "$CK".tmp-* >/dev/null 2>&1 && break; sleep 0.005; done
      kill -"$sig" "$pid"
      wait "$pid"
      code=$?
      name="SIG$sig during a $launch save"
      want=$((128 + $(kill -l "$sig")))
      if [ "$code" -eq "$want" ]; then pass "$name: exit $code"; else fail "$name: exit $code, wanted $want: $(tail -n 2 "$WORK/big.log")"; fi
      sleep 0.3  # the ranks die with the run
      if ls "$CK".tmp-* >/dev/null 2>&1; then fail "$name: left $(ls "$CK".tmp-*)"; else pass "$name: no temporary left"; fi
      if "$FUZZ" load "$CK" >/dev/null 2>"$WORK/load.err"; then pass "$name: the previous checkpoint is whole"
      else fail "$name: the checkpoint does not load: $(cat "$WORK/load.err")"; fi
      rm -f "$CK" "$CK".tmp-*
    done
  done
  finish
fi

if [ "$PART" = faults ]; then
  # Faults of a launch as a user meets them: a rank process killed (SIGKILL) or stopped (SIGSTOP)
  # under --launch procs, and the whole run ended by SIGTERM or SIGINT. Each ends the run within a
  # bound, says which rank, and leaves no process and nothing in /dev/shm behind; a checkpoint the
  # run wrote is whole. (Thread ranks share one process: a signal ends them all; a thread rank that
  # fails is covered by test_comm_threads, a stopped mpirun rank by the launches test.)
  P="train --launch procs --strategy ddp --devices 4 --dataset synthetic --model mlp:784-64-10 --steps 100000 --quiet"
  # start ARGS...: the run in the background, $job its pid, once its ranks are all forked.
  start() {
    "$SCALELAB" "$@" >"$WORK/run.log" 2>&1 &
    job=$!
    for _ in $(seq 1 100); do
      [ "$(pgrep -P "$job" | wc -l)" -ge 4 ] && break
      sleep 0.1
    done
    sleep 1  # into the steps
  }
  # ended_within SECONDS: $job ended by then ($code its exit status), or it is killed and 1 returned.
  tried=0 hangs=0
  ended_within() {
    tried=$((tried + 1))
    for _ in $(seq 1 $(($1 * 10))); do
      if ! kill -0 "$job" 2>/dev/null; then wait "$job"; code=$?; return 0; fi
      sleep 0.1
    done
    kill -KILL "$job" 2>/dev/null; wait "$job" 2>/dev/null
    hangs=$((hangs + 1))
    return 1
  }
  # nothing_left NAME: no process of the run and no shared memory segment of ours remain.
  nothing_left() {
    sleep 0.5
    local procs shm
    procs=$(pgrep -f -- "--model mlp:784-64-10 --steps 100000" | wc -l)
    shm=$(ls /dev/shm | grep -c "^scalelab-$job-" || true)  # a segment is named for the process that made it
    if [ "$procs" -eq 0 ] && [ "$shm" -eq 0 ]; then pass "$1: no process and no /dev/shm segment left"
    else fail "$1: left $procs process(es) and $shm /dev/shm segment(s)"; pkill -KILL -f -- "--model mlp:784-64-10 --steps 100000"; fi
  }

  start $P
  victim=$(pgrep -P "$job" | sort -n | sed -n 3p)
  kill -KILL "$victim"
  if ended_within 30; then
    if [ "$code" -eq 1 ] && grep -q 'rank 2 killed by signal 9' "$WORK/run.log"; then pass "a SIGKILLed rank: exit 1 naming it (rank 2 killed by signal 9)"
    else fail "a SIGKILLed rank: exit $code: $(tail -n 3 "$WORK/run.log")"; fi
  else fail "a SIGKILLed rank: the run did not end within 30 s"; fi
  nothing_left "a SIGKILLed rank"

  start $P --comm-timeout 2000
  victim=$(pgrep -P "$job" | sort -n | sed -n 2p)
  kill -STOP "$victim"
  if ended_within 30; then
    if [ "$code" -eq 1 ] && grep -q 'rank 1' "$WORK/run.log"; then pass "a SIGSTOPped rank: the others time out, exit 1 naming rank 1"
    else fail "a SIGSTOPped rank: exit $code: $(tail -n 3 "$WORK/run.log")"; fi
  else fail "a SIGSTOPped rank: the run did not end within 30 s"; kill -KILL "$victim" 2>/dev/null; fi
  nothing_left "a SIGSTOPped rank"

  # SIGTERM and SIGINT (Ctrl-C reaches the parent; a background job of a script ignores SIGINT, so
  # perl restores its default action first) while the run checkpoints every step.
  for sig in TERM INT; do
    CK="$WORK/sig-$sig.ckpt"
    perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV' -- "$SCALELAB" $P --checkpoint "$CK" --checkpoint-every 1 >"$WORK/run.log" 2>&1 &
    job=$!
    sleep 3
    kill -"$sig" "$job"
    if ended_within 10; then
      want=$((128 + $(kill -l "$sig")))
      if [ "$code" -eq "$want" ]; then pass "SIG$sig: the run ends at once (exit $code)"; else fail "SIG$sig: exit $code, wanted $want"; fi
    else fail "SIG$sig: the run did not end within 10 s"; fi
    nothing_left "SIG$sig"
    if [ -e "$CK" ] && "$FUZZ" load "$CK" >/dev/null 2>"$WORK/load.err"; then pass "SIG$sig: the last checkpoint is whole"
    else fail "SIG$sig: no whole checkpoint: $(cat "$WORK/load.err" 2>/dev/null)"; fi
  done
  echo "faults      cases tried $tried / hangs $hangs / other failures $((failures - hangs))"
  finish
fi

echo "unknown part $PART"
exit 2
