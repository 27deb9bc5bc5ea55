#!/usr/bin/env bash
# Sets everything up and runs every test: the unit and integration suites in a normal
# build, then again built with AddressSanitizer and UndefinedBehaviorSanitizer.
# KFORGE_REQUIRE_BACKENDS=cpu,cuda,rocm turns a missing toolchain into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export KFORGE_REQUIRE_BACKENDS=${KFORGE_REQUIRE_BACKENDS:-cpu}
JOBS=$(nproc)

scripts/setup.sh build
echo "== tests (RelWithDebInfo)"
ctest --test-dir build --output-on-failure -j"$JOBS"

scripts/setup.sh build-asan -DKFORGE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
echo "== tests (AddressSanitizer + UndefinedBehaviorSanitizer)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j"$JOBS"
