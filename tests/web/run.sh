#!/usr/bin/env bash
# tests/web/run.sh — runs chat-page.test.mjs: the chat page of `weft serve` in headless Chromium.
# Run from the repository root with WEFT_BINARY set (default: build/weft):
#   WEFT_BINARY=build/weft tests/web/run.sh
# Exits 77 (skipped) when node, /usr/bin/chromium or tests/web/node_modules/playwright-core is
# missing. Install them with: apt-get install -y nodejs npm chromium; (cd tests/web && npm ci)
set -euo pipefail
here="${BASH_SOURCE[0]%/*}"
[[ "$here" == "${BASH_SOURCE[0]}" ]] && here=.
here="$(cd "$here" && pwd)"
source "$here/../common/node-suite.sh"
if [[ ! -x /usr/bin/chromium ]]; then
    echo "tests/web: skipped: /usr/bin/chromium is missing (apt-get install -y chromium)" >&2
    exit 77
fi
node_suite_run "$here" chat-page.test.mjs playwright-core -- "$@"
