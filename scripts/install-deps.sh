#!/usr/bin/env bash
# scripts/install-deps.sh — installs the Debian packages weft builds with (needs root or sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libgtest-dev
      libpcre2-dev libutf8proc-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
