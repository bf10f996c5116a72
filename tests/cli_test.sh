#!/usr/bin/env bash
# The scalelab command line: exit codes (2 for a bad option, non-zero for a failed run, 0 for
# success) and the message fragments that tell a student what to do.
#   bash cli_test.sh <path to scalelab> <tests/data>
set -u

SCALELAB=${1:?usage: cli_test.sh <scalelab binary> <tests/data>}
DATA=${2:?usage: cli_test.sh <scalelab binary> <tests/data>}
[ -x "$SCALELAB" ] || { echo "FAIL: $SCALELAB is not an executable"; exit 1; }
[ -f "$DATA/tiny.json" ] || { echo "FAIL: $DATA/tiny.json is missing"; exit 1; }

. "$(dirname "$0")/support/checks.sh" cli-test

# expect NAME CODE FRAGMENT -- ARGS...: runs scalelab ARGS, wants exit CODE ("nonzero" for any
# failure) and FRAGMENT (may be empty) somewhere in stdout + stderr.
expect() {
  local name=$1 want=$2 fragment=$3
  shift 4
  local out rc
  out=$("$SCALELAB" "$@" 2>&1 </dev/null)
  rc=$?
  if [ "$want" = nonzero ]; then
    if [ "$rc" -eq 0 ]; then
      fail "$name: exit 0, wanted non-zero (scalelab $*)"
      return
    fi
  elif [ "$rc" -ne "$want" ]; then
    fail "$name: exit $rc, wanted $want (scalelab $*); output: $(printf '%s' "$out" | tail -n 3)"
    return
  fi
  if [ -n "$fragment" ] && ! printf '%s' "$out" | grep -qF -- "$fragment"; then
    fail "$name: output lacks '$fragment' (scalelab $*); output: $(printf '%s' "$out" | tail -n 3)"
    return
  fi
  pass "$name"
}

have_python() { command -v python3 >/dev/null 2>&1; }

# json_check FILE PYTHON_EXPR: the file is JSON and the expression (over `j`) is true.
json_check() {
  local file=$1 expr=$2
  [ -s "$file" ] || return 1
  if have_python; then
    python3 -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($expr) else 1)" "$file" 2>/dev/null
  else
    grep -q '{' "$file"
  fi
}

# ---------------------------------------------------------------------------------------------
# Bad options and bad values: exit 2, and the message names the option and the fix.
T="train --dataset synthetic --quiet"
expect "unknown option exits 2" 2 "--no-such-option" -- train --no-such-option
expect "no subcommand exits 2" 2 "" --
expect "unknown strategy lists the known ones" 2 "single" -- $T --strategy nope
expect "unknown strategy names --strategy" 2 "--strategy" -- $T --strategy nope
expect "sim without --hw asks for --hw" 2 "--hw" -- $T --device sim
expect "unknown device exits 2" 2 "cpu" -- $T --device tpu
expect "unknown hardware profile lists the shipped ones" 2 "a100-nvlink-8" -- $T --device sim --hw no-such-hw
expect "--batch 0 exits 2" 2 "--batch" -- $T --batch 0
expect "--model with one size exits 2" 2 "--model" -- $T --model mlp:784
expect "--model that is not an mlp exits 2" 2 "--model" -- $T --model cnn:1-2
expect "unknown dataset exits 2" 2 "--dataset" -- train --dataset nope --quiet
expect "--dry-run without sim exits 2" 2 "--device sim" -- $T --dry-run
expect "more devices than the profile has exits 2" 2 "--devices" -- $T --device sim --hw "$DATA/tiny.json" --devices 5
expect "--steps and --epochs together exit 2" 2 "" -- $T --steps 2 --epochs 2
expect "single on two devices exits 2" 2 "--devices" -- $T --devices 2

# A failed run (not a bad option): non-zero, and the missing data says how to get it.
expect "missing Fashion-MNIST says how to install it" nonzero "apt-get install dataset-fashion-mnist" -- \
  train --dataset fashion-mnist --data-dir /nonexistent --quiet
expect "missing Fashion-MNIST offers --dataset synthetic" nonzero "--dataset synthetic" -- \
  train --data-dir /nonexistent --quiet
expect "a trace that cannot be written fails" nonzero "/nonexistent/dir/t.json" -- \
  $T --model mlp:784-32-10 --steps 1 --trace /nonexistent/dir/t.json

# ---------------------------------------------------------------------------------------------
# Runs that work.
J="$WORK/cpu.json"
expect "a short cpu run succeeds" 0 "measured" -- $T --model mlp:784-32-10 --steps 5 --batch 32 --json "$J"
if json_check "$J" 'j["time_kind"] == "measured" and j["steps"] == 5 and j["device"] == "cpu" and j["strategy"] == "single" and isinstance(j["weights_checksum"], str) and len(j["per_device"]) == 1 and "peak_bytes" in j["per_device"][0]'; then
  pass "--json writes the summary with time_kind measured"
