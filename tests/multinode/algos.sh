#!/usr/bin/env bash
# Every collective with every algorithm forced (TIDE_ALGO), on NODES network
# namespaces x PPN ranks, with the result check on: any #wrong or failure
# fails the test (the first algorithm with every dtype x op, the others with
# float32 x every op). Skips (77) when not root.
#   algos.sh TIDERUN PERF_DIR NODES PPN "ALGOS" [tool args...]
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tiderun=$1 perfdir=$2 nodes=$3 ppn=$4 algos=$5
shift 5
args=("$@")
custom=1
[ ${#args[@]} -gt 0 ] || { custom=0; args=(-b 8 -e 1M -f 32 -n 1 -w 0 -c 1 -d all -o all); }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
name=tide-al$$
"$here/cluster.sh" up "$name" "$nodes" >/dev/null || exit $?
trap '"$here/cluster.sh" down "$name"' EXIT
fail=0
for tool in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  list=$algos
  # AlltoAll and send/receive have one route each: one run, no TIDE_ALGO.
  case $tool in alltoall | sendrecv) list=default ;; esac
  for algo in $list; do
    [ "$algo" = default ] && algo=
    # Every dtype x op with the first algorithm; float32 x every op with the
    # others (their arithmetic is the shared kernels; tests/multirank's
    # fake-node batches run every algorithm x dtype x op).
    run_args=("${args[@]}")
    if [ "$custom" = 0 ] && [ "$algo" != "${list%% *}" ]; then
      run_args=(-b 8 -e 1M -f 32 -n 1 -w 0 -c 1 -d float -o all)
    fi
    t0=$(date +%s%N)
    out=$(TIDE_ALGO=$algo CLUSTER_TIMEOUT=240 "$here/cluster.sh" tiderun "$name" "$nodes" "$ppn" \
      "$tiderun" "$perfdir/${tool}_perf" "${run_args[@]}" 2>&1)
    rc=$?
    wrong=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 13 {s += $9 + $13} END {print s + 0}')
    echo "$tool TIDE_ALGO=${algo:-(unset)}: rc=$rc wrong=$wrong ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
    if [ $rc -ne 0 ] || [ "$wrong" != 0 ]; then
      fail=1
      printf '%s\n' "$out" | tail -20
    fi
  done
done
exit $fail
