#!/usr/bin/env bash
# Sets everything up and runs every test: the unit and integration suites in a normal
# build (with the status page in headless Chromium and the request-parser fuzzer), then
# the unit and integration suites again built with AddressSanitizer and
# UndefinedBehaviorSanitizer. KFORGE_REQUIRE_BACKENDS=cpu,cuda,rocm turns a missing
# toolchain into a failure.
#
# Every phase runs and reports even when one before it failed (a failed build skips only
# the tests of that build); the last lines sum up each phase and every test, and the exit
# code is non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export KFORGE_REQUIRE_BACKENDS=${KFORGE_REQUIRE_BACKENDS:-cpu}
JOBS=$(nproc)
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

summary=()
failures=()
failed_phases=0
tests_passed=0
tests_failed=0

# phase NAME COMMAND...: runs it, records passed/FAILED and how long it took.
phase() {
  local name=$1
  shift
  echo "== $name"
  local start=$SECONDS
  if "$@"; then
    summary+=("passed  $name ($((SECONDS - start)) s)")
    return 0
  fi
  summary+=("FAILED  $name ($((SECONDS - start)) s)")
  failed_phases=$((failed_phases + 1))
  return 1
}

# failed_tails LOG: what each failed test printed (ctest --output-on-failure prints it
# after the test's status line): its first lines that name an error and its last lines,
# at most eight tests, so that a log read only from its end (a CI report) still says why.
failed_tails() {
  awk -v keep=15 -v most=8 '
    function flush(  i, s) {
      if (cur == "") return
      if (++shown <= most) {
        print "  -- " cur
        s = n > keep ? n - keep : 0
        for (i = 0; i < nhits; i++) if (at[i] < s) print "     " hit[i]
        if (nhits && at[0] < s) print "     ..."
        for (i = s; i < n; i++) print "     " buf[i % keep]
      }
      cur = ""
    }
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / || /^ *Start +[0-9]+: / || /tests passed, / {
      flush()
      if ($0 ~ /\*\*\*(Failed|Timeout|Exception)/) {
        cur = $0; gsub(/ \.+/, " ", cur); sub(/^ +/, "", cur); n = 0; nhits = 0
      }
      next
    }
    cur != "" {
      if (nhits < 6 && $0 ~ /ERROR|FAIL|[Ee]rror:|disagree|SUMMARY|Failure/) { at[nhits] = n; hit[nhits++] = $0 }
      buf[n % keep] = $0; n++
    }
    END { flush(); if (shown > most) print "  (and " shown - most " more failed tests above)" }' "$1"
}

# ctest_phase NAME BUILD_DIR: ctest over a build, its counts added to the totals.
ctest_phase() {
  local name=$1 dir=$2 log="$LOGS/$(basename "$2").log"
  phase "$name" bash -c 'ctest --test-dir "$1" --output-on-failure -j"$2" 2>&1 | tee "$3"; exit "${PIPESTATUS[0]}"' \
    _ "$dir" "$JOBS" "$log"
  local rc=$?
  # "97% tests passed, 2 tests failed out of 85"
  local line
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    tests_failed=$((tests_failed + BASH_REMATCH[1]))
    tests_passed=$((tests_passed + BASH_REMATCH[2] - BASH_REMATCH[1]))
  elif ((rc != 0)); then
    tests_failed=$((tests_failed + 1))  # ctest itself failed: count the phase as one failure
  fi
  local tails
  tails=$(failed_tails "$log")
  [[ -z $tails ]] || failures+=("$name:" "$tails")
}

if phase "build (RelWithDebInfo)" scripts/setup.sh build; then
  ctest_phase "tests (RelWithDebInfo)" build
else
  summary+=("SKIPPED tests (RelWithDebInfo): the build failed")
  tests_failed=$((tests_failed + 1))  # the build counts as one failed check
fi

if phase "build (AddressSanitizer + UndefinedBehaviorSanitizer)" \
  scripts/setup.sh build-asan -DKFORGE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest_phase "tests (AddressSanitizer + UndefinedBehaviorSanitizer)" build-asan
else
  summary+=("SKIPPED tests (AddressSanitizer + UndefinedBehaviorSanitizer): the build failed")
  tests_failed=$((tests_failed + 1))
fi

echo
if ((${#failures[@]})); then
  echo "== what the failed tests printed last"
  printf '%s\n' "${failures[@]}"
  echo
fi
echo "== summary"
printf '  %s\n' "${summary[@]}"
echo "test.sh: $tests_passed passed, $tests_failed failed"
((failed_phases == 0))