else
  fail "--json did not write the expected summary to $J: $(head -c 400 "$J" 2>/dev/null)"
fi
if ls "$WORK" | grep -qv '^cpu\.json$'; then
  fail "--json left other files behind: $(ls "$WORK" | tr '\n' ' ')"
else
  pass "--json leaves only its file"
fi

J2="$WORK/sim.json"
TR="$WORK/sim-trace.json"
expect "a sim run on the tiny profile succeeds" 0 "simulated" -- \
  $T --device sim --hw "$DATA/tiny.json" --model mlp:784-32-10 --steps 2 --batch 16 --json "$J2" --trace "$TR"
if json_check "$J2" 'j["time_kind"] == "simulated" and j["hw"] == "tiny" and j["time_s"] > 0'; then
  pass "sim --json says simulated, names the profile"
else
  fail "sim --json: $(head -c 400 "$J2" 2>/dev/null)"
fi
if json_check "$TR" 'len([e for e in j["traceEvents"] if e["ph"] == "X"]) > 0 and j["otherData"]["simulated"] == True'; then
  pass "--trace writes a Chrome trace"
else
  fail "--trace did not write a Chrome trace to $TR"
fi

# The same seed twice on sim: the same simulated time and weights, to the byte.
J3="$WORK/sim-again.json"
"$SCALELAB" $T --device sim --hw "$DATA/tiny.json" --model mlp:784-32-10 --steps 2 --batch 16 --json "$J3" >/dev/null 2>&1
if have_python && python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if a["time_s"] == b["time_s"] and a["weights_checksum"] == b["weights_checksum"] else 1)' "$J2" "$J3" 2>/dev/null; then
  pass "sim runs are deterministic"
elif ! have_python; then
  pass "sim runs are deterministic (skipped: no python3)"
else
  fail "two identical sim runs differ"
fi

expect "dry run on sim succeeds" 0 "dry run" -- \
  $T --device sim --hw a100-nvlink-8 --dry-run --steps 2

expect "profiles lists a100-nvlink-8" 0 "a100-nvlink-8" -- profiles
expect "profiles lists the multi-node profile" 0 "h100-ib-16x8" -- profiles
expect "strategies lists single" 0 "single" -- strategies

B="$WORK/bench.json"
expect "bench compute runs" 0 "ratio" -- bench compute --steps 2 --model mlp:784-128-10 --batch 64 --json "$B"
if json_check "$B" 'all(k in j and isinstance(j[k], (int, float)) and j[k] > 0 for k in ("achieved_gflops", "sgemm_gflops", "ratio"))'; then
  pass "bench compute --json has achieved_gflops, sgemm_gflops, ratio"
else
  fail "bench compute --json: $(head -c 400 "$B" 2>/dev/null)"
fi
expect "bench compute --steps 0 exits 2" 2 "" -- bench compute --steps 0

# bench sim: a dry run's wall time and RSS per case, the bound beside them where the issue set one.
S="$WORK/sim.json"
expect "bench sim runs a small case" 0 "64 devices:" -- bench sim --devices 64 --model mlp:784-256-10 --json "$S"
if have_python && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); r=j['rows'][0]; sys.exit(0 if r['devices']==64 and r['wall_s']>0 and r['rss_bytes']>0 and r['simulated_step_s']>0 else 1)" "$S"; then
  pass "bench sim --json has wall_s, rss_bytes and the simulated step"
else
  fail "bench sim --json: $(head -c 400 "$S" 2>/dev/null)"
fi
expect "bench sim names its bounds" 0 "bound 2 s" -- bench sim --devices 1024 --model mlp:784-64-10
expect "thousands of cpu devices are refused" 2 "--dry-run" -- train --strategy ddp --devices 4096 --batch 4096 --steps 1

# bench comm: the nccl-tests table, #wrong 0, the bound column; modelled times on sim.
C="$WORK/comm.json"
expect "bench comm threads runs" 0 "#wrong" -- bench comm --comm threads --ranks 3 --min-bytes 1K --max-bytes 64K --iters 3 --json "$C"
if json_check "$C" 'len(j["rows"]) == 7 and all(r["wrong"] == 0 and r["busbw"] > 0 and r["bound_busbw"] > 0 and set(r) >= {"op", "bytes", "time_us", "algbw", "busbw", "wrong", "bound_busbw", "peer_busbw"} for r in j["rows"])'; then
  pass "bench comm --json rows: 1K..64K, #wrong 0, busbw and bound"
else
  fail "bench comm --json: $(head -c 400 "$C" 2>/dev/null)"
