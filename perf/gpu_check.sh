#!/usr/bin/env bash
# GPU checks of issue 6 in one run (meant for a lent GPU machine, < 5 min):
#   1. build Tide with CUDA (hwloc/UCX/verbs/MPI/PMIx off; tests only if gtest is there)
#   2. the `gpu` suite: device kernels vs the host reference, every dtype x op,
#      plus kernel bandwidth against a device-to-device copy; the device
#      All-Reduce engine (one-shot / two-shot, peer-mapped scratch) at 1, 2, 4
#      ranks on GPU 0 as threads and as processes, with its bandwidth; Tide's
#      API on CUDA streams (every collective x dtype, large pipelined
#      All-Reduce, CUDA graph capture + 3 replays) at 1, 2, 4 ranks as threads
#   3. the perf tools (*_perf) at 1, 2 and 4 ranks (processes) from 8 B to 1 GiB
#      on host buffers, and the NCCL shim on device buffers (every collective x
#      datatype at 1, 2, 4 ranks on the one GPU, as threads and as processes)
#   4. when an nccl-tests checkout sits in an ignored folder (nccl-tests/ or
#      perf/nccl-tests/, or $NCCL_TESTS_DIR): build it against Tide's
#      libnccl.so.2 (and against a real NCCL when one is installed) and run
#      every *_perf with -c 1, then with -G 1
# and prints one short table. On a machine without a GPU it says so and exits 0.
#
# usage: perf/gpu_check.sh [build-dir]        (default: build-gpu)
#   FORCE=1       run the steps even without a GPU (they then skip or fail;
#                 for testing this script on a CPU machine)
#   QUICK=1       perf tools and nccl-tests up to 8 MiB only
#   BUILD_TIMEOUT seconds allowed for the build (default 240); JOBS: ninja -j
#   SKIP_BUILD=1  reuse an existing build folder as it is
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build-gpu}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
log="$build/gpu_check.log"
rows=()
row() { rows+=("$1|$2|$3"); }

print_table() {
  echo
  echo "== gpu_check summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname))"
  printf '%-40s %-8s %s\n' "check" "result" "detail"
  printf '%-40s %-8s %s\n' "-----" "------" "------"
  for r in "${rows[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '%-40s %-8s %s\n' "$a" "$b" "$c"
  done
  [ -f "$log" ] && echo "(full output: $log)"
}
trap print_table EXIT

