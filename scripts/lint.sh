#!/usr/bin/env bash
# Style and static checks of the tracked C/C++ sources:
#   scripts/lint.sh format              clang-format check (.clang-format), fast
#   scripts/lint.sh tidy [build] [f..]  clang-tidy (.clang-tidy) on the library,
#                                       shim and tools sources compiled in
#                                       `build` (default build/), or on f..
#   scripts/lint.sh fix-format          rewrite every file with clang-format
# Exits 1 when a check reports something. Debian 12: clang-format, clang-tidy.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-format}
sources() { git ls-files '*.cc' '*.h' '*.c' '*.cu' '*.cuh' | grep -v '^fuzz/corpus/'; }
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
  tidy)
    build=${2:-build}
    shift $(( $# >= 2 ? 2 : 1 ))
    files=("$@")
    if [ ${#files[@]} -eq 0 ]; then
      mapfile -t files < <(git ls-files 'src/*.cc' 'transports/*.cc' 'algorithms/*.cc' \
        'topology/*.cc' 'shim/*.cc' 'tools/*.cc')
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
  *) echo "usage: $0 format | fix-format | tidy [build] [files...]" >&2; exit 2 ;;
esac
