# tests/common/reference-libs.sh — sourced by the scripts that run the 2026 reference engine
# (tests/*/record.sh).
#
# `reference_libs WORK_DIR REFERENCE_DIR` links the reference's shared libraries by their versioned
# names into WORK_DIR/lib (where a copy turned its symbolic links into small text files naming the
# target, it links the target) and puts that folder first on LD_LIBRARY_PATH.
#
# `reference_workspace REFERENCE_DIR` makes a temporary folder `$work` with those libraries, and on
# exit stops the server whose pid the script keeps in `$server_pid` (if any) and removes `$work`.
reference_libs() {
    local libs="$1/lib" reference=$2 f name
    mkdir -p "$libs"
    for f in "$reference"/lib*.so*; do
        name=$(basename "$f")
        if [ "$(stat -c %s "$f")" -lt 64 ] && ! grep -q $'\x7fELF' "$f" 2>/dev/null; then
            ln -s "$(cat "$f")" "$libs/$name"
        else
            ln -s "$(realpath "$f")" "$libs/$name"
        fi
    done
    export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

reference_workspace_cleanup() {
    if [ -n "${server_pid:-}" ]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}

reference_workspace() {
    work=$(mktemp -d)
    server_pid=
    trap reference_workspace_cleanup EXIT
    reference_libs "$work" "$1"
}
