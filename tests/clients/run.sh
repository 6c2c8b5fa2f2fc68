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
source "$here/../common/node-suite.sh"
node_suite_run "$here" clients.test.mjs @anthropic-ai/sdk openai ollama -- "$@"
