#!/usr/bin/env bash
# GPU checks of issue 6 in one run (meant for a lent GPU machine: the whole
# device lease is 15 minutes, so the steps run in order of the acceptance's
# priority under one time budget, and a hang costs TIDE_TIMEOUT, not minutes):
#   1. build Tide with CUDA (hwloc/UCX/verbs/MPI/PMIx off, -Dwerror=false: the
#      image's compiler is unknown; tests only if gtest is there)
#   2. device reduction kernels vs the host reference (every dtype x op) and
#      their bandwidth against a device-to-device copy (>= 0.90)
#   3. Tide's API on CUDA streams through the device engine: All-Reduce,
#      AllGather, ReduceScatter, Broadcast at 1, 2, 4 ranks on GPU 0 as threads
#   4. the NCCL shim on device buffers: every collective x datatype (x op) at
#      1, 2, 4 ranks on the one GPU, as threads and as processes
#   5. when an nccl-tests checkout sits in an ignored folder (nccl-tests/ or
#      perf/nccl-tests/, or $NCCL_TESTS_DIR): build it for sm_90 against Tide's
#      libnccl.so.2 (and against a real NCCL when one is installed) and run
#      every *_perf at 1 rank with -c 1, then with -G 1 (graphs)
#   6. the device All-Reduce engine directly (one-/two-shot) at 1, 2, 4 ranks
#      as threads and as processes, with its bandwidth against the bound
#   7. the engine path with TIDE_DEVICE_ALGO forced to ring and to two-shot
#   8. stream-ordered API: every collective x dtype, pipelined All-Reduce, CUDA
#      graph capture + replays, 1, 2, 4 ranks
#   9. (PERF_HOST=1 only) the *_perf tools on host buffers, 1, 2, 4 processes
# and prints one short table (also copied with the log to $OUT when set).
# On a machine without a GPU it says so and exits 0.
#
# usage: perf/gpu_check.sh [build-dir]        (default: build-gpu)
#   FORCE=1       run the steps even without a GPU (they then skip or fail;
#                 for testing this script on a CPU machine)
#   QUICK=1       perf tools and nccl-tests up to 8 MiB only
#   BUDGET        seconds for the whole run, build included (default 540):
#                 no step starts after it, each step's timeout is cut to it
#   BUILD_TIMEOUT seconds allowed for the build (default 400); JOBS: ninja -j
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
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    [ -f "$log" ] && cp "$log" "$OUT/gpu_check.log"
    for r in "${rows[@]}"; do echo "$r"; done >"$OUT/gpu_check_table.txt"
  fi
}
trap print_table EXIT

[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
# A device-side hang ends in TIDE_TIMEOUT seconds with a coded error, not at a
# step's timeout; more hardware queues than ranks' streams (a spinning kernel
# must never sit in front of a peer's kernel in one queue).
export TIDE_TIMEOUT=${TIDE_TIMEOUT:-30}
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
budget=${BUDGET:-540}
start=$(date +%s)
# tmo N: N seconds, or what is left of the budget when that is less (>= 1).
tmo() {
  local left=$((start + budget - $(date +%s)))
  local t=$1
  ((left < t)) && t=$left
  ((t < 1)) && t=1
  echo "$t"
}
# have_time [N]: at least N (default 20) seconds of the budget are left.
have_time() { (($(date +%s) + ${1:-20} < start + budget)); }
# over: the budget is spent (said once in the table); steps then stop.
over() {
  have_time && return 1
  [ -n "${over_said:-}" ] || row "(remaining steps)" "skip" "time budget ($budget s) spent"
  over_said=1
}
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
      -Dpmix=disabled -Dbuildtype=release -Dwerror=false)
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" "${opts[@]}" >>"$log" 2>&1
else
  meson setup "$build" "${opts[@]}" >>"$log" 2>&1
fi
if timeout "$(tmo "${BUILD_TIMEOUT:-400}")" ninja -C "$build" ${JOBS:+-j"$JOBS"} >>"$log" 2>&1; then
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
  out=$(timeout "$(tmo 120)" "$kt" 2>&1); rc=$?
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

# ---- 3. AllReduce/AllGather/ReduceScatter/Broadcast on CUDA streams (device engine)
step "CUDA stream collective engine path"
gpu_test stream_engine_test stream_engine_test.cc "CUDA stream engine test"
set_=$gpu_exe
if [ -x "$set_" ]; then
  semax=$((64 << 20))
  [ "${QUICK:-0}" = 1 ] && semax=$((8 << 20))
  for n in 1 2 4; do
    step "stream_engine_test $n"
    over && break
    out=$(timeout "$(tmo 150)" "$set_" "$n" "$semax" 2>&1); rc=$?
    echo "$out" >>"$log"
    case $rc in
      0) res=ok ;; 77) res=skip ;; 124) res=TIMEOUT ;; *) res=FAILED ;;
    esac
    row "  AR/AG/RS/Bcast engine path, $n ranks" "$res" \
      "$(grep -m1 -E 'SKIP|stream_engine_test:|rank [0-9]+:|ranks logged' <<<"$out" | cut -c1-90), rc $rc"
  done
fi

# ---- 4. Device buffers through the NCCL shim ------------------------------------
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
      over && break
      out=$(timeout "$(tmo 240)" "$sdt" "$mode" "$n" 2>&1); rc=$?
      echo "$out" >>"$log"
      case $rc in
        0) res=ok ;; 77) res=skip ;; *) res=FAILED ;;
      esac
      row "  device bufs, $n ranks as $mode" "$res" "$(tail -1 <<<"$out" | cut -c1-70), rc $rc"
    done
  done
