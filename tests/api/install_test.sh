#!/usr/bin/env bash
# tests/api/install_test.sh BUILD_DIR SOURCE_DIR — what `cmake --install` gives, used as an application
# would: installs BUILD_DIR into a temporary prefix, builds examples/ against that prefix (not the
# build tree) with find_package and with pkg-config, checks that simple and simple-cpp print what the
# installed `weft run --temp 0 --repeat-penalty 1.0` prints and fail cleanly on a bad path, that
# libweft.so exports weft_* alone, and that `pip install ./python` bundles the installed library.
set -euo pipefail
build_dir=$(cd "$1" && pwd) source_dir=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build_dir" --prefix "$prefix" >"$tmp/install.log"
libdir=$(dirname "$(find "$prefix" -name 'libweft.so.1' | head -1)")
[ -f "$prefix/include/weft.h" ] && [ -x "$prefix/bin/weft" ] && [ -f "$libdir/pkgconfig/weft.pc" ] \
    && [ -f "$libdir/cmake/weft/weftConfig.cmake" ] || { echo "install is missing files:"; find "$prefix"; exit 1; }
soname=$(objdump -p "$libdir/libweft.so.1" | awk '/SONAME/ {print $2}')
[ "$soname" = libweft.so.1 ] || { echo "SONAME is '$soname', not libweft.so.1"; exit 1; }
leaked=$(nm -D --defined-only "$libdir/libweft.so.1" | awk '{print $3}' | grep -v '^weft_' || true)
[ -z "$leaked" ] || { echo "libweft.so exports more than weft_*:"; echo "$leaked" | head -20; exit 1; }

model=$source_dir/models/stories260K.gguf
prompt="Once upon a time"
expected=$("$prefix/bin/weft" run -m "$model" -p "$prompt" -n 48 --temp 0 --repeat-penalty 1.0 2>/dev/null)
[ -n "$expected" ] || { echo "weft run printed nothing"; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
for way in find_package pkg-config; do
    out=$tmp/examples-$way
    if [ $way = find_package ]; then
        cmake -S "$source_dir/examples" -B "$out" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/$way.log"
    else
        PKG_CONFIG_PATH=$libdir/pkgconfig cmake -S "$source_dir/examples" -B "$out" "${generator[@]}" \
            -DWEFT_EXAMPLES_PKGCONFIG=ON >"$tmp/$way.log"
    fi
    cmake --build "$out" >>"$tmp/$way.log" || { cat "$tmp/$way.log"; exit 1; }
    for exe in simple simple-cpp; do
        got=$("$out/$exe" "$model" "$prompt" 48)
        if [ "$got" != "$expected" ]; then
            printf '%s (%s) printed:\n%s\nweft run printed:\n%s\n' "$exe" "$way" "$got" "$expected"
            exit 1
        fi
        if "$out/$exe" /no/such/model.gguf "$prompt" 4 >"$tmp/bad.out" 2>"$tmp/bad.err"; then
            echo "$exe ($way) succeeded with a bad path"; exit 1
        fi
        grep -q "/no/such/model.gguf" "$tmp/bad.err" || { echo "$exe: no message naming the path:"; cat "$tmp/bad.err"; exit 1; }
        [ ! -s "$tmp/bad.out" ] || { echo "$exe printed on stdout for a bad path"; exit 1; }
        echo "$exe ($way): the same text as weft run; a bad path: $(cat "$tmp/bad.err")"
    done
done

# the Python package, installed from the installed library (bundled into the package)
for python in /usr/bin/python3 python3; do
    command -v "$python" >/dev/null && "$python" -m pip --version >/dev/null 2>&1 && break
    python=""
done
if [ -z "$python" ]; then
    echo "no python3 with pip: the Python package's install is not checked"
    exit 0
fi
cp -r "$source_dir/python" "$tmp/python-src"  # pip builds in the tree: a copy keeps the checkout clean
rm -rf "$tmp/python-src/build" "$tmp/python-src"/*.egg-info "$tmp/python-src/weft"/libweft.so*
WEFT_LIBRARY=$libdir/libweft.so.1 "$python" -m pip install --no-build-isolation --no-index --no-deps \
    --target "$tmp/site" "$tmp/python-src" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
[ -f "$tmp/site/weft/libweft.so.1" ] || { echo "pip install did not bundle libweft.so.1"; cat "$tmp/pip.log"; exit 1; }
got=$(cd "$tmp" && env -u WEFT_LIBRARY PYTHONPATH="$tmp/site" "$python" -c '
import sys, weft
llm = weft.Llama(model_path=sys.argv[1], verbose=False)
print(llm(sys.argv[2], max_tokens=48, temperature=0, repeat_penalty=1.0)["choices"][0]["text"])
' "$model" "$prompt")
if [ "$got" != "$expected" ]; then
    printf 'weft.Llama (pip-installed) printed:\n%s\nweft run printed:\n%s\n' "$got" "$expected"
    exit 1
fi
echo "pip install: bundled libweft.so.1; weft.Llama prints the same text as weft run"