[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

# ---- 0. Is there a GPU? ------------------------------------------------------
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
fi
if [ -z "$gpu" ] && [ -e /dev/nvidiactl ]; then gpu="NVIDIA device nodes present"; fi
if [ -z "$gpu" ]; then
  why="no GPU: no nvidia-smi answer and no /dev/nvidiactl"
  ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 ' || why="$why; no libcuda.so.1 (driver)"
  row "GPU" "none" "$why"
  if [ "${FORCE:-0}" != 1 ]; then
    echo "gpu_check: $why; nothing to run (FORCE=1 runs the steps anyway)"
    exit 0
  fi
else
  row "GPU" "found" "$gpu"
fi
mkdir -p "$build"
: >"$log"
t0=$(date +%s)
step() { echo "== $*" | tee -a "$log"; }

# ---- 1. Build ----------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" = 1 ] && [ -f "$build/build.ninja" ]; then
  row "build" "reused" "$build (SKIP_BUILD=1)"
else
step "configure + build ($build)"
opts=(-Dcuda=enabled -Dhwloc=disabled -Ducx=disabled -Dibverbs=disabled -Dmpi=disabled
      -Dpmix=disabled -Dbuildtype=release)
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" "${opts[@]}" >>"$log" 2>&1
else
  meson setup "$build" "${opts[@]}" >>"$log" 2>&1
fi
if timeout "${BUILD_TIMEOUT:-240}" ninja -C "$build" ${JOBS:+-j"$JOBS"} >>"$log" 2>&1; then
  row "build (CUDA, $(nproc) cores)" "ok" "$(( $(date +%s) - t0 )) s"
else
  row "build" "FAILED" "see $log"
  exit 1
fi
fi
[ -f "$build/shim/libnccl.so.2" ] && row "libnccl.so.2 shim" "built" "$build/shim" \
  || row "libnccl.so.2 shim" "absent" "no nccl.h found"

# ---- 2. GPU kernels ----------------------------------------------------------
step "gpu suite"
# Sets $gpu_exe to a plain-main GPU test: the meson-built one, else (tests/
# is not configured without gtest) compiled here against libtide_core.a.
gpu_test() {  # name source what
  gpu_exe="$build/tests/gpu/$1"
  [ -x "$gpu_exe" ] && return
  gpu_exe="$build/$1"
  c++ -std=c++20 -O2 -D_GNU_SOURCE -DTIDE_TEST_CUDA_KERNELS=1 -I"$root/include" -I"$root/src" \
    -I"$root" -I"$build" -I"$build/src" "$root/tests/gpu/$2" \
    -Wl,--whole-archive "$build/libtide_core.a" -Wl,--no-whole-archive -lpthread -ldl -lrt \
    -o "$gpu_exe" >>"$log" 2>&1 || row "$3" "FAILED" "does not compile"
}
gpu_test gpu_kernels_test test_gpu_kernels.cc "gpu kernel test"
kt=$gpu_exe
if [ -x "$kt" ]; then
  out=$(timeout 120 "$kt" 2>&1); rc=$?
  echo "$out" >>"$log"
  case $rc in
    0) row "kernels: dtype x op vs host" "ok" "$(grep -m1 'kernel correctness' <<<"$out")" ;;
    77) row "kernels: dtype x op vs host" "skip" "$(grep -m1 SKIP <<<"$out")" ;;
    *) row "kernels: dtype x op vs host" "FAILED" "rc $rc: $(grep -m1 -E 'FAIL|correctness' <<<"$out")" ;;
  esac
  while read -r name dt bw copy ratio; do
    verdict=ok
    awk -v r="$ratio" 'BEGIN{exit !(r < 0.9)}' && verdict=LOW
    row "  $name $dt (>= 0.90 of copy)" "$verdict" "$bw GB/s, copy $copy GB/s, ratio $ratio"
  done < <(grep '^reduce sum' <<<"$out" | sed 's/^reduce sum/reduce_sum/')
fi

# ---- 2b. Device All-Reduce engine (one-shot / two-shot over peer-mapped scratch) ----
step "device all-reduce engine"
gpu_test device_coll_test test_device_coll.cc "device all-reduce test"
dct=$gpu_exe
if [ -x "$dct" ]; then
  dcmax=""
  [ "${QUICK:-0}" = 1 ] && dcmax=$((8 << 20))
  for mode in threads procs; do
    for n in 1 2 4; do
      step "device_coll_test $mode $n"
      out=$(timeout 120 "$dct" "$mode" "$n" $dcmax 2>&1); rc=$?
      echo "$out" >>"$log"
      case $rc in
        0) res=ok ;; 77) res=skip ;; 124) res=TIMEOUT ;; *) res=FAILED ;;
      esac
      row "  device AR, $n ranks as $mode" "$res" "$(tail -1 <<<"$out" | cut -c1-90), rc $rc"
      # Largest size measured: two-shot bus bandwidth and its share of the
      # bound set by the bytes the GPU's memory must move (test prints it).
      big=$(grep -E '^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+' <<<"$out" | tail -1)
      if [ -n "$big" ] && [ "$n" != 1 ]; then
        read -r b t1 bw1 t2 bw2 cp e1 e2 <<<"$big"
        row "    $b B: busbw 1shot/2shot" "info" "$bw1 / $bw2 GB/s, d2d copy $cp GB/s, of bound ${e1:-?} / ${e2:-?}"
      fi
    done
  done
fi

