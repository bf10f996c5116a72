#!/usr/bin/env bash
# `scalelab figure`: the slides' charts from scalelab's own JSON next to their formulas.
#   - zero-memory: the JSON it reads holds ZeRO's closed forms exactly (S = ⌈P/N⌉ per shard:
#     DDP 4P+4P+8P; stage 1 4SN+4SN+8S; stage 2 4SN+4S+8S bytes) and the chart has a simulated
#     run's line and a formula line per stage;
#   - busbw: the α-β fit recovers α and the bandwidth of rows made from t = α + S/B exactly; on
#     the sim's rows (which name the protocol the cost model took) one fit per protocol, the large
#     messages' reaching the curve's top;
#   - scale: each row names the algorithm of its all-reduce (h100-ib-16x8: NVLS, NVLS-tree, ring),
#     and figure step-time writes it on the line;
#     the memory chart draws series that coincide as one line named for all of them;
#   - bubble: the simulated idle share and (p−1)/(m+p−1) lines from a pipeline sweep, labelled so;
#   - bad input (unknown kind, wrong optimizer, two files for one, not JSON, no rows) exits 2 saying why.
#   - scripts/comm_volume.py (the decks' bytes per step): each device's sends are the closed forms.
#   bash figure_test.sh <path to scalelab>
set -u
SCALELAB=${1:?usage: figure_test.sh <scalelab binary>}
. "$(dirname "$0")/support/checks.sh" figure-test

sweep=(--optimizer adam --model mlp:784-64-10 --devices 2..16)
ok=1
"$SCALELAB" scale --strategy ddp "${sweep[@]}" --json "$WORK/z0.json" >/dev/null 2>&1 || ok=0
"$SCALELAB" scale --strategy zero --zero-stage 1 "${sweep[@]}" --json "$WORK/z1.json" >/dev/null 2>&1 || ok=0
"$SCALELAB" scale --strategy zero --zero-stage 2 "${sweep[@]}" --json "$WORK/z2.json" >/dev/null 2>&1 || ok=0
if ((ok)) && python3 - "$WORK" <<'PY'
import json, math, sys
P = 784 * 64 + 64 + 64 * 10 + 10
for stage in (0, 1, 2):
    j = json.load(open(f"{sys.argv[1]}/z{stage}.json"))
    assert j["zero_stage"] == stage and j["parameters"] == P and j["optimizer"] == "adam", j
    for r in j["rows"]:
        N, m = r["devices"], r["peak_bytes"]
        S = math.ceil(P / N)
        want = {0: (4 * P, 4 * P, 8 * P), 1: (4 * S * N, 4 * S * N, 8 * S), 2: (4 * S * N, 4 * S, 8 * S)}[stage]
        assert (m["params"], m["grads"], m["optimizer"]) == want, (stage, N, m, want)
PY
then pass "scale --json: weights, gradients, optimizer per device are ZeRO's closed forms (stages 0, 1, 2; N = 2…16)"
else fail "the ZeRO sweeps' memory is not the closed form"; fi
if "$SCALELAB" figure zero-memory --json "$WORK/z0.json" --json "$WORK/z1.json" --json "$WORK/z2.json" --out "$WORK/z.svg" >/dev/null 2>&1 &&
  [ "$(grep -c '<polyline' "$WORK/z.svg")" = 6 ] && grep -q "4Ψ + 12Ψ/N" "$WORK/z.svg" && grep -q "ZeRO-2 (simulated run)" "$WORK/z.svg"; then
  pass "zero-memory: a simulated run's and a formula line for each of the three stages"
else fail "zero-memory: $(head -c 300 "$WORK/z.svg" 2>/dev/null)"; fi

# Rows of an all-reduce of 4 ranks made from t = 5 µs + S / (20 GB/s): busbw = S/t · 2(n−1)/n.
python3 - "$WORK/bw.json" <<'PY'
import json, sys
rows = []
for k in range(10, 27, 2):
    S = 2 ** k
    t = 5e-6 + S / 20e9
    rows.append({"bytes": S, "time_us": t * 1e6, "algbw": S / t * 1e-9, "busbw": S / t * 1.5e-9})
json.dump({"op": "all_reduce", "comm": "threads", "ranks": 4, "simulated": False, "rows": rows}, open(sys.argv[1], "w"))
PY
if "$SCALELAB" figure busbw --json "$WORK/bw.json" --out "$WORK/bw.svg" >/dev/null 2>&1 &&
  grep -q "fit: α = 5 µs, busbw → 30 GB/s" "$WORK/bw.svg" && grep -q "busbw (measured)" "$WORK/bw.svg"; then
  pass "busbw: the fit recovers α = 5 µs and busbw → 1.5 · 20 GB/s from exact rows"
