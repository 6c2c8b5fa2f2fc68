# scripts/reference-env.sh — sourced (with no arguments) by the scripts that run the 2026 reference by
# hand beside weft: moves to the repository root, takes the caller's first argument as the build folder
# (default build; shifted away), sets ref (REF=path/to/reference-2026 overrides
# ../shared/bench/reference-2026) and dir (a temporary folder, removed at exit), and puts the
# reference's libraries on LD_LIBRARY_PATH by their versioned names (a copy may have turned its
# symbolic links into small files naming the target: linked again in a folder of our own).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
ref=${REF:-../shared/bench/reference-2026}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/lib"
for f in "$ref"/lib*.so*; do
    if [ "$(stat -c %s "$f")" -lt 64 ]; then ln -s "$(cat "$f")" "$dir/lib/$(basename "$f")"; else ln -s "$(realpath "$f")" "$dir/lib/"; fi
done
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
