#!/usr/bin/env bash
# Interface selection: two namespaces joined by TWO veth pairs (nc?0 on
# 10.79.0.0/24, nc?1 on 10.79.1.0/24). Bootstrap uses link 0; the socket net
# must move its data over the link TIDE_SOCKET_IFNAME names, as the
# interfaces' own byte counters show. Needs root (else 77).
#   ifname_ns.sh TIDERUN NET_BW
set -u
tiderun=$1
netbw=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
id=$$
nsA=nc-ia-$id; nsB=nc-ib-$id
cleanup() { ip netns del "$nsA" 2>/dev/null; ip netns del "$nsB" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$nsA" 2>/dev/null || { echo "SKIP: cannot create namespaces"; exit 77; }
ip netns add "$nsB" || exit 77
for k in 0 1; do
  ip link add nca$k netns "$nsA" type veth peer name ncb$k netns "$nsB" || exit 77
  ip -n "$nsA" addr add 10.79.$k.1/24 dev nca$k
  ip -n "$nsB" addr add 10.79.$k.2/24 dev ncb$k
  ip -n "$nsA" link set nca$k up
  ip -n "$nsB" link set ncb$k up
done
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
export TIDE_SECRET="nc-ifname-$id"

txbytes() { ip -n "$nsA" -s -j link show "$1" | python3 -c \
  'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'; }

run() {  # TIDE_SOCKET_IFNAME value
  local port=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768+)
  for node in 0 1; do
    ns=$([ $node = 0 ] && echo "$nsA" || echo "$nsB")
    ip netns exec "$ns" env TIDE_SOCKET_IFNAME="$1" TIDE_NET=socket "$tiderun" --timeout 120 \
      --nnodes 2 --node-rank $node --nproc-per-node 1 --master-addr 10.79.0.1 \
      --master-port $port "$netbw" -b 16M -e 16M -n 8 -w 1 > /tmp/nc-ifname-$id.$node 2>&1 &
  done
  wait
}

fail=0
for pick in 1 0; do
  other=$((1 - pick))
  p0=$(txbytes nca$pick); o0=$(txbytes nca$other)
  run "nca$pick,ncb$pick"
  grep -q "device nca$pick" /tmp/nc-ifname-$id.0 || { cat /tmp/nc-ifname-$id.*; fail=1; }
  dp=$(( $(txbytes nca$pick) - p0 )); do_=$(( $(txbytes nca$other) - o0 ))
  echo "TIDE_SOCKET_IFNAME=nca$pick,ncb$pick: tx nca$pick +$dp bytes, nca$other +$do_ bytes"
  # 16 MiB x (4 + 1 warmup) streamed from A: the picked link carries >= 60 MB.
  [ "$dp" -gt 60000000 ] && [ "$do_" -lt 10000000 ] || fail=1
done
rm -f /tmp/nc-ifname-$id.*
exit $fail
