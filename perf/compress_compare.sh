#!/usr/bin/env bash
# Gradient compression on a shaped namespace "cluster" (issue 17's acceptance):
# NODES namespaces x PPN ranks (tests/multinode/cluster.sh), every node's
# link shaped to RATE with tc htb. R repetitions, each running, in an order
# that rotates by one every repetition: uncompressed Tide (the plain
# tideAllReduce, "tide"), Tide with each codec of -C (all_reduce_perf
# --compress CODEC), and Open MPI's MPI_Allreduce (pml ob1, btl tcp,self) on
# the same layout, float32 sum at SIZE (default 64M). --sweep adds the
# automatic choice's comparison over sizes (-b 4K .. -e 64M, x2): tide, auto,
# bf16 and int8 alternating inside each launch (all_reduce_perf --compare,
# -RR rounds per launch, default 5, the order rotating each round), RS
# launches (default 1), iterations banded by size as in
# perf/cluster_compare.sh. The first repetition of each runs with -c 1
# (#wrong: elements beyond docs/compression.md's bounds), the others -c 0.
# perf/compress_report.py then prints the tables (also OUT/report.txt):
# median time, busbw, wire bytes per rank (max over ranks), inter-node bytes
# per rank (mean over ranks, traffic counters) against the codec's theory,
# uncompressed/compressed time, the acceptance verdicts; and writes
# OUT/summary.csv, OUT/sweep.csv and PNG plots (gnuplot). Root only (exit 77
# otherwise).
#
#   perf/compress_compare.sh [-B BUILD] [-R 3] [-n 2] [-p 2] [-r 1gbit|none]
#       [-s 64M] [-C "fp16 bf16 int8 int4 topk:0.01 auto"] [--block 256]
#       [--iters "-n 5 -w 3"] [--no-mpi] [--sweep] [--sweep-only] [-RS 1] [-RR 5]
#       [-b 4K] [-e 64M] [-o DIR] [-- extra all_reduce_perf args]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build=${BUILD:-$repo/build}
reps=3 sweep_reps=1 sweep_rounds=5 nodes=2 ppn=2 rate=1gbit size=64M block=256
codecs="fp16 bf16 int8 int4 topk:0.01 auto"
iters="-n 5 -w 3"
sweep=0 main=1 mpi=1 minb=4K maxb=64M
small_iters="-n 200 -w 20" medium_iters="-n 10 -w 3" large_iters="-n 5 -w 3"
out=$repo/perf/results/compress-$(date +%Y%m%d-%H%M%S)
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -B) build=$2; shift 2 ;;
    -R) reps=$2; shift 2 ;;
    -RS) sweep_reps=$2; shift 2 ;;
    -RR) sweep_rounds=$2; shift 2 ;;
    -n) nodes=$2; shift 2 ;;
    -p) ppn=$2; shift 2 ;;
    -r) rate=$2; shift 2 ;;
    -s) size=$2; shift 2 ;;
    -C) codecs=$2; shift 2 ;;
    -b) minb=$2; shift 2 ;;
    -e) maxb=$2; shift 2 ;;
    --block) block=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    --sweep) sweep=1; shift ;;
    --sweep-only) sweep=1 main=0; shift ;;
    -o) out=$2; shift 2 ;;
    --) shift; break ;;
    *) usage; exit 2 ;;
  esac
done
extra=("$@")

bytes() {
  local v=${1^^}
  numfmt --from=iec "${v%B}" 2>/dev/null ||
    { echo "compress_compare.sh: bad size $1" >&2; return 1; }
}
size=$(bytes "$size") && minb=$(bytes "$minb") && maxb=$(bytes "$maxb") || exit 2

[ "$(id -u)" -eq 0 ] || { echo "SKIP: compress_compare.sh needs root (network namespaces)"; exit 77; }
tool=$build/perf/all_reduce_perf
tiderun=$build/tools/tiderun/tiderun
if [ ! -x "$tool" ] || [ ! -x "$tiderun" ]; then
  echo "no $tool or $tiderun (build first)"
  exit 2
fi
[ -x "$build/perf/all_reduce_perf_mpi" ] || mpi=0
mkdir -p "$out"
cluster=$repo/tests/multinode/cluster.sh
name=tide-cz$$
[ "$rate" = none ] && rate=""
"$cluster" up "$name" "$nodes" ${rate:+"$rate"} >/dev/null 2>&1 ||
  { echo "cannot build the cluster"; exit 1; }
