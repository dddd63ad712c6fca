#!/usr/bin/env bash
# UCX's own benchmark beside kernel TCP and Tide's nets, between two network
# namespaces (tests/multinode/cluster.sh, unshaped veth), one direction and
# both directions at once. For each run: GB/s on the wire and the whole
# machine's busy CPU seconds (user + nice + system + irq + softirq of
# /proc/stat) per GB sent (both nodes' tx_bytes; start-up included).
#   ucx_peer.sh BUILD [REPS]     (root; needs iperf3 and ucx_perftest from ucx-utils)
# One direction, 4 MiB messages: iperf3 -t 4; ucx_perftest tag_bw eager
# (UCX_RNDV_THRESH=inf) and with UCX's rendezvous; Tide net_bw -N socket / ucx.
# Both directions: iperf3 --bidir; two ucx_perftest pairs in opposite directions.
set -u
build=$(readlink -f "$1") reps=${2:-3}
here=$(dirname "$(readlink -f "$0")")
cluster=$here/../multinode/cluster.sh
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
for t in iperf3 ucx_perftest; do
  command -v $t >/dev/null || { echo "SKIP: $t not installed"; exit 77; }
done
name=up$$
"$cluster" up "$name" 2 >/dev/null || exit $?
trap '"$cluster" down "$name"' EXIT
a0=$("$cluster" addr "$name" 0) a1=$("$cluster" addr "$name" 1)
out=$(mktemp -d /tmp/ucx-peer-XXXXXX)
hz=$(getconf CLK_TCK)

busy() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
wire() {
  local s=0 i
  for i in 0 1; do
    s=$((s + $(ip netns exec "$name-$i" cat /sys/class/net/eth0/statistics/tx_bytes)))
  done
  echo $s
}
measure() {  # label cmd...
  local label=$1 b0 w0 t0 b1 w1 t1
  shift
  b0=$(busy) w0=$(wire) t0=$(date +%s.%N)
  "$@" >"$out/last" 2>&1 || echo "($label failed: $(tail -1 "$out/last"))"
  b1=$(busy) w1=$(wire) t1=$(date +%s.%N)
  awk -v l="$label" -v b="$((b1 - b0))" -v w="$((w1 - w0))" -v t0="$t0" -v t1="$t1" -v hz="$hz" \
    'BEGIN { cpu = b / hz; gb = w / 1e9; el = t1 - t0;
             printf "%-30s %6.2f GB in %5.2f s = %5.2f GB/s, CPU %5.2f s = %5.3f s/GB\n",
                    l, gb, el, gb / el, cpu, (gb > 0 ? cpu / gb : 0) }'
}
in_node() { local i=$1; shift; ip netns exec "$name-$i" "$@"; }
perftest() {  # server-node port [env...]
  local node=$1 port=$2 peer
  shift 2
  peer=$([ "$node" = 0 ] && echo "$a0" || echo "$a1")
  env "$@" UCX_TLS=tcp ip netns exec "$name-$node" ucx_perftest -p "$port" &
  sleep 0.5
  env "$@" UCX_TLS=tcp ip netns exec "$name-$((1 - node))" ucx_perftest "$peer" -p "$port" \
    -t tag_bw -s 4194304 -n 800 -w 20 -f
  wait
}
iperf() {  # extra iperf3 client options
  in_node 0 iperf3 -s -1 -D -p 5399
  sleep 0.3
  in_node 1 iperf3 -c "$a0" -p 5399 -t 4 "$@"
}
netbw() {  # net
  TIDE_NET=$1 UCX_TLS=tcp "$cluster" tiderun "$name" 2 1 "$build/tools/tiderun/tiderun" \
    "$build/perf/net_bw" -N "$1" -b 4M -e 4M -n 800 -w 20
}
bi_perftest() {
  perftest 0 13411 UCX_RNDV_THRESH=inf &
  perftest 1 13412 UCX_RNDV_THRESH=inf &
  wait
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= reps; r++)); do
  measure "iperf3 r$r" iperf
  measure "ucx_perftest eager r$r" perftest 0 13401 UCX_RNDV_THRESH=inf
  measure "ucx_perftest rndv r$r" perftest 0 13401 UCX_RNDV_THRESH=auto
  measure "tide net_bw socket r$r" netbw socket
  measure "tide net_bw ucx r$r" netbw ucx
  measure "both ways: iperf3 --bidir r$r" iperf --bidir
  measure "both ways: ucx_perftest r$r" bi_perftest
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$out"
