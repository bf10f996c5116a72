#!/usr/bin/env bash
# `scalelab grade` on lab 01: the solution scores 100 % with well-formed reports; hostile
# submissions (an endless loop, 100 GB, a segfault, a fork bomb, a compile error) are scored within
# their limits and the grader goes on; each cheat (an early exit, a forged verdict, the solution
# included, the rubric read at run time, a root-only include, a setsid escape) scores 0 and leaves
# nothing running; the grade is the same twice; a class folder, the hand-out (no solution, mutant
# or hidden check) and the autograder zip; bad usage exits 2 saying why. (Every lab's solution,
# stub and mutants: grade_labs_test.sh.)
#   bash grade_test.sh <path to scalelab> <labs dir> <tests/data/grade>
set -u
SCALELAB=${1:?usage: grade_test.sh <scalelab binary> <labs dir> <tests/data/grade>}
LABS=${2:?labs dir}
DATA=${3:?tests/data/grade}
. "$(dirname "$0")/support/checks.sh" grade-test
# The graders this test starts keep their scratch folders (and so their checks' executables) under
# $WORK/tmp: "left behind" then means left behind by this test, not by another grade running on
# the machine at the same time. Checks run as nobody when graded as root: it must reach them.
mkdir -p "$WORK/tmp"
chmod 755 "$WORK" "$WORK/tmp"
export TMPDIR="$WORK/tmp"
LAB=$LABS/01-collectives
started=$(date +%s.%N)

# grade NAME SUBMISSION [options…]: lab $GRADING, results in $WORK/NAME.{json,xml,out,rc}
GRADING=01-collectives
grade() {
  local name=$1 sub=$2
  shift 2
  "$SCALELAB" grade "$GRADING" --labs-dir "$LABS" --submission "$sub" --results "$WORK/$name.json" \
    --junit "$WORK/$name.xml" "$@" >"$WORK/$name.out" 2>&1
  echo $? >"$WORK/$name.rc"
}
rc() { cat "$WORK/$1.rc"; }
# result NAME CHECK: the check's result (passed, failed, timeout, crashed, blocked) in NAME's results.json
result() {
  python3 -c 'import json,sys
t=[t for t in json.load(open(sys.argv[1]))["tests"] if t["name"]==sys.argv[2]]
print(t[0]["extra_data"]["result"] if t else "absent")' "$WORK/$1.json" "$2"
}
seconds() {
  python3 -c 'import json,sys
print([t for t in json.load(open(sys.argv[1]))["tests"] if t["name"]==sys.argv[2]][0]["extra_data"]["seconds"])' \
    "$WORK/$1.json" "$2"
}
score() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["score"], sum(t["max_score"] for t in j["tests"]))' "$WORK/$1.json"; }
show() { tail -n 25 "$WORK/$1.out"; }

# --- the solution: 100 %, exit 0, the reports well-formed ------------------------------------
grade solution "$LAB/solution"
read -r got max < <(score solution)
if [ "$(rc solution)" = 0 ] && [ "$got" = "$max" ] && [ "$max" != 0 ]; then
  pass "the solution scores $got / $max and exits 0"
else
  fail "the solution: exit $(rc solution), score $got / $max: $(show solution)"
fi
grep -q "whole grade" "$WORK/solution.out" && pass "the table prints the grader's run time: $(grep -o 'whole grade [0-9.]* s' "$WORK/solution.out")" ||
  fail "no run time in the table: $(show solution)"
# Gradescope's documented fields: top-level score and tests; each test name, score, max_score,
# status passed|failed, output, visibility visible|hidden|after_due_date|after_published.
if python3 - "$WORK/solution.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert isinstance(j["score"], (int, float)), "score"
assert isinstance(j["execution_time"], (int, float)), "execution_time"
assert isinstance(j["tests"], list) and j["tests"], "tests"
names = set()
for t in j["tests"]:
    for k, ty in [("name", str), ("score", (int, float)), ("max_score", (int, float)), ("status", str),
                  ("output", str), ("visibility", str)]:
        assert isinstance(t.get(k), ty), (t.get("name"), k)
    assert t["status"] in ("passed", "failed"), t["status"]
    assert t["visibility"] in ("visible", "hidden", "after_due_date", "after_published"), t["visibility"]
    assert 0 <= t["score"] <= t["max_score"], t["name"]
    names.add(t["name"])
