#!/usr/bin/env bash
# scripts/build.sh — the first command of README: install dependencies, build, run a demo.
#   WEFT_WERROR=ON makes warnings errors (CI); BUILD_DIR picks the build folder (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DWEFT_WERROR="${WEFT_WERROR:-OFF}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
# the main job: record a small model's compute graph, print it and plan its memory
"$BUILD_DIR"/weft graph --demo
