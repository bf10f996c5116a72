#!/usr/bin/env bash
# The layers, from the bottom: core < strategies < run < calibration < viz < apps. A file may
# include headers of its own layer and those below, never above (the linker refuses the calls too:
# each layer is its own library). The labs (their grader and the harnesses students build against) sit beside run:
# they may use core, strategies and run, and nothing below them uses them.
# Inside core the folders are ordered too (CORE_ORDER, bottom first; "." is core's own files: the
# tensor, its memory ledger, errors, the names of the collectives), so core has no include cycle.
# Prints every offending include and exits 1 if there is one.
set -uo pipefail
root="${1:?usage: layers_test.sh SOURCE_DIR}"
cd "$root"
bad=0
refuse() {  # refuse WHAT ABOVE FILE...: the includes of ABOVE/ in the files
  local what=$1 above=$2; shift 2
  if hits=$(grep -rnE "#include \"$above/" "$@" --include='*.h' --include='*.cpp' --include='*.cu'); then
    echo "layers: $what includes $above/, a layer above it:"
    echo "$hits" | sed 's/^/  /'
    bad=1
  fi
}
check() {  # check LAYER FORBIDDEN-PREFIX...
  local layer=$1; shift
  for above in "$@"; do refuse "$layer/" "$above" "$layer"; done
}
check core strategies run labs calibration viz apps
check strategies run labs calibration viz apps
check run labs calibration viz apps
check labs calibration viz apps
check calibration labs viz apps
check viz apps

# The dashboard's model needs no window: viz/model/ (scalelab_viz_model, built everywhere) includes
# neither ImGui nor GLFW nor viz/'s windows.
if hits=$(grep -rnE '#include (<(imgui|GLFW/|GL/)|"viz/[a-z_]+\.h")' viz/model); then
  echo "layers: viz/model/ includes the GUI or viz/'s windows, which it is built without:"
  echo "$hits" | sed 's/^/  /'
  bad=1
fi

CORE_ORDER=(. io trace kernels device proc comm nn data checkpoint)
for folder in core/*/; do  # a new folder must be given its place
  name=$(basename "$folder")
  if [[ ! " ${CORE_ORDER[*]} " =~ " $name " ]]; then
    echo "layers: core/$name/ has no place in CORE_ORDER (tests/layers_test.sh) — add it where it belongs"
    bad=1
  fi
done
for ((i = 0; i < ${#CORE_ORDER[@]}; ++i)); do
  if [ "${CORE_ORDER[i]}" = . ]; then
    files=(core/*.h core/*.cpp) what="core/ (its own files)"  # not its folders
  else
    files=("core/${CORE_ORDER[i]}") what="core/${CORE_ORDER[i]}/"
  fi
  for above in "${CORE_ORDER[@]:i+1}"; do refuse "$what" "core/$above" "${files[@]}"; done
done

[ "$bad" = 0 ] && echo "layers: core < strategies < run (labs beside it) < calibration < viz < apps; inside core ${CORE_ORDER[*]} — no include reaches up"
exit $bad
