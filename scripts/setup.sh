#!/usr/bin/env bash
# Installs what kforge needs from Debian (once), then configures and builds into a
# build directory. Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${1:-build}
shift || true

PACKAGES=(
  build-essential cmake pkg-config ccache git binutils
  libcpp-httplib-dev nlohmann-json3-dev libssl-dev
  libgtest-dev googletest libbenchmark-dev
  hipcc libamdhip64-dev llvm-15 clang-tools-15
  libffi-dev libopenblas-dev bubblewrap
  libjs-chart.js libjs-highlight.js chromium nodejs clang-19 libclang-rt-19-dev
  python3 python3-numpy python3-pytest curl libhiredis-dev libjemalloc-dev libarchive-dev libcli11-dev redis-server nginx-light wrk
  podman runc uidmap debootstrap python3-yaml python3-jsonschema
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  # redis-server and nginx are run by kforge's tests and benches themselves, never as system
  # services: policy-rc.d keeps their packages from starting one (which fails where there is
  # no init, or where port 80 is taken) while they are installed.
  added_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -n "$added_policy" ] && $SUDO rm -f /usr/sbin/policy-rc.d
fi

# The browser test needs npm; Node from elsewhere (NodeSource) brings its own, Debian's
# nodejs does not.
if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive ${SUDO:-} apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

# CUDA is not in Debian main; kforge uses the toolkit at /usr/local/cuda (or $CUDA_HOME).
if [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && ! command -v nvcc >/dev/null; then
  echo "setup: nvcc not found (install the CUDA toolkit at /usr/local/cuda); the cuda backend will be unavailable"
fi

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
