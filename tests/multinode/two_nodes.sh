#!/usr/bin/env bash
# Two "nodes" = two network namespaces (own UTS name each) joined by a veth
# pair; one tiderun per node (--nnodes 2), ranks meet over TCP across the link
# and over shared memory inside each node. Runs a perf tool with the result
# check on. Skips (77) when not root or namespaces are unavailable.
#   two_nodes.sh TIDERUN PERF_TOOL [PROCS_PER_NODE] [extra tool args...]
set -u
tiderun=$1
tool=$2
ppn=${3:-2}
shift 3 2>/dev/null || shift $#
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-b 8 -e 4M -f 8 -n 3 -d float -o sum -c 1)

[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
id=$$
nsA=tide-t$id-a
nsB=tide-t$id-b
cleanup() { ip netns del "$nsA" 2>/dev/null; ip netns del "$nsB" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$nsA" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit 77; }
ip netns add "$nsB" || exit 77
# Addresses from a private /24 derived from the pid, only inside our namespaces.
net="10.$((200 + id % 50)).$(( (id / 50) % 250 ))"
ip link add va netns "$nsA" type veth peer name vb netns "$nsB" || exit 77
ip -n "$nsA" addr add "$net.1/24" dev va
ip -n "$nsB" addr add "$net.2/24" dev vb
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set va up
ip -n "$nsB" link set vb up

port=$((20000 + id % 12000))  # below the ephemeral range (32768+)
export TIDE_SECRET="two-nodes-$id-$RANDOM"
run_node() {  # node-rank
  ip netns exec "$([ "$1" = 0 ] && echo "$nsA" || echo "$nsB")" unshare --uts sh -c \
    "hostname node$1; exec \"\$0\" \"\$@\"" "$tiderun" --timeout 240 --nnodes 2 --node-rank "$1" \
    --nproc-per-node "$ppn" --master-addr "$net.1" --master-port "$port" "$tool" "${args[@]}"
}
run_node 0 > /tmp/tide-two-nodes-$id-0.log 2>&1 &
pid0=$!
run_node 1 > /tmp/tide-two-nodes-$id-1.log 2>&1
rc1=$?
wait $pid0
rc0=$?
cat /tmp/tide-two-nodes-$id-0.log
[ $rc1 -ne 0 ] && { echo "--- node 1 ---"; cat /tmp/tide-two-nodes-$id-1.log; }
rm -f /tmp/tide-two-nodes-$id-*.log
echo "node0 rc=$rc0 node1 rc=$rc1"
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]
