#!/usr/bin/env bash
# `scalelab calibrate --quick` and `train --predict` (issue 15): the profile it writes is valid and
# the sim accepts it; a run with --predict prints and writes both figures; broken profiles and
# misplaced options are refused with a clear message.
#   bash calibrate_test.sh <path to scalelab>
set -u
SCALELAB=${1:?usage: calibrate_test.sh <scalelab binary>}
PY=/usr/bin/python3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/support/checks.sh" calibrate-test

out=$("$SCALELAB" calibrate --quick --out "$WORK/me.json" 2>"$WORK/progress")
rc=$?
[ "$rc" -eq 0 ] && pass "calibrate --quick exits 0" || fail "calibrate --quick exited $rc: $(tail -n 5 "$WORK/progress")"
grep -q "\[calibrate\] 100%" "$WORK/progress" && pass "progress is shown on stderr" || fail "no progress on stderr"
if $PY - "$WORK/me.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
d = p["device"]
c = d["gemm_curves"]["f32"]
assert len(c["mnk"]) >= 4 and c["mnk"] == sorted(c["mnk"]), c["mnk"]
assert all(0 < e <= 1 for e in c["efficiency"]), c["efficiency"]
assert d["peak_flops"]["f32"] > 1e8 and d["mem_bandwidth_Bps"] > 1e8 and d["launch_overhead_s"] > 0
assert p["links"]["intra_node"]["bandwidth_Bps"] > 1e6 and p["links"]["host"]["bandwidth_Bps"] > 1e6
cal = p["calibration"]
assert cal["machine"] and cal["date"] and cal["quick"] is True
for k in ("gemm", "elementwise", "host_copy", "all_reduce_threads"):
    assert len(cal["raw"][k]) >= 3 and all(r["seconds"] > 0 for r in cal["raw"][k]), k
PYEOF
then pass "the profile has a GEMM curve, bandwidths, overhead, α-β and the raw measurements"
else fail "the profile is incomplete: $(head -c 400 "$WORK/me.json")"; fi

# `calibrate --list`: the probes, each with what it measures and the fields it writes — every field
# the profile just written has (but the machine's model and memory) named by one of them.
"$SCALELAB" calibrate --list > "$WORK/probes.txt" 2>&1
if [ "$?" -eq 0 ] && $PY - "$WORK/me.json" "$WORK/probes.txt" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
listed = open(sys.argv[2]).read()
writes = " ".join(l.split("writes", 1)[1] for l in listed.splitlines() if l.strip().startswith("writes"))
fields = [k for k in p["device"] if k not in ("model", "mem_capacity_bytes")] + ["links.host", "links.intra_node", "collectives"]
missing = [f for f in fields if f not in writes]
assert not missing, missing
PYEOF
then pass "calibrate --list names a probe for every field the profile has"
else fail "calibrate --list: $(head -c 600 "$WORK/probes.txt")"; fi

# Element-wise curves by kind, and the link between devices (copies) apart from the all-reduce's ring.
if $PY - "$WORK/me.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
ec = p["device"]["elementwise_curves"]
for kind in ("sgd", "adam", "bias_relu", "bias_relu_bwd", "softmax_xent", "axpy", "copy", "scale"):
    c = ec[kind]
    assert len(c["bytes"]) >= 4 and c["bytes"] == sorted(c["bytes"]), (kind, c)
    assert all(0 < e <= 1 for e in c["efficiency"]), (kind, c)
assert max(max(c["efficiency"]) for k, c in ec.items() if k != "source") == 1  # the best rate is the peak
assert p["collectives"]["protocols"] == ["Simple"] and 0 < p["collectives"]["intra_efficiency"] <= 1
assert len(p["calibration"]["raw"]["peer_copy"]) >= 3
for link in ("host", "intra_node"):  # copies by size: a memcpy's rate falls past the caches
    c = p["links"][link]["curve"]
    assert len(c["bytes"]) >= 3 and max(c["efficiency"]) == 1 and all(0 < e <= 1 for e in c["efficiency"]), (link, c)