# ---- 2c. Public API on CUDA streams (stream-ordered, graph-capturable) ------------
step "CUDA stream path"
gpu_test stream_device_test stream_device_test.cc "CUDA stream test"
sst=$gpu_exe
if [ -x "$sst" ]; then
  for n in 1 2 4; do
    step "stream_device_test $n"
    out=$(timeout 120 "$sst" "$n" 2>&1); rc=$?
    echo "$out" >>"$log"
    case $rc in
      0) res=ok ;; 77) res=skip ;; 124) res=TIMEOUT ;; *) res=FAILED ;;
    esac
    row "  CUDA stream + graphs, $n ranks as threads" "$res" \
      "$(grep -m1 -E 'SKIP|stream_device_test:|rank [0-9]+:' <<<"$out" | cut -c1-80), rc $rc"
  done
fi

# ---- 2d. AllReduce/AllGather/ReduceScatter/Broadcast on CUDA streams, device engine
step "CUDA stream collective engine path"
gpu_test stream_engine_test stream_engine_test.cc "CUDA stream engine test"
set_=$gpu_exe
if [ -x "$set_" ]; then
  semax=$((64 << 20))
  [ "${QUICK:-0}" = 1 ] && semax=$((8 << 20))
  for n in 1 2 4; do
    step "stream_engine_test $n"
    out=$(timeout 150 "$set_" "$n" "$semax" 2>&1); rc=$?
    echo "$out" >>"$log"
    case $rc in
      0) res=ok ;; 77) res=skip ;; 124) res=TIMEOUT ;; *) res=FAILED ;;
    esac
    row "  AR/AG/RS/Bcast engine path, $n ranks" "$res" \
      "$(grep -m1 -E 'SKIP|stream_engine_test:|rank [0-9]+:|ranks logged' <<<"$out" | cut -c1-90), rc $rc"
  done
  # All-Reduce kernel forced (TIDE_DEVICE_ALGO): the FIFO ring and two-shot.
  for algo in ring twoshot; do
    for n in 2 4; do
      step "stream_engine_test $n, TIDE_DEVICE_ALGO=$algo"
      out=$(TIDE_DEVICE_ALGO=$algo timeout 150 "$set_" "$n" "$semax" 2>&1); rc=$?
      echo "$out" >>"$log"
      case $rc in
        0) res=ok ;; 77) res=skip ;; 124) res=TIMEOUT ;; *) res=FAILED ;;
      esac
      row "  engine path, AR forced $algo, $n ranks" "$res" \
        "$(grep -m1 -E 'SKIP|stream_engine_test:|rank [0-9]+:|ranks logged' <<<"$out" | cut -c1-90), rc $rc"
    done
  done
fi

# ---- 3. Perf tools -------------------------------------------------------------
maxb=1G
[ "${QUICK:-0}" = 1 ] && maxb=8M
tiderun="$build/tools/tiderun/tiderun"
for tool in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  exe="$build/perf/${tool}_perf"
  [ -x "$exe" ] || { row "${tool}_perf" "absent" ""; continue; }
  for n in 1 2 4; do
    step "${tool}_perf -n $n"
    out=$(timeout 90 "$tiderun" -n "$n" "$exe" -b 8 -e "$maxb" -f 16 -n 5 -w 1 -c 1 2>&1); rc=$?
    echo "$out" >>"$log"
    wrong=$(sed -n 's/^# Out of bounds values : \([0-9]*\).*/\1/p' <<<"$out")
    bw=$(sed -n 's/^# Avg bus bandwidth *: *\([0-9.e+-]*\).*/\1/p' <<<"$out")
    res=ok
    [ "$rc" = 0 ] && [ "$wrong" = 0 ] || res=FAILED
    row "  ${tool}_perf $n proc (host bufs)" "$res" "#wrong ${wrong:-?}, avg busbw ${bw:-?} GB/s, rc $rc"
  done
