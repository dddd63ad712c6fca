#!/usr/bin/env python3
"""The layout planner's accuracy on this machine (one node).

Runs `tide-train --plan --world N` for the model, takes for every D x T x P
the (micro-batches, schedule) the planner ranks first, trains each of those
layouts for real under `tiderun -n N` (--warmup + --steps steps; the median
step_ms of the last --steps from --metrics), --repeats rounds alternating the
layouts, and prints predicted against measured (median of the rounds), their
ratio, and whether the planner's first choice is within 10% of the fastest
measured layout. Then `--layout auto` is run once and its chosen flags shown.

With --nodes K (root): the ranks run on K network namespaces of
tests/multinode/cluster.sh, every node's link shaped to --rate; the planner
gets --nodes K and a topology file of this node whose NIC speed is that rate
(tide-topo --dump, the NIC's speed-gbs rewritten) and --cores CPUs / K (the
namespaces share this machine's CPUs): the user's description of such a
cluster.

Usage: plan_check.py TIDE_TRAIN TIDERUN [--world 8] [--nodes 1] [--rate 1gbit]
       [--repeats 2] [--steps 10] [--warmup 2] [--workdir DIR] [-- extra model flags]
Exit 0 always (a measurement, not a test); the verdicts are printed.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--layers", "8", "--heads", "4", "--embd", "128", "--ctx", "64", "--batch", "16"]
QUIET = ["--eval-every", "0", "--log-every", "0"]
ROW = re.compile(r"^\s*(\d+)\s+dp (\d+) x tp (\d+) x pp (\d+)\s+(\d+)\s+(\S+)(?: V(\d+))?\s+"
                 r"([\d.]+)\s.*\s(\S+)$")


HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(os.path.dirname(HERE), "tests", "multinode", "cluster.sh")


def rate_gbs(rate):
    m = re.fullmatch(r"([\d.]+)([kmg])bit", rate)
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}[m[2]]
    return float(m[1]) * scale / 8e9


def topo_file(a):
    """This node's topology with its NICs at the shaped rate."""
    tool = os.path.join(os.path.dirname(os.path.dirname(a.tiderun)), "tide_topo", "tide-topo")
    dump = os.path.join(a.workdir, "node.tide.xml")
    subprocess.run([tool, "--dump", dump], capture_output=True, check=True)
    xml = open(dump).read()
    xml = re.sub(r'(<nic [^>]*speed-gbs=")[^"]*"', lambda m: m[1] + f'{rate_gbs(a.rate):g}"', xml)
    open(dump, "w").write(xml)
    return dump


def launch(a, args):
    if a.nodes == 1:
        return [a.tiderun, "-n", str(a.world)] + args
    return ["bash", CLUSTER, "tiderun", "plan", str(a.nodes), str(a.world // a.nodes),
            a.tiderun] + args


def plan(a, model):
    prof = os.path.join(a.workdir, "profile.json")
    if os.path.exists(prof):
        os.remove(prof)
    where = [] if a.nodes == 1 else ["--nodes", str(a.nodes), "--topo-file", a.topo,
                                     "--cores", str(max(1, os.cpu_count() // a.nodes))]
    out = subprocess.run([a.tide_train, "--plan", "--world", str(a.world), "--profile", prof] +
                         where + model, capture_output=True, text=True, check=True).stdout
    rows, choice = [], None
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows.append({"rank": int(m[1]), "dp": int(m[2]), "tp": int(m[3]), "pp": int(m[4]),
                         "M": int(m[5]), "schedule": m[6], "V": int(m[7] or 1),
                         "pred": float(m[8]), "stages": m[9]})
        if line.startswith("choice: "):
            choice = line[len("choice: "):]
    return out, rows, choice, prof


def flags_of(r, stage_layers):
    f = ["--dp", str(r["dp"]), "--tp", str(r["tp"]), "--pp", str(r["pp"]), "--micro-batches",
         str(r["M"])]
    if r["pp"] > 1:
        f += ["--schedule", r["schedule"]]
        if r["V"] > 1:
            f += ["--virtual-stages", str(r["V"])]
        if stage_layers:
            f += ["--stage-layers", stage_layers]
    return f


def measure(a, model, flags, name):
    metrics = os.path.join(a.workdir, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = launch(a, [a.tide_train] + model + QUIET + flags + [
        "--steps", str(a.warmup + a.steps), "--metrics", metrics])
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
    rows = [json.loads(x) for x in open(metrics)]
    return statistics.median(r["step_ms"] for r in rows[a.warmup:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--workdir", default=tempfile.mkdtemp(prefix="tide-plan-"))
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    model = MODEL + a.extra
    if a.nodes > 1:
        a.topo = topo_file(a)
        subprocess.run(["bash", CLUSTER, "down", "plan"], capture_output=True)
        subprocess.run(["bash", CLUSTER, "up", "plan", str(a.nodes), a.rate], check=True,
                       capture_output=True)
    out, rows, choice, prof = plan(a, model)
    print(out.splitlines()[0])
    best = {}
    for r in rows:
        key = (r["dp"], r["tp"], r["pp"])
        if key not in best:
            best[key] = r
    chosen = rows[0]
    todo = list(best.values())
    times = {id(r): [] for r in todo}
    for rep in range(a.repeats):
        order = todo if rep % 2 == 0 else list(reversed(todo))
        for r in order:
            sl = r["stages"] if r["pp"] > 1 else ""
            name = f"d{r['dp']}t{r['tp']}p{r['pp']}_{rep}"
            times[id(r)].append(measure(a, model, flags_of(r, sl), name))
    print(f"| layout | M | schedule | predicted ms | measured ms | predicted/measured | within 25% |")
    print("|---|---|---|---|---|---|---|")
    fastest = min(statistics.median(times[id(r)]) for r in todo)
    ok = 0
    for r in todo:
        meas = statistics.median(times[id(r)])
        ratio = r["pred"] / meas
        good = abs(ratio - 1) <= 0.25
        ok += good
        sch = "-" if r["pp"] == 1 else r["schedule"] + (f" V{r['V']}" if r["V"] > 1 else "")
        print(f"| dp {r['dp']} x tp {r['tp']} x pp {r['pp']} | {r['M']} | {sch} | "
              f"{r['pred']:.1f} | {meas:.1f} | {ratio:.2f} | {'yes' if good else 'no'} |")
    first = statistics.median(times[id(chosen)])
    print(f"within 25%: {ok}/{len(todo)} layouts; first choice "
          f"(dp {chosen['dp']} x tp {chosen['tp']} x pp {chosen['pp']}) measured {first:.1f} ms, "
          f"fastest measured {fastest:.1f} ms: ratio {first / fastest:.3f} "
          f"({'within' if first <= 1.10 * fastest else 'NOT within'} 10%)")
    where = [] if a.nodes == 1 else ["--topo-file", a.topo,
                                     "--cores", str(max(1, os.cpu_count() // a.nodes))]
    p = subprocess.run(launch(a, [a.tide_train] + model + QUIET + where +
                              ["--layout", "auto", "--profile", prof, "--steps", "3"]),
                       capture_output=True, text=True, timeout=900)
    auto = [x for x in p.stdout.splitlines() if x.startswith("layout auto:")]
    print(auto[0] if auto else f"--layout auto failed: exit {p.returncode} {p.stderr[-500:]}")
    if a.nodes > 1:
        subprocess.run(["bash", CLUSTER, "down", "plan"], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
