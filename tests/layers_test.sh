#!/usr/bin/env bash
# The layers, from the bottom: core < strategies < run < calibration < viz < apps. A file may include
# headers of its own layer and those below, never above (the linker refuses the calls too: each
# layer is its own library). The labs (their grader and the harnesses students build against) sit
# beside run: they may use core, strategies and run, and nothing below them uses them.
# Prints every offending include and exits 1 if there is one.
set -uo pipefail
root="${1:?usage: layers_test.sh SOURCE_DIR}"
cd "$root"
bad=0
check() {  # check LAYER FORBIDDEN-PREFIX...
  local layer=$1; shift
  for above in "$@"; do
    if hits=$(grep -rnE "#include \"$above/" "$layer" --include='*.h' --include='*.cpp' --include='*.cu'); then
      echo "layers: $layer/ includes $above/ (a layer above it):"
      echo "$hits" | sed 's/^/  /'
      bad=1
    fi
  done
}
check core strategies run labs calibration viz apps
check strategies run labs calibration viz apps
check run labs calibration viz apps
check labs calibration viz apps
check calibration labs viz apps
check viz apps
[ "$bad" = 0 ] && echo "layers: core < strategies < run (labs beside it) < calibration < viz < apps — no include reaches up"
exit $bad
