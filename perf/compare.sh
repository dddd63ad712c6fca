#!/usr/bin/env bash
# Side-by-side comparison of Tide and Open MPI on the perf tools.
#
#   perf/compare.sh [options]
#
# For each rank count N and collective, runs R repetitions of: Tide
# (tiderun -n N <coll>_perf), Open MPI with pml ob1 / btl vader,self, and Open
# MPI with pml ucx (<coll>_perf_mpi, the same harness over MPI), alternating
# the libraries inside every repetition so drift on a shared machine hits all
# of them alike. float32, sum, out-of-place columns. Then perf/plot_compare.py
# prints one table per collective and N (median busbw, Tide / best MPI, and
# for small sizes the time ratio best-MPI / Tide) and writes CSV, JSON and
# PNG plots. A STREAM probe (stream_probe) runs first; All-Reduce busbw is
# also shown as a fraction of the memory roofline (see stream_probe.cc). The
# printed report is also saved as OUT/report.txt, followed by the verdict of
# perf/check_bands.py (issue 3's acceptance bands) on the medians.
#
# Sizes: min * factor^k up to --split (-s), and max / factor^k above it, so
# both ends of -b..-e are measured. Sizes <= -s run with --small-iters, sizes
# <= -S with --medium-iters, larger ones with --large-iters (one launch per
# band and run), so a default run covers 8 B .. 256 MiB in about 10 minutes on
# 2 cores.
#
# Options (defaults in brackets):
#   -B DIR      build directory [$BUILD or <repo>/build]
#   -N "LIST"   rank counts ["2 4"]
#   -R REPS     repetitions [3]
#   -b/-e/-f    min bytes, max bytes, size factor (>= 2) [8, 256M, 4]
#   -C "LIST"   collectives [all_reduce all_gather reduce_scatter broadcast];
#               also: reduce alltoall sendrecv
#   -L "LIST"   libraries among tide tideZ0 ob1 ucx tideB [tide tideZ0 ob1 ucx];
#               tideZ0 is Tide with -z 0 (its calls on a host stream) whatever
#               -z says, so both launch modes sit beside Open MPI in one run;
#               tideB is Tide again with the environment of -V (A/B a knob in
#               the same alternating run); neither is counted as a peer
#   -V "ENV"    environment of tideB, e.g. "TIDE_SHM_CMA_HUGE=1 TIDE_ALGO=ring"
#   -z 0|1      blocking mode passed to every tool [1]: 1 issues Tide's calls
#               on the NULL stream, which, like MPI_Allreduce, returns when
#               the operation is done (the MPI tools are always blocking);
#               0 queues them on a host stream (a worker thread per process)
#   -s BYTES    small/medium split [64K]; -S BYTES  medium/large split [4M]
#   --small-iters "ARGS" [-n 50 -w 5]   --medium-iters "ARGS" [-n 10 -w 2]
#   --large-iters "ARGS" [-n 2 -w 1]
#   --check first|all|none  result check (-c 1) on repetition 1 only, on all,
#               or never [first]; checks run after the timed loop
#   --timeout SEC  per launch [300]
#   -o DIR      output directory [perf/results/<timestamp>]
# Exit status: 0 when every launch succeeded and no check counted a wrong value.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build=${BUILD:-$repo/build}
ranks="2 4"
reps=3
minb=8
maxb=256M
factor=4
colls="all_reduce all_gather reduce_scatter broadcast"
libs="tide tideZ0 ob1 ucx"
variant_env=""
blocking=1
split=64K
split2=4M
small_iters="-n 50 -w 5"
medium_iters="-n 10 -w 2"
large_iters="-n 2 -w 1"
check=first
timeout_s=300
out=""

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -B) build=$2; shift ;;
    -N) ranks=$2; shift ;;
    -R) reps=$2; shift ;;
    -b) minb=$2; shift ;;
    -e) maxb=$2; shift ;;
    -f) factor=$2; shift ;;
    -C) colls=$2; shift ;;
    -L) libs=$2; shift ;;
    -V) variant_env=$2; shift ;;
    -z) blocking=$2; shift ;;
    -s) split=$2; shift ;;
    -S) split2=$2; shift ;;
    --small-iters) small_iters=$2; shift ;;
    --medium-iters) medium_iters=$2; shift ;;
    --large-iters) large_iters=$2; shift ;;
    --check) check=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    -o) out=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown option $1 (see -h)" >&2; exit 1 ;;
  esac
  shift
