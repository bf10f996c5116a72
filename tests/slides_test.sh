#!/usr/bin/env bash
# The lecture decks (slides/): `scripts/slides.sh` builds every deck from this build; then
#   - every deck has its HTML (and PDF where Chromium is installed);
#   - every excerpt a deck names is marked in the source, and none is left unexpanded;
#   - every picture a deck shows exists and was made by this build (newer than its start);
#   - no number is left as {{RUN.field}};
#   - every "try it" command runs and exits 0 (shortened as the deck's test-with says);
#   - every picture's text is ≥ 18 px as shown on a 1280×720 slide (dashboard PNGs from their
#     sidecar's font size, SVGs from their own font sizes, both scaled as the slide shows them),
#     and so is every text Chromium draws (tables, code, captions) where it is installed;
#   - the words "measured" / "simulated" on a slide, in a chart and in a table's labels agree
#     with the clock of what they show; every `scalelab train` to try names --model and --seed;
#   - where Chromium is installed, the first slide of each deck renders headless to a PNG;
#   - the README's picture of each deck (docs/img/slides-NN.png) is as new as what draws it: its
#     stamp slides-NN.png.inputs matches (scripts/picture_stamps.py; `make slides-pictures` redraws).
# Every check runs and reports before the test fails, so one run lists all that is wrong.
# A machine where marp-cli cannot be installed fails here (slides.sh says why): no skipping.
#   tests/slides_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/scalelab-slides-test-XXXXXX")
trap 'rm -rf "$work"' EXIT
out="$work/build"
fail() { echo "FAIL: $*" >&2; exit 1; }

decks=("$src"/slides/[0-9][0-9]-*.md)
((${#decks[@]} == 6)) || fail "expected 6 decks in slides/, found ${#decks[@]}"
deck_tool=(python3 "$src/scripts/slides_deck.py")
check_tool=(python3 "$src/scripts/slides_check.py")
failed=()
check() {  # name, then the command: run it, note a failure, go on
  local name=$1
  shift
  "$@" || failed+=("$name")
}

echo "== build"
bash "$src/scripts/slides.sh" "$build" "$out"

echo "== decks, excerpts, numbers"
"${deck_tool[@]}" markers --root "$src" "${decks[@]}"
for d in "${decks[@]}"; do
  name=$(basename "$d" .md)
  [ -s "$out/$name.html" ] || fail "$name: no $out/$name.html"
  if command -v chromium >/dev/null; then [ -s "$out/$name.pdf" ] || fail "$name: no PDF although chromium is installed"; fi
  ! grep -n '<!-- excerpt:\|{{' "$out/$name.md" || fail "$name: something above was not expanded"
  n_excerpts=$(grep -c '^<!-- excerpt:' "$d" || true)
  n_blocks=$(grep -c '^<div class="source">' "$out/$name.md" || true)
  [ "$n_excerpts" = "$n_blocks" ] || fail "$name: $n_excerpts excerpts named, $n_blocks put in"
  echo "$name: $n_excerpts excerpts"
done
# A name that is not marked is an error naming the deck and the marker.
printf -- '---\nmarp: true\n---\n<!-- excerpt: no-such-marker -->\n' >"$work/99-bad.md"
if msg=$("${deck_tool[@]}" markers --root "$src" "$work/99-bad.md" 2>&1); then fail "an unmarked excerpt was accepted"; fi
grep -q "99-bad.md: excerpt 'no-such-marker'" <<<"$msg" || fail "the error does not name the deck and marker: $msg"

echo "== pictures"
n=0
while IFS=$'\t' read -r deck path; do
  f="$out/$path"
  [ -s "$f" ] || fail "$deck shows $path, which the build did not make"
  [ "$f" -nt "$out/.stamp" ] || fail "$deck shows $path, older than this build (not regenerated)"
  n=$((n + 1))
done < <("${deck_tool[@]}" images "${decks[@]}")
((n >= 15)) || fail "only $n pictures in the decks"
echo "$n pictures, all made by this build"

echo "== legible at 1280×720"
check "text size" "${check_tool[@]}" text-size --out "$out" --theme "$src/slides/scalelab.css" "${decks[@]}"
if command -v chromium >/dev/null; then
  check "rendered text" "${check_tool[@]}" rendered --out "$out" "${decks[@]}"
fi

echo "== simulated or measured"
check "simulated/measured" "${check_tool[@]}" clocks --out "$out" "${decks[@]}"

echo "== try it"
check "try it names its run" "${check_tool[@]}" try-it-names "${decks[@]}"
export PATH="$build:$build/apps/scalelab-dash:$PATH"
mkdir -p "$work/try"
n=0
while IFS=$'\t' read -r deck command; do
  echo "$deck: $command"
  rc=0
  (cd "$work/try" && bash -c "$command" >"$work/try.log" 2>&1) || rc=$?
  ((rc == 0)) || { cat "$work/try.log"; fail "$deck: '$command' exited $rc"; }
  n=$((n + 1))
done < <("${deck_tool[@]}" try-it "${decks[@]}")
echo "$n commands ran"

echo "== render"
if command -v chromium >/dev/null; then
  for d in "${decks[@]}"; do
    name=$(basename "$d" .md)
    # The bespoke HTML shows its first slide; headless Chromium prints the window to a PNG.
    chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,720 \
      --screenshot="$out/$name.first.png" "file://$out/$name.html" >/dev/null 2>&1 || fail "$name: chromium could not render it"
    size=$(stat -c %s "$out/$name.first.png")
    ((size > 20000)) || fail "$name: the rendered first slide is $size bytes — blank?"
    echo "$name: first slide rendered ($size bytes)"
  done
  [ -z "${SLIDES_TEST_KEEP:-}" ] || cp "$out"/*.first.png "$SLIDES_TEST_KEEP"/
else
  echo "chromium not installed: no render (scripts/install-deps.sh installs it)"
fi

echo "== the README's pictures of the decks"
check "README pictures" python3 "$src/scripts/picture_stamps.py" slides --root "$src" --out "$out" --img "$src/docs/img" "${decks[@]}"
((${#failed[@]} == 0)) || fail "$(IFS=,; echo "${failed[*]}") — see above"
echo "slides: OK"
