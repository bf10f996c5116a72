#!/usr/bin/env bash
# The documentation stays true: every relative link in README.md, docs/*.md and the other READMEs
# resolves to a file (and a `#anchor` to a heading of it), the README links every page in docs/,
# and every command shown in a ```sh block of README.md and docs/*.md runs against this build:
#   $B/scalelab …     run in a scratch folder (profiles/, labs/, examples/ linked in), exit 0 in time;
#   mpirun …          the same, under mpirun --allow-run-as-root --oversubscribe;
#   make TARGET       `make -n TARGET` in the sources (the target exists; the test cannot run it);
#   ctest …           `ctest -N` lists at least one test for those arguments;
#   cmake --preset P  the preset exists;  scripts/X.sh …  the script exists and parses (bash -n);
#   B=…               skipped (the test's B is the build it was given).
# A command marked `# needs a GPU` (or `# needs PyTorch`) is run too; where there is no GPU (no
# torch) it passes when it fails only for want of one, so an option that no longer exists is
# still caught. Anything else in a sh block, or a placeholder (…, an upper-case word such as S or
# FILE), fails: write a real, small command instead. And docs/cli.md has a section for every
# subcommand `scalelab --help` lists and names every option of each. Each failure names the file
# and the line.
#   bash docs_test.sh <path to scalelab> <source dir> [mpirun | none]
set -u
SCALELAB=${1:?usage: docs_test.sh <scalelab binary> <source dir> [mpirun]}
SRC=${2:?usage: docs_test.sh <scalelab binary> <source dir> [mpirun]}
MPIRUN=${3:-$(command -v mpirun || true)}   # `none`: scalelab was built without its mpi backend
[ "$MPIRUN" = none ] && MPIRUN=""
. "$(dirname "$0")/support/checks.sh" docs-test
B=$(cd "$(dirname "$SCALELAB")" && pwd)
SRC=$(cd "$SRC" && pwd)
PER_COMMAND_S=${DOCS_TEST_TIMEOUT:-90}

