#!/usr/bin/env bash
# scripts/speculative-bench.sh — speculative decoding against plain decoding on the 1.1B synth shape
# (TinyLlama's: embd 2048, 22 layers, 32 heads, 4 KV heads, ff 5632, vocab 32000), alternating runs,
# one markdown table: generated tokens/s, draft tokens verified and accepted, speed-up.
#   scripts/speculative-bench.sh [DIR]   (models in DIR, default /tmp/weft-bench; WEFT=path/to/weft;
#                                         ROUNDS=2, N=128 tokens, THREADS=2)
# Random weights: a model of the same seed with fewer layers predicts almost nothing the whole one
# does, so the target is drawn with --block-scale 0.02 (every block a small correction) and its draft
# is the same seed with 2 layers: the cost structure is the real one (every weight read), the
# acceptance rate is set by the scale.
# Prompt lookup needs a model that copies: random weights never do, so its rows run the one trained
# model here, stories260K (built into weft), on a prompt that repeats a passage: it goes on repeating.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/weft-bench}
weft=${WEFT:-build/weft}
rounds=${ROUNDS:-2}
n=${N:-128}
threads=${THREADS:-2}
mkdir -p "$dir"
shape=(--arch llama --embd 2048 --heads 32 --kv-heads 4 --ff 5632 --vocab 32000 --ctx 2048 --type f16)
make_q8() {  # NAME LAYERS SCALE
    [ -f "$dir/$1-q8_0.gguf" ] && return
    "$weft" synth "$dir/$1-F16.gguf" "${shape[@]}" --layers "$2" --block-scale "$3" >/dev/null
    "$weft" quantize "$dir/$1-F16.gguf" "$dir/$1-q8_0.gguf" q8_0 >/dev/null 2>&1
    rm -f "$dir/$1-F16.gguf"
}
make_q8 tl 22 1
make_q8 ts 22 0.02
make_q8 ts-d2 2 0.02
prompt="Once upon a time there was a little girl named Lily. She loved to play outside in the park."

repeating="Lily went to the park. She saw a big red ball. She played with the ball all day."
repeating="$repeating $repeating $repeating"
# name | target | extra flags (target "stories260K": the built-in model on the repeating prompt)
cases=(
    "plain|tl|"
    "itself as draft (upper bound of acceptance)|tl|--draft-model $dir/tl-q8_0.gguf --draft-p-min 0 --draft-max 4"
    "prompt lookup, n-gram 2|tl|--lookup-ngram 2 --draft-max 8"
    "plain (block-scale 0.02)|ts|"
    "2-layer draft of the same seed|ts|--draft-model $dir/ts-d2-q8_0.gguf --draft-p-min 0 --draft-max 4"
    "plain, on a prompt that repeats|stories260K|"
    "prompt lookup on the repeating prompt, n-gram 2|stories260K|--lookup-ngram 2 --draft-max 8"
)
declare -A tps drafted accepted
for ((r = 0; r < rounds; r++)); do
    for c in "${cases[@]}"; do
        IFS='|' read -r name target flags <<<"$c"
        model=(-m "$dir/$target-q8_0.gguf") p=$prompt
        [ "$target" = stories260K ] && model=() p=$repeating
        # shellcheck disable=SC2086
        "$weft" run "${model[@]}" -p "$p" -n "$n" --temp 0 -t "$threads" $flags \
            >/dev/null 2>"$dir/spec.log"
        t=$(sed -n 's/.*generated [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) tokens\/s.*/\1/p' "$dir/spec.log")
        tps[$name]="${tps[$name]:-} $t"
        d=$(sed -n 's/.*: \([0-9]*\) draft tokens verified, \([0-9]*\) accepted.*/\1 \2/p' "$dir/spec.log")
        drafted[$name]=${d% *}
        accepted[$name]=${d#* }
    done
done
mean() { echo "$@" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.2f", s / NF }'; }
echo "| target | decoding | tokens/s | drafted | accepted | speed-up |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
base=""
for c in "${cases[@]}"; do
    IFS='|' read -r name target flags <<<"$c"
    m=$(mean ${tps[$name]})
    case "$name" in plain*) base=$m ;; esac
    up=$(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
    d=${drafted[$name]:-}; a=${accepted[$name]:-}
    label=$target-q8_0
    [ "$target" = stories260K ] && label=$target
    echo "| $label | $name | $m | ${d:--} | ${a:--} | $up |"
done
