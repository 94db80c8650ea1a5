#!/usr/bin/env bash
# Installs wallfacer's build and test dependencies from Debian 12 packages.
# CUDA/NCCL are not installed here: the optional CUDA backend uses a preinstalled toolkit when
# nvcc is found.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache clang-format
  libsimgrid-dev libboost-graph-dev libyaml-cpp-dev libfmt-dev libcli11-dev nlohmann-json3-dev libtinyxml2-dev
  libopenblas-dev libmimalloc-dev zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev qt6-svg-dev fonts-dejavu-core xvfb xauth
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "install-deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
