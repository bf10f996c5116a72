#!/usr/bin/env bash
# `scalelab grade LAB --mutation-score` on one lab: the share of automatic mutations of the solution
# its rubric catches, against the goal (90 %), and every survivor listed in the lab's README (its
# "Mutations the checks do not catch" section names each as `FILE:LINE`, a known gap or equivalent).
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
listed = set(re.findall(r"`([\w.]+:\d+)`", section[1])) if len(section) == 2 else set()
print(f"SCORE {s['caught']} of {s['compiled']} compiled mutants caught ({100 * s['score']:.0f} %), "
      f"{s['mutants'] - s['compiled']} did not compile, {s['seconds']:.0f} s")
for m in s["survivors"]:
    key = f"{m['file']}:{m['line']}"
    print(("LISTED " if key in listed else "UNLISTED ") + f"{key} {m['kind']}: {m['before']} -> {m['after']}")
EOF
cat "$WORK/verdict.txt"
score_line=$(grep '^SCORE' "$WORK/verdict.txt")
if python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['score'] < 0.9)" "$WORK/score.json"; then
  pass "$LAB: ${score_line#SCORE }, the goal is 90 %"
else
  fail "$LAB: ${score_line#SCORE }, below the goal of 90 %"
fi
if grep -q '^UNLISTED' "$WORK/verdict.txt"; then
  fail "$LAB: survivors not in its README's \"Mutations the checks do not catch\": $(grep -c '^UNLISTED' "$WORK/verdict.txt")"
else
  pass "$LAB: every survivor is listed in its README"
fi
finish
