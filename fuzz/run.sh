#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a
# bounded time on a copy of its checked-in corpus (fuzz/corpus/<target>;
# fuzz/make_corpus.py rewrites the bootstrap frame seeds).
#   fuzz/run.sh [seconds per target (default 60)] [build dir (default build-fuzz)]
# Exit status: 0 when every target ran clean; non-zero on a finding (the
# crashing input is left in the build dir as crash-*).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
out=${2:-build-fuzz}
CXX=${FUZZ_CXX:-clang++}
mkdir -p "$out"
common=(-std=c++20 -O1 -g -D_GNU_SOURCE -Iinclude -Isrc -I.
        -fno-sanitize-recover=undefined -pthread)
core=(src/core/boot/bootstrap.cc src/core/boot/bootstrap_frame.cc src/core/boot/bootstrap_root.cc
      src/core/auth.cc src/core/socket.cc src/core/if_addrs.cc src/core/if_filter.cc
      src/core/config.cc src/core/log.cc src/core/status.cc)
# The codec round trips link only the compression kernels (no core).
codecs=(algorithms/compression/codec_avx2.cc algorithms/compression/codec_kernels.cc
        algorithms/compression/codec_scalar.cc algorithms/compression/topk.cc)
targets=(boot_frame boot_hello unique_id codec)
# Each library source is compiled once (instrumented, without libFuzzer's
# main), on every core; the targets link the objects they need.
obj() { local o=${1//\//_}; echo "$out/obj/${o%.cc}.o"; }
mkdir -p "$out/obj"
echo "== fuzz: compiling ${#core[@]} core and ${#codecs[@]} codec sources"
compile() { "$CXX" "${common[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "$1" -o "$(obj "$1")"; }
pids=()
for f in "${core[@]}" "${codecs[@]}"; do
  compile "$f" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.2; done
done
for p in "${pids[@]}"; do wait "$p"; done
for t in "${targets[@]}"; do
  echo "== fuzz: building $t"
  if [ "$t" = codec ]; then srcs=("${codecs[@]}"); else srcs=("${core[@]}"); fi
  objs=()
  for f in "${srcs[@]}"; do objs+=("$(obj "$f")"); done
  "$CXX" "${common[@]}" -fsanitize=fuzzer,address,undefined "fuzz/fuzz_$t.cc" "${objs[@]}" \
    -o "$out/fuzz_$t"
done
# The targets run side by side, one per core, each for $secs s; a finding
# leaves its input under $out/artifacts_<target>/ (crash-*, leak-*, timeout-*).
fuzz_one() {  # target
  local t=$1 work="$out/corpus_$1"
  rm -rf "$work" "$out/artifacts_$t" && mkdir -p "$work" "$out/artifacts_$t"
  cp "fuzz/corpus/$t"/* "$work"/
  (cd "$out" && "./fuzz_$t" -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 \
     -artifact_prefix="artifacts_$t/" -print_final_stats=1 "corpus_$t") >"$out/fuzz_$t.log" 2>&1
}
status=0
declare -A pid
for t in "${targets[@]}"; do
  echo "== fuzz: $t for $secs s"
  fuzz_one "$t" &
  pid[$t]=$!
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.5; done
done
for t in "${targets[@]}"; do
  rc=0
  wait "${pid[$t]}" || rc=$?
  echo "== fuzz: $t finished (exit $rc)"
  tail -n 12 "$out/fuzz_$t.log"
  [ "$rc" -eq 0 ] || status=1
  if ls "$out/artifacts_$t"/* >/dev/null 2>&1; then status=1; fi
done
exit $status
