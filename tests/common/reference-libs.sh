# tests/common/reference-libs.sh — sourced by the scripts that run the 2026 reference engine
# (tests/*/record.sh): `reference_libs WORK_DIR REFERENCE_DIR` links the reference's shared libraries
# by their versioned names into WORK_DIR/lib (where a copy turned its symbolic links into small text
# files naming the target, it links the target) and puts that folder first on LD_LIBRARY_PATH.
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
