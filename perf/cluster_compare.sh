#!/usr/bin/env bash
# Multi-node comparison on a namespace "cluster" (tests/multinode/cluster.sh):
# NODES namespaces x PPN ranks joined by a bridge, every node's link shaped
# to RATE with tc htb. For each of R repetitions, alternating: Tide with the
# automatic choice, Tide with each forced algorithm (TIDE_ALGO), and Open MPI
# (pml ob1, btl tcp,self) across the same namespaces. Prints per size the
# median out-of-place busbw of each, hier/ring, auto/MPI and auto/best-forced
# ratios, the cost model's predicted times (from the auto run's
# TIDE_DEBUG=INFO choice lines) against the measured ones, and the
# inter-node bytes per rank (--traffic). Root only.
#
#   perf/cluster_compare.sh [-B BUILD] [-R 3] [-n 2] [-p 2] [-r 1gbit|none]
#                           [-b 8] [-e 64M] [-f 2] [-A "ring hier tree rhd"]
#                           [-C all_reduce] [-o DIR] [-- extra tool args]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build=${BUILD:-$repo/build}
reps=3 nodes=2 ppn=2 rate=1gbit minb=8 maxb=64M factor=2 coll=all_reduce
algos="ring hier tree rhd"
out=$repo/perf/results/cluster-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
  case "$1" in
    -B) build=$2; shift 2 ;;
    -R) reps=$2; shift 2 ;;
    -n) nodes=$2; shift 2 ;;
    -p) ppn=$2; shift 2 ;;
    -r) rate=$2; shift 2 ;;
    -b) minb=$2; shift 2 ;;
    -e) maxb=$2; shift 2 ;;
    -f) factor=$2; shift 2 ;;
    -A) algos=$2; shift 2 ;;
    -C) coll=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --) shift; break ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
extra=("$@")
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)"; exit 77; }
mkdir -p "$out"
cluster=$repo/tests/multinode/cluster.sh
name=tide-cc$$
[ "$rate" = none ] && rate=""
"$cluster" up "$name" "$nodes" $rate >/dev/null 2>&1 || { echo "cannot build the cluster"; exit 1; }
trap '"$cluster" down "$name"' EXIT
tool=(-b "$minb" -e "$maxb" -f "$factor" -d float -o sum -n 5 -w 2 "${extra[@]}")
echo "cluster: $nodes nodes x $ppn ranks, link ${rate:-unshaped}; $coll ${tool[*]}; load $(cut -d' ' -f1-3 /proc/loadavg)"
fail=0
for ((r = 1; r <= reps; r++)); do
  check=()
  [ "$r" = 1 ] && check=(-c 1)
  TIDE_DEBUG=INFO "$cluster" tiderun "$name" "$nodes" "$ppn" "$build/tools/tiderun/tiderun" \
    "$build/perf/${coll}_perf" "${tool[@]}" "${check[@]}" --traffic >"$out/auto-$r.txt" 2>&1 ||
    fail=1
  for a in $algos; do
    TIDE_ALGO=$a "$cluster" tiderun "$name" "$nodes" "$ppn" "$build/tools/tiderun/tiderun" \
      "$build/perf/${coll}_perf" "${tool[@]}" "${check[@]}" --traffic >"$out/$a-$r.txt" 2>&1 ||
      fail=1
  done
  if [ -x "$build/perf/${coll}_perf_mpi" ]; then
    "$cluster" mpirun "$name" "$nodes" "$ppn" --mca pml ob1 --mca btl tcp,self \
      "$build/perf/${coll}_perf_mpi" "${tool[@]}" "${check[@]}" >"$out/mpi-$r.txt" 2>&1 || fail=1
  fi
  echo "repetition $r done"
done
python3 "$here/cluster_report.py" "$out" "auto $algos mpi" | tee "$out/report.txt"
exit $fail
