#!/usr/bin/env bash
# Sourced by .ci/run (needs $jobs). ASan + UBSan stage (run_asan).

# The sanitizer stages run the multi-rank tests' reduced matrix
# (TIDE_TEST_REDUCED=1, see tests/multirank/coll_check.h): every collective x
# dtype x op x in/out of place x root at the small counts, fewer large cases.
run_asan() {
  sanitized_build build-asan address,undefined unit fault multirank
  TIDE_TEST_REDUCED=1 \
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    meson test -C build-asan --no-rebuild --suite unit --suite fault --suite multirank \
      --print-errorlogs --num-processes 2 --timeout-multiplier 3
}