assert abs(j["score"] - sum(t["score"] for t in j["tests"])) < 1e-9, "score is the sum"
assert "builds" in names and "busbw" in names, names
assert any(t["visibility"] == "hidden" for t in j["tests"]), "a hidden check"
EOF
then pass "results.json has Gradescope's fields"; else fail "results.json: $(head -c 600 "$WORK/solution.json")"; fi
if python3 -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot(); s = r.find("testsuite")
assert r.tag == "testsuites" and s is not None and int(s.get("tests")) == len(s.findall("testcase")) > 1
assert int(s.get("failures")) == 0' "$WORK/solution.xml"; then
  pass "the JUnit XML parses (xml.etree), no failures"
else
  fail "JUnit XML: $(head -c 400 "$WORK/solution.xml")"
fi

GRADING=01-collectives

# --- hostile submissions: each scored within its limit, and the next check still runs ----------
# patched NAME: lab 01's solution with $DATA/NAME.patch applied, in $WORK/NAME (its path printed).
patched() {
  mkdir -p "$WORK/$1" && cp -r "$LAB/solution/." "$WORK/$1/" && patch -s -p1 -d "$WORK/$1" --batch -i "$DATA/$1.patch"
  echo "$WORK/$1"
}
# hostile NAME EXPECTED LIMIT_S: exact_sums ends EXPECTED within LIMIT_S; broadcast_exact then passes.
hostile() {
  local name=$1 expected=$2 limit=$3
  grade "$name" "$(patched "$name")" --check exact_sums --check broadcast_exact --timeout 3
  local r s next
  r=$(result "$name" exact_sums)
  s=$(seconds "$name" exact_sums)
  next=$(result "$name" broadcast_exact)
  if [[ " $expected " == *" $r "* ]] && python3 -c "import sys; sys.exit(not float('$s') <= $limit)" && [ "$next" = passed ] &&
    [ "$(rc "$name")" = 1 ]; then
    pass "$name: $r in $(printf "%.2f" "$s") s (limit $limit s), the next check passed"
  else
    fail "$name: expected $expected within $limit s and the next check passed, got $r in $s s, next $next: $(show "$name")"
  fi
}
# The checks' limit is 3 s; the bound adds what killing a process group takes on a loaded 2-core
# machine (4.7 s was seen for the fork bomb at a load average of 88): it proves the grader ends
# each within its limit and goes on, not a hang.
hostile infinite_loop timeout 8
hostile alloc_100gb "failed crashed" 8
hostile segfault crashed 8
hostile fork_bomb "timeout failed" 8
if ! pgrep -f "$WORK/tmp/scalelab-grade-.*/harness" >/dev/null; then
  pass "no process of a check is left behind"
else
  fail "processes left behind: $(pgrep -af "$WORK/tmp/scalelab-grade-.*/harness" | head -5)"
fi
grade compile_error "$(patched compile_error)"
if [ "$(result compile_error builds)" = failed ] && grep -q "error:" "$WORK/compile_error.json" &&
  [ "$(rc compile_error)" = 1 ] && python3 - "$WORK/compile_error.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
others = [t for t in j["tests"] if t["name"] != "builds"]
assert others and all(t["extra_data"]["result"] == "blocked" and t["score"] == 0 for t in others)
EOF
then pass "a compile error: builds failed with the compiler's errors, every other check blocked"
else fail "a compile error: $(show compile_error)"; fi

