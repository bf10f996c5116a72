#!/usr/bin/env bash
# The tour (`make demo`) in small: every registered strategy gets a row and a trace, and a tour in
# which a strategy fails exits non-zero (a demo that breaks must not look green).
#   bash tour_test.sh <path to scalelab>
set -u
SCALELAB=${1:?usage: tour_test.sh <scalelab binary>}
. "$(dirname "$0")/support/checks.sh" tour-test

common=(tour --hw a100-nvlink-8 --devices 2 --dataset synthetic --model mlp:784-64-32-10 --batch 64 --steps 6)
out=$("$SCALELAB" "${common[@]}" --out "$WORK/ok" 2>&1)
rc=$?
[ "$rc" -eq 0 ] && pass "a small tour exits 0" || fail "a small tour exited $rc: $(printf '%s' "$out" | tail -n 5)"
strategies=$("$SCALELAB" strategies | awk '/^[a-z]/ {print $1}')
[ -n "$strategies" ] || fail "scalelab strategies lists nothing"
for s in $strategies; do
  if printf '%s\n' "$out" | grep -qE "^$s +[0-9]+ +[0-9.]+ " && [ -s "$WORK/ok/$s.trace.json" ] && [ -s "$WORK/ok/$s.json" ]; then
    pass "the tour has a row, a trace and a summary for $s"
  else
    fail "the tour lacks $s (row, $s.trace.json or $s.json): $(printf '%s' "$out" | grep -E "^$s" | head -1)"
  fi
done
# Synchronous strategies show their difference to single; it is within the contract.
if printf '%s\n' "$out" | awk '$1 == "ddp" && $11 != "—" && $11 + 0 <= 1e-5 {found = 1} END {exit !found}'; then
  pass "ddp's max_rel_diff after 5 steps is ≤ 1e-5"
else
  fail "ddp's max_rel_diff column: $(printf '%s' "$out" | grep -E '^ddp ')"
fi

# The lecture's ConvNet and a GPT (its dataset: text, its throughput in tokens): every strategy has
# its row, the synchronous ones within the contract.
for model in convnet gpt:1-32-2-16-96; do
  out=$("$SCALELAB" tour --hw a100-nvlink-8 --devices 2 --model "$model" --batch 16 --steps 3 --out "$WORK/$model" 2>&1)
  rc=$?
  rows=$(printf '%s\n' "$out" | grep -cE "^[a-z-]+ +[0-9]+ +[0-9.]+ ")
  if [ "$rc" -eq 0 ] && [ "$rows" -eq "$(printf '%s\n' $strategies | wc -l)" ] &&
    printf '%s\n' "$out" | awk '$1 == "ddp" && $11 + 0 <= 1e-5 {found = 1} END {exit !found}'; then
    pass "a tour of $model: a row for each strategy, ddp within 1e-5 of single"
  else
    fail "a tour of $model exited $rc with $rows rows: $(printf '%s' "$out" | tail -n 12)"
  fi
done
if printf '%s\n' "$out" | grep -q "gpt:1-32-2-16-96, text," && printf '%s\n' "$out" | grep -q "tokens/s"; then
  pass "a GPT's tour reads text and counts tokens/s"
else
  fail "a GPT's tour: $(printf '%s' "$out" | head -n 3)"
fi

# One layer cannot be split over 2 devices: model-parallel and pipeline run on the one device they
# can take (their dev column says 1); ddp-mp, whose replicas always span 2, fails, and so does the tour.
out=$("$SCALELAB" tour --hw a100-nvlink-8 --devices 2 --dataset synthetic --model mlp:784-10 --batch 64 --steps 2 \
  --out "$WORK/bad" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && printf '%s' "$out" | grep -q "ddp-mp *failed" && printf '%s' "$out" | grep -q "strategies failed" &&
  printf '%s\n' "$out" | grep -qE "^model-parallel +1 " && printf '%s\n' "$out" | grep -qE "^pipeline +1 "; then
  pass "a tour with a failing strategy exits $rc and says which; the layer-splitting ones run on the devices they can take"
else
  fail "a tour with a failing strategy exited $rc: $(printf '%s' "$out" | tail -n 4)"
fi

finish
