#!/usr/bin/env bash
# The slides test's own checks (scripts/slides_check.py, scripts/picture_stamps.py) on a tiny
# hand-made build in a scratch folder: each must pass what is right and fail what is wrong,
# naming deck·slide, the picture and the size or word. Needs python3 alone (no build, no Marp).
#   tests/slides_check_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/scalelab-slides-check-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
tool=(python3 "$src/scripts/slides_check.py")
theme="$src/slides/scalelab.css"
# expect_fail NAME PATTERN COMMAND…: the command fails and says PATTERN.
expect_fail() {
  local name=$1 pattern=$2
  shift 2
  local msg
  if msg=$("$@" 2>&1); then fail "$name: accepted"; fi
  grep -qF -- "$pattern" <<<"$msg" || fail "$name: the error does not say '$pattern': $msg"
  echo "ok: $name"
}

# A build as scripts/slides.sh leaves it: the expanded deck, img/ with its sidecars, data/.
mkdir -p "$work/src" "$work/out/img" "$work/out/data"
png() {  # path width height: a PNG header is all the check reads
  python3 -c "import struct,sys,zlib; w,h=int(sys.argv[2]),int(sys.argv[3]); ihdr=struct.pack('>IIBBBBB',w,h,8,2,0,0,0); open(sys.argv[1],'wb').write(b'\x89PNG\r\n\x1a\n'+struct.pack('>I',13)+b'IHDR'+ihdr+struct.pack('>I',zlib.crc32(b'IHDR'+ihdr)))" "$@"
}
sidecar() {  # path width height font_px clock
  printf '{"panel": "timeline", "width": %s, "height": %s, "font_px": %s, "clock": "%s", "trace": "data/run.trace.json", "step": 3}\n' "$2" "$3" "$4" "$5" >"$1.json"
}
png "$work/out/img/wide.png" 1400 390
sidecar "$work/out/img/wide.png" 1400 390 24 simulated
cat >"$work/out/img/chart.svg" <<'EOF'
<svg xmlns='http://www.w3.org/2000/svg' width='720' height='450' font-family='sans-serif'>
<g font-size='24'><text x='10' y='30'>busbw (simulated)</text><text x='10' y='60' font-size='20'>small</text></g>
</svg>
EOF
printf '{"time_kind": "simulated", "steps": 4}\n' >"$work/out/data/run.json"
printf '{"simulated": true}\n' >"$work/out/data/sweep.json"
printf 'img/chart.svg data/sweep.json\n' >"$work/out/data/plots.txt"
deck() {  # the deck's body, after its front matter; written as the source and as the expanded deck
  { printf -- '---\nmarp: true\n---\n\n# Title\n\n---\n\n'; cat; } >"$work/src/01-t.md"
  sed 's/{{run\.steps}}/4/g' "$work/src/01-t.md" >"$work/out/01-t.md"
}

echo "== text size"
deck <<'EOF'
![w:1150](img/wide.png)

---

![w:720](img/chart.svg)
EOF
cp "$theme" "$work/theme.css"
sed -i 's/font-size: *1[0-7]px/font-size: 18px/g' "$work/theme.css"
"${tool[@]}" text-size --out "$work/out" --theme "$work/theme.css" "$work/src/01-t.md" || fail "legible pictures were refused"
# 20 px in a 1400 px picture shown 1150 wide: 16.4 px.
png "$work/out/img/wide.png" 1400 390
sidecar "$work/out/img/wide.png" 1400 390 20 simulated
deck <<'EOF'
![w:1150](img/wide.png)
EOF
expect_fail "a panel shown too small" "01-t.md·2 img/wide.png: 'the timeline panel's text' is 16.4 px" \
  "${tool[@]}" text-size --out "$work/out" --theme "$work/theme.css" "$work/src/01-t.md"
# Without a size the picture is capped at the content width (1280 − 2 × 64): 20 × 1152/1400 = 16.5.
deck <<'EOF'
![](img/wide.png)
EOF
expect_fail "a panel at its natural size, capped" "is 16.5 px" \
  "${tool[@]}" text-size --out "$work/out" --theme "$work/theme.css" "$work/src/01-t.md"
