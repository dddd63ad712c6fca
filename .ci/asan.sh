#!/usr/bin/env bash
# Sourced by .ci/run (needs $jobs). ASan + UBSan stage (run_asan).

# The sanitizer stages run the multi-rank tests' reduced matrix
# (TIDE_TEST_REDUCED=1, see tests/multirank/coll_check.h): every collective x
# dtype x op x in/out of place x root at the small counts, fewer large cases.
# The build is -O1 -g1 (see sanitized_build). LeakSanitizer suppresses only
# third-party libraries' own leaks (tests/sanitizers/lsan.supp). Session 5, on
# 2 cores shared with 4 other builds (load 9-16): build 1332 s (14.4 min of
# CPU in all), tests 587 s (891 s of test time summed over 2 processes).
run_asan() {
  sanitized_build build-asan address,undefined unit fault multirank
  # shellcheck disable=SC2046
  TIDE_TEST_REDUCED=1 \
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0} \
  LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    meson test -C build-asan --no-rebuild --print-errorlogs --num-processes 2 \
      --timeout-multiplier 3 $(asan_tests)
}

# Every test of suites unit, fault and multirank but three that wait out
# timeouts and run the same code as their neighbours (fault_stop_tcp and
# fault_stop_shm: a stopped rank, 11 s each; fault_netns_shaped: a slow link),
# which stage test runs unsanitized; fault_netns_linkdown and the kill tests
# keep the error paths under ASan. And unit_device_coll_logic: an exhaustive
# enumeration of the device engine's pure index arithmetic (22 s under ASan),
# no allocation or threads.
asan_tests() {
  meson test -C build-asan --no-rebuild --list --suite unit --suite fault --suite multirank \
    2>/dev/null | sed -n 's#^tide:[a-z]* / ##p' |
    grep -vxE 'fault_stop_(shm|tcp)|fault_netns_shaped|unit_device_coll_logic'
}
