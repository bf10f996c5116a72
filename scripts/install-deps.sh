#!/usr/bin/env bash
# Installs with apt only the Debian packages scalelab needs that are missing. Idempotent; as root
# it runs apt-get directly, otherwise through sudo. Says what it installs.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  patch  # the labs' mutants are patches on their solutions (scalelab grade --mutants)
  libgtest-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  libglfw3-dev libimgui-dev
  xvfb xauth
  nlohmann-json3-dev libcli11-dev
  dataset-fashion-mnist
  fortunes  # the GPT's default text corpus (/usr/share/games/fortunes)
  python3-torch python3-numpy  # the cross-check against PyTorch (tests/pytorch), run as /usr/bin/python3
  chromium  # the slides' PDFs and their render test (make slides: Marp prints through it)
)
# The slides' marp-cli (slides/package.json) runs on Node and is installed by npm. A Node from
# elsewhere (NodeSource) brings its own npm: only a machine with no npm gets Debian's two.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "[install-deps] all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
echo "[install-deps] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Update the index only when an install fails for want of it: a fresh machine's lists may be empty.
if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "[install-deps] done"
