#!/usr/bin/env bash
# The same training launched three ways — ranks as threads, as forked processes (shm), as mpirun
# processes (Open MPI) — gives the same result: each within fp32 round-off of single
# (--check-equivalence), and the same loss curve as the threads launch; and every launch reports
# every rank: the summary lists all 4 devices and the trace holds the ops of all 4. (Bit-identical weights are
# not promised: each backend adds the ranks' gradients in its own order, and mpirun pins a rank to
# one core, which changes OpenBLAS's blocking.)
# With the dashboard built, its replay of a procs and an mpirun trace shows every device too.
#   bash launch_test.sh <scalelab> <mpirun> [<scalelab-dash>]
set -u
SCALELAB=${1:?usage: launch_test.sh <scalelab> <mpirun>}
MPIRUN=${2:?usage: launch_test.sh <scalelab> <mpirun>}
DASH=${3:-}
. "$(dirname "$0")/support/checks.sh" launch-test

# every_rank SUMMARY TRACE: the summary lists devices 0-3 and the trace has ops on each of them.
every_rank() {
  python3 - "$1" "$2" <<'PY'
import json, sys
summary, trace = (json.load(open(p)) for p in sys.argv[1:3])
events = trace["traceEvents"] if isinstance(trace, dict) else trace
names = [d["device"] for d in summary["per_device"]]
pids = sorted({e["pid"] for e in events if e.get("ph") == "X"})
print("  summary devices %s, trace pids %s" % (names, pids))
sys.exit(0 if len(names) == 4 and len(set(names)) == 4 and pids == [0, 1, 2, 3] else 1)
PY
}

# close A B: the two JSON summaries agree: final loss within 1e-5 relative, max_rel_diff ≤ 1e-5 in both.
close() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ok = abs(a["final_loss"] - b["final_loss"]) <= 1e-5 * abs(b["final_loss"])
for j in (a, b):
    ok = ok and j["equivalence"] is not None and j["equivalence"]["max_rel_diff"] <= 1e-5
print("  final_loss %.9g vs %.9g, max_rel_diff %.3g and %.3g" % (a["final_loss"], b["final_loss"],
      a["equivalence"]["max_rel_diff"] if a["equivalence"] else -1, b["equivalence"]["max_rel_diff"] if b["equivalence"] else -1))
sys.exit(0 if ok else 1)
PY
}

COMMON=(train --dataset synthetic --batch 64 --steps 8 --check-equivalence --quiet)
# sequence-parallel: tensor-parallel with --sequence-parallel (its reduce-scatters and all-gathers).
for name in ddp zero pipeline tensor-parallel sequence-parallel; do
  strategy=$name
  extra=(--model mlp:784-64-64-32-10)
  [ "$strategy" = pipeline ] && extra+=(--micro-batches 4 --schedule 1f1b)
  [ "$strategy" = tensor-parallel ] && extra=(--model gpt:2-32-4-16-96)  # it splits a transformer's heads
  [ "$name" = sequence-parallel ] && strategy=tensor-parallel extra=(--model gpt:2-32-4-16-96 --sequence-parallel)
  "$SCALELAB" "${COMMON[@]}" --strategy $strategy --devices 4 "${extra[@]}" --json "$WORK/$name.threads.json" >/dev/null 2>"$WORK/err" \
    || { fail "$name --launch threads: $(tail -n 3 "$WORK/err")"; continue; }
  if "$SCALELAB" "${COMMON[@]}" --strategy $strategy --devices 4 "${extra[@]}" --launch procs \
       --json "$WORK/$name.procs.json" --trace "$WORK/$name.procs.trace.json" >/dev/null 2>"$WORK/err"; then
    close "$WORK/$name.procs.json" "$WORK/$name.threads.json" && pass "$name: --launch procs = threads" \
      || fail "$name: --launch procs differs from threads"
    every_rank "$WORK/$name.procs.json" "$WORK/$name.procs.trace.json" && pass "$name: --launch procs reports every rank" \
      || fail "$name: --launch procs's summary or trace lacks ranks"
  else
    fail "$name --launch procs: $(tail -n 3 "$WORK/err")"
  fi
  if OMPI_MCA_btl_vader_single_copy_mechanism=none "$MPIRUN" --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 \
       -np 4 "$SCALELAB" "${COMMON[@]}" --strategy $strategy --devices 4 "${extra[@]}" --launch mpi --comm mpi \
       --json "$WORK/$name.mpi.json" --trace "$WORK/$name.mpi.trace.json" >/dev/null 2>"$WORK/err"; then
    close "$WORK/$name.mpi.json" "$WORK/$name.threads.json" && pass "$name: --launch mpi = threads" \
      || fail "$name: --launch mpi differs from threads"
    every_rank "$WORK/$name.mpi.json" "$WORK/$name.mpi.trace.json" && pass "$name: --launch mpi reports every rank" \
      || fail "$name: --launch mpi's summary or trace lacks ranks"
  else
    fail "$name --launch mpi: $(tail -n 3 "$WORK/err")"
  fi
done

echo
# The dashboard replays a procs or mpirun pipeline whole: 4 devices, 4 stages (no window needed).
if [ -n "$DASH" ]; then
  for launch in procs mpi; do
    d=$("$DASH" --replay "$WORK/pipeline.$launch.trace.json" --describe 2>&1)
    if printf '%s\n' "$d" | grep -qx "devices: 4" && printf '%s\n' "$d" | grep -qx "pipeline_stages: 4"; then
      pass "the dashboard replays the --launch $launch pipeline with every device and stage"
    else
      fail "the dashboard's replay of the --launch $launch pipeline: $(printf '%s' "$d" | grep -E 'devices|stages|dash' | tr '\n' ' ')"
    fi
  done
fi

# A stopped rank (SIGSTOP: alive, silent) under mpirun: the other rank's collective times out
# (its message says which call and which rank), and the job is aborted (MPI_Abort), not left waiting in MPI_Finalize for ever.
"$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$SCALELAB" train --strategy ddp --devices 2 --launch mpi \
  --comm mpi --dataset synthetic --steps 1000000 --seed 4242 --comm-timeout 2000 --quiet >"$WORK/stop.log" 2>&1 &
job=$!
for _ in $(seq 1 100); do
  rank=$(pgrep -f -- "--seed 4242 --comm-timeout 2000" | grep -v "^$job$" | tail -n 1)
  [ -n "$rank" ] && grep -q . /proc/"$rank"/status 2>/dev/null && break
  sleep 0.1
done
sleep 2  # the ranks are past their start and training
kill -STOP "$rank" 2>/dev/null
ended=no
for _ in $(seq 1 300); do
  if ! kill -0 "$job" 2>/dev/null; then ended=yes; break; fi
  sleep 0.1
done
if [ "$ended" = yes ] && wait "$job"; then code=0; else code=$?; fi
if [ "$ended" = yes ] && [ "$code" != 0 ] && grep -q "\[comm\] mpi: rank [01] waited" "$WORK/stop.log" && grep -q "MPI_Abort" "$WORK/stop.log"; then
  pass "a SIGSTOPped rank under mpirun: the other times out saying where, and the job is aborted (exit $code) within 30 s"
else
  fail "a SIGSTOPped rank under mpirun: ended $ended, exit $code: $(head -n 3 "$WORK/stop.log")"
  kill -KILL "$job" "$rank" 2>/dev/null
fi
pkill -KILL -f -- "--seed 4242 --comm-timeout 2000" 2>/dev/null

finish
