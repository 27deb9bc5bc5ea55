#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/CMakeLists.txt, with clang: libFuzzer + ASan +
# UBSan) and runs each for a bounded time from its seed corpus, two at a time.
#   tests/fuzz/run.sh build BUILD_DIR               configure and build every target
#   tests/fuzz/run.sh run SECONDS BUILD_DIR TARGET  run one (request, http_head, headers,
#                                                   archive, settings, config)
# A run exits non-zero on a crash, a sanitizer report, a leak or a timeout; the reproducer
# is left in BUILD_DIR/fuzz/<target>/ (crash-*, leak-*, timeout-*): add it to
# tests/fuzz/corpus/<target>/ as a regression input once fixed. Each run prints libFuzzer's
# final stats (executions, coverage).
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  build)
    OUT=${2:-build}/fuzz
    CXX=${FUZZ_CXX:-$(command -v clang++-19 || command -v clang++)}
    cmake -S tests/fuzz -B "$OUT" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=None >/dev/null
    cmake --build "$OUT" -j"$(nproc)"
    ;;
  run)
    SECONDS_TO_RUN=$2
    OUT=$3/fuzz
    TARGET=$4
    WORK="$OUT/$TARGET"
    rm -rf "$WORK"
    mkdir -p "$WORK/corpus"
    cp tests/fuzz/corpus/"$TARGET"/* "$WORK/corpus/"
    cd "$WORK"
    # Stack traces with function names and lines.
    for s in /usr/lib/llvm-19/bin/llvm-symbolizer "$(command -v llvm-symbolizer || true)"; do
      if [ -x "$s" ]; then export ASAN_SYMBOLIZER_PATH=$s; break; fi
    done
    # The inputs found to add coverage go to corpus/ (a scratch copy); the seeds stay as committed.
    rc=0
    "../${TARGET}_fuzz" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix=./ corpus/ || rc=$?
    # A finding on a CI machine is gone with it: print each reproducer (its first 3 KiB in
    # base64), to be decoded into tests/fuzz/corpus/$TARGET/ (base64 -d).
    for f in crash-* leak-* timeout-* oom-*; do
      [ -f "$f" ] || continue
      echo "reproducer $f ($(stat -c %s "$f") bytes), base64: $(head -c 3072 "$f" | base64 -w0)"
    done
    exit "$rc"
    ;;
  *)
    echo "usage: tests/fuzz/run.sh build BUILD_DIR | run SECONDS BUILD_DIR TARGET" >&2
    exit 2
    ;;
esac
