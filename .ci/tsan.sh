#!/usr/bin/env bash
# Sourced by .ci/run (needs $jobs). TSan stage (run_tsan).

run_tsan() {
  # -O1 with line tables only (-g1): quicker to compile than debugoptimized's
  # -O2 -g, and TSan's reports still carry file:line.
  local tsan_args="-Doptimization=1 -Ddebug=false -Dc_args=-g1 -Dcpp_args=-g1"
  local SANITIZED_MESON_ARGS=${SANITIZED_MESON_ARGS-$tsan_args}
  sanitized_build build-tsan thread multirank fault
  local -x TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
  # Reduced matrix, types x ops thinned (tests/multirank/coll_check.h).
  local -x TIDE_TEST_REDUCED=2
  # Every multirank test but shim_host_ranks: it forks ranks without exec
  # from a threaded process, which TSan cannot follow (the ASan stage runs it).
  # Of the forced-algorithm batches only shm_1to4 and nodes_2x2 (every row,
  # one and two levels): the others run the same rows' threads at other rank
  # counts, layouts and chunk sizes (140 s under TSan), which stages test and
  # asan cover.
  local tests t0 rc=0
  tests=$(meson test -C build-tsan --no-rebuild --list --suite multirank 2>/dev/null |
    sed -n 's#^tide:multirank / ##p' | grep -vx shim_host_ranks |
    grep -vxE 'multirank_algos_(shm_5_6|nodes_unequal|nodes_3x2|net_3_5|nodes_small_chunks)')
  t0=$(date +%s)
  # shellcheck disable=SC2086
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes 2 \
    --timeout-multiplier 4 $tests fault_threads_shm fault_threads_tcp || rc=$?
  echo "== build-tsan tests ran in $(( $(date +%s) - t0 )) s"
  return "$rc"
}
