#!/usr/bin/env bash
# scripts/build.sh — the first command of README: install dependencies, build, generate text.
#   WEFT_WERROR=ON makes warnings errors (CI); BUILD_DIR picks the build folder (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# Ninja for a new build folder (it schedules the two cores better than make); a folder configured
# before keeps its generator
generator=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DWEFT_WERROR="${WEFT_WERROR:-OFF}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
# the test suites' pinned npm packages (the openai client, playwright-core, the Anthropic, OpenAI
# and Ollama clients); their tests skip
# without them
for dir in tests/openai tests/web tests/clients; do
    if [ -f "$dir/package-lock.json" ] && command -v npm >/dev/null; then
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || echo "build.sh: npm ci in $dir failed; its tests will skip" >&2
    fi
done
# the main job: generate text with the model built into weft (stories260K)
"$BUILD_DIR"/weft run -p "Once upon a time" -n 64 --temp 0
