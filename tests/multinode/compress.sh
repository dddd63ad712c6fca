#!/usr/bin/env bash
# The compressed collectives (issue 17) on NODES network namespaces x PPN ranks:
# all_reduce_perf, reduce_scatter_perf and all_gather_perf with every codec of
# CODECS (--compress), at odd sizes (251, 7279 and 211091 float32 elements), result
# check on (-c 1: every element of every rank within docs/compression.md's
# bound, byte-identical across ranks). The op alternates between the runs
# (float32 sum, float32 avg); the All-Reduces with bf16 and int8 take
# bfloat16 avg. Any #wrong or failure fails the test.
# Skips (77) when not root.
#   compress.sh TIDERUN PERF_DIR NODES PPN "CODECS"
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tiderun=$1 perfdir=$2 nodes=$3 ppn=$4 codecs=$5
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
name=tide-cm$$
"$here/cluster.sh" up "$name" "$nodes" >/dev/null || exit $?
trap '"$here/cluster.sh" down "$name"' EXIT
fail=0 k=0
for tool in all_reduce reduce_scatter all_gather; do
  for codec in $codecs; do
    if [ $((k % 2)) -eq 0 ]; then dt=(-d float -o sum); else dt=(-d float -o avg); fi
    k=$((k + 1))
    # bfloat16 input (the perf tool's bfloat16 data and check cost 4x float's):
    # the All-Reduce with bf16 and int8.
    case "$tool $codec" in "all_reduce bf16" | "all_reduce int8") dt=(-d bfloat16 -o avg) ;; esac
    t0=$(date +%s%N)
    out=$(CLUSTER_TIMEOUT=240 "$here/cluster.sh" tiderun "$name" "$nodes" "$ppn" "$tiderun" \
      "$perfdir/${tool}_perf" --compress "$codec" "${dt[@]}" -b 1004 -e 1M -f 29 -n 1 -w 0 \
      -c 1 2>&1)
    rc=$?
    wrong=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 13 {s += $9 + $13} END {print s + 0}')
    rows=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 13' | wc -l)
    echo "$tool --compress $codec ${dt[*]}: rc=$rc wrong=$wrong sizes=$rows" \
      "($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
    if [ $rc -ne 0 ] || [ "$wrong" != 0 ] || [ "$rows" -ne 3 ]; then
      fail=1
      printf '%s\n' "$out" | tail -20
    fi
  done
done
exit $fail
