#!/usr/bin/env bash
# tests/template/jinja/reference/record.sh — records how the 2026 reference server renders the chat
# templates of the reasoning families, the expectations of tests/server/test_chat_reference.cpp.
#
#   tests/template/jinja/reference/record.sh BUILD_DIR      (from the repository root)
#
# For each template below (tests/template/jinja/templates/NAME.jinja) the reference llama-server
# runs with --jinja --chat-template-file on a tiny model `weft synth` writes, and every request body
# of conversations/ is POSTed to its /apply-template; the prompt it answers is written to
# expected/NAME--CONVERSATION.txt (an HTTP error: .error with its message). cases.json records the
# model's bos/eos tokens and the day (templates that print the date print this one).
#
# Where the templates come from (model data that GGUF files carry as tokenizer.chat_template):
# gpt-oss.jinja is openai/gpt-oss-120b's (as llama.cpp keeps it in models/templates/
# openai-gpt-oss-120b.jinja); deepseek-v3.1.jinja, glm-4.5.jinja and lfm2.jinja are llama.cpp's
# models/templates/deepseek-ai-DeepSeek-V3.1.jinja, glm_4_5.jinja and llama-cpp-lfm2.jinja;
# qwen3.jinja (Qwen/Qwen3-8B) and deepseek-r1.jinja (DeepSeek-R1-Distill) were checked in before.
# gemma4.jinja is llama.cpp's models/templates/gemma4.jinja; smollm3.jinja is HuggingFaceTB/SmolLM3-3B's;
# granite4.jinja is the tokenizer.chat_template of a granite-4.0-h GGUF (6418 bytes); qwen3.5.jinja is
# that of Qwen3.5-0.8B's GGUF; llama4.jinja is meta-llama/Llama-4-Scout's (as transformers keeps it).
# (Mistral Small 3.1's template is not here: this reference refuses it at start, "lexer: unknown
# escape character \" for the backslash-newline inside its strings.)
set -euo pipefail

build=${1:?usage: record.sh BUILD_DIR}
weft="$build/weft"
reference=${REFERENCE:-../shared/bench/reference-2026}
here=tests/template/jinja/reference
templates=tests/template/jinja/templates
port=${PORT:-18947}
# A temporary $work with the reference's shared libraries, cleaned up (and $server_pid stopped) on exit.
source tests/common/reference-libs.sh
reference_workspace "$reference"

model="$work/model.gguf"
"$weft" synth "$model" --arch llama --embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 --vocab 300 --seed 7 >/dev/null

names=(gpt-oss qwen3 deepseek-r1 deepseek-v3.1 glm-4.5 lfm2 gemma4 smollm3 granite4 qwen3.5 llama4)
rm -f "$here"/expected/*
for name in "${names[@]}"; do
    "$reference/llama-server" -m "$model" --jinja --chat-template-file "$templates/$name.jinja" \
        --port "$port" --no-webui -c 512 -t 1 >"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    python3 - "$port" "$here" "$name" <<'PY'
import json, os, sys, urllib.request, urllib.error
port, here, name = sys.argv[1:]
for conv in sorted(os.listdir(os.path.join(here, "conversations"))):
    stem = conv[: -len(".json")]
    body = open(os.path.join(here, "conversations", conv), "rb").read()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/apply-template", data=body,
                                 headers={"Content-Type": "application/json"})
    base = os.path.join(here, "expected", f"{name}--{stem}")
    try:
        prompt = json.load(urllib.request.urlopen(req))["prompt"]
        open(base + ".txt", "w", encoding="utf-8", newline="").write(prompt)
    except urllib.error.HTTPError as e:
        message = json.load(e).get("error", {}).get("message", "")
        open(base + ".error", "w", encoding="utf-8").write(message + "\n")
PY
    props=$(curl -s "http://127.0.0.1:$port/props")
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=
    echo "$name: $(ls "$here"/expected/"$name"--* | wc -l) renderings"
done
python3 - "$here" "$props" "${names[@]}" <<'PY'
import datetime, json, sys
here, props, names = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
cases = {"date": datetime.date.today().isoformat(), "bos_token": props["bos_token"],
         "eos_token": props["eos_token"], "templates": names}
with open(f"{here}/cases.json", "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")
PY
