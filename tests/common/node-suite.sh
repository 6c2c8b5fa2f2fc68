# tests/common/node-suite.sh — sourced by the npm suites' run.sh (tests/openai, tests/clients,
# tests/web): `node_suite_run SUITE_DIR SCRIPT PACKAGE...` runs node on SUITE_DIR/SCRIPT with the
# caller's arguments after `--`, or exits 77 (skipped, with the reason on stderr) when node or one of
# the pinned packages is missing from SUITE_DIR/node_modules.
node_suite_run() {
    local dir="$1" script="$2"
    shift 2
    local name="tests/${dir##*/}" packages=()
    while [[ $# -gt 0 && "$1" != -- ]]; do
        packages+=("$1")
        shift
    done
    [[ $# -gt 0 ]] && shift
    if ! command -v node >/dev/null 2>&1; then
        echo "$name: skipped: node is not installed" >&2
        exit 77
    fi
    local package
    for package in "${packages[@]}"; do
        if [[ ! -f "$dir/node_modules/$package/package.json" ]]; then
            echo "$name: skipped: $dir/node_modules/$package is missing (run: cd $name && npm ci)" >&2
            exit 77
        fi
    done
    exec node "$dir/$script" "$@"
}
