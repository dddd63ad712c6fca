#!/usr/bin/env bash
# DDP of a small transformer over two network-namespace "nodes" x 2 ranks
# joined by a rate-limited link (docs/pytorch.md, "Two nodes"): gloo, tide, and
# tide with tide_torch.compression_hook("int8"), alternating, --repeats times;
# prints each run's step time and final loss and the medians' ratios.
#   sudo perf/torch_cluster.sh [-B build] [--rate 1gbit] [--steps 200] [--repeats 3]
#        [ddp_train.py options...]
# Root only (namespaces). Each run's line is perf/ddp_train.py's "ddp:" line.
# EVERY_PHASE=1: the hook compresses the intra-node phases too.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build rate=1gbit steps=200 repeats=3
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    -B) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)"; exit 77; }
py=/usr/bin/python3
name=ttc
cluster=tests/multinode/cluster.sh
$cluster down $name >/dev/null 2>&1 || true
$cluster up $name 2 "$rate" >/dev/null
trap '$cluster down $name' EXIT
# The default model: little compute, 3.7 M parameters (most in the embedding
# and the head, as in GPT-2), 4 MiB buckets, so the link matters.
model=(--model transformer --width 256 --layers 2 --vocab 4096 --batch 2 --ctx 32 --steps "$steps"
       --lr 0.02 --warmup 5 --bucket-mb 4 "${extra[@]}")
export PYTHONPATH=$PWD/$build/python OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0
run() {  # label args...
  local label=$1
  shift
  local line
  line=$($cluster tiderun $name 2 2 "$PWD/$build/tools/tiderun/tiderun" -- "$py" \
    "$PWD/perf/ddp_train.py" "${model[@]}" "$@" | grep '^ddp:' || true)
  echo "$label $line"
}
out=$(mktemp)
for ((r = 0; r < repeats; r++)); do
  if ((r % 2 == 0)); then order=(gloo tide int8); else order=(int8 tide gloo); fi
  for k in "${order[@]}"; do
    case $k in
      gloo) run gloo --backend gloo ;;
      tide) run tide --backend tide ;;
      int8) run int8 --backend tide --hook int8 ${EVERY_PHASE:+--hook-every-phase} ;;
    esac
  done | tee -a "$out"
done
"$py" - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) < 2:
        continue
    kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    runs.setdefault(parts[0], []).append((float(kv["step_ms"]), float(kv["loss"])))
med = {k: (statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs)) for k, vs in runs.items()}
for k in ["gloo", "tide", "int8"]:
    if k in med:
        print(f"{k:>5}: step {med[k][0]:9.2f} ms  loss {med[k][1]:.4f}  ({len(runs[k])} runs)")
if all(k in med for k in ["gloo", "tide", "int8"]):
    g = med["gloo"][0]
    print(f"tide/gloo step {med['tide'][0] / g:.3f} (bar 0.8); int8/gloo step {med['int8'][0] / g:.3f} "
          f"(bar 0.4); int8 loss - tide loss {med['int8'][1] - med['tide'][1]:+.4f} (bar 0.02)")
PY
rm -f "$out"
