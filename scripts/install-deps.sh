#!/usr/bin/env bash
# scripts/install-deps.sh — installs the Debian packages weft builds with (needs root or sudo).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
updated=0
# apt-get install of the packages of the list that are not installed yet
install_missing() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ $updated -eq 0 ]; then $SUDO apt-get update -qq; updated=1; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
}
# the build
install_missing build-essential cmake ninja-build pkg-config libgtest-dev \
    libpcre2-dev libutf8proc-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libssl-dev libstb-dev python3
# the self-signed certificate of the HTTPS test (Https.* skips without the openssl command)
install_missing openssl || echo "install-deps.sh: could not install openssl; the HTTPS tests will skip" >&2
# pipelines across processes and machines (mpirun -np R weft ...); weft builds without them
install_missing openmpi-bin libopenmpi-dev || echo "install-deps.sh: could not install Open MPI; weft builds without pipelines across ranks" >&2
# the Vulkan compute backend (headers, the shader compiler; lavapipe runs its tests on the CPU); weft
# builds without them
install_missing libvulkan-dev glslc mesa-vulkan-drivers || echo "install-deps.sh: could not install the Vulkan packages; weft builds without the Vulkan backend" >&2
# the server's client and browser tests (they skip without these): chromium, and node + npm unless
# the machine has them from elsewhere (NodeSource's node, which Debian's npm would conflict with)
test_pkgs=(chromium)
command -v node >/dev/null || test_pkgs+=(nodejs)
command -v npm >/dev/null || test_pkgs+=(npm)
install_missing "${test_pkgs[@]}" || echo "install-deps.sh: could not install ${test_pkgs[*]}; the browser and npm client tests will skip" >&2
# the oracle the Jinja interpreter's live test compares with (the test skips without it)
install_missing python3-jinja2 || echo "install-deps.sh: could not install python3-jinja2; the live Jinja oracle test will skip" >&2
# the Python package (python/: `pip install ./python`, its pytest suite; the api tests skip without them)
install_missing python3-pip python3-setuptools python3-venv python3-pytest || echo "install-deps.sh: could not install python3-pip, python3-setuptools, python3-venv or python3-pytest; the Python package's tests will skip" >&2
# the NumPy reference forward passes (tests/reference; their tests skip without it)
install_missing python3-numpy || echo "install-deps.sh: could not install python3-numpy; the NumPy reference tests will skip" >&2
