#!/usr/bin/env bash
# A small "cluster" of network namespaces on one machine, for multi-node
# tests and benchmarks. Each node is a namespace with its own UTS host name and
# address; the nodes hang off a Linux bridge in a separate switch namespace.
# A link can be rate-limited with tc htb (netem is not available here).
#
#   cluster.sh up NAME NODES [RATE]    create NAME-0..NAME-(NODES-1) (+ NAME-sw);
#                                      RATE (e.g. 1gbit) shapes every node's
#                                      egress; prints the node addresses
#   cluster.sh down NAME               delete them
#   cluster.sh addr NAME I             address of node I
#   cluster.sh exec NAME I CMD...      run CMD in node I (own host name nodeI)
#   cluster.sh tiderun NAME NODES PPN TIDERUN [tiderun opts --] TOOL ARGS...
#                                      one tiderun per node; prints node 0's
#                                      output, fails if any node fails
#   cluster.sh mpirun NAME NODES PPN MPIRUN_ARGS...
#                                      Open MPI across the nodes (rsh agent =
#                                      this script), started from node 0
#   cluster.sh agent HOST CMD...       (used by mpirun) run CMD on node HOST
#
# Root only. Addresses: 10.251.<k>.<i+1>/24 with k derived from NAME, created
# only inside these namespaces.
set -u
self=$(readlink -f "$0")

subnet() { echo "10.251.$(( $(printf '%s' "$1" | cksum | cut -d' ' -f1) % 250 ))"; }
addr() { echo "$(subnet "$1").$(( $2 + 1 ))"; }

cmd=${1:-}
shift || true
case "$cmd" in
  up)
    name=$1 n=$2 rate=${3:-}
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
    ip netns add "$name-sw" 2>/dev/null || { echo "SKIP: cannot create namespaces"; exit 77; }
    ip -n "$name-sw" link add br0 type bridge
    ip -n "$name-sw" link set br0 up
    for ((i = 0; i < n; i++)); do
      ns=$name-$i
      ip netns add "$ns"
      ip link add eth0 netns "$ns" type veth peer name p$i netns "$name-sw"
      ip -n "$name-sw" link set p$i master br0
      ip -n "$name-sw" link set p$i up
      ip -n "$ns" addr add "$(addr "$name" "$i")/24" dev eth0
      ip -n "$ns" link set lo up
      ip -n "$ns" link set eth0 up
      if [ -n "$rate" ]; then
        ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 10
        ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:10 htb rate "$rate" \
          ceil "$rate"
      fi
      echo "node$i $(addr "$name" "$i")"
    done
    ;;
  down)
    name=$1
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^$name-([0-9]+|sw)$"); do
      ip netns del "$ns"
    done
    ;;
  addr)
    addr "$1" "$2"
    ;;
  exec)
    name=$1 i=$2
    shift 2
    ip netns exec "$name-$i" unshare --uts sh -c 'hostname "$0"; exec "$@"' "node$i" "$@"
    ;;
  tiderun)
    name=$1 n=$2 ppn=$3 tiderun=$4
    shift 4
    opts=()
    if printf '%s\n' "$@" | grep -qx -- '--'; then
      while [ "$1" != "--" ]; do opts+=("$1"); shift; done
      shift
    fi
    # Below the ephemeral range (32768+): a root port that a rank's outgoing
    # connection holds in the namespace would fail the bind.
    port=$((20000 + RANDOM % 12000))
    export TIDE_SECRET=${TIDE_SECRET:-"cluster-$name-$RANDOM$RANDOM"}
    logs=()
    pids=()
    for ((i = 0; i < n; i++)); do
      log=$(mktemp /tmp/tide-cluster-XXXXXX.log)
      logs+=("$log")
      "$self" exec "$name" "$i" "$tiderun" --timeout "${CLUSTER_TIMEOUT:-600}" --nnodes "$n" \
        --node-rank "$i" --nproc-per-node "$ppn" --master-addr "$(addr "$name" 0)" \
        --master-port "$port" "${opts[@]}" "$@" >"$log" 2>&1 &
      pids+=($!)
    done
    rc=0
    for ((i = 0; i < n; i++)); do
      wait "${pids[$i]}" || { rc=1; echo "--- node $i failed ---"; cat "${logs[$i]}"; }
    done
    cat "${logs[0]}"
    rm -f "${logs[@]}"
    exit $rc
    ;;
  mpirun)
    name=$1 n=$2 ppn=$3
    shift 3
    hosts=""
    for ((i = 0; i < n; i++)); do hosts+="${hosts:+,}$(addr "$name" "$i"):$ppn"; done
    "$self" exec "$name" 0 mpirun --allow-run-as-root --oversubscribe --bind-to none \
      -np $((n * ppn)) --host "$hosts" --mca plm_rsh_agent "$self agent" \
      --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "$@"
    ;;
  agent)
    # mpirun calls: agent [options] HOST CMD...; HOST is a node address.
    while [ "${1#-}" != "$1" ]; do shift; done
    host=$1
    shift
    last=${host##*.}
    for ns in $(ip netns list | awk '{print $1}'); do
      if ip -n "$ns" -4 addr show 2>/dev/null | grep -q "inet $host/"; then
        exec ip netns exec "$ns" unshare --uts sh -c "hostname node$((last - 1)); $*"
      fi
    done
    echo "cluster.sh agent: no namespace has $host" >&2
    exit 1
    ;;
  *)
    sed -n '2,25p' "$0"
    exit 2
    ;;
esac
