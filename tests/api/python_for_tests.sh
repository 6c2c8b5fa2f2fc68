# tests/api/python_for_tests.sh — sourced: sets PYTHON to an interpreter with pytest (Debian's
# /usr/bin/python3 first: scripts/install-deps.sh installs python3-pytest for it), or exits 77 (skip).
PYTHON=""
for candidate in /usr/bin/python3 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c "import pytest" 2>/dev/null; then
        PYTHON=$candidate
        break
    fi
done
if [ -z "$PYTHON" ]; then
    echo "no python3 with pytest (Debian: apt-get install python3-pytest, as scripts/install-deps.sh does): skipped" >&2
    exit 77
fi
