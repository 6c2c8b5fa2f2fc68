#!/usr/bin/env bash
# scripts/f16-accuracy.sh — how close weft's F16 products (f16_int16_mm.h) keep a model to the F32
# logits, beside the reference's own F16 file: the 2026 reference's llama-quantize writes the F16 file
# from an F32 one, its refdump prints the F32 and F16 logits of 5 prompts, and weft prints its logits of
# the same F16 file with the int16 products and with exact f32 FMAs (WEFT_F16_INT16=0). Printed per
# model: the mean and worst row NMSE (sum (a - b)^2 / sum b^2 per prompt position) from the F32 logits.
# The accuracy rule of a weight type: weft's F16 no farther from the F32 logits than the reference's F16.
# The reference is a yardstick run here by hand, not a dependency of the build or the tests.
#
#   scripts/f16-accuracy.sh [BUILD_DIR] [F32 models...]
#   (default BUILD_DIR build; default models: the fixtures' tiny-llama and stories260K, and a `weft
#   synth` llama of embd 512, 4 layers, ff 1536; REF=path/to/reference-2026 overrides
#   ../shared/bench/reference-2026)
source "$(dirname "$0")/reference-env.sh"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    "$build/weft" synth "$dir/synth-llama-f32.gguf" --type f32 --arch llama --embd 512 --layers 4 --heads 8 \
        --kv-heads 4 --ff 1536 --vocab 2048 --seed 3 >/dev/null 2>&1
    models=(../shared/fixtures/models/tiny-llama-F32.gguf ../shared/fixtures/models/stories260K.gguf
        "$dir/synth-llama-f32.gguf")
fi
prompts=("Once upon a time, there was" "The quick brown fox jumps over the lazy dog."
    "In 1492 Columbus sailed the ocean blue, and" "def fibonacci(n):\n    return" "Lily and Tom went to the park to play")
for model in "${models[@]}"; do
    name=$(basename "$model" .gguf)
    "$ref/llama-quantize" "$model" "$dir/$name-ref-f16.gguf" F16 >"$dir/quantize.log" 2>&1 ||
        { cat "$dir/quantize.log"; exit 1; }
    for i in "${!prompts[@]}"; do
        p=${prompts[$i]}
        "$ref/refdump" "$model" "$p" 0 >"$dir/$name.$i.ref-f32.json" 2>/dev/null
        "$ref/refdump" "$dir/$name-ref-f16.gguf" "$p" 0 >"$dir/$name.$i.ref-f16.json" 2>/dev/null
        "$build/weft" logits -m "$dir/$name-ref-f16.gguf" -p "$p" -n 0 --json >"$dir/$name.$i.weft-int16.json" 2>/dev/null
        WEFT_F16_INT16=0 "$build/weft" logits -m "$dir/$name-ref-f16.gguf" -p "$p" -n 0 --json \
            >"$dir/$name.$i.weft-fma.json" 2>/dev/null
    done
    python3 - "$dir" "$name" "${#prompts[@]}" <<'PY'
import json, sys
d, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
errors = {k: [] for k in ("ref-f16", "weft-int16", "weft-fma")}
for i in range(n):
    ref = json.load(open(f"{d}/{name}.{i}.ref-f32.json"))["prompt_logits"]
    for k in errors:
        rows = json.load(open(f"{d}/{name}.{i}.{k}.json"))["prompt_logits"]
        errors[k] += [sum((a - b) ** 2 for a, b in zip(r, q)) / sum(b * b for b in q) for r, q in zip(rows, ref)]
line = " | ".join(f"{k} {sum(e) / len(e):.3g} (worst {max(e):.3g})" for k, e in errors.items())
print(f"{name}: mean row NMSE from the F32 logits: {line}")
PY
done
