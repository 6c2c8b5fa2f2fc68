#!/usr/bin/env bash
# scripts/bench_kv_cache_types.sh — generation tokens/s of KV cache types against each other at some
# cache depths, the runs alternating between the types (a noisy machine drifts between runs, not
# between types); prints each run (tokens/s and, from --profile, the attention op's ms per token)
# and the medians per (type, depth), and each type's median tokens/s over the first type's.
#   scripts/bench_kv_cache_types.sh WEFT MODEL [ROUNDS] [DEPTHS] [TYPES] [extra weft bench args...]
#   e.g. scripts/bench_kv_cache_types.sh build/weft m.gguf 4 "512 8192" "f16 q8_0" -t 2
set -euo pipefail
weft=${1:?weft binary}
model=${2:?model}
rounds=${3:-4}
depths=${4:-"512 8192"}
types=${5:-"f16 q8_0"}
shift $(($# < 5 ? $# : 5))
n_gen=${N_GEN:-32}
declare -A runs attns
for depth in $depths; do
    for ((r = 0; r < rounds; ++r)); do
        for type in $types; do
            read -r tps attn < <("$weft" bench -m "$model" -p 0 -n "$n_gen" -d "$depth" -r 1 -ctk "$type" \
                -ctv "$type" --no-bandwidth --json --profile "$@" 2>/dev/null |
                python3 -c 'import json, sys
j = json.load(sys.stdin)
p = j["profile"]["tg"]
attn = sum(r["ms"] for r in p["ops"] if r["op"] == "attention") / max(p["graphs"], 1)
print(j["tg"]["tokens_per_s"], attn)')
            printf 'd%-6s %-5s round %d: %8.2f t/s, attention %7.3f ms/token\n' "$depth" "$type" "$((r + 1))" \
                "$tps" "$attn"
            runs[$depth,$type]+="$tps "
            attns[$depth,$type]+="$attn "
        done
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {printf "%.2f", (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
echo
printf '| depth | %s |\n' "$(for t in $types; do printf '%s t/s | %s attn ms | ' "$t" "$t"; done)t/s ratio"
for depth in $depths; do
    first=""
    line="| $depth |"
    ratios=""
    for type in $types; do
        m=$(echo "${runs[$depth,$type]}" | median)
        line+=" $m | $(echo "${attns[$depth,$type]}" | median) |"
        if [[ -z $first ]]; then first=$m; else ratios+="$(awk -v a="$m" -v b="$first" 'BEGIN {printf "%.2f ", a / b}')"; fi
    done
    echo "$line $ratios|"
done
