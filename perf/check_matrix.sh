#!/usr/bin/env bash
# Correctness matrix of the perf tools: every tool x rank count x transport,
# every dtype and op, sizes 8 B .. 64 MiB, with the result check on.
#   perf/check_matrix.sh [BUILD_DIR] [extra perf flags...]
# Prints one line per run and exits non-zero if any run failed or counted a
# wrong value. Default iterations are lowered (-n 2 -w 1) to keep it short;
# pass "-n 20" to use nccl-tests' default.
set -uo pipefail
build=${1:-build}
shift || true
extra=("$@")
[ ${#extra[@]} -gt 0 ] || extra=(-n 2 -w 1)
tiderun="$build/tools/tiderun/tiderun"
tools=(all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv)
ranks=${RANKS:-"1 2 3 4 8"}
fail=0
for transport in shm tcp; do
  for n in $ranks; do
    for t in "${tools[@]}"; do
      env=()
      [ "$transport" = tcp ] && env=(TIDE_SHM_DISABLE=1)
      start=$(date +%s.%N)
      out=$(env "${env[@]}" timeout 1800 "$tiderun" -n "$n" "$build/perf/${t}_perf" \
            -b 8 -e 64M -f 4 -d all -o all -c 1 "${extra[@]}" 2>&1)
      rc=$?
      secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
      wrong=$(echo "$out" | awk '/^ +[0-9]/ { w += $(NF-4) + $NF } END { print w + 0 }')
      rows=$(echo "$out" | grep -cE '^ +[0-9]')
      status=OK
      if [ $rc -ne 0 ] || [ "$wrong" != 0 ] || [ "$rows" -eq 0 ]; then status=FAIL; fail=1; fi
      printf '%-4s %-15s n=%d rows=%-4d wrong=%-3s rc=%d %6.1fs %s\n' "$transport" "$t" "$n" \
        "$rows" "$wrong" "$rc" "$secs" "$status"
      [ $status = FAIL ] && echo "$out" | tail -20
    done
  done
done
exit $fail
