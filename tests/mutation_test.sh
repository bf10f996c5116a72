#!/usr/bin/env bash
# `scalelab grade LAB --mutation-score` on one lab: the share of automatic mutations of the solution
# its rubric catches, against the goal (90 % of the non-equivalent ones), and every survivor listed
# in the lab's README: its "Mutations the checks do not catch" section names each as `FILE:LINE`,
# either a known gap or equivalent (a mutation that changes nothing a check could see); the score
# leaves the equivalent ones out.
#   bash mutation_test.sh <path to scalelab> <labs dir> LAB
set -u
SCALELAB=${1:?usage: mutation_test.sh <scalelab binary> <labs dir> LAB}
LABS=${2:?labs dir}
LAB=${3:?lab}
. "$(dirname "$0")/support/checks.sh" mutation-test
mkdir -p "$WORK/tmp"
chmod 755 "$WORK" "$WORK/tmp"
export TMPDIR="$WORK/tmp"
"$SCALELAB" grade "$LAB" --labs-dir "$LABS" --mutation-score --json >"$WORK/score.json" 2>"$WORK/progress.txt"
code=$?
if [ "$code" != 0 ]; then
  fail "$LAB: --mutation-score exit $code: $(tail -5 "$WORK/progress.txt")"
  finish
fi
python3 - "$WORK/score.json" "$LABS/$LAB/README.md" >"$WORK/verdict.txt" 2>&1 <<'EOF'
import json, re, sys
s = json.load(open(sys.argv[1]))
readme = open(sys.argv[2]).read()
section = readme.split("## Mutations the checks do not catch", 1)
rows = {}  # `file:line` -> the README's lines about it
if len(section) == 2:
    for line in section[1].split("\n## ", 1)[0].splitlines():
        for key in re.findall(r"`([\w.]+:\d+)`", line):
            rows.setdefault(key, []).append(line)
equivalent = 0
for m in s["survivors"]:
    key = f"{m['file']}:{m['line']}"
    lines = rows.get(key)
    # Equivalent only when every row about that line says so: a line with a gap among its
    # mutations counts all of them as gaps (the report cannot tell which of them survived).
    same = lines is not None and all("equivalent" in l and "gap" not in l for l in lines)
    equivalent += same
    state = "UNLISTED" if lines is None else "EQUIVALENT" if same else "GAP"
    print(f"{state} {key} {m['kind']}: {m['before']} -> {m['after']}".replace("\n", " / "))
real = s["compiled"] - equivalent
score = s["caught"] / real if real else 1.0
print(f"SCORE {s['caught']} of {real} non-equivalent mutants caught ({100 * score:.0f} %); {s['compiled']} compiled, "
      f"{equivalent} equivalent, {s['mutants'] - s['compiled']} did not compile; {s['seconds']:.0f} s")
print(f"RATIO {score}")
EOF
cat "$WORK/verdict.txt"
score_line=$(grep '^SCORE' "$WORK/verdict.txt")
ratio=$(sed -n 's/^RATIO //p' "$WORK/verdict.txt")
if [ -n "$ratio" ] && python3 -c "import sys; sys.exit(float('$ratio') < 0.9)"; then
  pass "$LAB: ${score_line#SCORE }; the goal is 90 %"
else
  fail "$LAB: ${score_line#SCORE }; below the goal of 90 %"
fi
if grep -q '^UNLISTED' "$WORK/verdict.txt"; then
  fail "$LAB: survivors not in its README's \"Mutations the checks do not catch\": $(grep -c '^UNLISTED' "$WORK/verdict.txt")"
else
  pass "$LAB: every survivor is listed in its README, as a known gap or an equivalent mutant"
fi
finish
