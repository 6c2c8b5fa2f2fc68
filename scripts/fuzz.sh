#!/usr/bin/env bash
# scripts/fuzz.sh — builds a libFuzzer target with clang (build-fuzz) and runs it for a bounded time.
#   scripts/fuzz.sh [SECONDS] [TARGET]   (default 600 seconds, target gguf)
# Targets (fuzz/):
#   gguf      the GGUF reader (gguf_reader_fuzzer). Seeds: the first 16 KiB of every fixture GGUF
#             (../shared/fixtures, when present) and the broken-file corpus of tests/gguf/corpus.
#   template  chat templates parsed and rendered, and JSON read (template_fuzzer). Seeds: the Jinja
#             templates of tests/template/jinja/templates.
#   grammar   GBNF grammars parsed, written back and matched, and JSON schemas converted
#             (grammar_fuzzer). Seeds: tests/grammar/corpus and a few schemas.
# The growing corpus is kept in fuzz/corpus-work/TARGET (git-ignored); crashes land in
# build-fuzz/artifacts/TARGET. Prints the number of executions; exits 1 on a crash.
# Not part of the normal test run. JOBS sets the build parallelism (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-600}
TARGET=${2:-gguf}
BUILD_DIR=build-fuzz
FIXTURES=${WEFT_FIXTURES:-../shared/fixtures}
case "$TARGET" in
gguf) fuzzer=gguf_reader_fuzzer ;;
template) fuzzer=template_fuzzer ;;
grammar) fuzzer=grammar_fuzzer ;;
*)
    echo "fuzz: unknown target '$TARGET' (gguf, template, grammar)" >&2
    exit 2
    ;;
esac

CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWEFT_BUILD_FUZZERS=ON -DWEFT_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target "$fuzzer"

seed="$BUILD_DIR/seed/$TARGET"
work="fuzz/corpus-work/$TARGET"
artifacts="$BUILD_DIR/artifacts/$TARGET"
rm -rf "$seed"
mkdir -p "$seed" "$work" "$artifacts"
case "$TARGET" in
gguf)
    if [ -d "$FIXTURES" ]; then
        for f in "$FIXTURES"/models/*.gguf "$FIXTURES"/vocab/*.gguf; do
            [ -f "$f" ] && head -c 16384 "$f" >"$seed/head-$(basename "$f")"
        done
    fi
    cp tests/gguf/corpus/*.gguf "$seed/" 2>/dev/null || true
    ;;
template)
    cp tests/template/jinja/templates/*.jinja "$seed/"
    ;;
grammar)
    cp tests/grammar/corpus/valid/*.gbnf tests/grammar/corpus/invalid/*.gbnf "$seed/"
    # a sentence after the NUL for the matcher, and schemas for the converter
    printf 'root ::= "a" [0-9]+ ("," root)?\0a12,a3' >"$seed/sentence.gbnf"
    printf '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer", "minimum": -3}}, "required": ["name"]}\0{"name": "x", "n": 2}' >"$seed/object.json"
    printf '{"anyOf": [{"type": "array", "items": {"$ref": "#"}, "maxItems": 3}, {"enum": [1, "a", null]}]}\0[[1],"a"]' >"$seed/recursive.json"
    ;;
esac
echo "fuzz: $TARGET, $(ls "$seed" | wc -l) seed files, running for ${SECONDS_TO_RUN} s" >&2

log="$BUILD_DIR/fuzz-$TARGET.log"
status=0
# -malloc_limit_mb: a single allocation above it is reported as a bug (a hostile length must never
# reach the allocator); the inputs are at most 64 KiB, so nothing legitimate comes near.
"$BUILD_DIR/fuzz/$fuzzer" "$work" "$seed" \
    -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -malloc_limit_mb=256 -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
tail -n 15 "$log" >&2
echo "executions: ${execs:-unknown}"
if [ "$status" -ne 0 ]; then
    echo "fuzz: the fuzzer stopped with status $status; see $log and $artifacts/" >&2
    exit 1
fi
echo "fuzz: no crash in ${SECONDS_TO_RUN} s"
