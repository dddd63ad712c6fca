#!/usr/bin/env bash
# Style and static checks of the tracked C/C++ sources:
#   scripts/lint.sh format              clang-format check (.clang-format), fast
#   scripts/lint.sh tidy [build] [f..]  clang-tidy (.clang-tidy) on the library,
#                                       shim and tools sources compiled in
#                                       `build` (default build/), or on f..
#   scripts/lint.sh fix-format          rewrite every file with clang-format
#   scripts/lint.sh layers              no #include "..." crosses a layer the
#                                       wrong way (rules below), fast
# Exits 1 when a check reports something. Debian 12: clang-format, clang-tidy.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-format}
sources() { git ls-files '*.cc' '*.h' '*.c' '*.cu' '*.cuh' | grep -v '^fuzz/corpus/'; }

# ---- layers (docs/architecture.md, "Layers") ----------------------------------
# Every #include "..." of a tracked source is resolved as the compiler finds
# it (the including file's folder, the target's own include folder: perf/
# for perf/, tests/harness/ for tests/; then tide_inc: include/, src/, the
# root) and checked against the including file's layer:
#  (a) include/tide/ includes only include/tide/.
#  (b) src/ (core, cuda) includes only src/ and include/tide/: never
#      transports/, algorithms/, topology/, shim/. Inside src/core, folders
#      include downwards only: comm/ > issue/ > device/ > exec/ > boot/ (a
#      folder may include the ones to its right), and the top-level
#      src/core/*.h,*.cc (interfaces, shared pieces) include no folder.
#  (c) transports/<x>/ includes only src/core/, include/tide/, transports/<x>/,
#      transports/common/ (helpers the nets share) and transports/net/ (the
#      net adapter and registry): never another transport or net.
#      transports/common/ itself includes only src/core/, include/tide/ and
#      transports/common/ (it sits below every net).
#  (d) algorithms/ includes only src/core/, include/tide/, algorithms/;
#      topology/ only src/core/, include/tide/, topology/ (neither includes
#      the other, transports/, shim/ or src/cuda/).
#  (e) shim/ includes only include/tide/, shim/ and src/cuda/cuda_loader.h
#      (the lazy driver loader, compiled into libnccl.so.2 itself).
#  (f) clients: perf/, tools/, trainer/, python/ (tide_torch), reducer/
#      (the gradient reducer, compiled into libtide but built on the public
#      API only),
#      tests/multirank/, tests/capi/, tests/fault/, tests/launch/ and
#      tests/harness/ include only include/tide/ and their own folder
#      (tests/ ones also tests/harness/), except the pairs in
#      layer_exceptions.
# Headers outside the tree (system, gtest, generated tide_build_config.h) are
# not checked. Not checked either: tests/unit, tests/net, tests/gpu,
# tests/topology, tests/shim and fuzz/, which test internals on purpose.
layer_exceptions=(
  # The device rows' cost model is the device engine's own (a pure,
  # driver-free header), so the engine and the planner price alike.
  "algorithms/device/device_rows.cc src/cuda/device_algo_choice.h"
  # The microbenchmark of the host reduction kernels themselves.
  "perf/reduce_bench.cc algorithms/kernels/host_kernels.h"
  # The throughput benchmark of the host codec kernels themselves.
  "perf/codec_bench.cc algorithms/compression/codec_kernels.h"
  # Writes docs/env.md from the core's one knob table.
  "tools/gen_env_doc.cc src/core/config.h"
  # Runs the topology provider offline (detect, convert, print a CommTopo).
  "tools/tide_topo/tide_topo.cc src/core/topology.h"
  "tools/tide_topo/tide_topo.cc topology/formats.h"
  "tools/tide_topo/tide_topo.cc topology/provider.h"
  "tools/tide_topo/report.h topology/model.h"
  "tools/tide_topo/report.h src/core/topology.h"
  # --json prints the tree algorithm's double binary tree; --plan prices
  # every row with the core's predictAll (tideTopoPredictTime's).
  "tools/tide_topo/report.cc algorithms/patterns/cost.h"
  "tools/tide_topo/report.cc algorithms/patterns/tree.h"
  "tools/tide_topo/report.cc src/core/comm/predict.h"
  "tools/tide_topo/report.cc src/core/config.h"
)