done
# Device buffers through the NCCL shim: every collective x datatype (x op),
# in and out of place, N ranks sharing the GPU as threads and as processes.
sdt="$build/tests/gpu/shim_device_test"
if [ ! -x "$sdt" ] && [ -f "$build/shim/libnccl.so.2" ]; then
  # tests/ is not configured without gtest: build the program by hand.
  sdt="$build/shim_device_test"
  c++ -std=c++20 -O2 -isystem "$CUDA_HOME/include" "$root/tests/gpu/shim_device_test.cc" \
    -L"$build/shim" -Wl,--disable-new-dtags,-rpath,"$build/shim" -l:libnccl.so.2 -ldl -lpthread \
    -o "$sdt" >>"$log" 2>&1 || row "shim device test" "FAILED" "does not compile"
fi
if [ -x "$sdt" ]; then
  for mode in threads procs; do
    for n in 1 2 4; do
      step "shim_device_test $mode $n"
      out=$(timeout 240 "$sdt" "$mode" "$n" 2>&1); rc=$?
      echo "$out" >>"$log"
      case $rc in
        0) res=ok ;; 77) res=skip ;; *) res=FAILED ;;
      esac
      row "  device bufs, $n ranks as $mode" "$res" "$(tail -1 <<<"$out" | cut -c1-70), rc $rc"
    done
  done
fi

# ---- 4. nccl-tests ---------------------------------------------------------------
nt=${NCCL_TESTS_DIR:-}
for d in "$root/nccl-tests" "$root/perf/nccl-tests"; do
  [ -z "$nt" ] && [ -f "$d/Makefile" ] && nt=$d
done
run_nccl_tests() {  # label, NCCL_HOME, library dir
  local label=$1 home=$2 libdir=$3 bdir="$build/nccl-tests-$1"
  step "nccl-tests against $label"
  if ! timeout 200 make -C "$nt" -j"$(nproc)" NCCL_HOME="$home" CUDA_HOME="$CUDA_HOME" \
      BUILDDIR="$bdir" >>"$log" 2>&1; then
    row "nccl-tests build ($label)" "FAILED" "see $log"
    return
  fi
  local e="-e 128M"
  [ "${QUICK:-0}" = 1 ] && e="-e 8M"
  for exe in "$bdir"/*_perf; do
    for g in 0 1; do
      out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        timeout 60 "$exe" -b 8 $e -f 4 -g 1 -c 1 -G "$g" 2>&1); rc=$?
      echo "$out" >>"$log"
      wrong=$(sed -n 's/^# *Out of bounds values : \([0-9]*\).*/\1/p' <<<"$out")
      bw=$(sed -n 's/^# *Avg bus bandwidth *: *\([0-9.e+-]*\).*/\1/p' <<<"$out")
      res=ok
      [ "$rc" = 0 ] && [ "$wrong" = 0 ] || res=FAILED
      row "  $(basename "$exe") $label G=$g" "$res" "#wrong ${wrong:-?}, busbw ${bw:-?}, rc $rc$( [ $res = FAILED ] && echo ": $(grep -m1 -iE 'error|failed' <<<"$out" | cut -c1-80)")"
    done
  done
}
if [ -z "$nt" ]; then
  row "nccl-tests" "skip" "no checkout in nccl-tests/ or perf/nccl-tests/"
elif [ -f "$build/shim/libnccl.so.2" ]; then
  home="$build/nccl-home-tide"
  mkdir -p "$home/include" "$home/lib"
  ln -sf "$CUDA_HOME/include/nccl.h" "$home/include/nccl.h"
  ln -sf "$build/shim/libnccl.so.2" "$home/lib/libnccl.so.2"
  ln -sf "$build/shim/libnccl.so.2" "$home/lib/libnccl.so"
  run_nccl_tests tide "$home" "$build/shim"
  real=$(ls "$CUDA_HOME"/lib64/libnccl.so.2 2>/dev/null | head -1)
  if [ -n "$real" ]; then
    run_nccl_tests nccl "$CUDA_HOME" "$(dirname "$real")"
  else
    row "nccl-tests on real NCCL" "skip" "no libnccl.so.2 under $CUDA_HOME"
  fi
fi
row "total time" "" "$(( $(date +%s) - t0 )) s"