else fail "busbw: $(grep -o 'fit[^<]*' "$WORK/bw.svg" 2>/dev/null)"; fi

# The sim switches protocol with the size (a100-nvlink-8, 8 ranks: LL, then LL128, then Simple):
# one line per protocol, and the Simple line's bandwidth is at least the curve's highest busbw.
if "$SCALELAB" bench comm --device sim --hw a100-nvlink-8 --ranks 8 --min-bytes 1K --max-bytes 256M \
    --json "$WORK/sim-bw.json" >/dev/null 2>&1 &&
  "$SCALELAB" figure busbw --json "$WORK/sim-bw.json" --out "$WORK/sim-bw.svg" >/dev/null 2>&1 &&
  python3 - "$WORK/sim-bw.json" "$WORK/sim-bw.svg" <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1]))
rows = j["rows"]
assert j["hw"] == "a100-nvlink-8" and j["link_GBps"] == 300, (j["hw"], j["link_GBps"])
assert [(r["algorithm"], r["protocol"]) for r in (rows[0], rows[10], rows[-1])] == [("ring", "LL"), ("ring", "LL128"), ("ring", "Simple")]
fits = dict(re.findall(r"ring (\w+) \(\d+ sizes\): α = [\d.]+ µs, busbw → ([\d.]+) GB/s", open(sys.argv[2]).read()))
assert set(fits) == {"LL", "LL128", "Simple"}, fits
assert float(fits["Simple"]) >= max(r["busbw"] for r in rows), (fits, max(r["busbw"] for r in rows))
PY
then pass "busbw on sim: rows name ring/LL, LL128, Simple; one α-β line each, Simple's at the curve's top"
else fail "busbw on sim: $(grep -o 'ring [^<]*' "$WORK/sim-bw.svg" 2>/dev/null | head -3)"; fi

# scale: the algorithm of one all-reduce of the gradients at each N, and one memory line for the
# categories DDP keeps equal (weights, gradients, momentum, buckets: 4P bytes each).
if "$SCALELAB" scale --strategy ddp --hw h100-ib-16x8 --model mlp:784-4096-4096-4096-10 --devices 8..32 --json "$WORK/ddp-scale.json" \
    --plot "$WORK/ddp-scale.svg" >/dev/null 2>&1 &&
  python3 -c 'import json, sys; rows = json.load(open(sys.argv[1]))["rows"]
assert [r["grad_all_reduce_algorithm"] for r in rows] == ["NVLS Simple", "NVLS-tree Simple", "ring LL128"], rows
assert all(r["grad_all_reduce_ms"] > 0 for r in rows)' "$WORK/ddp-scale.json" &&
  grep -q ">params = grads = optimizer = comm_buffers<" "$WORK/ddp-scale.svg" &&
  grep -q ">NVLS-tree Simple<" "$WORK/ddp-scale.svg" &&
  "$SCALELAB" figure step-time --json "$WORK/ddp-scale.json" --out "$WORK/step.svg" >/dev/null 2>&1 &&
  grep -q ">ring LL128<" "$WORK/step.svg" && grep -q ">one all-reduce of the gradients<" "$WORK/step.svg"; then
  pass "scale: the all-reduce's algorithm per N (NVLS, NVLS-tree, ring), in scale --plot and figure step-time; coinciding memory lines drawn as one"
else fail "scale: $(head -c 300 "$WORK/ddp-scale.json" 2>/dev/null)"; fi

if "$SCALELAB" scale --strategy pipeline --model mlp:512-512-512-512-512 --devices 4 --micro-batches 1..8 --batch 256 --strong \
    --json "$WORK/pipe.json" >/dev/null 2>&1 &&
  "$SCALELAB" figure bubble --json "$WORK/pipe.json" --out "$WORK/pipe.svg" >/dev/null 2>&1 &&
  [ "$(grep -c '<polyline' "$WORK/pipe.svg")" = 2 ] && grep -q "p = 4 stages" "$WORK/pipe.svg" \
  && grep -q "idle share (simulated)" "$WORK/pipe.svg" && ! grep -q "(measured)" "$WORK/pipe.svg"; then
  pass "bubble: the simulated idle share and (p−1)/(m+p−1) over m = 1…8 at p = 4"
else fail "bubble: $(head -c 300 "$WORK/pipe.svg" 2>/dev/null)"; fi

