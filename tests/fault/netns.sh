#!/usr/bin/env bash
# Two network namespaces as two nodes (one rank each, TCP between them) and a
# faulty link, with TIDE_TIMEOUT=5:
#   linkdown: the link goes down during 16 MiB All-Reduces; both ranks must
#             fail within 6.5 s of it.
#   shaped:   the link is limited to 8 Mbit/s (htb); one 8 MiB All-Reduce
#             (about 10 s, twice the timeout) must complete correctly; no
#             link probe at creation (TIDE_LINK_PROBE=0: its 4 MiB would
#             take 5 s more on this link).
# Namespaces are named ft<pid>-a/b and removed on exit. Skips (77) when not
# root or when namespaces, veth or htb are unavailable.
#   netns.sh TIDERUN FAULT_WORKER linkdown|shaped
set -u
tiderun=$1
worker=$2
mode=$3
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
id=$$
nsA=ft$id-a
nsB=ft$id-b
logs=$(mktemp -d /tmp/tide-ft-XXXXXX)
cleanup() {
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null
  rm -rf "$logs"
}
trap cleanup EXIT
ip netns add "$nsA" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit 77; }
ip netns add "$nsB" || exit 77
net="10.$((150 + id % 50)).$(( (id / 50) % 250 ))"
ip link add fa netns "$nsA" type veth peer name fb netns "$nsB" ||
  { echo "SKIP: cannot create a veth pair"; exit 77; }
ip -n "$nsA" addr add "$net.1/24" dev fa
ip -n "$nsB" addr add "$net.2/24" dev fb
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set fa up
ip -n "$nsB" link set fb up

export TIDE_TIMEOUT=5
export TIDE_SECRET="ft-$id-$RANDOM"
export TIDE_SOCKET_IFNAME=f
port=$((20000 + id % 12000))  # below the ephemeral range (32768+)
now_ms() { date +%s%3N; }
run_node() {  # node-rank worker-args...
  local node=$1
  shift
  ip netns exec "$([ "$node" = 0 ] && echo "$nsA" || echo "$nsB")" "$tiderun" --timeout 60 \
    --nnodes 2 --node-rank "$node" --nproc-per-node 1 --master-addr "$net.1" \
    --master-port "$port" "$worker" "$@"
}

case "$mode" in
  linkdown)
    args=(loop 4194304 100000)
    ;;
  shaped)
    for pair in "$nsA fa" "$nsB fb"; do
      set -- $pair
      { tc -n "$1" qdisc add dev "$2" root handle 1: htb default 10 &&
        tc -n "$1" class add dev "$2" parent 1: classid 1:10 htb rate 8mbit; } ||
        { echo "SKIP: htb shaping unavailable"; exit 77; }
    done
    export TIDE_LINK_PROBE=0
    args=(loop 2097152 1)
    ;;
  *)
    echo "usage: $0 TIDERUN WORKER linkdown|shaped" >&2
    exit 2
    ;;
esac

t0=$(now_ms)
run_node 0 "${args[@]}" > "$logs/0" 2>&1 &
p0=$!
run_node 1 "${args[@]}" > "$logs/1" 2>&1 &
p1=$!
if [ "$mode" = linkdown ]; then
  sleep 2.5
  tdown=$(now_ms)
  ip -n "$nsA" link set fa down
  echo "link down at +$((tdown - t0)) ms"
fi
wait $p0; rc0=$?
wait $p1; rc1=$?
tend=$(now_ms)
for n in 0 1; do echo "--- node $n ---"; grep -v "TIDE WARN" "$logs/$n" | tail -n 5; done
echo "node0 rc=$rc0 node1 rc=$rc1, $((tend - t0)) ms"

fail=0
if [ "$mode" = linkdown ]; then
  for n in 0 1; do
    t=$(awk '/^T_ERR /{print $2; exit}' "$logs/$n")
    if [ -z "$t" ]; then
      echo "FAIL: node $n reported no error"
      fail=1
      continue
    fi
    dt=$((t - tdown))
    echo "node $n: error $dt ms after the link went down: $(grep -m1 '^T_ERR' "$logs/$n" | cut -c1-220)"
    [ $dt -le 6500 ] || { echo "FAIL: node $n took $dt ms (> 6500)"; fail=1; }
  done
else
  for n in 0 1; do
    grep -q "^RESULT ok" "$logs/$n" || { echo "FAIL: node $n did not complete correctly"; fail=1; }
    grep -q "^T_ERR" "$logs/$n" && { echo "FAIL: node $n reported an error"; fail=1; }
    grep -h "^ELAPSED" "$logs/$n"
  done
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail=1
fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
