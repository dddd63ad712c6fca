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
# Iterations per size are banded as in perf/compare.sh: small calls vary
# from call to call by more than the algorithms differ, so sizes <= -s run
# with --small-iters, sizes <= -S with --medium-iters and larger ones with
# --large-iters (one launch per band, appended to the same output file).
# Tool arguments after -- come after the band's and override them (e.g.
# "-- -n 5 -w 2" for one iteration count at every size).
#
#   perf/cluster_compare.sh [-B BUILD] [-R 3] [-n 2] [-p 2] [-r 1gbit|none]
#                           [-b 8] [-e 64M] [-f 2] [-A "ring hier tree rhd"]
#                           [-C all_reduce] [-s 64K] [-S 4M]
#                           [--small-iters "-n 50 -w 5"] [--medium-iters "-n 10 -w 2"]
#                           [--large-iters "-n 3 -w 1"] [-o DIR] [-- extra tool args]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build=${BUILD:-$repo/build}
reps=3 nodes=2 ppn=2 rate=1gbit minb=8 maxb=64M factor=2 coll=all_reduce
split=64K split2=4M
small_iters="-n 50 -w 5" medium_iters="-n 10 -w 2" large_iters="-n 3 -w 1"
algos="ring hier tree rhd"
out=$repo/perf/results/cluster-$(date +%Y%m%d-%H%M%S)
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
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
    -s) split=$2; shift 2 ;;
    -S) split2=$2; shift 2 ;;
    --small-iters) small_iters=$2; shift 2 ;;
    --medium-iters) medium_iters=$2; shift 2 ;;
    --large-iters) large_iters=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --) shift; break ;;
    *) usage; exit 2 ;;
  esac
done
extra=("$@")

# Bytes from 8, 64K, 64M, 1G (or 64KB) style values.
bytes() {
  local v=${1^^}
  numfmt --from=iec "${v%B}" 2>/dev/null ||
    { echo "cluster_compare.sh: bad size $1" >&2; return 1; }
}
minb=$(bytes "$minb") && maxb=$(bytes "$maxb") && split=$(bytes "$split") &&
  split2=$(bytes "$split2") || exit 2
if ! [[ "$factor" =~ ^[0-9]+$ ]] || [ "$factor" -lt 2 ]; then
  echo "cluster_compare.sh: -f must be >= 2" >&2
  exit 2
fi

# The sizes the tools measure (minb * factor^k <= maxb), grouped into bands:
# one launch per band with -b/-e at its first and last size.
declare -A band_lo band_hi
for ((s = minb; s <= maxb; s *= factor)); do
  if [ "$s" -le "$split" ]; then b=small; elif [ "$s" -le "$split2" ]; then b=medium; else b=large; fi
  [ -n "${band_lo[$b]:-}" ] || band_lo[$b]=$s
  band_hi[$b]=$s
done
declare -A band_iters=([small]="$small_iters" [medium]="$medium_iters" [large]="$large_iters")
bands=()
for b in small medium large; do [ -n "${band_lo[$b]:-}" ] && bands+=("$b"); done

[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)"; exit 77; }
mkdir -p "$out"
cluster=$repo/tests/multinode/cluster.sh
name=tide-cc$$
[ "$rate" = none ] && rate=""
"$cluster" up "$name" "$nodes" $rate >/dev/null 2>&1 || { echo "cannot build the cluster"; exit 1; }
trap '"$cluster" down "$name"' EXIT
summary=""
for b in "${bands[@]}"; do summary+=" $b ${band_lo[$b]}..${band_hi[$b]}: ${band_iters[$b]};"; done
echo "cluster: $nodes nodes x $ppn ranks, link ${rate:-unshaped}; $coll -f $factor -d float" \
  "-o sum;$summary extra: ${extra[*]:-none}; load $(cut -d' ' -f1-3 /proc/loadavg)"

# run VARIANT FILE CHECK...: one launch per band of VARIANT (auto, an
# algorithm, or mpi), appended to FILE. Returns non-zero if any failed.
run() {
  local variant=$1 file=$2 rc=0 b
  shift 2
  : >"$file"
  for b in "${bands[@]}"; do
    # shellcheck disable=SC2206  # the band's iteration arguments split on spaces
    local tool=(-b "${band_lo[$b]}" -e "${band_hi[$b]}" -f "$factor" -d float -o sum
                ${band_iters[$b]} "${extra[@]}" "$@")
    case "$variant" in
      mpi)
        "$cluster" mpirun "$name" "$nodes" "$ppn" --mca pml ob1 --mca btl tcp,self \
          "$build/perf/${coll}_perf_mpi" "${tool[@]}" >>"$file" 2>&1 || rc=1 ;;
      auto)
        TIDE_DEBUG=INFO "$cluster" tiderun "$name" "$nodes" "$ppn" "$build/tools/tiderun/tiderun" \
          "$build/perf/${coll}_perf" "${tool[@]}" --traffic >>"$file" 2>&1 || rc=1 ;;
      *)
        TIDE_ALGO=$variant "$cluster" tiderun "$name" "$nodes" "$ppn" \
          "$build/tools/tiderun/tiderun" "$build/perf/${coll}_perf" "${tool[@]}" --traffic \
          >>"$file" 2>&1 || rc=1 ;;
    esac
  done
  return $rc
}

fail=0
for ((r = 1; r <= reps; r++)); do
  check=()
  [ "$r" = 1 ] && check=(-c 1)
  run auto "$out/auto-$r.txt" "${check[@]}" || fail=1
  for a in $algos; do
    run "$a" "$out/$a-$r.txt" "${check[@]}" || fail=1
  done
  if [ -x "$build/perf/${coll}_perf_mpi" ]; then
    run mpi "$out/mpi-$r.txt" "${check[@]}" || fail=1
  fi
  echo "repetition $r done"
done
python3 "$here/cluster_report.py" "$out" "auto $algos mpi" | tee "$out/report.txt"
exit $fail
