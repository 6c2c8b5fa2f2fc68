#!/usr/bin/env bash
# scripts/sanitize.sh — the whole test suite (with the GGUF mutation corpus) under AddressSanitizer
# and UndefinedBehaviorSanitizer: configures and builds the `asan` preset (build-asan) and runs ctest
# with halt_on_error, so any report fails its test. Slow (an -O1 instrumented build, every test);
# CI runs it as a separate step when time allows (WEFT_CI_SANITIZE=1 .ci/run), or nightly.
#   scripts/sanitize.sh [CTEST ARGS...]   e.g. scripts/sanitize.sh -R hostile
# JOBS sets the build and test parallelism (default 2). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$JOBS"
# the presets set these too; exporting them here covers a ctest run without --preset
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:print_summary=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# the Vulkan driver's memory, kept until the process ends (scripts/lsan.supp)
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}
ctest --preset asan -j "$JOBS" "$@"