done

# Bytes from 8, 64K, 256M, 1G style values.
bytes() {
  local v=$1 n mult=1
  n=${v%[KkMmGg]*}
  case "$v" in
    *[Kk]*) mult=1024 ;;
    *[Mm]*) mult=$((1024 * 1024)) ;;
    *[Gg]*) mult=$((1024 * 1024 * 1024)) ;;
  esac
  n=${n%[Bb]}
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "compare.sh: bad size $v" >&2; exit 1; }
  echo $((n * mult))
}
minb=$(bytes "$minb"); maxb=$(bytes "$maxb"); split=$(bytes "$split"); split2=$(bytes "$split2")
[ "$split" -le "$split2" ] || { echo "compare.sh: -s is larger than -S" >&2; exit 1; }
if ! [[ "$factor" =~ ^[0-9]+$ ]] || [ "$factor" -lt 2 ]; then
  echo "compare.sh: -f must be >= 2" >&2
  exit 1
fi
[ "$minb" -le "$maxb" ] || { echo "compare.sh: -b is larger than -e" >&2; exit 1; }
case "$check" in first|all|none) ;; *) echo "compare.sh: bad --check $check" >&2; exit 1 ;; esac

tiderun="$build/tools/tiderun/tiderun"
probe="$build/perf/stream_probe"
for f in "$tiderun" "$probe"; do
  [ -x "$f" ] || { echo "compare.sh: $f not built (ninja -C $build)" >&2; exit 1; }
done
for c in $colls; do
  for l in $libs; do
    case "$l" in tide|tideB|tideZ0) f="$build/perf/${c}_perf" ;; *) f="$build/perf/${c}_perf_mpi" ;; esac
    [ -x "$f" ] || { echo "compare.sh: $f not built (MPI tools need meson's mpi_dep)" >&2; exit 1; }
  done
done
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
mca_ob1=(--mca pml ob1 --mca btl vader,self)
mca_ucx=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)

# Sizes: min * factor^k up to min(split, max), then max / factor^k down to
# just above the split, so both ends of -b..-e are measured. Bands: small
# (<= split), medium (<= split2), large; each is one launch per run.
declare -A band_lo band_hi
band_of() {
  if [ "$1" -le "$split" ]; then echo small
  elif [ "$1" -le "$split2" ]; then echo medium
  else echo large; fi
}
add_size() {
  local b
  b=$(band_of "$1")
  if [ -z "${band_lo[$b]:-}" ] || [ "$1" -lt "${band_lo[$b]}" ]; then band_lo[$b]=$1; fi
  if [ -z "${band_hi[$b]:-}" ] || [ "$1" -gt "${band_hi[$b]}" ]; then band_hi[$b]=$1; fi
}
s=$minb
while [ "$s" -le "$maxb" ] && [ "$s" -le "$split" ]; do add_size "$s"; s=$((s * factor)); done
s=$maxb
while [ "$s" -gt "$split" ] && [ "$s" -ge "$minb" ]; do add_size "$s"; s=$((s / factor)); done
declare -A band_iters=([small]="$small_iters" [medium]="$medium_iters" [large]="$large_iters")

[ -n "$out" ] || out="$here/results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/raw" || exit 1
index="$out/runs.tsv"
printf 'coll\tranks\tlib\trep\tband\trc\tseconds\tfile\tcommand\n' > "$index"
nproc=$(nproc)
rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null)
git -C "$repo" diff --quiet 2>/dev/null || rev="$rev+dirty"
{
  echo "{"
  echo "  \"date\": \"$(date -Is)\","
  echo "  \"host\": \"$(hostname)\","
  echo "  \"nproc\": $nproc,"
  echo "  \"loadavg_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "  \"mpirun_version\": \"$(mpirun --version 2>/dev/null | head -1)\","
  echo "  \"git\": \"$rev\","
  echo "  \"ranks\": \"$ranks\", \"reps\": $reps, \"min_bytes\": $minb, \"max_bytes\": $maxb,"
  echo "  \"factor\": $factor, \"split\": $split, \"split2\": $split2, \"blocking\": $blocking,"
  echo "  \"small_iters\": \"$small_iters\", \"medium_iters\": \"$medium_iters\","
  echo "  \"large_iters\": \"$large_iters\", \"check\": \"$check\","
  echo "  \"variant_env\": \"$variant_env\""
} > "$out/meta.json"  # closed at the end

