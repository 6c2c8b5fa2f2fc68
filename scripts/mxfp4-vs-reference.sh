#!/usr/bin/env bash
# scripts/mxfp4-vs-reference.sh — weft's MXFP4_MOE quantization against the 2026 reference's, byte for
# byte, on a random-weight MoE that `weft synth` writes: the reference's llama-quantize and `weft
# quantize` both convert it, and quant_tests' Mxfp4.QuantizesAsTheEstablishedQuantizerOnItsFile reads
# the three files with weft's own GGUF reader (every mxfp4 tensor of the reference's file quantized
# again from the F32 values; weft's file: the same tensors, types and bytes). The reference is a
# yardstick run here by hand, not a dependency of the build or the tests.
#
#   scripts/mxfp4-vs-reference.sh [BUILD_DIR] [weft synth options...]
#   (default BUILD_DIR build; REF=path/to/reference-2026 overrides ../shared/bench/reference-2026;
#   F32=path/to/model.gguf compares on that F32 file instead of a synth)
source "$(dirname "$0")/reference-env.sh"
shape=(--arch qwen3moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --ff 128 --experts 8 --experts-used 2
    --vocab 1024 --seed 7)
[ $# -gt 0 ] && shape=("$@")
if [ -n "${F32:-}" ]; then  # F32=path: that F32 model instead of a synth
    cp "$F32" "$dir/moe-f32.gguf"
else
    "$build/weft" synth "$dir/moe-f32.gguf" --type f32 "${shape[@]}" >/dev/null
fi
"$ref/llama-quantize" "$dir/moe-f32.gguf" "$dir/moe-reference.gguf" MXFP4_MOE >"$dir/reference.log" 2>&1 ||
    { cat "$dir/reference.log"; exit 1; }
"$build/weft" quantize "$dir/moe-f32.gguf" "$dir/moe-weft.gguf" MXFP4_MOE 2>/dev/null
WEFT_MXFP4_F32="$dir/moe-f32.gguf" WEFT_MXFP4_REFERENCE="$dir/moe-reference.gguf" WEFT_MXFP4_WEFT="$dir/moe-weft.gguf" \
    "$build/quant_tests" --gtest_filter=Mxfp4.QuantizesAsTheEstablishedQuantizerOnItsFile

# Logits: weft's on its MXFP4_MOE file against the reference's F32 logits, beside the reference's own
# on its MXFP4_MOE file (the same bytes, checked above): per prompt row sum (a - b)^2 / sum b^2.
prompt="Once upon a time, there was"
"$ref/refdump" "$dir/moe-f32.gguf" "$prompt" 4 >"$dir/ref-f32.json" 2>/dev/null
"$ref/refdump" "$dir/moe-reference.gguf" "$prompt" 4 >"$dir/ref-mxfp4.json" 2>/dev/null
"$build/weft" logits -m "$dir/moe-f32.gguf" -p "$prompt" -n 4 --json >"$dir/weft-f32.json" 2>/dev/null
"$build/weft" logits -m "$dir/moe-weft.gguf" -p "$prompt" -n 4 --json >"$dir/weft-mxfp4.json" 2>/dev/null
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
load = lambda n: json.load(open(f"{d}/{n}.json"))
ref = load("ref-f32")["prompt_logits"]
def dist(rows):
    e = [sum((a - b) ** 2 for a, b in zip(r, q)) / sum(b * b for b in q) for r, q in zip(rows, ref)]
    return sum(e) / len(e), max(e)
for name in ("weft-f32", "ref-mxfp4", "weft-mxfp4"):
    run = load(name)
    mean, worst = dist(run["prompt_logits"])
    print(f"{name:11s} from the reference's F32 logits: mean row NMSE {mean:.4g}, worst {worst:.4g}, greedy {run['greedy']}")
PY
