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
if ! command -v node >/dev/null 2>&1; then
    echo "tests/openai: skipped: node is not installed" >&2
    exit 77
fi
if [[ ! -f "$here/node_modules/openai/package.json" ]]; then
    echo "tests/openai: skipped: $here/node_modules/openai is missing (run: cd tests/openai && npm ci)" >&2
    exit 77
fi
exec node "$here/openai-client.test.mjs" "$@"