fi

# ---- 5. nccl-tests ---------------------------------------------------------------
nt=${NCCL_TESTS_DIR:-}
for d in "$root/nccl-tests" "$root/perf/nccl-tests"; do
  [ -z "$nt" ] && [ -f "$d/Makefile" ] && nt=$d
done
run_nccl_tests() {  # label, NCCL_HOME, library dir
  local label=$1 home=$2 libdir=$3 bdir="$build/nccl-tests-$1"
  step "nccl-tests against $label"
  have_time 60 || { over; return; }
  # sm_90 only (the H200): nccl-tests' default list has archs CUDA 13 dropped.
  if ! timeout "$(tmo 200)" make -C "$nt" -j"$(nproc)" NCCL_HOME="$home" CUDA_HOME="$CUDA_HOME" \
      NVCC_GENCODE="${NT_GENCODE:--gencode=arch=compute_90,code=sm_90}" \
      BUILDDIR="$bdir" >>"$log" 2>&1; then
    row "nccl-tests build ($label)" "FAILED" "see $log"
    return
  fi
  local e="-e 128M"
  [ "${QUICK:-0}" = 1 ] && e="-e 8M"
  for exe in "$bdir"/*_perf; do
    for g in 0 1; do
      over && break 2
      out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        timeout "$(tmo 60)" "$exe" -b 8 $e -f 4 -g 1 -c 1 -G "$g" 2>&1); rc=$?
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
# ---- 6. Device All-Reduce engine (one-shot / two-shot over peer-mapped scratch) ----
step "device all-reduce engine"
gpu_test device_coll_test test_device_coll.cc "device all-reduce test"
dct=$gpu_exe
if [ -x "$dct" ]; then
  dcmax=""
  [ "${QUICK:-0}" = 1 ] && dcmax=$((8 << 20))
  for mode in threads procs; do
    for n in 1 2 4; do
      step "device_coll_test $mode $n"
      over && break
      out=$(timeout "$(tmo 120)" "$dct" "$mode" "$n" $dcmax 2>&1); rc=$?
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

# ---- 7. All-Reduce kernel forced (TIDE_DEVICE_ALGO): the FIFO ring and two-shot
if [ -x "${set_:-}" ]; then
  # All-Reduce kernel forced (TIDE_DEVICE_ALGO): the FIFO ring and two-shot.
  for algo in ring twoshot; do
    for n in 2 4; do
      step "stream_engine_test $n, TIDE_DEVICE_ALGO=$algo"
      over && break
      out=$(TIDE_DEVICE_ALGO=$algo timeout "$(tmo 150)" "$set_" "$n" "$semax" 2>&1); rc=$?
      echo "$out" >>"$log"
      case $rc in
        0) res=ok ;; 77) res=skip ;; 124) res=TIMEOUT ;; *) res=FAILED ;;
      esac
      row "  engine path, AR forced $algo, $n ranks" "$res" \
        "$(grep -m1 -E 'SKIP|stream_engine_test:|rank [0-9]+:|ranks logged' <<<"$out" | cut -c1-90), rc $rc"
    done
  done
fi

# ---- 8. Public API on CUDA streams (stream-ordered, graph-capturable) ------------
step "CUDA stream path"
gpu_test stream_device_test stream_device_test.cc "CUDA stream test"
sst=$gpu_exe
if [ -x "$sst" ]; then
  for n in 1 2 4; do
    step "stream_device_test $n"
    over && break
    out=$(timeout "$(tmo 120)" "$sst" "$n" 2>&1); rc=$?
    echo "$out" >>"$log"
    case $rc in
      0) res=ok ;; 77) res=skip ;; 124) res=TIMEOUT ;; *) res=FAILED ;;
    esac
    row "  CUDA stream + graphs, $n ranks as threads" "$res" \
      "$(grep -m1 -E 'SKIP|stream_device_test:|rank [0-9]+:' <<<"$out" | cut -c1-80), rc $rc"
  done
fi

# ---- 9. Perf tools on host buffers (PERF_HOST=1; not part of the GPU acceptance) ----
if [ "${PERF_HOST:-0}" = 1 ]; then
maxb=1G
[ "${QUICK:-0}" = 1 ] && maxb=8M
tiderun="$build/tools/tiderun/tiderun"
for tool in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  exe="$build/perf/${tool}_perf"
  [ -x "$exe" ] || { row "${tool}_perf" "absent" ""; continue; }
  for n in 1 2 4; do
    step "${tool}_perf -n $n"
    over && break
    out=$(timeout "$(tmo 90)" "$tiderun" -n "$n" "$exe" -b 8 -e "$maxb" -f 16 -n 5 -w 1 -c 1 2>&1); rc=$?
    echo "$out" >>"$log"
    wrong=$(sed -n 's/^# Out of bounds values : \([0-9]*\).*/\1/p' <<<"$out")
    bw=$(sed -n 's/^# Avg bus bandwidth *: *\([0-9.e+-]*\).*/\1/p' <<<"$out")
    res=ok
    [ "$rc" = 0 ] && [ "$wrong" = 0 ] || res=FAILED
    row "  ${tool}_perf $n proc (host bufs)" "$res" "#wrong ${wrong:-?}, avg busbw ${bw:-?} GB/s, rc $rc"
  done
done
fi

row "total time" "" "$(( $(date +%s) - t0 )) s"
