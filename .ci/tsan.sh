#!/usr/bin/env bash
# Sourced by .ci/run (needs $jobs). TSan stage (run_tsan).

run_tsan() {
  sanitized_build build-tsan thread multirank fault
  local -x TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
  local -x TIDE_TEST_REDUCED=1
  # Every multirank test but shim_host_ranks: it forks ranks without exec
  # from a threaded process, which TSan cannot follow (the ASan stage runs it).
  local tests
  tests=$(meson test -C build-tsan --no-rebuild --list --suite multirank 2>/dev/null |
    sed -n 's#^tide:multirank / ##p' | grep -vx shim_host_ranks)
  # shellcheck disable=SC2086
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes 2 \
    --timeout-multiplier 4 $tests
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes 2 \
    --timeout-multiplier 4 fault_threads_shm fault_threads_tcp
}

