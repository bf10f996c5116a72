#!/usr/bin/env bash
# `scalelab scale`: the three lessons it exists to show hold in its numbers — ZeRO's optimizer
# state per device is 2·4·⌈P/N⌉ bytes (1/N), a pipeline's idle share falls with the micro-batches,
# DDP's first row is the yardstick and communication grows once the ring leaves the node — on
# clusters reshaped past the profile's size; the JSON and the SVG are well-formed; bad sweeps exit 2
# saying why.
#   bash scale_test.sh <path to scalelab>
set -u
SCALELAB=${1:?usage: scale_test.sh <scalelab binary>}
. "$(dirname "$0")/support/checks.sh" scale-test

# ZeRO-1 with Adam, mlp:784-64-10 (P = 50 890), weak scaling from 2 to 256 devices (h100-ib-16x8
# has 128: the last size is it reshaped to 32 nodes).
if "$SCALELAB" scale --strategy zero --zero-stage 1 --optimizer adam --model mlp:784-64-10 --devices 2..32,256 \
  --json "$WORK/zero.json" --plot "$WORK/zero.svg" >"$WORK/zero.out" 2>&1 && python3 - "$WORK/zero.json" <<'PY'
import json, math, sys
j = json.load(open(sys.argv[1]))
rows = j["rows"]
assert [r["devices"] for r in rows] == [2, 4, 8, 16, 32, 256], rows
P = 784 * 64 + 64 + 64 * 10 + 10
for r in rows:
    want = 2 * 4 * math.ceil(P / r["devices"])
    assert r["peak_bytes"]["optimizer"] == want, (r["devices"], r["peak_bytes"]["optimizer"], want)
    assert r["fits"] and r["global_batch"] == 32 * r["devices"], r
assert rows[0]["efficiency"] == 1.0
PY
then pass "zero: optimizer bytes per device = 2·4·⌈P/N⌉ exactly at N = 2…32 (doubling) and 256 (past the profile's 128)"
else fail "zero sweep: $(tail -20 "$WORK/zero.out")"; fi
grep -q "reshaped\|more nodes" "$WORK/zero.out" && pass "the table says the profile was grown with more nodes" ||
  fail "no word on the reshaped profile: $(head -5 "$WORK/zero.out")"
python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); assert "Peak memory per device" in d.toxml()' \
  "$WORK/zero.svg" && pass "the plot is well-formed SVG with the memory chart" || fail "the SVG does not parse"

# A pipeline over 4 devices, m = 1…16: the idle share (the bubble) falls with every doubling.
if "$SCALELAB" scale --strategy pipeline --model mlp:512-512-512-512-10 --devices 4 --micro-batches 1,2,4,8,16 \
  --strong --batch 512 --json "$WORK/pipe.json" >"$WORK/pipe.out" 2>&1 && python3 - "$WORK/pipe.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
idle = [r["bubble_pct"] for r in rows]
assert [r["micro_batches"] for r in rows] == [1, 2, 4, 8, 16], rows
assert all(a > b for a, b in zip(idle, idle[1:])), idle
assert idle[0] >= 70, idle  # m = 1: three of four stages wait, (p−1)/p = 75 %
PY
then pass "pipeline: the idle share falls with the micro-batches: $(python3 -c 'import json,sys; print([round(r["bubble_pct"],1) for r in json.load(open(sys.argv[1]))["rows"]])' "$WORK/pipe.json")"
else fail "pipeline sweep: $(tail -20 "$WORK/pipe.out")"; fi

# Interleaved 1F1B (V = 2) over 4 devices and 8 equal layers: at every m a smaller idle share than
# plain 1F1B's, and the JSON says the schedule (figure bubble draws (p−1)/(V·m+p−1) from it).
deep=mlp:512-512-512-512-512-512-512-512-512
if "$SCALELAB" scale --strategy pipeline --model $deep --devices 4 --micro-batches 4,8 --strong --batch 512 \
  --schedule 1f1b --json "$WORK/1f1b.json" >"$WORK/1f1b.out" 2>&1 &&
  "$SCALELAB" scale --strategy pipeline --model $deep --devices 4 --micro-batches 4,8 --strong --batch 512 \
    --schedule interleaved --virtual-stages 2 --json "$WORK/v2.json" >"$WORK/v2.out" 2>&1 &&
  python3 - "$WORK/1f1b.json" "$WORK/v2.json" <<'PY'
