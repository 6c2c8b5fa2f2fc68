#!/usr/bin/env bash
# scripts/fuzz.sh — builds the GGUF reader fuzzer with clang (build-fuzz) and runs it for a bounded time.
#   scripts/fuzz.sh [SECONDS]   (default 600)
# Seeds: the first 16 KiB of every fixture GGUF (../shared/fixtures, when present) and the broken-file
# corpus of tests/gguf/corpus. The growing corpus is kept in fuzz/corpus-work (git-ignored);
# crashes land in build-fuzz/artifacts. Prints the number of executions; exits 1 on a crash.
# Not part of the normal test run. JOBS sets the build parallelism (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-600}
BUILD_DIR=build-fuzz
FIXTURES=${WEFT_FIXTURES:-../shared/fixtures}

CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWEFT_BUILD_FUZZERS=ON -DWEFT_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target gguf_reader_fuzzer

seed="$BUILD_DIR/seed"
rm -rf "$seed"
mkdir -p "$seed" fuzz/corpus-work "$BUILD_DIR/artifacts"
if [ -d "$FIXTURES" ]; then
    for f in "$FIXTURES"/models/*.gguf "$FIXTURES"/vocab/*.gguf; do
        [ -f "$f" ] && head -c 16384 "$f" >"$seed/head-$(basename "$f")"
    done
fi
cp tests/gguf/corpus/*.gguf "$seed/" 2>/dev/null || true
echo "fuzz: $(ls "$seed" | wc -l) seed files, running for ${SECONDS_TO_RUN} s" >&2

log="$BUILD_DIR/fuzz.log"
status=0
# -malloc_limit_mb: a single allocation above it is reported as a bug (a hostile length must never
# reach the allocator); the inputs are at most 64 KiB, so nothing legitimate comes near.
"$BUILD_DIR/fuzz/gguf_reader_fuzzer" fuzz/corpus-work "$seed" \
    -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -malloc_limit_mb=256 -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$BUILD_DIR/artifacts/" >"$log" 2>&1 || status=$?
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
tail -n 15 "$log" >&2
echo "executions: ${execs:-unknown}"
if [ "$status" -ne 0 ]; then
    echo "fuzz: the fuzzer stopped with status $status; see $log and $BUILD_DIR/artifacts/" >&2
    exit 1
fi
echo "fuzz: no crash in ${SECONDS_TO_RUN} s"
