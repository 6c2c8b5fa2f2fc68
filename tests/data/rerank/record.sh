#!/usr/bin/env bash
# tests/data/rerank/record.sh — records the fixtures of tests/runtime/test_rerank.cpp: the reranker
# `weft synth` writes (a bert with a classification head, pooling rank) at F32 and Q8_0, and the
# 2026 reference server's answer to one POST /v1/rerank for it (llama-server --reranking), with
# the synth flags, the query and the documents beside it.
#
#   tests/data/rerank/record.sh BUILD_DIR      (from the repository root; needs ../shared)
set -euo pipefail

build=${1:?usage: record.sh BUILD_DIR}
weft="$build/weft"
reference=${REFERENCE:-../shared/bench/reference-2026}
out=tests/data/rerank
synth_args="--arch bert --reranker --embd 64 --layers 2 --heads 4 --ff 128 --vocab 512 --ctx 128"
port=${PORT:-18977}
# A temporary $work with the reference's shared libraries, cleaned up (and $server_pid stopped) on exit.
source tests/common/reference-libs.sh
reference_workspace "$reference"

request='{"query": "what is a cat", "documents": ["a cat is an animal", "The sky is blue!", "cats and dogs", "", "zebra quokka xylophone, 42 times: a long and winding sentence about nothing in particular", "what is a cat"]}'

for type in F32 Q8_0; do
    model="$work/reranker-$type.gguf"
    # shellcheck disable=SC2086
    "$weft" synth "$model" $synth_args --type "${type,,}" >/dev/null
    "$reference/llama-server" --reranking -m "$model" --port "$port" -t 2 --no-webui >"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do
        curl -sf "localhost:$port/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -sf "localhost:$port/v1/rerank" -d "$request" >"$work/answer.json" ||
        { tail -5 "$work/server.log"; echo "rerank failed for $type" >&2; exit 1; }
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    python3 - "$work/answer.json" "$out/reranker-$type.json" "$synth_args" "$request" <<'PY'
import json, sys
answer = json.load(open(sys.argv[1]))
answer.pop("model", None)  # the reference names its file's path
request = json.loads(sys.argv[4])
fixture = {"synth_args": sys.argv[3], "query": request["query"], "documents": request["documents"],
           "answer": answer}
with open(sys.argv[2], "w") as f:
    json.dump(fixture, f, indent=1)
    f.write("\n")
PY
    echo "$type: $out/reranker-$type.json"
done