# Sets `resolved` to the tree path `inc` (included by `f`) resolves to, or ""
# when it is not a file of the tree.
resolve_include() {
  local f=$1 inc=$2 d p
  local dirs=("${f%/*}")
  case $f in perf/*) dirs+=(perf) ;; tests/*) dirs+=(tests/harness) ;; esac
  dirs+=(include src .)
  resolved=""
  for d in "${dirs[@]}"; do
    p="$d/$inc"
    [ -f "$p" ] || continue
    p=${p#./}
    case $p in */../*) p=$(realpath -m --relative-to=. "$p") ;; esac
    resolved=$p
    return
  done
}

# The order of src/core's folders (rule b): a folder includes only folders of
# a lower rank; the top level (-1) includes none.
core_rank() {
  case $1 in
    src/core/comm/*) echo 4 ;; src/core/issue/*) echo 3 ;; src/core/device/*) echo 2 ;;
    src/core/exec/*) echo 1 ;; src/core/boot/*) echo 0 ;; src/core/*/*) echo 9 ;;
    src/core/*) echo -1 ;; *) echo -2 ;;
  esac
}
core_rule() {
  local a b
  a=$(core_rank "$1")
  b=$(core_rank "$2")
  [ "$a" -ge -1 ] && [ "$b" -ge 0 ] || return 0
  [ "${1%/*}" = "${2%/*}" ] && return 0  # its own folder
  [ "$b" -lt "$a" ] && [ "$b" -ne 9 ] && return 0
  rule="(b) src/core folders include downwards only (comm > issue > device > exec > boot; the top level includes none)"
}

# Sets `rule` to the rule that `f` breaks by including tree path `t` ("" when
# allowed or not a file of the tree).
layer_rule() {
  local f=$1 t=$2 x own
  rule=""
  [ -n "$t" ] || { case $f in include/tide/*) ;; *) return ;; esac; }
  case $f in
    include/tide/*)
      case $t in include/tide/*) ;; *) rule="(a) include/tide/ includes only include/tide/" ;; esac ;;
    src/*)
      case $t in src/* | include/tide/*) core_rule "$f" "$t" ;;
        *) rule="(b) src/ includes only src/ and include/tide/ (never transports/, algorithms/, topology/, shim/)" ;;
      esac ;;
    transports/common/*)
      case $t in src/core/* | include/tide/* | transports/common/*) ;;
        *) rule="(c) transports/common/ includes only src/core/, include/tide/ and transports/common/" ;;
      esac ;;
    transports/*/*)
      x=${f#transports/}
      x=${x%%/*}
      case $t in src/core/* | include/tide/* | transports/"$x"/* | transports/common/* | transports/net/*) ;;
        *) rule="(c) transports/$x/ includes only src/core/, include/tide/, transports/$x/, transports/common/ and transports/net/" ;;
      esac ;;
    algorithms/*)
      case $t in src/core/* | include/tide/* | algorithms/*) ;;
        *) rule="(d) algorithms/ includes only src/core/, include/tide/ and algorithms/" ;;
      esac ;;
    topology/*)
      case $t in src/core/* | include/tide/* | topology/*) ;;
        *) rule="(d) topology/ includes only src/core/, include/tide/ and topology/" ;;
      esac ;;
    shim/*)
      case $t in include/tide/* | shim/* | src/cuda/cuda_loader.h) ;;
        *) rule="(e) shim/ includes only include/tide/, shim/ and src/cuda/cuda_loader.h" ;;
      esac ;;
    perf/* | tools/* | trainer/* | reducer/* | python/* | tests/multirank/* | tests/capi/* | \
      tests/fault/* | \
      tests/launch/* | tests/harness/*)
      case $f in tests/*) own=${f#tests/} own=tests/${own%%/*} ;; *) own=${f%%/*} ;; esac
      case $t in include/tide/* | "$own"/*) ;;
        tests/harness/*) case $f in tests/*) ;; *) rule="(f) $own/ (a client) includes only include/tide/ and $own/" ;; esac ;;
        *) rule="(f) $own/ (a client) includes only include/tide/ and $own/" ;;
      esac ;;
  esac
}

check_layers() {
  local bad=0 n=0 f line text inc e
  local -A used=()
  while IFS=: read -r f line text; do
    inc=${text#*\"}
    inc=${inc%%\"*}
    n=$((n + 1))
    resolve_include "$f" "$inc"
    layer_rule "$f" "$resolved"
    [ -n "$rule" ] || continue
    for e in "${layer_exceptions[@]}"; do
      [ "$e" = "$f $resolved" ] && { used[$e]=1; continue 2; }
    done
    echo "$f:$line: #include \"$inc\" ($resolved) breaks $rule"
    bad=1
  done < <(sources | xargs grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' /dev/null)
  for e in "${layer_exceptions[@]}"; do
    [ -n "${used[$e]:-}" ] || { echo "scripts/lint.sh: stale layer exception (no such include): $e"; bad=1; }
  done
  [ $bad -eq 0 ] && echo "layers: clean ($n includes)"
  return $bad
}
case "$mode" in
  format)
    bad=0
    for f in $(sources); do
      clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || { echo "not formatted: $f"; bad=1; }
    done
    [ $bad -eq 0 ] && echo "clang-format: clean"
    exit $bad ;;
  fix-format)
    sources | xargs clang-format -i ;;
  layers)
    check_layers
    exit $? ;;
  tidy)
    build=${2:-build}
    shift $(( $# >= 2 ? 2 : 1 ))
    files=("$@")
    if [ ${#files[@]} -eq 0 ]; then
      mapfile -t files < <(git ls-files 'src/*.cc' 'transports/*.cc' 'algorithms/*.cc' \
        'topology/*.cc' 'shim/*.cc' 'tools/*.cc' 'reducer/*.cc')
    fi
    out=$(mktemp)
    todo=()
    for f in "${files[@]}"; do
      # Only files this build compiles (optional features may be off).
      grep -q "\"file\": \"[^\"]*$f\"" "$build/compile_commands.json" && todo+=("$f")
    done
    # One clang-tidy per file, as many at once as there are cores. GCC-only
    # warning flags of the build (e.g. -Wno-restrict) mean nothing to clang.
    printf '%s\n' "${todo[@]}" | xargs -P "$(nproc)" -I{} sh -c \
      'clang-tidy -p "$1" --quiet --extra-arg=-Wno-unknown-warning-option "$2" 2>/dev/null |
         grep -A2 -E "(warning|error):"' _ "$build" {} >>"$out"
    if [ -s "$out" ]; then sort -u "$out" | grep -E '(warning|error):'; rm -f "$out"; exit 1; fi
    rm -f "$out"
    echo "clang-tidy: clean (${#files[@]} files)" ;;
  *) echo "usage: $0 format | fix-format | layers | tidy [build] [files...]" >&2; exit 2 ;;
esac
