#!/usr/bin/env bash
# Builds the libFuzzer target with clang (libFuzzer + ASan + UBSan) and runs it for a
# bounded time from the seed corpus. Usage: tests/fuzz/run.sh SECONDS BUILD_DIR
# Exits non-zero on a crash, a sanitizer report or a leak; the reproducer is left in
# BUILD_DIR/fuzz/ (crash-*).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_TO_RUN=${1:-60}
OUT=${2:-build}/fuzz
CXX=${FUZZ_CXX:-$(command -v clang++-19 || command -v clang++)}
mkdir -p "$OUT/corpus"
cp tests/fuzz/corpus/* "$OUT/corpus/"
SOURCES=(tests/fuzz/request_fuzz.cpp core/request.cpp core/tensor.cpp core/dtype.cpp core/backend.cpp core/abi.cpp core/hash.cpp core/toolchain.cpp core/cpu_target.cpp core/process.cpp core/fsutil.cpp)
if [ ! -x "$OUT/request_fuzz" ] || [ -n "$(find "${SOURCES[@]}" core/*.hpp -newer "$OUT/request_fuzz")" ]; then
  echo "fuzz: building with $CXX"
  "$CXX" -std=c++2b -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
    "${SOURCES[@]}" -lcrypto -o "$OUT/request_fuzz"
fi
cd "$OUT"
./request_fuzz -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout=10 -print_final_stats=1 corpus/
