#!/usr/bin/env bash
# Gradescope's autograder for one lab: a zip with setup.sh and run_autograder at its top and the
# sources in scalelab/ — without any lab's solution/ or mutants/, so neither the autograder image
# nor a submission graded in it can reach them. setup.sh builds scalelab there once (make build
# installs what it needs); run_autograder grades /autograder/submission into results.json.
#   bash scripts/autograder.sh LAB OUT.zip      (make autograder LAB=05-ddp)
set -euo pipefail
lab=${1:?usage: autograder.sh LAB OUT.zip (e.g. 01-collectives dist/autograder-01.zip)}
out=${2:?usage: autograder.sh LAB OUT.zip}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$root/labs/$lab/checks.json" ]; then
  echo "[autograder] no lab named '$lab' in $root/labs — the labs are: $(cd "$root/labs" && ls -d [0-9]*/ | tr -d / | tr '\n' ' ')" >&2
  exit 2
fi
stage=$(mktemp -d "${TMPDIR:-/tmp}/scalelab-autograder.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/scalelab"
# The tracked files (or every file, outside a git checkout) but the instructor's: solutions,
# mutants, build trees, and what grading does not need (measured profiles, pictures, slides).
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$root" && git ls-files -z --cached --others --exclude-standard)
else
  (cd "$root" && find . -type f -not -path './build/*' -not -path './.git/*' -printf '%P\0')
fi | while IFS= read -r -d '' f; do [ -f "$root/$f" ] && printf '%s\0' "$f"; done |  # tracked but deleted: left out
  grep -zvE '^labs/[^/]+/(solution|mutants)/|^profiles/measured/|^docs/img/|^slides/|^build/' |
  (cd "$root" && xargs -0 cp --parents -t "$stage/scalelab")
cat >"$stage/setup.sh" <<EOF
#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the autograder's image.
set -euo pipefail
cd /autograder/source/scalelab
make build
EOF
cat >"$stage/run_autograder" <<EOF
#!/usr/bin/env bash
# Gradescope runs this for each submission: lab $lab, graded into results.json (exit 0 whatever the score).
cd /autograder/source/scalelab
build/release/scalelab grade $lab --submission /autograder/submission --results /autograder/results/results.json
exit 0
EOF
chmod 755 "$stage/setup.sh" "$stage/run_autograder"
mkdir -p "$(dirname "$out")"
out_abs=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
# A zip as Gradescope takes it (Python's zipfile: no zip program needed), written beside the target
# and renamed over it, so a half-written zip is never left under its name.
/usr/bin/python3 - "$stage" "$out_abs.part" <<'EOF'
import os, sys, zipfile
stage, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for top, dirs, files in os.walk(stage):
        dirs.sort()
        for f in sorted(files):
            path = os.path.join(top, f)
            info = zipfile.ZipInfo.from_file(path, os.path.relpath(path, stage))
            with open(path, "rb") as src:
                z.writestr(info, src.read(), zipfile.ZIP_DEFLATED)
EOF
mv -f "$out_abs.part" "$out_abs"
echo "[autograder] $out: Gradescope's autograder for lab $lab (setup.sh, run_autograder, the sources without solutions or mutants)"
