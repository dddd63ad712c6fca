#!/usr/bin/env bash
# All-Reduce busbw of the UCX net vs the socket net (out-of-place, sizes
# >= 1 MiB), REPS alternating runs of each, medians, ratio ucx/socket:
#   measure_ucx.sh BUILD local [REPS]   one node, 2 ranks, TIDE_SHM_DISABLE=1;
#                                       ucx with UCX_TLS=sm,self
#   measure_ucx.sh BUILD ns [REPS]      2 network namespaces x 1 rank (root;
#                                       tests/multinode/cluster.sh, prefix "ux");
#                                       ucx with UCX_TLS=tcp
# Extra all_reduce_perf options: ARGS="-b 1M -e 64M -f 4 -w 2 -n 10" (default).
# TIDE_UCX_* and UCX_* variables in the environment reach the ucx runs (A/B of
# knobs, e.g. TIDE_UCX_NSTREAMS=4 or TIDE_UCX_TCP_RNDV_THRESH=0).
# RATE=4gbit (ns mode): rate-limit each node's link with tc htb, so that the
# link and not the 2 cores bounds both nets.
set -u
build=$1 mode=$2 reps=${3:-3}
here=$(dirname "$(readlink -f "$0")")
tiderun=$build/tools/tiderun/tiderun
tool=$build/perf/all_reduce_perf
read -r -a args <<<"${ARGS:--b 1M -e 64M -f 4 -w 2 -n 10}"
export TIDE_SHM_DISABLE=1
tmp=$(mktemp -d /tmp/ux-measure-XXXXXX)
name=ux$$
cluster="$here/../multinode/cluster.sh"
cleanup() { [ "$mode" = ns ] && "$cluster" down "$name"; rm -rf "$tmp"; }
trap cleanup EXIT
if [ "$mode" = ns ]; then
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
  "$cluster" up "$name" 2 ${RATE:-} >/dev/null || exit $?
fi

run() {  # net rep
  local tls=sm,self
  [ "$mode" = ns ] && tls=tcp
  if [ "$mode" = ns ]; then
    UCX_TLS=$tls TIDE_NET=$1 "$cluster" tiderun "$name" 2 1 "$tiderun" "$tool" "${args[@]}"
  else
    UCX_TLS=$tls TIDE_NET=$1 "$tiderun" -n 2 "$tool" "${args[@]}"
  fi 2>&1 | awk '/^ +[0-9]+ +[0-9]+ /{ print $1, $8 }' >"$tmp/$1.$2"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)${RATE:+, links $RATE}"
for ((r = 0; r < reps; r++)); do
  run socket "$r"
  run ucx "$r"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$reps" <<'PY'
import statistics, sys
d, reps = sys.argv[1], int(sys.argv[2])
def load(net):
    out = {}
    for r in range(reps):
        for line in open(f"{d}/{net}.{r}"):
            size, bw = line.split()
            out.setdefault(int(size), []).append(float(bw))
    return out
s, u = load("socket"), load("ucx")
print("| size | socket busbw (GB/s) | ucx busbw (GB/s) | ucx/socket |")
print("|---|---|---|---|")
for size in sorted(s):
    ms, mu = statistics.median(s[size]), statistics.median(u.get(size, [0]))
    ratio = mu / ms if ms > 0 else float("nan")
    print(f"| {size >> 20} MiB | {ms:.3f} | {mu:.3f} | {ratio:.2f} |   "
          f"runs: {s[size]} / {u.get(size)}")
PY