# A background half: w:700 capped at 45 % of 1280 = 576; 20 × 576/1400 = 8.2.
deck <<'EOF'
![bg right:45% w:700](img/wide.png)
EOF
expect_fail "a panel in a background half" "is 8.2 px" \
  "${tool[@]}" text-size --out "$work/out" --theme "$work/theme.css" "$work/src/01-t.md"
# An SVG's smallest text (20 in a 720-wide chart) shown 600 wide: 16.7.
deck <<'EOF'
![w:600](img/chart.svg)
EOF
expect_fail "a chart shown too small" "01-t.md·2 img/chart.svg: 'small' is 16.7 px" \
  "${tool[@]}" text-size --out "$work/out" --theme "$work/theme.css" "$work/src/01-t.md"
rm "$work/out/img/wide.png.json"
deck <<'EOF'
![w:1150](img/wide.png)
EOF
expect_fail "a panel without its sidecar" "no img/wide.png.json: drawn by an old scalelab-dash" \
  "${tool[@]}" text-size --out "$work/out" --theme "$work/theme.css" "$work/src/01-t.md"
sidecar "$work/out/img/wide.png" 1200 390 20 simulated
expect_fail "a sidecar of another picture" "the sidecar is not this picture's" \
  "${tool[@]}" text-size --out "$work/out" --theme "$work/theme.css" "$work/src/01-t.md"
sidecar "$work/out/img/wide.png" 1400 390 24 simulated
printf 'section { padding: 48px 64px; }\npre { font-size: 15px; }\n' >"$work/small.css"
expect_fail "a theme with a small font" "small.css: 'pre' sets font-size 15 px" \
  "${tool[@]}" text-size --out "$work/out" --theme "$work/small.css" "$work/src/01-t.md"

# As Chromium draws them (where it and Marp are installed: the slides test installs Marp).
marp="$src/slides/node_modules/.bin/marp"
if command -v chromium >/dev/null && [ -x "$marp" ]; then
  mkdir -p "$work/html"
  printf '/* @theme small */\n@import "default";\nsection { font-size: 26px; }\ntable { font-size: 12px; }\n' >"$work/html/small.css"
  { printf -- '---\nmarp: true\ntheme: small\n---\n\n# Title\n\n---\n\n| a | b |\n|---|---|\n| small | text |\n\n---\n\n'
    for i in $(seq 1 30); do echo "- line $i"; done; } >"$work/html/01-t.md"
  "$marp" --theme "$work/html/small.css" --html "$work/html/01-t.md" -o "$work/html/01-t.html" --no-stdin >/dev/null 2>&1 ||
    fail "marp could not build the tiny deck"
  expect_fail "a table drawn too small" "01-t·2: <th> 'a' is drawn at 12.0 px" \
    "${tool[@]}" rendered --out "$work/html" "$work/html/01-t.md"
  expect_fail "text cut off at the slide's bottom" "01-t·3: 'line " \
    "${tool[@]}" rendered --out "$work/html" "$work/html/01-t.md"
else
  echo "chromium or Marp not installed: the drawn sizes are not checked here (the slides test installs Marp)"
fi

echo "== simulated or measured"
deck <<'EOF'
## What the run shows (simulated)

![w:1150](img/wide.png)

| {{run.steps}} steps | simulated |
|---|---|
| ms/step | {{run.ms_per_step}} |
EOF
"${tool[@]}" clocks --out "$work/out" "$work/src/01-t.md" || fail "true labels were refused"
deck <<'EOF'
## The measured timeline

![w:1150](img/wide.png)
EOF
expect_fail "a slide calling a simulated panel measured" "01-t.md·2: the slide says 'measured' about simulated figures (img/wide.png)" \
  "${tool[@]}" clocks --out "$work/out" "$work/src/01-t.md"
deck <<'EOF'
<!-- Notes: the measured share -->
![w:720](img/chart.svg)
EOF
expect_fail "a presenter note calling a simulated chart measured" "the slide says 'measured' about simulated figures (img/chart.svg)" \
  "${tool[@]}" clocks --out "$work/out" "$work/src/01-t.md"
sidecar "$work/out/img/wide.png" 1400 390 24 measured
deck <<'EOF'
## A real GPU's run, simulated

