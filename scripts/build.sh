#!/usr/bin/env bash
# Configures and builds wallfacer into build/ (Release with debug info), using every core.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja "${launcher[@]}" "$@"
cmake --build build -j "$(nproc)"
