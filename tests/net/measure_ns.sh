#!/usr/bin/env bash
# Measures the socket net between two network namespaces joined by one
# unshaped veth pair (prefix "nc"): iperf3 vs net_bw, and Tide's socket
# All-Reduce vs Open MPI's TCP BTL (ob1, btl tcp,self), REPS alternating runs
# each. Prints raw tables and the per-size medians. Needs root, iperf3,
# mpirun. Usage: measure_ns.sh BUILD_DIR [REPS]
set -u
build=$(realpath "$1")
reps=${2:-3}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
nsA=nc-a-$$; nsB=nc-b-$$
out=/tmp/nc-measure-$$; mkdir -p "$out"
cleanup() { ip netns pids "$nsB" 2>/dev/null | xargs -r kill 2>/dev/null
            ip netns del "$nsA" 2>/dev/null; ip netns del "$nsB" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$nsA" && ip netns add "$nsB" || exit 77
ip link add nca0 netns "$nsA" type veth peer name ncb0 netns "$nsB" || exit 77
ip -n "$nsA" addr add 10.77.0.1/24 dev nca0
ip -n "$nsB" addr add 10.77.0.2/24 dev ncb0
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set nca0 up; ip -n "$nsB" link set ncb0 up
export TIDE_SECRET="nc-measure-$$"
tiderun=$build/tools/tiderun/tiderun

two_nodes() {  # tool args... : one rank per namespace
  local port=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768+)
  for node in 0 1; do
    ns=$([ $node = 0 ] && echo "$nsA" || echo "$nsB")
    ip netns exec "$ns" unshare --uts sh -c "hostname nc$node; exec \"\$0\" \"\$@\"" \
      "$tiderun" --timeout 300 --nnodes 2 --node-rank $node --nproc-per-node 1 \
      --master-addr 10.77.0.1 --master-port $port "$@" > "$out/node$node.log" 2>&1 &
  done
  wait
  cat "$out/node0.log"
}

# Open MPI: mpirun in A starts the rank of B through an "rsh agent" that
# enters B's namespace.
agent=$out/agent.sh
printf '#!/bin/sh\nshift_host=$1; shift\nexec ip netns exec %s sh -c "$*"\n' "$nsB" > "$agent"
chmod +x "$agent"
mpi_run() {
  ip netns exec "$nsA" mpirun --allow-run-as-root --oversubscribe --bind-to none \
    --host localhost:1,ncb:1 -np 2 --mca plm_rsh_agent "$agent" \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
    --mca oob_tcp_if_include 10.77.0.0/24 "$@" 2>&1
}

ip netns exec "$nsB" iperf3 -s -D -1 > /dev/null 2>&1 || true
for r in $(seq "$reps"); do
  echo "=== rep $r: iperf3"
  ip netns exec "$nsB" iperf3 -s -1 -D
  sleep 0.5
  ip netns exec "$nsA" iperf3 -c 10.77.0.2 -t 4 -f g | tee "$out/iperf.$r" | tail -4
  echo "=== rep $r: net_bw"
  two_nodes "$build/perf/net_bw" -b 1M -e 64M -f 4 -n 20 | tee "$out/netbw.$r"
  echo "=== rep $r: tide allreduce (socket)"
  TIDE_NET=socket two_nodes "$build/perf/all_reduce_perf" -b 1M -e 64M -f 4 -n 10 -w 2 -c 0 \
    | tee "$out/tide.$r"
  echo "=== rep $r: mpi allreduce (btl tcp)"
  mpi_run "$build/perf/all_reduce_perf_mpi" -b 1M -e 64M -f 4 -n 10 -w 2 -c 0 | tee "$out/mpi.$r"
done

python3 - "$out" "$reps" <<'PY'
import sys, re, statistics as st
out, reps = sys.argv[1], int(sys.argv[2])
def table(prefix, col):
    d = {}
    for r in range(1, reps + 1):
        try: lines = open(f"{out}/{prefix}.{r}").read().splitlines()
        except OSError: continue
        for l in lines:
            f = l.split()
            if f and f[0].isdigit() and len(f) > col:
                d.setdefault(int(f[0]), []).append(float(f[col]))
    return {k: st.median(v) for k, v in d.items()}
ip = []
for r in range(1, reps + 1):
    try:
        for l in open(f"{out}/iperf.{r}"):
            if "receiver" in l: ip.append(float(re.findall(r"([\d.]+) Gbits/sec", l)[0]))
    except (OSError, IndexError): pass
ipm = st.median(ip) if ip else float("nan")
print(f"iperf3 median {ipm:.2f} Gbit/s over {len(ip)} runs: {ip}")
nb = table("netbw", 2)
for s, v in sorted(nb.items()):
    print(f"net_bw {s:>10} B  {v:7.2f} Gbit/s  ratio vs iperf3 {v / ipm:5.2f}")
t, m = table("tide", 7), table("mpi", 7)   # out-of-place busbw (GB/s)
for s in sorted(t):
    if s in m:
        print(f"allreduce {s:>10} B  tide {t[s]:6.3f}  mpi {m[s]:6.3f} GB/s  ratio {t[s] / m[s]:5.2f}")
PY