t = p["device"]["gemm_table"]["f32"]  # every GEMM shape measured, priced by the nearest ones
assert len(t) == len(p["calibration"]["raw"]["gemm"]) and all(r["seconds"] > 0 for r in t), t[:3]
assert {(r["trans_a"], r["trans_b"]) for r in t} == {(False, True), (True, False), (False, False)}
# dW, the GEMM a gradient accumulates into, also measured adding to C (beta = 1); no other shape.
assert all((r.get("seconds_accumulate", 0) > 0) == r["trans_a"] for r in t), [r for r in t if r["trans_a"]][:3]
# Every op measured cold too (the caches flushed), and the sweep that finds the cache in effect.
assert all(r["seconds_cold"] > 0 for r in t)
for c in [v for k, v in ec.items() if k != "source"] + [p["links"][l]["curve"] for l in ("host", "intra_node")]:
    assert len(c["efficiency_cold"]) == len(c["bytes"]) and all(0 < e <= 1 for e in c["efficiency_cold"]), c
sweep = p["calibration"]["raw"]["host_cache"]
assert len(sweep) >= 5 and all(r["seconds"] > 0 for r in sweep), sweep
assert p["device"].get("host_cache_bytes", 1) > 0
# The cold share by bytes moved, point by point from the sweeps: rising from 0 to 1 (DRAM's time).
assert ("host_cache_curve" in p["device"]) == ("host_cache_bytes" in p["device"])
c = p["device"].get("host_cache_curve", {"bytes": [1], "cold_share": [1]})
assert c["bytes"] == sorted(c["bytes"]) and c["cold_share"] == sorted(c["cold_share"]), c
assert all(0 <= s <= 1 for s in c["cold_share"]) and c["cold_share"][-1] == 1, c
# Three sweeps; the profile holds their median.
sweeps = p["calibration"]["raw"]["host_cache_sweeps"]
assert len(sweeps) == 3 and all(len(s["rows"]) >= 5 for s in sweeps), sweeps
assert sorted(s["bytes_in_effect"] for s in sweeps)[1] == p["device"].get("host_cache_bytes", 0), sweeps
# After each sweep that found a cache: y += x after D bytes touched once, four times, and 4D once;
# the profile holds the median of their estimates of how much a byte touched again counts.
retouch = p["calibration"]["raw"]["host_cache_retouch"]
assert len(retouch) == sum(s["bytes_in_effect"] > 0 for s in sweeps), retouch
for r in retouch:
    assert len(r["rows"]) in (0, 4) and r["seconds_dram"] > 0 and r["seconds_hot"] > 0, r  # 0: no cliff that time
    assert r["retouch"] == -1 or 0 <= r["retouch"] <= 1, r
