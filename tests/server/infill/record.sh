#!/usr/bin/env bash
# tests/server/infill/record.sh — records how the 2026 reference server assembles /infill prompts,
# the expectation of tests/server/test_native_api.cpp (NativeApi.InfillPromptsAreTheReferences).
#
#   tests/server/infill/record.sh BUILD_DIR      (from the repository root)
#
# The reference llama-server runs on the model `weft synth --fim` writes (Qwen2.5-Coder's FIM
# tokens) with a slot of 1024 positions, batches of 256 and --n-predict 64 (so that the prefix, the
# suffix and the extra chunks are all cut); every body of requests.json is POSTed to its /infill
# with n_predict 1 and the prompt it answers (its text, special tokens written out) and its length
# in tokens go to expected.json.
set -euo pipefail

build=${1:?usage: record.sh BUILD_DIR}
reference=${REFERENCE:-../shared/bench/reference-2026}
here=tests/server/infill
port=${PORT:-18951}
# A temporary $work with the reference's shared libraries, cleaned up (and $server_pid stopped) on exit.
source tests/common/reference-libs.sh
reference_workspace "$reference"

model="$work/fim.gguf"
"$build/weft" synth "$model" --arch qwen2 --embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 --vocab 400 \
    --seed 7 --fim >/dev/null
"$reference/llama-server" -m "$model" --port "$port" --no-webui -c 1024 -b 256 -n 64 -np 1 -t 1 \
    >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
done
python3 - "$port" "$here" <<'PY'
import json, sys, urllib.request
port, here = sys.argv[1:]
out = []
for body in json.load(open(f"{here}/requests.json")):
    body = dict(body, n_predict=1, temperature=0)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/infill", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    answer = json.load(urllib.request.urlopen(req))
    out.append({"prompt": answer["prompt"], "tokens_evaluated": answer["tokens_evaluated"]})
with open(f"{here}/expected.json", "w", encoding="utf-8") as f:
    json.dump(out, f, indent=1, ensure_ascii=False)
    f.write("\n")
PY
echo "recorded $(python3 -c "import json; print(len(json.load(open('$here/expected.json'))))") infill prompts"
