#!/usr/bin/env bash
# scripts/bubble_parts.py: the split of a pipeline run's idle share that decks 02 and 04 show.
#   - a drawn GPipe step of equal stages, nothing else in it: all its idle is fill and drain, the
#     formula (p−1)/(m+p−1);
#   - the same stages, stage 0's backward half the others': the extra idle is "unequal stages",
#     (m−1)·Σ (max b − b_s) for GPipe; a gap between two stages' work is "sends, copies";
#   - simulated runs (GPipe, 1F1B, model parallel): the parts add up to the run's bubble_fraction;
#     with stages equal in forward + backward, 1F1B has no "unequal" part;
#   - a trace without training steps, or a schedule it does not know, is refused, saying so.
#   bash bubble_parts_test.sh <path to scalelab> <source dir>
set -u
SCALELAB=${1:?usage: bubble_parts_test.sh <scalelab binary> <source dir>}
SRC=${2:?usage: bubble_parts_test.sh <scalelab binary> <source dir>}
. "$(dirname "$0")/support/checks.sh" bubble-parts-test
parts() { python3 "$SRC/scripts/bubble_parts.py" "$@"; }

# Drawn GPipe steps: p stages, m micro-batches, forward f and backward b µs per micro-batch
# (b0 on stage 0), stage s+1 starting a micro-batch `gap` µs after stage s ends it.
python3 - "$WORK" <<'PY'
import json, sys
def gpipe(p, m, f, b, b0, gap=0.0):
    ev = []
    def x(d, t, dur, cat):
        ev.append({"ph": "X", "pid": d, "tid": 0, "ts": t, "dur": dur, "cat": cat, "name": cat, "args": {"step": 0}})
    done = [[0.0] * m for _ in range(p)]
    for s in range(p):  # forwards
        t = 0.0
        for i in range(m):
            t = max(t, done[s - 1][i] + gap if s else 0.0)
            x(s, t, f, "fwd"); t += f; done[s][i] = t
    back = [[0.0] * m for _ in range(p)]
    for s in reversed(range(p)):  # backwards, after the stage's last forward
        t = done[s][m - 1]
        bs = b0 if s == 0 else b
        for i in range(m):
            t = max(t, back[s + 1][i] + gap if s < p - 1 else 0.0)
            x(s, t, bs, "bwd"); t += bs; back[s][i] = t
    return {"traceEvents": ev}, {"devices": p, "micro_batches": m, "steps": 1}
for name, args in {"equal": (4, 8, 1.0, 2.0, 2.0), "light0": (4, 8, 1.0, 2.0, 1.0),
                   "gap": (4, 8, 1.0, 2.0, 2.0, 0.5)}.items():
    trace, summary = gpipe(*args)
    json.dump(trace, open(f"{sys.argv[1]}/{name}.trace.json", "w"))
    json.dump(summary, open(f"{sys.argv[1]}/{name}.json", "w"))
PY
for t in equal light0 gap; do parts "$WORK/$t.json" "$WORK/$t.trace.json" gpipe >"$WORK/$t-parts.json" || fail "$t: bubble_parts.py failed"; done
python3 - "$WORK" <<'PY' && pass "drawn GPipe steps: equal stages sit on (p−1)/(m+p−1), all fill and drain; a half backward on stage 0 is 'unequal', (m−1)·1 µs; gaps between stages are 'sends'" || fail "drawn GPipe steps: $(cat "$WORK"/{equal,light0,gap}-parts.json | tr -d ' \n')"
import json, sys
load = lambda n: json.load(open(f"{sys.argv[1]}/{n}-parts.json"))
close = lambda a, b: abs(a - b) < 1e-9
e = load("equal")
assert close(e["measured"], 3 / 11) and close(e["formula"], 3 / 11) and close(e["fill_drain"], 3 / 11), e
assert close(e["unequal_stages"], 0) and close(e["sends_copies"], 0) and close(e["optimizer_tail"], 0), e
l = load("light0")  # unequal: stage 0 waits (m−1)·1 µs, of 4 devices × the step
assert close(l["unequal_stages"], 7 / (4 * l["step_us"])) and close(l["sends_copies"], 0), l
assert close(l["fill_drain"] + l["unequal_stages"], l["measured"]), l
g = load("gap")
assert g["sends_copies"] > 0 and close(g["unequal_stages"], 0), g
assert close(g["fill_drain"] + g["sends_copies"], g["measured"]), g
PY

# Simulated runs: the parts add up to the run's own idle share.
run=(train --device sim --hw a100-nvlink-8 --dataset synthetic --model mlp:6144-4096-4096-4096-4096 --batch 512
  --steps 2 --dry-run --quiet --devices 4)
ok=1
for r in "gpipe --strategy pipeline --micro-batches 4" "1f1b --strategy pipeline --micro-batches 4 --schedule 1f1b" \
  "mp --strategy model-parallel"; do
  set -- $r
  name=$1
  shift
  "$SCALELAB" "${run[@]}" "$@" --json "$WORK/$name.json" --trace "$WORK/$name.trace.json" >/dev/null 2>&1 || ok=0
  schedule=gpipe
  [ "$name" = 1f1b ] && schedule=1f1b
  parts "$WORK/$name.json" "$WORK/$name.trace.json" $schedule >"$WORK/$name-parts.json" 2>&1 || ok=0
done
if ((ok)) && python3 - "$WORK" <<'PY'; then
import json, sys
for n in ("gpipe", "1f1b", "mp"):
    run = json.load(open(f"{sys.argv[1]}/{n}.json"))
    p = json.load(open(f"{sys.argv[1]}/{n}-parts.json"))
    total = p["fill_drain"] + p["unequal_stages"] + p["optimizer_tail"] + p["sends_copies"]
    assert abs(p["measured"] - run["bubble_fraction"]) < 1e-6, (n, p, run["bubble_fraction"])
    assert abs(total - p["measured"]) < 1e-9, (n, p)
    assert all(p[k] > -1e-9 for k in ("fill_drain", "unequal_stages", "optimizer_tail", "sends_copies")), (n, p)
one = json.load(open(f"{sys.argv[1]}/1f1b-parts.json"))
assert one["unequal_stages"] < 0.01, one  # every stage's forward + backward is the same work
PY
  pass "simulated GPipe, 1F1B, model parallel: the parts add up to bubble_fraction, none negative; equal stages leave 1F1B no 'unequal' part"
else fail "simulated runs: $(cat "$WORK"/gpipe-parts.json "$WORK"/1f1b-parts.json 2>/dev/null | head -c 600)"; fi

echo '{"traceEvents": []}' >"$WORK/empty.trace.json"
out=$(parts "$WORK/equal.json" "$WORK/empty.trace.json" 2>&1) && fail "an empty trace was read: $out" ||
  { [[ "$out" == *"no training-step events"* ]] && pass "an empty trace: refused, '$out'" || fail "empty trace: $out"; }
out=$(parts "$WORK/equal.json" "$WORK/equal.trace.json" zigzag 2>&1) && fail "schedule zigzag was taken: $out" ||
  { [[ "$out" == *"usage"* ]] && pass "an unknown schedule: refused, '$out'" || fail "unknown schedule: $out"; }
finish