fi
for op in broadcast reduce all_gather reduce_scatter scatter gather send; do
  expect "bench comm $op has no wrong elements" 0 "" -- bench comm --ranks 4 --op $op --min-bytes 4K --max-bytes 8K --iters 2 --json "$C"
  json_check "$C" 'all(r["wrong"] == 0 for r in j["rows"])' && pass "bench comm $op #wrong 0" || fail "bench comm $op: $(head -c 300 "$C")"
done
S="$WORK/sim.json"
expect "bench comm on sim prints modelled times" 0 "modelled" -- bench comm --device sim --hw a100-nvlink-8 --ranks 8 --min-bytes 1M --max-bytes 1M --json "$S"
# 8 ranks on NVLink3 (300 GB/s, of which NCCL achieves 0.8075; launch 8.5 µs, a Simple step 3.25 µs:
# the profile's "collectives"): at 1 MiB the ring with LL128 is the cheapest, 14 steps at 1.9/3.4 of
# a Simple one and 2·7/8 · 1 MiB at 120/128 of the bandwidth = 42.01 µs (LL 46.8, Simple 61.6)
if json_check "$S" 'abs(j["rows"][0]["time_us"] - (8.5 + 14 * 3.25 * 1.9 / 3.4 + 1.75 * 1048576 / (300e9 * 0.8075 * 120 / 128) * 1e6)) < 0.01'; then
  pass "bench comm sim time is the ring formula (LL128)"
else
  fail "bench comm sim time: $(head -c 400 "$S")"
fi
expect "bench comm unknown op exits 2" 2 "all_reduce" -- bench comm --op allreduce
expect "bench comm unknown backend exits 2" 2 "threads, shm, mpi or nccl" -- bench comm --comm carrier-pigeon
expect "bench comm sim without --hw exits 2" 2 "--hw" -- bench comm --device sim
expect "bench comm --comm mpi outside mpirun exits 2" 2 "mpirun -np" -- bench comm --comm mpi

# Mixed precision: the summary says so, the JSON carries the scaler, options are checked.
A="$WORK/amp.json"
expect "train --amp fp16 prints the mixed-precision line" 0 "mixed precision" -- \
  train --dataset synthetic --model mlp:784-32-10 --steps 3 --amp fp16 --quiet --json "$A"
if json_check "$A" 'j["amp"]["dtype"] == "fp16" and j["amp"]["loss_scale"] > 0 and j["amp"]["skipped_steps"] >= 0'; then
  pass "train --amp fp16 --json has amp{dtype, loss_scale, skipped_steps}"
else
  fail "train --amp fp16 --json: $(head -c 400 "$A" 2>/dev/null)"
fi
expect "--amp-initial-scale without --amp fp16 exits 2" 2 "--amp fp16" -- \
  train --dataset synthetic --steps 1 --amp-initial-scale 1024
expect "--amp fp8 exits 2" 2 "fp16" -- train --dataset synthetic --steps 1 --amp fp8
expect "--zero-stage without zero exits 2" 2 "--strategy zero" -- train --dataset synthetic --steps 1 --strategy ddp --devices 2 --zero-stage 1
expect "--micro-batches without pipeline exits 2" 2 "--strategy pipeline" -- train --dataset synthetic --steps 1 --micro-batches 4
expect "--check-equivalence with Hogwild exits 2" 2 "" -- train --dataset synthetic --steps 1 --strategy multiprocessing --devices 2 --check-equivalence

# --dump-batches: each step's global batch is B distinct training-set indices, and the shards are
# its rows by the strategy's rule — DistributedSampler's interleave for ddp, DataParallel's slices.
D="$WORK/batches.json"
for run in "ddp interleaved" "data-parallel contiguous"; do
  set -- $run
  if "$SCALELAB" train --dataset synthetic --model mlp:784-8-10 --batch 12 --steps 3 --strategy "$1" --devices 3 \
       --quiet --dump-batches "$D" >/dev/null 2>&1 &&
     json_check "$D" "j['shard_rule'] == '$2' and len(j['steps']) == 3 and all(len(set(s['global'])) == 12 and
       all(s['shards'][k] == (s['global'][k::3] if j['shard_rule'] == 'interleaved' else s['global'][4 * k:4 * k + 4])
           for k in range(3)) for s in j['steps'])"; then
    pass "--dump-batches $1: the global batches and the $2 shards"
  else
    fail "--dump-batches $1: $(head -c 400 "$D" 2>/dev/null)"
  fi
done
expect "--dump-batches into a missing directory exits before training" nonzero "dump-batches" -- \
  train --dataset synthetic --steps 1 --dump-batches "$WORK/no-such-dir/b.json"

echo
finish
