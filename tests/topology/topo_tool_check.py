#!/usr/bin/env python3
"""tide-topo's machine-readable outputs on every topology fixture:
  --json                  parses as JSON; names each GPU's NIC (when the node has NICs);
                          rings are permutations of the ranks; two trees, one root each
  --plan 64M --nodes 2 --ranks-per-node 8
                          a time for every algorithm of every collective; the chosen
                          one is the smallest and equals tideTopoPredictTime's
Usage: topo_tool_check.py TIDE_TOPO FIXTURE_DIR
"""
import glob
import json
import os
import subprocess
import sys

tool, fixtures = sys.argv[1], sys.argv[2]
failures = []
files = sorted(glob.glob(os.path.join(fixtures, "*.xml")))
for f in files:
    name = os.path.basename(f)
    p = subprocess.run([tool, "--xml", f, "--json", "--nodes", "2", "--ranks", "8"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"{name}: --json exited {p.returncode}: {p.stderr.strip()}")
        continue
    try:
        j = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        failures.append(f"{name}: --json is not JSON: {e}")
        continue
    nics = [d for d in j["devices"] if d["kind"] == "nic"]
    for g in j["gpus"]:
        if nics and not g["nic"]:
            failures.append(f"{name}: GPU {g['bus']} has no NIC named")
    n = len(j["communicator"]["rings"][0])
    if n != 16:
        failures.append(f"{name}: ring of {n} ranks, want 16")
    for ring in j["communicator"]["rings"]:
        if sorted(ring) != list(range(n)):
            failures.append(f"{name}: a ring is not a permutation of the ranks")
    for t in j["communicator"]["trees"]:
        if t["parentOfRank"].count(-1) != 1:
            failures.append(f"{name}: tree {t['tree']} has {t['parentOfRank'].count(-1)} roots")
    npaths = len(j["paths"])
    if npaths != len(j["devices"]) or any(len(r) != npaths for r in j["paths"]):
        failures.append(f"{name}: the path matrix is not devices x devices")

    p = subprocess.run([tool, "--xml", f, "--plan", "64M", "--nodes", "2", "--ranks-per-node", "8"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"{name}: --plan exited {p.returncode}: {p.stderr.strip()}")
        continue
    rows, chosen = {}, {}
    for line in p.stdout.splitlines():
        if line.startswith("#") or line.startswith("collective"):
            continue
        parts = line.split()
        if parts[1] == "=>":
            chosen[parts[0]] = (float(parts[2]), float(parts[4]))
        elif parts[2] != "n/a":
            rows.setdefault(parts[0], []).append(float(parts[2]))
    for coll in ["allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall",
                 "sendrecv"]:
        if coll not in chosen:
            failures.append(f"{name}: --plan printed no time for {coll}")
            continue
        model, api = chosen[coll]
        if coll != "sendrecv" and not rows.get(coll):
            failures.append(f"{name}: --plan printed no algorithm for {coll}")
        if rows.get(coll) and abs(min(rows[coll]) - model) > 0.006:
            failures.append(f"{name}: {coll}: chosen {model} is not the smallest {min(rows[coll])}")
        if not model > 0 or abs(model - api) > 0.006:
            failures.append(f"{name}: {coll}: --plan {model} != tideTopoPredictTime {api}")
print(f"{len(files)} fixtures checked, {len(failures)} failure(s)")
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures or not files else 0)
