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
  bad "--zero-stage 0 with zero" 2 zero "pass 1 or 2" -- $T --strategy zero --devices 2 --zero-stage 0
  bad "--zero-stage 3" 2 zero "1 or 2" -- $T --strategy zero --devices 2 --zero-stage 3
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
  for p in dir fifo loop-a empty; do bad "--hw $p" 1 hw "" -- $T --device sim --hw "$WORK/$p" --dry-run; done
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
  bad "profile nodes 1.5" 1 hw "whole number" -- $T --device sim --hw "$WORK/nodes-frac.json" --dry-run
  bad "profile devices_per_node 1e12" 1 hw "devices_per_node" -- $T --device sim --hw "$WORK/dpn-huge.json" --dry-run
  bad "profile name a number" 1 hw "must be a string" -- $T --device sim --hw "$WORK/name-number.json" --dry-run
  bad "profile gemm_efficiency 2" 1 hw "gemm_efficiency" -- $T --device sim --hw "$WORK/eff-2.json" --dry-run
  bad "profile latency 1e9 s" 1 hw "latency_s" -- $T --device sim --hw "$WORK/latency-huge.json" --dry-run
  bad "profile 1e999" 1 hw "" -- $T --device sim --hw "$WORK/overflow.json" --dry-run
  bad "profile an array" 1 hw "JSON object" -- $T --device sim --hw "$WORK/array.json" --dry-run
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
  if [ "$rc" -eq 1 ] && printf '%s' "$out" | grep -qF "[hw]"; then clear=$((clear + 1)); pass "profiles with a bad profile file"; else fail "profiles with a bad profile file: exit $rc: $out"; fi
  bad "grade --timeout 0" 2 cli "--timeout" -- grade 01-collectives --timeout 0
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