trap '"$cluster" down "$name"' EXIT
{
  echo "nodes=$nodes"
  echo "ppn=$ppn"
  echo "rate=${rate:-unshaped}"
  echo "size=$size"
  echo "block=$block"
  echo "codecs=$codecs"
  echo "git=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "load=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "date=$(date '+%Y-%m-%d %H:%M')"
} >"$out/meta.txt"
echo "cluster: $nodes nodes x $ppn ranks, link ${rate:-unshaped}; all_reduce float32 sum;" \
  "codecs: $codecs (block $block); extra: ${extra[*]:-none}; load $(cut -d' ' -f1-3 /proc/loadavg)"

# File name of a variant: "topk:0.01" -> "topk_0.01".
file_of() { echo "${1//:/_}"; }

# run VARIANT FILE TOOL_ARGS...: one launch of VARIANT (tide, mpi or a codec)
# appended to FILE. Non-zero if it failed.
run() {
  local variant=$1 file=$2
  shift 2
  case "$variant" in
    mpi)
      "$cluster" mpirun "$name" "$nodes" "$ppn" --mca pml ob1 --mca btl tcp,self \
        "$build/perf/all_reduce_perf_mpi" "$@" "${extra[@]}" >>"$file" 2>&1 ;;
    compare)
      "$cluster" tiderun "$name" "$nodes" "$ppn" "$tiderun" "$tool" "$@" --traffic \
        --compare none,auto,bf16,int8 --rounds "$sweep_rounds" --block "$block" \
        "${extra[@]}" >>"$file" 2>&1 ;;
    tide)
      "$cluster" tiderun "$name" "$nodes" "$ppn" "$tiderun" "$tool" "$@" --traffic \
        "${extra[@]}" >>"$file" 2>&1 ;;
    *)
      "$cluster" tiderun "$name" "$nodes" "$ppn" "$tiderun" "$tool" "$@" --traffic \
        --compress "$variant" --block "$block" "${extra[@]}" >>"$file" 2>&1 ;;
  esac
}

# rotate K WORDS...: the words rotated left by K.
rotate() {
  local k=$1
  shift
  local w=("$@")
  local n=${#w[@]} i
  for ((i = 0; i < n; i++)); do printf '%s ' "${w[$(((i + k) % n))]}"; done
}

fail=0
if [ "$main" = 1 ]; then
  read -ra variants <<<"tide $codecs"
  [ "$mpi" = 1 ] && variants+=(mpi)
  echo "main: ${variants[*]} at $size B, $reps repetitions, iterations: $iters"
  for ((r = 1; r <= reps; r++)); do
    check=(-c 0)
    [ "$r" = 1 ] && check=(-c 1)
    for v in $(rotate $((r - 1)) "${variants[@]}"); do
      f=$out/main-$(file_of "$v")-$r.txt
      : >"$f"
      # shellcheck disable=SC2086  # the iteration arguments split on spaces
      run "$v" "$f" -b "$size" -e "$size" -d float -o sum $iters "${check[@]}" ||
        { fail=1; echo "  $v (repetition $r) failed: see $f"; }
    done
    echo "main repetition $r done"
  done
fi

if [ "$sweep" = 1 ]; then
  declare -A band_lo band_hi
  for ((s = minb; s <= maxb; s *= 2)); do
    if [ "$s" -le 65536 ]; then b=small; elif [ "$s" -le 4194304 ]; then b=medium; else b=large; fi
    [ -n "${band_lo[$b]:-}" ] || band_lo[$b]=$s
    band_hi[$b]=$s
  done
  declare -A band_iters=([small]="$small_iters" [medium]="$medium_iters" [large]="$large_iters")
  echo "sweep: tide auto bf16 int8 alternating at $minb..$maxb B (x2), $sweep_rounds rounds" \
    "per launch, $sweep_reps launch(es)"
  for ((r = 1; r <= sweep_reps; r++)); do
    check=(-c 0)
    [ "$r" = 1 ] && check=(-c 1)
    f=$out/sweep-compare-$r.txt
    : >"$f"
    for b in small medium large; do
      [ -n "${band_lo[$b]:-}" ] || continue
      # shellcheck disable=SC2086  # the band's iteration arguments split on spaces
      run compare "$f" -b "${band_lo[$b]}" -e "${band_hi[$b]}" -f 2 -d float -o sum \
        ${band_iters[$b]} "${check[@]}" || { fail=1; echo "  sweep (launch $r) failed: see $f"; }
    done
    echo "sweep launch $r done"
  done
fi

python3 "$here/compress_report.py" "$out" | tee "$out/report.txt"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
exit $fail