# --- cheats: a submission scores only by doing the work, sees nothing of the instructor's, and
# leaves nothing running ---------------------------------------------------------------------------
# Each cheat is a lab-01 submission (tests/data/grade/cheats/); the .in ones get the labs' path (and
# a root-only file's) written in here. Every check it touches scores 0.
CHEATS=$WORK/cheats
mkdir -p "$CHEATS/rootonly"
chmod 755 "$CHEATS"
chmod 700 "$CHEATS/rootonly"
echo "ROOT-ONLY-SECRET-LINE" >"$CHEATS/rootonly/secret.h"
chmod 600 "$CHEATS/rootonly/secret.h"
LABS_REAL=$(cd "$LABS" && pwd -P)
for f in "$DATA"/cheats/*.cpp "$DATA"/cheats/*.cpp.in; do
  out=$CHEATS/$(basename "$f" .in)
  sed "s|@LABS@|$LABS_REAL|g; s|@SECRET@|$CHEATS/rootonly/secret.h|g" "$f" >"$out"
  grep -q "^#define CHEAT" "$out" && cat "$DATA/cheats/functions.cpp.txt" >>"$out"
done
for cheat in "$CHEATS"/*.cpp; do
  name=cheat-$(basename "$cheat" .cpp)
  grade "$name" "$cheat" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do sleep 0.2; done
done
wait
for cheat in "$CHEATS"/*.cpp; do
  base=$(basename "$cheat" .cpp)
  name=cheat-$base
  # Only a grader run as root has a user to drop the compiler to.
  [ "$base" = include_root_only ] && [ "$(id -u)" != 0 ] && continue
  read -r got max < <(score "$name")
  leaked=""
  grep -q "LEAKED\|ROOT-ONLY-SECRET" "$WORK/$name.json" && leaked=" (it read what it must not)"
  case $base in
    exit_at_start | fake_pass_exit | forged_verdict) want="the check ended before its verdict" ;;
    include_solution | include_solution_abs) want="No such file\|not a public header" ;;
    include_root_only) want="Permission denied" ;;
    early_constructor) want="is refused" ;;
    *) want="" ;;
  esac
  if python3 -c "import sys; sys.exit(float('$got') != 0)" && [ "$(rc "$name")" = 1 ] && [ -z "$leaked" ] &&
    grep -q "$want" "$WORK/$name.json"; then
    pass "cheat $base: 0 / $max${want:+, '$want'}"
  else
    fail "cheat $base: $got / $max, exit $(rc "$name")$leaked, wanted '$want': $(show "$name")"
  fi
done
# The reader saw neither the solution nor the rubric: its checks say so.
grep -q "nothing readable" "$WORK/cheat-read_at_run_time.json" &&
  pass "a check cannot read solution/ or checks.json while it runs" ||
  fail "a check read the instructor's files: $(show cheat-read_at_run_time)"
if ! pgrep -x sl-escaped >/dev/null; then
  pass "a process that left the check's group and session (fork, setsid, fork) is gone after the grade"
else
  fail "an escaped process outlived its check: $(pgrep -ax sl-escaped)"
  pkill -9 -x sl-escaped
fi

# A submission that calls the library's own answer to its lab (lab 07's schedules are
# scalelab::gpipe_schedule and one_f_one_b_schedule, public for the strategy) is refused.
mkdir -p "$WORK/library_answer"
cat >"$WORK/library_answer/schedule.cpp" <<'CPP'
#include "lab.h"
namespace lab07 {
std::vector<Task> gpipe_schedule(int p, int s, int m) { return scalelab::gpipe_schedule(p, s, m); }
std::vector<Task> one_f_one_b_schedule(int p, int s, int m) { return scalelab::one_f_one_b_schedule(p, s, m); }
}  // namespace lab07
CPP
"$SCALELAB" grade 07-pipeline --labs-dir "$LABS" --submission "$WORK/library_answer" \
  --results "$WORK/library_answer.json" >"$WORK/library_answer.out" 2>&1
la_rc=$?
if [ "$la_rc" = 1 ] && grep -q "calls scalelab::gpipe_schedule, the library's own answer" "$WORK/library_answer.json" &&
  python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["score"] != 0)' "$WORK/library_answer.json"; then
  pass "a submission that calls the library's own schedule is refused: 0 points"
else
  fail "library answer: exit $la_rc, $(tail -n 8 "$WORK/library_answer.out")"
fi

# … and lab 01's ring written as the process group's own all_reduce (85 of 100 before the rule).
mkdir -p "$WORK/library_collective"
sed '/^void ring_all_reduce/,/^}/c\void ring_all_reduce(ProcessGroup\& pg, const Tensor\& data) { pg.all_reduce(data); }' \
  "$LAB/solution/ring.cpp" >"$WORK/library_collective/ring.cpp"
grade library_collective "$WORK/library_collective"
read -r got max < <(score library_collective)
if [ "$(rc library_collective)" = 1 ] && python3 -c "import sys; sys.exit(float('$got') != 0)" &&
  grep -q "calls scalelab::ProcessGroup::all_reduce, the library's own answer" "$WORK/library_collective.json"; then
  pass "lab 01's ring as the process group's all_reduce is refused: 0 / $max"
else
  fail "library collective: $got / $max, exit $(rc library_collective): $(show library_collective)"
fi

# --- the same submission graded twice: the same results.json but for durations --------------
# A mutant made by hand as an instructor would: the solution with one patch applied.
mkdir -p "$WORK/chain" && cp -r "$LAB/solution/." "$WORK/chain/" &&
  patch -s -p1 -d "$WORK/chain" --batch -i "$LAB/mutants/chain_exchange.patch"
grade chain_once "$WORK/chain"
grade chain_again "$WORK/chain"
strip='import json,sys
j=json.load(open(sys.argv[1])); j.pop("execution_time")
for t in j["tests"]: t["extra_data"].pop("seconds")
print(json.dumps(j, sort_keys=True))'
first=$(python3 -c "$strip" "$WORK/chain_once.json")
if [ -n "$first" ] && [ "$first" = "$(python3 -c "$strip" "$WORK/chain_again.json")" ] && [ "$(rc chain_once)" = 1 ]; then
  pass "graded twice, results.json is identical apart from durations"
else
  fail "graded twice, results.json differs: $(diff <(python3 -c "$strip" "$WORK/chain_once.json") <(python3 -c "$strip" "$WORK/chain_again.json") | head -5)"
fi

# --- the grader itself cannot run: exit 2, saying why --------------------------------------------
out=$("$SCALELAB" grade no-such-lab --labs-dir "$LABS" 2>&1)
[ $? = 2 ] && [[ "$out" == *"[grade]"*"01-collectives"* ]] && pass "an unknown lab exits 2 and lists the labs" ||
  fail "an unknown lab: $out"
out=$("$SCALELAB" grade 01-collectives --labs-dir "$LABS" --toolchain "$WORK/none.txt" 2>&1)
[ $? = 2 ] && [[ "$out" == *"[grade]"*"grade-toolchain"* ]] && pass "no toolchain file exits 2 and says to build" ||
  fail "no toolchain: $out"

# --- numeric questions (answers.json) and a class of submissions, on a test lab -------------------
# alab: twice.cpp and answers.json; the rubric grades two answers itself (abs and rel tolerance),
# the harness reads one. class/: alice right, bob partly, carol.late does not compile, dave.cpp is one
# file for a lab of two.
ALABS=$DATA/answers-lab
"$SCALELAB" grade alab --labs-dir "$ALABS" --results "$WORK/alab-stub.json" >"$WORK/alab-stub.out" 2>&1
if python3 - "$WORK/alab-stub.json" <<'EOF2'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["score"] == 0, j["score"]
for t in j["tests"]:
    if t["name"] != "builds":
        assert t["extra_data"]["result"] == "failed" and "TODO" in t["output"], t
EOF2
then pass "answers: the unanswered questions (null) score 0 and say TODO"
else fail "answers: the stub: $(tail -20 "$WORK/alab-stub.out")"; fi
out=$("$SCALELAB" grade alab --labs-dir "$ALABS" --submissions "$ALABS/class" --out "$WORK/class" 2>&1)
code=$?
if [ "$code" = 0 ] && python3 - "$WORK/class" <<'EOF2'
import csv, json, sys
rows = {r["student"]: r for r in csv.DictReader(open(sys.argv[1] + "/grades.csv"))}
assert sorted(rows) == ["alice", "bob", "carol.late", "dave"], sorted(rows)  # a folder's whole name
a, b, c, d = rows["alice"], rows["bob"], rows["carol.late"], rows["dave"]
assert (a["score"], a["max_score"], a["builds"]) == ("30", "30", "passed"), a
assert b["score"] == "15" and b["twice"] == "10" and b["bytes"] == "5", b
assert b["bubble"] == "failed" and b["harness_read"] == "failed" and b["hidden_bytes"] == "failed", b
assert c["builds"] == "failed" and c["bubble"] == "blocked" and c["score"] == "0", c
assert d["score"] == "0" and "one file" in d["note"], d
bob = {t["name"]: t for t in json.load(open(sys.argv[1] + "/bob/results.json"))["tests"]}
assert "0.4285" in bob["bubble"]["output"] and "0.5" in bob["bubble"]["output"], bob["bubble"]
EOF2
then pass "a class folder graded in one command: grades.csv (alice 30, bob 15, carol blocked on builds, dave not graded, with why), each student's results.json"
else fail "--submissions: exit $code: $out $(cat "$WORK/class/grades.csv" 2>/dev/null)"; fi
[[ "$out" == *"4/4"* && "$out" == *"passed by"* ]] && pass "--submissions shows progress per student and how many passed each check" ||
  fail "--submissions progress/summary: $out"
out=$("$SCALELAB" grade --labs-dir "$ALABS" --release "$WORK/alab.tar.gz" 2>&1) && mkdir -p "$WORK/alab-out" &&
  tar -xzf "$WORK/alab.tar.gz" -C "$WORK/alab-out"
if python3 - "$WORK/alab-out/scalelab-labs/alab/checks.json" <<'EOF2'
import json, sys
checks = {c["name"]: c for c in json.load(open(sys.argv[1]))["checks"]}
assert "hidden_bytes" not in checks, checks
assert "expected" not in checks["bubble"]["answer"] and checks["bubble"]["answer"]["key"] == "bubble", checks["bubble"]
EOF2
then
  "$SCALELAB" grade alab --labs-dir "$WORK/alab-out/scalelab-labs" --submission "$ALABS/class/alice" \
    --results "$WORK/alab-handout.json" >"$WORK/alab-handout.out" 2>&1
  [ "$(result alab-handout bubble)" = blocked ] && [ "$(result alab-handout twice)" = passed ] &&
    pass "the hand-out keeps the questions but not their expected values: graded from it, they are blocked" ||
    fail "graded from the hand-out: bubble $(result alab-handout bubble): $(tail -20 "$WORK/alab-handout.out")"
else
  fail "the hand-out's rubric still tells the answers: $out"
fi

# --- Gradescope's autograder: the sources to build and the lab's rubric, no solution or mutant ----
if bash "$(dirname "$0")/../scripts/autograder.sh" 01-collectives "$WORK/ag/autograder.zip" >"$WORK/ag.out" 2>&1 &&
  /usr/bin/python3 - "$WORK/ag/autograder.zip" <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = set(z.namelist())
for need in ["setup.sh", "run_autograder", "scalelab/Makefile", "scalelab/labs/01-collectives/harness.cpp",
             "scalelab/labs/01-collectives/checks.json", "scalelab/labs/grader/grader.cpp", "scalelab/core/tensor.h"]:
    assert need in names, need
leaks = [n for n in names if "/solution/" in n or "/mutants/" in n]
assert not leaks, leaks[:3]
run = z.read("run_autograder").decode()
assert "grade 01-collectives --submission /autograder/submission --results /autograder/results/results.json" in run, run
assert "make build" in z.read("setup.sh").decode()
assert z.getinfo("run_autograder").external_attr >> 16 & 0o111, "run_autograder is executable"
EOF
then pass "the autograder zip has setup.sh, run_autograder and the sources, and no solution or mutant"
else fail "the autograder zip: $(cat "$WORK/ag.out")"; fi
out=$(bash "$(dirname "$0")/../scripts/autograder.sh" no-such-lab "$WORK/ag/x.zip" 2>&1)
[ $? = 2 ] && [[ "$out" == *"01-collectives"* ]] && [ ! -e "$WORK/ag/x.zip" ] && pass "autograder for an unknown lab: exit 2, the labs listed" ||
  fail "autograder for an unknown lab: $out"

# --- the hand-out: stubs, READMEs, public checks; no solution, mutants or hidden checks ---------
out=$("$SCALELAB" grade --labs-dir "$LABS" --release "$WORK/dist/labs.tar.gz" 2>&1)
if [ $? = 0 ] && mkdir -p "$WORK/unpacked" && tar -xzf "$WORK/dist/labs.tar.gz" -C "$WORK/unpacked"; then
  u=$WORK/unpacked/scalelab-labs
  missing=""
  for f in README.md common/harness.h 01-collectives/README.md 01-collectives/lab.h 01-collectives/ring.cpp \
    01-collectives/harness.cpp 01-collectives/checks.json; do
    [ -f "$u/$f" ] || missing="$missing $f"
  done
  leaked=$(cd "$u" && find . -path '*solution*' -o -path '*mutants*' | head -3)
  hidden=$(python3 -c 'import json,sys; print(sum(c.get("visibility","visible")!="visible" for c in json.load(open(sys.argv[1]))["checks"]))' \
    "$u/01-collectives/checks.json")
  cmp -s "$u/01-collectives/ring.cpp" "$LAB/ring.cpp" || missing="$missing (ring.cpp is not the stub)"
  if [ -z "$missing" ] && [ -z "$leaked" ] && [ "$hidden" = 0 ]; then
    pass "the hand-out has the stubs, READMEs and public checks, and no solution, mutant or hidden check"
  else
    fail "the hand-out: missing$missing; leaked $leaked; hidden checks $hidden"
  fi
else
  fail "--release: $out"
fi

echo "grade test: $(python3 -c "print(round($(date +%s.%N) - $started, 1))") s"
finish
