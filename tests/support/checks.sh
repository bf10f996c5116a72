# What the shell tests share (source it: `. "$(dirname "$0")/support/checks.sh" NAME`): a scratch
# folder $WORK removed on exit, PASS/FAIL lines, and `finish`, which says how many checks failed
# and exits 1 if any did.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/scalelab-$1.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0
pass() { echo "PASS: $1"; }
fail() {
  echo "FAIL: $1"
  failures=$((failures + 1))
}
# `$SCALELAB ARGS…` must exit 2 (a usage error) saying EXPECTED-TEXT.
expect_usage() {  # NAME EXPECTED-TEXT ARGS…
  local name=$1 want=$2
  shift 2
  out=$("$SCALELAB" "$@" 2>&1)
  local code=$?
  [ "$code" = 2 ] && [[ "$out" == *"$want"* ]] && pass "$name: exit 2, '$want'" || fail "$name: exit $code: $out"
}
finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all checks passed"
  exit 0
}
