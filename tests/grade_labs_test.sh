#!/usr/bin/env bash
# `scalelab grade` on every lab: the solution scores 100 %, the untouched stub 0 with a TODO on every
# check, and every shipped mutant (mutants/*.patch, at least 8) is caught by the check its header
# names (`--mutants`). Two labs at a time; each lab's verdicts are gathered at the end.
#   bash grade_labs_test.sh <path to scalelab> <labs dir>
set -u
SCALELAB=${1:?usage: grade_labs_test.sh <scalelab binary> <labs dir>}
LABS=${2:?labs dir}
. "$(dirname "$0")/support/checks.sh" grade-labs-test
# Checks run as nobody when graded as root: the scratch folders must be reachable.
mkdir -p "$WORK/tmp"
chmod 755 "$WORK" "$WORK/tmp"
export TMPDIR="$WORK/tmp"
started=$(date +%s.%N)

# check_lab LAB: prints its PASS/FAIL lines.
check_lab() {
  local lab=$1 out=$WORK/$1
  "$SCALELAB" grade "$lab" --labs-dir "$LABS" --submission "$LABS/$lab/solution" --results "$out-solution.json" \
    >"$out-solution.out" 2>&1
  local code=$?
  if [ "$code" = 0 ] && python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
sys.exit(not (j["score"] == sum(t["max_score"] for t in j["tests"]) > 0))' "$out-solution.json"; then
    echo "PASS: $lab: the solution scores 100 %"
  else
    echo "FAIL: $lab: the solution: exit $code: $(tail -20 "$out-solution.out")"
  fi
  "$SCALELAB" grade "$lab" --labs-dir "$LABS" --results "$out-stub.json" >"$out-stub.out" 2>&1
  code=$?
  if [ "$code" = 1 ] && python3 - "$out-stub.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["score"] == 0, j["score"]
for t in j["tests"]:
    if t["name"] == "builds":
        assert t["status"] == "passed", "the stub compiles"
        continue
    assert t["status"] == "failed" and t["extra_data"]["result"] == "failed", t
    assert "TODO" in t["output"], (t["name"], t["output"])
EOF
  then echo "PASS: $lab: the stub compiles, scores 0 and every check says TODO"
  else echo "FAIL: $lab: the stub: exit $code: $(tail -20 "$out-stub.out")"; fi
  "$SCALELAB" grade "$lab" --labs-dir "$LABS" --mutants --json >"$out-mutants.json" 2>"$out-mutants.err"
  code=$?
  local summary
  if summary=$(python3 - "$out-mutants.json" 2>&1 <<'EOF'
import json, sys
ms = json.load(open(sys.argv[1]))
bad = [f'{m["mutant"]}: {m["note"]}' for m in ms if not m["caught"] or m["score"] != 0]
assert not bad, "; ".join(bad)
assert len(ms) >= 8, f"{len(ms)} mutants, fewer than 8"
print(f"{len(ms)} mutants, each caught by the check it names")
EOF
  ) && [ "$code" = 0 ]; then
    echo "PASS: $lab: $summary"
  else
    echo "FAIL: $lab: --mutants exit $code: $summary $(tail -5 "$out-mutants.err")"
  fi
}

for labdir in "$LABS"/*/; do
  [ -f "$labdir/checks.json" ] || continue
  lab=$(basename "$labdir")
  check_lab "$lab" >"$WORK/$lab.verdicts" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do sleep 0.5; done
done
wait
for v in "$WORK"/*.verdicts; do
  while IFS= read -r line; do
    case $line in
      PASS:*) pass "${line#PASS: }" ;;
      FAIL:*) fail "${line#FAIL: }" ;;
      *) echo "$line" ;;
    esac
  done <"$v"
done
# The figures a lab's README and rubric quote are the solution's own, as graded above: lab 05's
# overlap ("NN.N %" in the check's output).
if python3 - "$WORK/05-ddp-solution.json" "$LABS/05-ddp/README.md" "$LABS/05-ddp/checks.json" >"$WORK/figures.txt" 2>&1 <<'EOF'
import json, re, sys
tests = {t["name"]: t for t in json.load(open(sys.argv[1]))["tests"]}
measured = re.search(r"passed: (\d+\.\d) %", tests["overlap"]["output"]).group(1)
for path in sys.argv[2:]:
    quoted = set(re.findall(r"reference(?: solution reaches|:) (\d+\.\d) %", open(path).read()))
    assert quoted == {measured}, f"{path} quotes {sorted(quoted)} %, the solution measures {measured} %"
print(f"lab 05's README and rubric quote the overlap the solution measures: {measured} %")
EOF
then pass "$(cat "$WORK/figures.txt")"
else fail "a quoted figure is stale: $(cat "$WORK/figures.txt")"; fi
echo "grade labs test: $(python3 -c "print(round($(date +%s.%N) - $started, 1))") s"
finish