cd "$SRC"
pages=(README.md docs/*.md labs/README.md viz/README.md slides/README.md profiles/README.md)
[ -f examples/pytorch/README.md ] && pages+=(examples/pytorch/README.md)
# DOCS_TEST_PAGES="docs/cli.md" checks the commands of those pages alone (while writing one).
command_pages=(${DOCS_TEST_PAGES:-README.md docs/*.md})

# --- links ------------------------------------------------------------------------------------
# A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens.
slug() {
  printf '%s' "$1" | sed -E 's/^#+ +//; s/`//g' | tr 'A-Z' 'a-z' |
    sed -E 's/—|–|×|…|·|→|≤|≥|±|’|“|”//g; s/[][!"#$%&'"'"'()*+,./:;<=>?@\\^{|}~]//g; s/ /-/g'
}
anchors_of() {  # every heading's anchor of a Markdown file, one a line (fenced code left out)
  awk '/^```/ {code = !code; next} !code && /^#+ / {print}' "$1" | while IFS= read -r h; do slug "$h"; echo; done
}
links=0
for page in "${pages[@]}"; do
  dir=$(dirname "$page")
  # file:line:target of every ](target) outside fenced code; web addresses and mail are not ours.
  while IFS=$'\t' read -r line target; do
    links=$((links + 1))
    path=${target%%#*}
    anchor=""
    [[ "$target" == *"#"* ]] && anchor=${target#*#}
    if [ -n "$path" ]; then
      file="$dir/$path"
      if [ ! -e "$file" ]; then
        fail "$page:$line: link to $target: $file does not exist"
        continue
      fi
    else
      file=$page
    fi
    if [ -n "$anchor" ] && [[ "$file" == *.md ]] && ! anchors_of "$file" | grep -qxF -- "$anchor"; then
      fail "$page:$line: link to $target: $file has no heading with the anchor #$anchor"
    fi
  done < <(awk '/^```/ {code = !code; next}
                !code { s = $0; gsub(/`[^`]*`/, "", s)
                        while (match(s, /\]\([^) ]+\)/)) {
                          t = substr(s, RSTART + 2, RLENGTH - 3); s = substr(s, RSTART + RLENGTH)
                          if (t !~ /^(https?:|mailto:)/) printf "%d\t%s\n", NR, t } }' "$page")
done
[ "$failures" = 0 ] && pass "links: $links relative links in ${#pages[@]} pages resolve"

# Every page in docs/ is linked from the README: a newcomer finds each from there.
unlinked=0
for doc in docs/*.md; do
  grep -qF "]($doc" README.md || { fail "README.md does not link $doc"; unlinked=1; }
done
[ "$unlinked" = 0 ] && pass "README.md links every page in docs/"

# --- docs/cli.md covers the CLI --------------------------------------------------------------
# Every subcommand `scalelab --help` lists has a section, and every option its --help lists is named.
subcommands() { "$SCALELAB" "$@" --help | awk '/^Subcommands:/ {s = 1; next} s && /^  [a-z]/ {print $1}'; }
cli_missing=0
for sub in $(subcommands) $(subcommands bench | sed 's/^/bench:/'); do
  args=(${sub/:/ })
  [ -n "$(subcommands "${args[@]}")" ] && continue   # bench: its subcommands have the sections
  grep -qE "^## ${args[*]}\$" docs/cli.md || { fail "docs/cli.md has no section '## ${args[*]}'"; cli_missing=1; continue; }
  for opt in $("$SCALELAB" "${args[@]}" --help | grep -oE '^  (-[a-z],)?--[a-z][a-z0-9-]*' | sed -E 's/^ +(-[a-z],)?//'); do
    [ "$opt" = --help ] && continue
    grep -qF "\`$opt\`" docs/cli.md || { fail "docs/cli.md does not name ${args[*]} $opt"; cli_missing=1; }
  done
done
[ "$cli_missing" = 0 ] && pass "docs/cli.md: a section for every subcommand, every option named"

# --- commands ---------------------------------------------------------------------------------
scratch="$WORK/scratch"
mkdir -p "$scratch/out"
for d in profiles labs examples tests; do ln -s "$SRC/$d" "$scratch/$d"; done
no_gpu='no usable CUDA device|built without CUDA|no CUDA device'
no_torch='python3-torch'
commands=0
started=$(date +%s)
check_command() {  # PAGE LINE COMMAND
  local where="$1:$2" cmd=$3 gpu=0 body word out rc absent=$no_gpu
  [[ "$cmd" =~ \#\ *needs\ a\ GPU ]] && gpu=1
  [[ "$cmd" =~ \#\ *needs\ PyTorch ]] && gpu=1 && absent=$no_torch
  body=$(printf '%s' "$cmd" | sed -E 's/(^|[[:space:]])#.*$//; s/[[:space:]]+$//')
  [ -z "$body" ] && return
  [[ "$body" =~ ^B= ]] && return
  commands=$((commands + 1))
  if [[ "$body" == *"…"* ]] || [[ " $body " =~ \ [A-Z][A-Z0-9_]*\  ]]; then
    fail "$where: a placeholder in a command (write real, small arguments): $body"
    return
  fi
  word=${body%% *}
  case "$word" in
    '$B/scalelab' | '$B/scalelab-dash' | mpirun)
      if [ "$word" = mpirun ]; then
        [ -n "$MPIRUN" ] || { echo "SKIP: $where: no mpirun, or scalelab built without its mpi backend: $body"; return; }
        local flags=""
        [[ "$body" == *--allow-run-as-root* ]] || flags+=" --allow-run-as-root"
        [[ "$body" == *--oversubscribe* ]] || flags+=" --oversubscribe"
        body="$MPIRUN$flags ${body#mpirun}"
      fi
      local t0=$(date +%s)
      out=$(cd "$scratch" && B="$B" timeout "$PER_COMMAND_S" bash -c "$body" 2>&1 </dev/null)
      rc=$?
      local took=$(( $(date +%s) - t0 ))
      if [ "$rc" = 0 ]; then
        pass "$where: exit 0 in ${took} s: $body"
      elif [ "$gpu" = 1 ] && printf '%s' "$out" | grep -qE "$absent"; then
        pass "$where: parsed; it needs what this machine lacks: $body"
      elif [ "$rc" = 124 ]; then
        fail "$where: still running after ${PER_COMMAND_S} s: $body"
      else
        fail "$where: exit $rc: $body"$'\n'"$(printf '%s' "$out" | tail -n 6 | sed 's/^/    /')"
      fi ;;
    make)
      local target=${body#make }
      if out=$(make -n -C "$SRC" $target 2>&1 >/dev/null); then
        pass "$where: make has the target: $body"
      else
        fail "$where: make -n $target: $(printf '%s' "$out" | tail -n 2)"
      fi ;;
    ctest)
      local args=${body#ctest }
      args=$(printf '%s' "$args" | sed -E 's/--test-dir [^ ]+ ?//')
      out=$(ctest --test-dir "$B" -N $args 2>&1)
      if [ "$gpu" = 1 ] || printf '%s' "$out" | grep -qE 'Total Tests: [1-9]'; then
        pass "$where: ctest lists tests for: $args"
      else
        fail "$where: ctest -N $args lists no test"
      fi ;;
    cmake)
      local preset
      preset=$(printf '%s' "$body" | sed -nE 's/.*--preset[ =]([A-Za-z0-9_-]+).*/\1/p' | head -1)
      if [ -n "$preset" ] && grep -q "\"name\": \"$preset\"" "$SRC/CMakePresets.json"; then
        pass "$where: the preset $preset exists"
      else
        fail "$where: cmake needs a preset of CMakePresets.json: $body"
      fi ;;
    scripts/*)
      if [ -f "$SRC/$word" ] && bash -n "$SRC/$word"; then
        pass "$where: $word exists and parses"
      else
        fail "$where: $word is missing or does not parse"
      fi ;;
    *)
      fail "$where: a command this test cannot check (\$B/scalelab, mpirun, make, ctest, cmake --preset, scripts/): $body" ;;
  esac
}
for page in "${command_pages[@]}"; do
  # line<TAB>command of every command in a ```sh block; a line ending in \ continues on the next.
  while IFS=$'\t' read -r line cmd; do
    check_command "$page" "$line" "$cmd"
  done < <(awk '/^```sh *$/ {sh = 1; next} /^```/ {sh = 0; next}
                sh { if (acc == "") start = NR
                     if ($0 ~ /\\$/) { acc = acc substr($0, 1, length($0) - 1); next }
                     printf "%d\t%s\n", start, acc $0; acc = "" }' "$page")
done
echo "commands: $commands checked in $(( $(date +%s) - started )) s"
[ "$commands" -gt 0 ] || fail "no command found in the sh blocks of ${command_pages[*]}"
finish