import json, sys
plain, inter = (json.load(open(f)) for f in sys.argv[1:])
assert inter["schedule"] == "interleaved" and inter["virtual_stages"] == 2, inter
for a, b in zip(plain["rows"], inter["rows"]):
    assert b["bubble_pct"] < a["bubble_pct"], (a, b)
PY
then pass "interleaved, V = 2: a smaller bubble than 1F1B's at m = 4 and 8"
else fail "interleaved sweep: $(tail -20 "$WORK/v2.out")"; fi
if "$SCALELAB" figure bubble --json "$WORK/v2.json" --out "$WORK/v2.svg" >/dev/null 2>&1 && grep -q "V·m" "$WORK/v2.svg"
then pass "figure bubble: the interleaved formula"
else fail "figure bubble of an interleaved sweep has no (p−1)/(V·m+p−1)"; fi

# DDP: inside one node (8 devices) the ring runs on NVLink; at 16 it crosses InfiniBand.
if "$SCALELAB" scale --strategy ddp --model mlp:784-256-10 --devices 4,8,16 --json "$WORK/ddp.json" >"$WORK/ddp.out" 2>&1 &&
  python3 - "$WORK/ddp.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert rows[0]["efficiency"] == 1.0 and all(r["step_ms"] > 0 and r["samples_per_s"] > 0 for r in rows), rows
assert rows[2]["exposed_comm_ms"] > rows[1]["exposed_comm_ms"], rows
PY
then pass "ddp: the first row is the yardstick, the exposed communication grows across nodes"
else fail "ddp sweep: $(tail -20 "$WORK/ddp.out")"; fi

# A GPT to 4,096 devices under ZeRO-2 with Adam: the ledger's memory per device within 1 % of the
# closed form at every size, the optimizer state and the gradient shard falling as 1/N.
if "$SCALELAB" scale --strategy zero --zero-stage 2 --optimizer adam --model gpt:2-128-4-64-96 --hw h100-ib-1024x8 \
  --devices 8..4096 --batch 1 --steps 2 --json "$WORK/gpt.json" >"$WORK/gpt.out" 2>&1 && python3 - "$WORK/gpt.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert [r["devices"] for r in rows] == [8 << k for k in range(10)], rows
for r in rows:
    assert abs(r["closed_form_bytes"] - r["peak_total_bytes"]) <= 0.01 * r["closed_form_bytes"], r
assert rows[-1]["peak_bytes"]["optimizer"] < rows[0]["peak_bytes"]["optimizer"] / 256, rows
PY
then pass "gpt under zero-2 from 8 to 4096 devices: memory per device, ledger = closed form within 1 %"
else fail "gpt sweep: $(tail -20 "$WORK/gpt.out")"; fi
grep -q "Korthikanti" "$WORK/gpt.out" && pass "the table sets our block's activations next to Korthikanti et al.'s" ||
  fail "no Korthikanti line: $(head -5 "$WORK/gpt.out")"

# Bad sweeps: exit 2 with the option and the fix.
expect_usage "m swept at several sizes" "ONE device count" scale --strategy pipeline --devices 2,4 --micro-batches 1,2
expect_usage "a zero device count" "'0' is not a count" scale --devices 0,8
expect_usage "a range that runs down" "runs down" scale --devices 64..8
expect_usage "a single-node profile grown" "no link between nodes" scale --hw a100-nvlink-8 --devices 8,16
expect_usage "--nodes without sim" "--device sim" train --nodes 4
expect_usage "--weak and --strong" "choose one" scale --weak --strong
expect_usage "--virtual-stages but for a pipeline" "--virtual-stages" scale --strategy ddp --virtual-stages 2
finish