# No legend box over a line: every chart of `scale --plot` (the memory panel's lines run along its
# top) puts its legend where no line passes — each line sampled between its points too.
if "$SCALELAB" scale --strategy pipeline --model mlp:8192-8192-8192-8192-8192 --hw h100-ib-1024x8 --devices 4 \
    --micro-batches 1..64 --batch 4096 --strong --plot "$WORK/pipe-plot.svg" >/dev/null 2>&1 && python3 - "$WORK/pipe-plot.svg" <<'PY'
import re, sys
svg = open(sys.argv[1]).read()
boxes = [tuple(map(float, m)) for m in re.findall(
    r"<rect x='([-\d.e]+)' y='([-\d.e]+)' width='([-\d.e]+)' height='([-\d.e]+)' fill='white' fill-opacity", svg)]
lines = [[tuple(map(float, p.split(','))) for p in m.split()] for m in re.findall(r"<polyline[^>]*points='([^']*)'", svg)]
assert len(boxes) == 3 and len(lines) >= 6, (len(boxes), len(lines))  # two lines a chart at least
for x, y, w, h in boxes:
    for pts in lines:
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            for k in range(9):
                px, py = ax + (bx - ax) * k / 8, ay + (by - ay) * k / 8
                assert not (x <= px <= x + w and y <= py <= y + h), ((x, y, w, h), (px, py))
PY
then pass "scale --plot: no legend box covers a line (the pipeline sweep's three charts)"
else fail "scale --plot: a legend covers a line in $WORK/pipe-plot.svg"; fi

"$SCALELAB" scale --strategy zero --optimizer sgd --model mlp:784-64-10 --devices 2,4 --json "$WORK/sgd.json" >/dev/null 2>&1
echo '{"rows": []}' >"$WORK/empty.json"
echo 'not json' >"$WORK/bad.json"
expect_usage "an unknown figure" "no such figure" figure gantt --json "$WORK/z0.json" --out "$WORK/x.svg"
expect_usage "zero-memory of SGD" "the formulas are for Adam" figure zero-memory --json "$WORK/sgd.json" --out "$WORK/x.svg"
expect_usage "two files for the bubble" "reads ONE file" figure bubble --json "$WORK/pipe.json" --json "$WORK/pipe.json" --out "$WORK/x.svg"
expect_usage "not JSON" "not JSON" figure busbw --json "$WORK/bad.json" --out "$WORK/x.svg"
expect_usage "no rows" "no rows" figure bubble --json "$WORK/empty.json" --out "$WORK/x.svg"
[ -e "$WORK/x.svg" ] && fail "a refused figure left $WORK/x.svg" || pass "nothing written when refused"
# scripts/comm_volume.py (the decks' bytes-per-step table): what each device sends in a step of a
# run's trace equals the strategy's closed form — DDP 2(N−1)/N·4Ψ on every device, DataParallel's
# device 0 (N−1)/N·B·(in+out)·4 + (N−1)·4Ψ, model parallel's activations at the cuts.
volume_ok=1
for strategy in ddp data-parallel model-parallel; do
  "$SCALELAB" train --strategy $strategy --device sim --hw a100-nvlink-8 --devices 4 --model mlp:784-64-32-16-10 \
    --dataset synthetic --batch 64 --steps 3 --quiet --json "$WORK/$strategy.json" --trace "$WORK/$strategy.trace.json" \
    >/dev/null 2>&1 || volume_ok=0
done
if [ $volume_ok = 1 ] &&
  python3 "$(dirname "$0")/../scripts/comm_volume.py" "$WORK" --step 1 --volume ddp data-parallel model-parallel >/dev/null &&
  python3 - "$WORK/comm.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["volume"]
psi = 784 * 64 + 64 + 64 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10
assert v["ddp"]["sent"] == [2 * 3 / 4 * 4 * psi] * 4, v["ddp"]
assert v["data_parallel"]["sent"][0] == 3 / 4 * 64 * (784 + 10) * 4 + 3 * 4 * psi, v["data_parallel"]
assert v["model_parallel"]["sent"] == [64 * 4 * 64, 64 * 4 * (64 + 32), 64 * 4 * (32 + 16), 64 * 4 * 16], v["model_parallel"]
assert all(r["sent"] == r["formula"] for r in v.values()), v
PY
then pass "comm_volume.py: the bytes each device sends per step are the closed forms (ddp, data-parallel, model-parallel)"
else fail "comm_volume.py: $(head -c 600 "$WORK/comm.json" 2>/dev/null)"; fi

finish