echo "== compare: results in $out" >&2
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" -v n="$nproc" 'BEGIN { exit !(l > n / 2) }'; then
  echo "== warning: load average $load on $nproc CPUs; other jobs will skew the numbers" >&2
fi
echo "== stream_probe (float32, 1 and $nproc threads)" >&2
"$probe" -t "$nproc" -r 5 > "$out/stream.txt" 2>&1 || echo "== stream_probe failed" >&2
# Ring All-Reduce roofline per rank count, at the largest size (its busbw
# ceiling does not depend on the size); bandwidth measured with
# min(N, CPUs) threads.
for n in $ranks; do
  "$probe" --roofline -n "$n" -s "$maxb" -r 5 > "$out/roofline_n$n.txt" 2>&1 ||
    echo "== stream_probe --roofline failed" >&2
done

nl=$(echo $libs | wc -w); nc=$(echo $colls | wc -w); nr=$(echo $ranks | wc -w)
total=$((nl * nc * nr * reps))
done_runs=0
fail=0
start_all=$(date +%s)
for n in $ranks; do
  for c in $colls; do
    for rep in $(seq 1 "$reps"); do
      for lib in $libs; do
        cflag=0
        { [ "$check" = all ] || { [ "$check" = first ] && [ "$rep" = 1 ]; }; } && cflag=1
        case "$lib" in
          tide|tideZ0) launch=("$tiderun" -n "$n" "$build/perf/${c}_perf") ;;
          # shellcheck disable=SC2206
          tideB) launch=(env $variant_env "$tiderun" -n "$n" "$build/perf/${c}_perf") ;;
          ob1) launch=("${mpirun[@]}" -np "$n" "${mca_ob1[@]}" "$build/perf/${c}_perf_mpi") ;;
          ucx) launch=("${mpirun[@]}" -np "$n" "${mca_ucx[@]}" "$build/perf/${c}_perf_mpi") ;;
          *) echo "compare.sh: unknown library $lib" >&2; exit 1 ;;
        esac
        t0=$(date +%s.%N)
        status=OK
        for band in small medium large; do
          lo=${band_lo[$band]:-} hi=${band_hi[$band]:-} iters=${band_iters[$band]}
          [ -n "$lo" ] || continue
          file="raw/${c}_n${n}_${lib}_r${rep}_${band}.txt"
          # shellcheck disable=SC2206
          z=$blocking
          [ "$lib" = tideZ0 ] && z=0
          args=(-b "$lo" -e "$hi" -f "$factor" -d float -o sum -c "$cflag" -z "$z" $iters)
          b0=$(date +%s.%N)
          timeout "$timeout_s" "${launch[@]}" "${args[@]}" > "$out/$file" 2>&1 < /dev/null
          rc=$?
          secs=$(awk -v a="$b0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$n" "$lib" "$rep" "$band" "$rc" \
            "$secs" "$file" "${launch[*]} ${args[*]}" >> "$index"
          wrong=$(awk '/^ +[0-9]/ { if ($9 ~ /^[0-9]+$/) w += $9; if ($13 ~ /^[0-9]+$/) w += $13 }
                       END { print w + 0 }' "$out/$file")
          if [ $rc -ne 0 ] || [ "$wrong" != 0 ]; then
            status="FAIL(rc=$rc wrong=$wrong, see $file)"
            fail=1
          fi
        done
        done_runs=$((done_runs + 1))
        secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        printf '[%3d/%d %4ds] %-15s N=%d rep %d %-4s %6.1fs %s\n' "$done_runs" "$total" \
          $(($(date +%s) - start_all)) "$c" "$n" "$rep" "$lib" "$secs" "$status" >&2
      done
    done
  done
done
echo "  ,\"loadavg_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"," >> "$out/meta.json"
echo "  \"seconds\": $(($(date +%s) - start_all))" >> "$out/meta.json"
echo "}" >> "$out/meta.json"

python3 "$here/plot_compare.py" "$out" | tee "$out/report.txt" || fail=1
# Issue 3's acceptance bands (information: a failing band does not fail the run).
python3 "$here/check_bands.py" "$out" | tee -a "$out/report.txt" || true
exit $fail