![w:1150](img/wide.png)
EOF
expect_fail "a slide calling a measured panel simulated" "the slide says 'simulated' about measured figures" \
  "${tool[@]}" clocks --out "$work/out" "$work/src/01-t.md"
sidecar "$work/out/img/wide.png" 1400 390 24 simulated
deck <<'EOF'
| | measured idle | formula |
|---|---|---|
| GPipe | {{run.bubble_fraction}} | 27% |
EOF
expect_fail "a table column saying measured over simulated numbers" "the table's 'measured idle' says 'measured' beside numbers of run (simulated)" \
  "${tool[@]}" clocks --out "$work/out" "$work/src/01-t.md"
sed -i 's/busbw (simulated)/busbw (measured)/' "$work/out/img/chart.svg"
deck <<'EOF'
![w:720](img/chart.svg)
EOF
expect_fail "a chart's legend saying measured about simulated data" "img/chart.svg: the chart says 'measured' — it was drawn from simulated data (data/sweep.json)" \
  "${tool[@]}" clocks --out "$work/out" "$work/src/01-t.md"
: >"$work/out/data/plots.txt"
expect_fail "a chart whose source is not named" "no line in data/plots.txt names the JSON it was drawn from" \
  "${tool[@]}" clocks --out "$work/out" "$work/src/01-t.md"

echo "== try it"
deck <<'EOF'
```bash try-it
scalelab train --strategy ddp --devices 4 --model mlp:784-512-256-128-10 --seed 42
scalelab-dash --strategy ddp
```
EOF
"${tool[@]}" try-it-names "$work/src/01-t.md" || fail "a try-it naming its model and seed was refused"
deck <<'EOF'
```bash try-it
scalelab train --strategy ddp --devices 4 \
  --model mlp:784-512-256-128-10
```
EOF
expect_fail "a try-it without its seed" "01-t.md: 'scalelab train --strategy ddp --devices 4 --model mlp:784-512-256-128-10' does not name --seed" \
  "${tool[@]}" try-it-names "$work/src/01-t.md"

echo "== the README's pictures: stamps"
stamps=(python3 "$src/scripts/picture_stamps.py")
mkdir -p "$work/root/slides" "$work/root/scripts" "$work/root/viz" "$work/root/apps/scalelab-dash" "$work/pictures"
cp "$theme" "$src/slides/marp.config.js" "$src/slides/package-lock.json" "$work/root/slides/"
echo 'draw' >"$work/root/scripts/slides.sh"
echo 'int colour = 1;' >"$work/root/viz/panel.cpp"
deck <<'EOF'
<!-- readme -->
## The picture

![w:720](img/chart.svg)
EOF
cp "$work/src/01-t.md" "$work/root/slides/01-t.md"
: >"$work/pictures/slides-01.png"
"${stamps[@]}" slides --write --root "$work/root" --out "$work/out" --img "$work/pictures" "$work/root/slides/01-t.md" >/dev/null
"${stamps[@]}" slides --root "$work/root" --out "$work/out" --img "$work/pictures" "$work/root/slides/01-t.md" || fail "a fresh stamp was refused"
sed -i 's/The picture/The new picture/' "$work/out/01-t.md"
expect_fail "a slide's words changed" "slides-01.png is older than what draws it: its slide differs" \
  "${stamps[@]}" slides --root "$work/root" --out "$work/out" --img "$work/pictures" "$work/root/slides/01-t.md"
grep -q 'make slides-pictures' <<<"$("${stamps[@]}" slides --root "$work/root" --out "$work/out" --img "$work/pictures" "$work/root/slides/01-t.md" 2>&1)" ||
  fail "the stale stamp's error does not name the command that redraws it"
sed -i 's/The new picture/The picture/' "$work/out/01-t.md"
echo '<!-- a chart drawn again, differently -->' >>"$work/out/img/chart.svg"
expect_fail "a picture on the slide changed" "its images differs" \
  "${stamps[@]}" slides --root "$work/root" --out "$work/out" --img "$work/pictures" "$work/root/slides/01-t.md"
rm "$work/pictures/slides-01.png.inputs"
expect_fail "a picture without a stamp" "has no stamp slides-01.png.inputs" \
  "${stamps[@]}" slides --root "$work/root" --out "$work/out" --img "$work/pictures" "$work/root/slides/01-t.md"
echo "slides checks: OK"
