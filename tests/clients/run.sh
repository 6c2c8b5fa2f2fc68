#!/usr/bin/env bash
# tests/clients/run.sh — runs clients.test.mjs: the Anthropic Messages, OpenAI Responses and Ollama
# routes of `weft serve` through @anthropic-ai/sdk, openai and ollama. Run from the repository root
# with WEFT_BINARY set (default: build/weft):
#   WEFT_BINARY=build/weft tests/clients/run.sh
# Exits 77 (skipped) when node or one of the pinned clients is missing; install them with:
# (cd tests/clients && npm ci)
set -euo pipefail
here="${BASH_SOURCE[0]%/*}"
[[ "$here" == "${BASH_SOURCE[0]}" ]] && here=.
here="$(cd "$here" && pwd)"
if ! command -v node >/dev/null 2>&1; then
    echo "tests/clients: skipped: node is not installed" >&2
    exit 77
fi
for package in @anthropic-ai/sdk openai ollama; do
    if [[ ! -f "$here/node_modules/$package/package.json" ]]; then
        echo "tests/clients: skipped: $here/node_modules/$package is missing (run: cd tests/clients && npm ci)" >&2
        exit 77
    fi
done
exec node "$here/clients.test.mjs" "$@"