found = sorted(r["retouch"] for r in retouch if r["retouch"] >= 0)
if found and "host_cache_bytes" in p["device"]:
    assert p["device"]["host_cache_retouch"] == found[len(found) // 2], (found, p["device"])
else:
    assert "host_cache_retouch" not in p["device"], p["device"]
# The collectives a strategy calls, timed by size on the ranks calibrated (4 by default).
# The gap when the cores pass from one device's thread to another's, and what it came from. (The
# bounds on timings here only catch a wrong unit: a shared machine preempts a 40 µs GEMM for 12 ms.)
assert 0 <= p["device"]["turn_handoff_s"] < 0.1 and len(p["calibration"]["raw"]["turn_handoff"]["round_mean_s"]) >= 5
# What a GEMM takes more right after the cores passed to its thread: the median of the rounds'
# differences (threads taking turns less one thread going round the devices), never below 0.
extra = p["calibration"]["raw"]["turn_gemm_extra"]
assert len(extra["extra_s"]) == 9 and all(0 < t < 1.0 for t in extra["gemm_median_s_one_thread"]), extra
assert p["device"]["turn_gemm_extra_s"] == max(0.0, sorted(extra["extra_s"])[4]), (extra, p["device"])
# A cache line's round trip between the first two cores, at the start, middle and end; the median kept.
import os
trips = p["calibration"]["raw"]["core_round_trip_s"]
assert len(trips) == 3, trips
if len(os.sched_getaffinity(0)) >= 2:
    assert all(0 < t < 0.1 for t in trips) and p["device"]["core_round_trip_s"] == sorted(trips)[1], (trips, p["device"])
timed = {(t["op"], t["ranks"]): t for t in p["collectives"]["measured"]}
for op in ("all_reduce", "reduce_scatter", "all_gather"):
    for ranks in (4, 2):  # the ranks calibrated, and the 2-rank groups of ddp-mp
        t = timed[(op, ranks)]
        assert len(t["bytes"]) >= 3 and len(t["seconds"]) == len(t["bytes"]) and min(t["seconds"]) > 0, t
# A message between 2 ranks (a pipeline's send and recv), timed by size.
t = timed[("send", 2)]
assert len(t["bytes"]) >= 3 and min(t["seconds"]) > 0 and ("send", 4) not in timed, sorted(timed)
PYEOF
then pass "element-wise curves for every kind a step makes; copies by size; GEMMs shape by shape; collectives timed by size"
else fail "element-wise curves or peer link missing: $(head -c 400 "$WORK/me.json")"; fi

# The threads all-reduce on 2 ranks.
if "$SCALELAB" calibrate --quick --devices 2 --out "$WORK/me2.json" >/dev/null 2>&1 && $PY -c "
import json, sys
p = json.load(open('$WORK/me2.json'))
sys.exit(0 if p['calibration']['fits']['all_reduce_threads']['ranks'] == 2 and {t['ranks'] for t in p['collectives']['measured']} == {2} else 1)"; then
  pass "calibrate --devices 2 measures the all-reduce on 2 ranks"
else fail "calibrate --devices 2: $(head -c 300 "$WORK/me2.json" 2>/dev/null)"; fi
out=$("$SCALELAB" calibrate --quick --devices 1 --out "$WORK/none.json" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "\[calibrate\] --devices 1" && [ ! -e "$WORK/none.json" ] \
  && pass "calibrate --devices 1 is refused (an all-reduce needs 2 ranks)" || fail "calibrate --devices 1: rc $rc, $out"

small=(--model mlp:784-64-32-10 --dataset synthetic --batch 64 --steps 6)
if "$SCALELAB" train --device sim --hw "$WORK/me.json" --devices 2 --strategy ddp --dry-run "${small[@]}" --quiet \
     --trace "$WORK/sim.trace.json" >"$WORK/sim.out" 2>&1; then
  pass "the sim prices a run on the calibrated profile"
else fail "sim refused the calibrated profile: $(tail -n 3 "$WORK/sim.out")"; fi
# Its trace carries the profile it was priced with, whole: the calibration record and the curve.
if $PY - "$WORK/me.json" "$WORK/sim.trace.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))["otherData"]
assert t["simulated"] is True
for d in t["devices"]:
    q = d["profile"]
    assert q["name"] == p["name"], q["name"]
    assert q["calibration"] == p["calibration"], "calibration record differs"
    assert q["device"]["gemm_curves"]["f32"] == p["device"]["gemm_curves"]["f32"]
    assert q["links"] == p["links"]
PYEOF
then pass "the sim run's trace carries the calibrated profile whole (machine, date, raw measurements, curve)"
else fail "the sim run's trace lacks the calibrated profile"; fi

# A sim worker process sends its device's description (the whole profile) to the parent each
# round: a large calibrated profile must fit (a full calibration's raw measurements did not).
$PY -c "
import json; p = json.load(open('$WORK/me.json')); p['calibration']['padding'] = 'x' * 40000
json.dump(p, open('$WORK/big.json', 'w'))"
if "$SCALELAB" train --device sim --hw "$WORK/big.json" --devices 2 --strategy multiprocessing "${small[@]}" --quiet >"$WORK/mp.out" 2>&1; then
  pass "multiprocessing on sim with a 40 KB profile"
else fail "multiprocessing on a large profile: $(tail -n 3 "$WORK/mp.out")"; fi

# bench predict: every strategy measured and priced (taking turns on the host), on a calibrated
# profile given by path and a shipped one given by name.
out=$("$SCALELAB" bench predict --hw "$WORK/me.json" --hw a100-nvlink-8 --model mlp:784-32-10 --steps 3 --devices 2 --repeat 2 \
      --json "$WORK/bp.json" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "calibrated on" && printf '%s' "$out" | grep -q "a100-nvlink-8 (not calibrated)" \
   && ! printf '%s' "$out" | grep -q "failed:" && $PY -c "
import json, sys
rows = json.load(open('$WORK/bp.json'))['rows']
assert len(rows) == 8 and all(len(r['predictions']) == 2 and r['predictions'][0]['step_time_s']['predicted'] > 0 for r in rows), rows
runs = [r['measured_runs_step_s'] for r in rows]
assert all(len(m) == 2 and m == sorted(m) and m[0] <= r['measured_step_s'] <= m[1] for m, r in zip(runs, rows)), runs
# the machine's speed now against the calibration: a GEMM of the calibrated profile's table, nothing on a GPU's
# and a cache line's round trip between the first two cores, before the model's runs and after them
for key in ('speed_now', 'speed_after'):
    now = rows[0][key]
    assert [p['op'] for p in now[0]] == ['GEMM 128×1024×1024', 'core-to-core round trip'] and now[1] == [], now
    assert all(p['calibrated_s'] > 0 and p['now_s'] > 0 and p['moved_past'] > 1 for p in now[0]), now" \
   && printf '%s' "$out" | grep -q "between the fastest and the slowest measured run" \
   && printf '%s' "$out" | grep -q "P1 now: GEMM 128×1024×1024 [0-9.]*×, core-to-core round trip [0-9.]*× their calibrated times" \
   && printf '%s' "$out" | grep -q "P1 after its runs: GEMM 128×1024×1024"; then
  pass "bench predict prices every strategy on a calibrated profile (by path) and a shipped one (by name); 2 runs each, their spread; the machine's speed and its cores' round trip against the calibration, before and after the runs"
else fail "bench predict: rc $rc, $(printf '%s' "$out" | tail -n 12)"; fi

# --retime-gemms: each profile again with the GEMM shapes the model's runs make timed just before
# them; a profile without a table (a shipped one) is priced as it is. Nothing is left behind.
out=$("$SCALELAB" bench predict --hw "$WORK/me.json" --hw a100-nvlink-8 --retime-gemms --model mlp:784-32-10 --steps 3 --devices 2 \
      --repeat 1 --json "$WORK/bpr.json" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "P1's GEMMs now take" && printf '%s' "$out" | grep -q "# P1\*: " \
   && printf '%s' "$out" | grep -q "P2 has no GEMM table to re-time: P2\* is P2" && $PY -c "
import json, glob, os, tempfile
left = glob.glob(os.path.join(tempfile.gettempdir(), 'scalelab-retimed-*'))
rows = json.load(open('$WORK/bpr.json'))['rows']
assert len(rows) == 8 and all(len(r['predictions']) == 4 for r in rows), rows
speed = rows[0]['gemm_speed_now']
assert 0.2 < speed[0]['ratio'] < 5 and speed[1]['ratio'] == 0, speed
shapes = {(g['trans_a'], g['trans_b'], g['m'], g['n'], g['k']) for g in speed[0]['shapes']}
assert all(g['now_s'] > 0 and g['calibrated_s'] > 0 for g in speed[0]['shapes']), speed
# Layer 1 (784 → 32) and 2 (32 → 10) at the batch's 128 rows (single), a replica's 64 (ddp on 2) and a
# micro-batch's 32 (the pipeline's 4): forward x·Wᵀ, dW = dyᵀ·x, and dx = dy·W past the first layer.
for b in (128, 64, 32):
    assert {(False, True, b, 32, 784), (True, False, 32, 784, b), (False, True, b, 10, 32), (True, False, 10, 32, b),
            (False, False, b, 32, 10)} <= shapes, (b, sorted(shapes))
assert (False, False, 128, 784, 32) not in shapes, sorted(shapes)  # no dx for the first layer: nothing takes it
for r in rows:
    p = [x['step_time_s']['predicted'] for x in r['predictions']]
    assert p[3] == p[1], (r['strategy'], p)  # no table: nothing re-timed
    assert r['predictions'][2]['profile'].endswith('(GEMMs re-timed)'), r['predictions'][2]['profile']
assert not left, left"; then
  pass "bench predict --retime-gemms: the GEMM speed now against the calibration, a column per profile, temporaries removed"
else fail "bench predict --retime-gemms: rc $rc, $(printf '%s' "$out" | tail -n 12)"; fi

# --measured: the table just written priced again, nothing run — its models, steps, devices and
# measured runs as saved, the GEMM speed it measured then; the same prediction (the sim is
# deterministic).
out=$("$SCALELAB" bench predict --hw "$WORK/me.json" --measured "$WORK/bpr.json" --retime-gemms --json "$WORK/bpm.json" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "took, when the table was measured," && ! printf '%s' "$out" | grep -q "failed:" \
   && printf '%s' "$out" | grep -q "P1, when measured: GEMM" \
   && ! printf '%s' "$out" | grep -q "load average" && $PY -c "
import json
old = json.load(open('$WORK/bpr.json'))
new = json.load(open('$WORK/bpm.json'))
assert new['steps'] == old['steps'] == 3 and new['batch'] == old['batch'], (new['steps'], new['batch'])
assert len(new['rows']) == len(old['rows']) == 8
for o, n in zip(old['rows'], new['rows']):
    assert (n['model'], n['strategy'], n['devices']) == (o['model'], o['strategy'], o['devices']), n
    assert n['measured_runs_step_s'] == o['measured_runs_step_s'] and n['measured_step_s'] == o['measured_step_s']
    assert n['gemm_speed_now'][0]['ratio'] == o['gemm_speed_now'][0]['ratio']
    for i in (0, 2):  # P1 and P1* of the old table are P1 and P1* here
        p, q = o['predictions'][i], n['predictions'][1 if i else 0]
        assert abs(q['step_time_s']['predicted'] / p['step_time_s']['predicted'] - 1) < 1e-9, (n['strategy'], p, q)
        assert q['per_step_by_class']['gemm']['measured_s'] == o['predictions'][0]['per_step_by_class']['gemm']['measured_s']
"; then
  pass "bench predict --measured prices a saved table again: its runs, steps and GEMM speed as saved, the same predictions"
else fail "bench predict --measured: rc $rc, $(printf '%s' "$out" | tail -n 12)"; fi

# The tables shipped in profiles/measured/ (docs/accuracy.md's figures) still price with this build.
shipped=$(ls "$ROOT"/profiles/measured/*-bench-predict.json | tail -n 1)
out=$("$SCALELAB" bench predict --hw "${shipped%-bench-predict.json}-profile.json" --measured "$shipped" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -cE '^mlp:784-')" -eq 24 ] && printf '%s' "$out" | grep -qE "^# P1: [0-9]+ of 24 within"; then
  pass "the shipped table $(basename "$shipped") priced again: 24 rows"
else fail "the shipped table $shipped: rc $rc, $(printf '%s' "$out" | tail -n 12)"; fi

# The table measured on the lent H100 (profiles/measured/h100/): a cuda table prices again without a
# GPU, as it was measured — no turns on the host's cores, the profile's host gap before each op.
gpu_table=$(ls "$ROOT"/profiles/measured/h100/*-bench-predict.json | tail -n 1)
gpu_profile=$(ls "$ROOT"/profiles/measured/h100/*-profile.json | tail -n 1)
out=$("$SCALELAB" bench predict --hw "$gpu_profile" --measured "$gpu_table" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -cE '^mlp:784-.* (single|data-parallel|model-parallel|ddp|ddp-mp|pipeline|zero) ')" -eq 21 ] \
   && printf '%s' "$out" | grep -q "each strategy on the cuda device" \
   && "$SCALELAB" train --device sim --hw "$gpu_profile" --strategy ddp --devices 4 --dry-run --model mlp:784-1024-1024-10 \
        --dataset synthetic --steps 3 --quiet > /dev/null; then
  pass "the H100 table $(basename "$gpu_table") priced again on its profile: 21 rows, as on the cuda device"
else fail "the H100 table $gpu_table: rc $rc, $(printf '%s' "$out" | tail -n 12)"; fi

# A table whose core-to-core probes read 3.5× their calibrated round trip, before and after every
# model's runs (as when the host placed the VM's cores apart): the probes flag every model.
apart="$WORK/cores-apart.json"
$PY - "$shipped" "$apart" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
for row in t["rows"]:
    for key in ("speed_now", "speed_after"):
        for probes in row.get(key, []):
            for probe in probes:
                if probe["op"] == "core-to-core round trip":
                    probe["now_s"] = 3.5 * probe["calibrated_s"]
json.dump(t, open(sys.argv[2], "w"))
PYEOF
out=$("$SCALELAB" bench predict --hw "${shipped%-bench-predict.json}-profile.json" --measured "$apart" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c "the host has placed this machine's cores otherwise")" -eq 6 ] \
   && printf '%s' "$out" | grep -q "every model had a probe move (before or after its runs): no row was measured as the machine was calibrated"; then
  pass "a table measured with the cores apart: the round trip flags every model, before and after its runs"
else fail "the cores-apart table $apart: rc $rc, $(printf '%s' "$out" | tail -n 12)"; fi

# bench repeat: each table's measurements as the prediction of the other's, in closed form. Two
# tables of two configs: single 1.00 and 1.08 ms, ddp 2.00 and 2.00 — single's errors −7.4 % and
# +8.0 %, ddp's 0 and 0: 2 of 4 within ±3 %, all 4 within ±10 %, mean |error| 3.9 %; ddp as a
# multiple of its table's single, 2.00 and 1.85: +8.0 % and −7.4 %, 0 of 2.
$PY - "$WORK" <<'PYEOF'
import json, sys
for name, single in (("ra", 1.0e-3), ("rb", 1.08e-3)):
    rows = [{"model": "mlp:8-4-2", "strategy": s, "devices": d, "measured_step_s": t, "measured_runs_step_s": [t]}
            for s, d, t in (("single", 1, single), ("ddp", 4, 2.0e-3))]
    json.dump({"batch": 16, "steps": 5, "device": "cpu", "rows": rows}, open(f"{sys.argv[1]}/{name}.json", "w"))
PYEOF
out=$("$SCALELAB" bench repeat "$WORK/ra.json" "$WORK/rb.json" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -qE "^mlp:8-4-2 +single +1.00 +1.08 +7.4 %" \
   && printf '%s' "$out" | grep -q "another table's measurement as the prediction: 2 of 4 within ±3 % (50 %), 2 within ±5 %, 4 within ±10 %; mean |error| 3.9 %" \
   && printf '%s' "$out" | grep -q "each run as a multiple of its table's single: 0 of 2 within ±3 % (0 %), 0 within ±5 %, 2 within ±10 %; mean |error| 7.7 %"; then
  pass "bench repeat: each table's measurements as the other's prediction, in closed form"
else fail "bench repeat: rc $rc, $(printf '%s' "$out" | tail -n 6)"; fi
out=$("$SCALELAB" bench repeat "$WORK/ra.json" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "needs two tables or more" \
  && pass "bench repeat with one table: exit 2, says it needs two" || fail "bench repeat, one table: rc $rc, $out"
$PY -c "import json,sys; t=json.load(open(sys.argv[1])); t['steps']=9; json.dump(t, open(sys.argv[2],'w'))" "$WORK/rb.json" "$WORK/rc.json"
out=$("$SCALELAB" bench repeat "$WORK/ra.json" "$WORK/rc.json" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "compare tables of the same runs" \
  && pass "bench repeat of tables of other runs (steps 5 and 9): exit 2, names both" || fail "bench repeat, other runs: rc $rc, $out"
# A run that failed in one table (no measured step time) leaves its config out; nothing in common: exit 2.
$PY - "$WORK" <<'PYEOF'
import json, sys
t = json.load(open(f"{sys.argv[1]}/rb.json"))
del t["rows"][1]["measured_step_s"]
json.dump(t, open(f"{sys.argv[1]}/rd.json", "w"))
for r in t["rows"]: r["model"] = "mlp:9-9"
json.dump(t, open(f"{sys.argv[1]}/re.json", "w"))
PYEOF
out=$("$SCALELAB" bench repeat "$WORK/ra.json" "$WORK/rd.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] && printf '%s' "$out" | grep -qE "^mlp:8-4-2 +single " && ! printf '%s' "$out" | grep -qE "^mlp:8-4-2 +ddp " \
  && printf '%s' "$out" | grep -q "another table's measurement as the prediction: 0 of 2 within ±3 %" \
  && pass "bench repeat leaves out a config one table did not measure" || fail "bench repeat, a failed row: rc $rc, $out"
out=$("$SCALELAB" bench repeat "$WORK/ra.json" "$WORK/re.json" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "no model and strategy was measured in every table" \
  && pass "bench repeat of tables of other models: exit 2" || fail "bench repeat, other models: rc $rc, $out"

# A table of an earlier build kept 4 probe shapes (no transposition) and a ratio: --retime-gemms
# scales the whole GEMM table by it, so single on the 2048-wide model (its GEMMs nearly all its
# time) moves about as much. Made from the shipped table, its re-timing written the earlier way.
old_table="$WORK/earlier-build.json"
$PY - "$shipped" "$old_table" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
probes = [{"m": m, "n": n, "k": n, "calibrated_s": 1e-3, "now_s": 0.896e-3} for m in (32, 128) for n in (256, 1024)]
for row in t["rows"]:
    row["gemm_speed_now"] = [{"ratio": 0.896, "shapes": probes}]
json.dump(t, open(sys.argv[2], "w"))
PYEOF
out=$("$SCALELAB" bench predict --hw "${shipped%-bench-predict.json}-profile.json" --measured "$old_table" --retime-gemms --json "$WORK/old.json" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "0.896× their calibrated times" && $PY -c "
import json
row = [r for r in json.load(open('$WORK/old.json'))['rows'] if r['strategy'] == 'single' and '2048' in r['model']][0]
p = [x['step_time_s']['predicted'] for x in row['predictions']]
assert 0.88 < p[1] / p[0] < 0.92, p"; then
  pass "a table of an earlier build (a ratio, no shapes) re-timed as it was: its whole GEMM table scaled"
else fail "the earlier table $old_table re-timed: rc $rc, $(printf '%s' "$out" | tail -n 12)"; fi

printf '{"rows": "none"}' > "$WORK/not-a-table.json"
printf '{"steps": 3, "rows": [{"model": "mlp:784-32-10", "strategy": "single", "devices": 1, "measured_runs_step_s": "x"}]}' \
  > "$WORK/broken-row.json"
printf '{"steps": "three", "rows": [{"model": "mlp:784-32-10", "strategy": "single"}]}' > "$WORK/broken-steps.json"
printf '{"steps": 3, "rows": [{"model": "mlp:784-32-10", "strategy": "single", "devices": 1, "measured_runs_step_s": [0.001], "gemm_speed_now": [{"ratio": 1, "shapes": [{"m": 8, "n": 32, "k": 784, "trans_a": false, "trans_b": true, "now_s": "fast"}]}]}]}' \
  > "$WORK/broken-shape.json"
for bad in "$WORK/none.json" "$WORK/not-a-table.json" "$WORK/me.json" "$WORK/broken-row.json" "$WORK/broken-steps.json" "$WORK/broken-shape.json"; do
  out=$("$SCALELAB" bench predict --hw "$WORK/me.json" --measured "$bad" --retime-gemms 2>&1)
  rc=$?
  if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q -- "--measured" && printf '%s' "$out" | grep -q "bench predict --json"; then
    pass "--measured $(basename "$bad") refused with exit 2, naming the option and what to pass"
  else fail "--measured $(basename "$bad"): rc $rc, $out"; fi
done

out=$("$SCALELAB" train --device cpu --devices 2 --strategy ddp --predict "$WORK/me.json" "${small[@]}" --quiet --json "$WORK/run.json" \
      --trace "$WORK/measured.trace.json" --trace-steps 1:2 2>&1)
rc=$?
[ "$rc" -eq 0 ] && pass "train --predict exits 0" || fail "train --predict exited $rc: $(printf '%s' "$out" | tail -n 5)"
printf '%s\n' "$out" | grep -qE "^    step time \(ms\) +[0-9.]+ +[0-9.]+ +[-+][0-9.]+ %" \
  && pass "the summary prints predicted, measured and the error" || fail "no predicted/measured line: $out"
printf '%s\n' "$out" | grep -q "busy/comm/idle" && pass "per-device busy/comm/idle, both" || fail "no per-device line: $out"
printf '%s\n' "$out" | grep -q "measured.trace.json measured, .*measured.trace.predicted.json predicted" \
  && pass "the summary names both traces" || fail "no trace line: $out"
printf '%s\n' "$out" | grep -qE "^    machine now +GEMM 128×1024×1024 [0-9.]+×, core-to-core round trip [0-9.]+× their calibrated times" \
  && pass "the machine's speed and its cores' round trip now against its calibration, after the run" || fail "no machine-now line: $out"
if $PY - "$WORK/run.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
p = j["prediction"]
s = p["step_time_s"]
assert s["predicted"] > 0 and s["measured"] > 0
assert abs(s["error"] - (s["predicted"] - s["measured"]) / s["measured"]) < 1e-9
assert len(p["per_device"]) == 2 and "busy_pct" in p["per_device"][0]["predicted"] and "busy_pct" in p["per_device"][0]["measured"]
assert p["per_step_by_class"]["gemm"]["predicted_s"] > 0 and p["per_step_by_class"]["gemm"]["measured_s"] > 0
assert p["summary"]["time_kind"] == "simulated" and j["time_kind"] == "measured"
assert [x["op"] for x in p["speed_now"]] == ["GEMM 128×1024×1024", "core-to-core round trip"] and all(x["now_s"] > 0 for x in p["speed_now"])
PYEOF
then pass "--json carries both figures and the error"
else fail "--json lacks the prediction: $(head -c 400 "$WORK/run.json")"; fi
# A profile calibrated with its cores far closer than they are now: the line says so, and what it does.
$PY -c "
import json; p = json.load(open('$WORK/me.json')); p['device']['core_round_trip_s'] = 1e-9
json.dump(p, open('$WORK/close-cores.json', 'w'))"
out=$("$SCALELAB" train --device cpu --strategy single --predict "$WORK/close-cores.json" "${small[@]}" --quiet 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -qE "core-to-core round trip [0-9.]+×" \
   && printf '%s' "$out" | grep -q "the host has placed this machine's cores otherwise than when calibrated" \
   && printf '%s' "$out" | grep -q "1 when calibrated): element-wise ops that read another core's writes"; then
  pass "cores placed otherwise than when calibrated: train --predict warns, with both round trips"
else fail "cores placed otherwise: rc $rc, $(printf '%s' "$out" | tail -n 6)"; fi
if $PY - "$WORK/me.json" "$WORK/measured.trace.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))["otherData"]
assert t["simulated"] is False and all(d["profile"] is None for d in t["devices"])
assert t["predicted_with"]["name"] == p["name"] and t["predicted_with"]["calibration"] == p["calibration"]
# --trace-steps keeps steps 1 and 2 of the measured run (the priced twin writes no trace, and takes no steps of one)
steps = {e["args"]["step"] for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("ph") == "X" and e["args"].get("step", -1) >= 0}
assert steps == {1, 2}, steps
# … and the prediction's trace beside it: the sim's events as the host serves them, the same steps
q = json.load(open(sys.argv[2].replace(".json", ".predicted.json")))
assert q["otherData"]["simulated"] is True and len(q["otherData"]["devices"]) == 2, q["otherData"]
assert "predicted on" in q["otherData"]["title"], q["otherData"]["title"]
ops = [e for e in q["traceEvents"] if e.get("ph") == "X"]
assert ops and {e["args"]["step"] for e in ops} == {1, 2}, {e["args"]["step"] for e in ops}
PYEOF
then pass "the measured run's trace names the profile its prediction was priced on, and holds the steps --trace-steps chose; the predicted trace beside it"
else fail "the --predict run's trace does not name its profile"; fi

# Refused, with the fix: --predict off the cpu device, a broken curve, calibrate of a device it cannot measure.
out=$("$SCALELAB" train --device sim --hw a100-nvlink-8 --predict "$WORK/me.json" "${small[@]}" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "\[predict\].*--device cpu" \
  && pass "--predict on sim is a usage error" || fail "--predict on sim: rc $rc, $out"
$PY - "$WORK/me.json" "$WORK/broken.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
c = p["device"]["gemm_curves"]["f32"]
c["mnk"][1], c["mnk"][2] = c["mnk"][2], c["mnk"][1]
json.dump(p, open(sys.argv[2], "w"))
PYEOF
out=$("$SCALELAB" train --device sim --hw "$WORK/broken.json" --dry-run "${small[@]}" 2>&1)
rc=$?
[ "$rc" -ne 0 ] && printf '%s' "$out" | grep -q "\[hw\] .*broken.json: field 'device.gemm_curves.f32.mnk' must increase" \
  && pass "a curve with sizes out of order is refused, naming the field" || fail "broken curve: rc $rc, $out"
out=$("$SCALELAB" calibrate --device cuda --out "$WORK/gpu.json" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "\[calibrate\] --device cuda" && [ ! -e "$WORK/gpu.json" ] \
  && pass "calibrate --device cuda is refused and writes nothing" || fail "calibrate --device cuda: rc $rc, $out"
out=$("$SCALELAB" train --device cpu --tf32 "${small[@]}" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "\-\-tf32" && pass "--tf32 on cpu is refused" || fail "--tf32 on cpu: rc $rc, $out"
out=$("$SCALELAB" train --device sim --hw t4-pcie-4 --tf32 --dry-run "${small[@]}" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "no TF32" && pass "--tf32 on a T4 is refused: it has no TF32" || fail "--tf32 on t4: rc $rc, $out"
"$SCALELAB" train --device sim --hw a100-nvlink-8 --dry-run "${small[@]}" --quiet --json "$WORK/f32.json" >/dev/null 2>&1
"$SCALELAB" train --device sim --hw a100-nvlink-8 --tf32 --dry-run "${small[@]}" --quiet --json "$WORK/tf32.json" >/dev/null 2>&1
if $PY -c "
import json, sys
a = json.load(open('$WORK/f32.json'))['time_s']; b = json.load(open('$WORK/tf32.json'))['time_s']
sys.exit(0 if 0 < b < a else 1)"; then pass "--tf32 on an A100 makes the same run faster"
else fail "--tf32 did not change the A100's time"; fi
finish
