#!/usr/bin/env bash
# The README's pictures (docs/img) as new as what draws them:
#   - each dashboard picture (scripts/screenshots.sh, `make screenshots`) has its stamp
#     NAME.png.inputs, and the stamp recomputed from this build and this source matches
#     (scripts/picture_stamps.py: the dash's options, the run it shows, the dashboard's code);
#   - each scaling chart (scripts/scale-pictures.sh, `make scale-pictures`) is drawn again and is
#     the same file;
#   - every picture in docs/img is one of those, or a deck's slides-NN.png (the slides test checks
#     those stamps: it builds the decks).
# A stale picture fails, naming it, what changed and the command that redraws it.
#   tests/readme_pictures_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/scalelab-readme-pictures-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
img="$src/docs/img"
stale=0

echo "== dashboard pictures: their stamps"
PICTURES_PLAN="$work/plan" bash "$src/scripts/screenshots.sh" "$build" "$work/unused"
[ -s "$work/plan" ] || fail "scripts/screenshots.sh planned no picture"
(cd "$src" && python3 scripts/picture_stamps.py dash --build "$build" --img "$img" "$work/plan") || stale=1

echo "== scaling charts: drawn again"
bash "$src/scripts/scale-pictures.sh" "$build" "$work/scale" >/dev/null
for f in "$work"/scale/*.svg; do
  name=$(basename "$f")
  if ! cmp -s "$f" "$img/$name"; then
    echo "[pictures] $img/$name differs from what this build draws — redraw it: make scale-pictures" >&2
    stale=1
  fi
done

echo "== every picture has what draws it"
for f in "$img"/*.png "$img"/*.svg; do
  name=$(basename "$f")
  case "$name" in
    slides-[0-9][0-9].png) continue ;;
  esac
  if ! cut -f1 "$work/plan" | grep -qxF "$name" && [ ! -e "$work/scale/$name" ]; then
    echo "[pictures] $img/$name: no script draws it — add it to scripts/screenshots.sh or scripts/scale-pictures.sh" >&2
    stale=1
  fi
done
((stale == 0)) || fail "stale README pictures — see above"
echo "readme pictures: OK"
