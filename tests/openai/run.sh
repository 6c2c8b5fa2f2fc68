#!/usr/bin/env bash
# tests/openai/run.sh — runs openai-client.test.mjs: `weft serve` through the official openai npm
# client. Run from the repository root with WEFT_BINARY set (default: build/weft):
#   WEFT_BINARY=build/weft tests/openai/run.sh
# Exits 77 (skipped) when node or tests/openai/node_modules/openai is missing; install the pinned
# client with: (cd tests/openai && npm ci)
set -euo pipefail
here="${BASH_SOURCE[0]%/*}"
[[ "$here" == "${BASH_SOURCE[0]}" ]] && here=.
here="$(cd "$here" && pwd)"
source "$here/../common/node-suite.sh"
node_suite_run "$here" openai-client.test.mjs openai -- "$@"
