#!/usr/bin/env bash
# Every collective over the UCX net (TIDE_NET=ucx), result check on (-c 1),
# in one of two setups:
#   ucx_colls.sh local TIDERUN PERF_DIR NRANKS
#       one node, UCX_TLS=sm,self, TIDE_SHM_DISABLE=1 (UCX carries everything)
#   ucx_colls.sh ns TIDERUN PERF_DIR NODES PPN
#       NODES network namespaces (tests/multinode/cluster.sh, name prefix "ux",
#       deleted on exit) x PPN ranks, UCX_TLS=tcp, TIDE_SHM_DISABLE=1. Root only.
# Fails when a tool fails or reports wrong values; skips (77) when it cannot run.
set -u
mode=$1 tiderun=$2 perf=$3
shift 3
here=$(dirname "$(readlink -f "$0")")
tools="all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv"
args=(-b 8 -e 8M -f 8 -w 1 -n 2 -c 1)
export TIDE_NET=ucx TIDE_SHM_DISABLE=1

case "$mode" in
  local)
    nranks=$1
    export UCX_TLS=sm,self
    run() { timeout 300 "$tiderun" -n "$nranks" "$perf/$1_perf" "${args[@]}"; }
    ;;
  ns)
    nodes=$1 ppn=$2
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
    export UCX_TLS=tcp CLUSTER_TIMEOUT=240
    name=ux$$
    cluster="$here/../multinode/cluster.sh"
    trap '"$cluster" down "$name"' EXIT
    "$cluster" up "$name" "$nodes" >/dev/null
    rc=$?
    [ $rc -eq 0 ] || exit $rc
    run() { timeout 300 "$cluster" tiderun "$name" "$nodes" "$ppn" "$tiderun" \
      "$perf/$1_perf" "${args[@]}"; }
    ;;
  *)
    echo "usage: $0 local TIDERUN PERF_DIR NRANKS | ns TIDERUN PERF_DIR NODES PPN" >&2
    exit 2
    ;;
esac

failed=0
for t in $tools; do
  out=$(run "$t" 2>&1)
  rc=$?
  if printf '%s\n' "$out" | grep -q "net ucx cannot be used"; then
    echo "SKIP: the UCX net cannot run here"
    printf '%s\n' "$out" | grep "cannot be used" | head -3
    exit 77
  fi
  wrong=$(printf '%s\n' "$out" | awk '/^ +[0-9]+ +[0-9]+ /{ w += $9 + $13 } END { print w + 0 }')
  if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -q "Out of bounds values : 0 OK" ||
     [ "$wrong" != 0 ]; then
    echo "FAIL: $t (exit $rc, #wrong $wrong)"
    printf '%s\n' "$out" | tail -30
    failed=1
  else
    busbw=$(printf '%s\n' "$out" | awk '/^ +[0-9]+ +[0-9]+ /{ s = $1 " B: " $8 " GB/s" } END { print s }')
    echo "ok: $t (#wrong 0, largest $busbw)"
  fi
done
exit $failed
