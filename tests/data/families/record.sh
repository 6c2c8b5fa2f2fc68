#!/usr/bin/env bash
# tests/data/families/record.sh — records the fixtures of test_family_reference.cpp: for each family
# the file `weft synth` writes at F32 and at Q8_0, and the 2026 reference engine's logits for it
# (refdump: every prompt position, 8 greedy tokens), with the synth flags added as "synth_args".
#
#   tests/data/families/record.sh BUILD_DIR [NAME ...]    (from the repository root; no NAME: all)
#
# Each line below must give the flags family_table.h renders for its entry (the test compares them);
# record_long lines those of the family test_<arch>.cpp checks far into a sequence.
set -euo pipefail

build=${1:?usage: record.sh BUILD_DIR [NAME ...]}
shift
weft="$build/weft"
reference=${REFERENCE:-../shared/bench/reference-2026}
out=tests/data/families
prompt="Once upon a time"
# A temporary $work with the reference's shared libraries, removed on exit.
source tests/common/reference-libs.sh
reference_workspace "$reference"

record() {
    local name=$1
    shift
    if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " =~ " $name " ]]; then return; fi
    for type in F32 Q8_0; do
        local model="$work/$name-$type.gguf"
        "$weft" synth "$model" "$@" --type "${type,,}" >/dev/null 2>"$work/synth.log" ||
            { cat "$work/synth.log" >&2; exit 1; }
        "$reference/refdump" "$model" "$prompt" 8 2>"$work/refdump.log" >"$work/out.json" ||
            { tail -5 "$work/refdump.log"; echo "refdump failed for $name $type" >&2; exit 1; }
        python3 - "$work/out.json" "$out/$name-$type.json" "$*" <<'PY'
import json, sys
fixture = json.load(open(sys.argv[1]))
fixture = {"synth_args": sys.argv[3], **fixture}
with open(sys.argv[2], "w") as f:
    json.dump(fixture, f, separators=(",", ":"))
    f.write("\n")
PY
        echo "$name $type: $out/$name-$type.json"
    done
}

# A family whose features act only far into a sequence (llama4: chunks of 8192 positions, the
# attention temperature from position 8191): the reference's perplexity tool on one chunk of
# $long_ctx tokens of simple-stories.txt (repeated), its log-probabilities saved (16 bits per entry,
# --kl-divergence-base), of which the rows of the positions below are kept with the chunk's tokens.
long_ctx=8704
record_long() {
    local name=$1
    shift
    if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " =~ " $name " ]]; then return; fi
    local model="$work/$name-F32.gguf" text="$work/$name.txt"
    "$weft" synth "$model" "$@" --type f32 >/dev/null 2>"$work/synth.log" || { cat "$work/synth.log" >&2; exit 1; }
    for _ in 1 2 3 4 5 6; do cat tests/data/simple-stories.txt; done >"$text"
    "$reference/llama-perplexity" -m "$model" -f "$text" -c $long_ctx --chunks 1 -t 2 \
        --kl-divergence-base "$work/$name.kld" >"$work/ppl.log" 2>&1 ||
        { tail -5 "$work/ppl.log"; echo "llama-perplexity failed for $name" >&2; exit 1; }
    python3 - "$work/$name.kld" "$out/$name-F32.json" "$*" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"_logits_"
n_ctx, n_vocab, n_chunk = struct.unpack_from("<3i", data, 8)
tokens = list(struct.unpack_from(f"<{n_ctx}i", data, 20))
per_row = 2 * ((n_vocab + 1) // 2) + 4  # uint16: step and lowest (floats), then the codes
first = n_ctx // 2  # rows of positions first ... n_ctx - 2
rows_at = 20 + 4 * n_ctx * n_chunk
kept = list(range(first, first + 4)) + list(range(8184, 8201)) + list(range(n_ctx - 8, n_ctx - 1))
rows = []
for pos in kept:
    off = rows_at + 2 * per_row * (pos - first)
    step, lowest = struct.unpack_from("<2f", data, off)
    codes = list(struct.unpack_from(f"<{n_vocab}H", data, off + 8))
    rows.append({"pos": pos, "step": step, "lowest": lowest, "codes": codes})
fixture = {"synth_args": sys.argv[3], "n_ctx": n_ctx, "n_vocab": n_vocab, "tokens": tokens, "rows": rows}
with open(sys.argv[2], "w") as f:
    json.dump(fixture, f, separators=(",", ":"))
    f.write("\n")
PY
    echo "$name F32 (positions past 8192): $out/$name-F32.json"
}

wanted=("$@")
common="--embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 --vocab 300"
record llama --arch llama $common --seed 7
record llama-moe --arch llama $common --experts 4 --experts-used 2 --seed 7
record qwen2 --arch qwen2 $common --seed 7
record qwen3 --arch qwen3 $common --seed 7
record granite --arch granite $common --seed 7
record starcoder2 --arch starcoder2 $common --seed 7
record gemma --arch gemma $common --seed 7
record gemma2 --arch gemma2 --embd 64 --layers 4 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --seed 7
record gemma3 --arch gemma3 --embd 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --seed 7
record phi2 --arch phi2 $common --seed 7
record phi3 --arch phi3 $common --sliding-window 0 --seed 7
record olmo2 --arch olmo2 $common --seed 7
record command-r --arch command-r $common --seed 7
record qwen2moe --arch qwen2moe $common --experts 4 --experts-used 2 --seed 7
record qwen3moe --arch qwen3moe $common --experts 4 --experts-used 2 --seed 7
record deepseek2 --arch deepseek2 $common --experts 4 --experts-used 2 --seed 7
record mamba --arch mamba $common --seed 7
record mamba2 --arch mamba2 $common --seed 7
record smollm3 --arch smollm3 --embd 64 --layers 4 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --seed 7
record mistral3 --arch mistral3 $common --seed 7
record glm4moe --arch glm4moe $common --experts 4 --experts-used 2 --seed 7
record gpt-oss --arch gpt-oss --embd 64 --layers 4 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --experts 4 --experts-used 2 --seed 7
record llama4 --arch llama4 --embd 64 --layers 4 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --experts 4 --experts-used 2 --seed 7
record_long llama4-long --arch llama4 --embd 64 --layers 4 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --experts 4 --experts-used 2 --seed 7
hybrid4="--embd 64 --layers 4 --heads 4 --kv-heads 2 --ff 96 --vocab 300"
record qwen3next --arch qwen3next $hybrid4 --experts 4 --experts-used 2 --seed 7
record qwen35 --arch qwen35 $hybrid4 --seed 7
record qwen35moe --arch qwen35moe $hybrid4 --experts 4 --experts-used 2 --seed 7
record lfm2 --arch lfm2 $hybrid4 --seed 7
record granitehybrid --arch granitehybrid $hybrid4 --seed 7
record gemma4 --arch gemma4 --embd 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --seed 7
record gemma4-moe --arch gemma4 --embd 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --experts 4 --experts-used 2 --seed 7
