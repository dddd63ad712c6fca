#!/usr/bin/env python3
"""ZeRO-3's step time against ZeRO-2's (docs/zero.md, "Speed").

The model of issue 21 (4 layers x 256 wide, ctx 64, batch 16) at DP4, run
under --zero 2, --zero 3 and --zero 3 --compress-params int8, --repeats
rounds alternating the three; each run's median step_ms over its steps after
--warmup, then the median over the rounds, and the ratios to ZeRO-2 of the
same session. With --nodes 2 (root) the ranks run on two network namespaces
of tests/multinode/cluster.sh (2 ranks each), every node's egress shaped to
--rate with tc htb. --steps 200 also compares the losses at the last step.

Usage: zero_speed.py TIDE_TRAIN TIDERUN [--nodes 1|2] [--rate 1gbit]
       [--steps 30] [--warmup 5] [--repeats 3] [--workdir DIR]
Exit 0 always (a measurement); the table is printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--layers", "4", "--heads", "4", "--embd", "256", "--ctx", "64", "--batch", "16",
         "--eval-every", "0", "--log-every", "0", "--dp", "4"]
RUNS = {"zero2": ["--zero", "2"], "zero3": ["--zero", "3"],
        "zero3-int8": ["--zero", "3", "--compress-params", "int8"]}
HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(os.path.dirname(HERE), "tests", "multinode", "cluster.sh")


def run(a, name, flags, rnd):
    metrics = os.path.join(a.workdir, f"{name}_{rnd}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    args = [a.tide_train] + MODEL + flags + ["--steps", str(a.steps), "--metrics", metrics]
    if a.nodes == 1:
        cmd = [a.tiderun, "-n", "4"] + args
    else:
        cmd = ["bash", CLUSTER, "tiderun", "zs", "2", "2", a.tiderun] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"{name}: exit {p.returncode}\n{' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    rows = [json.loads(x) for x in open(metrics)]
    return statistics.median(r["step_ms"] for r in rows[a.warmup:]), rows[-1]["loss"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("--nodes", type=int, default=1, choices=[1, 2])
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default=tempfile.mkdtemp(prefix="zero_speed_"))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    if a.nodes == 2:
        subprocess.run(["bash", CLUSTER, "down", "zs"], capture_output=True)
        up = subprocess.run(["bash", CLUSTER, "up", "zs", "2", a.rate], capture_output=True,
                            text=True)
        if up.returncode != 0:
            sys.exit("cluster.sh up failed: " + up.stdout + up.stderr)
    try:
        times = {k: [] for k in RUNS}
        loss = {}
        for rnd in range(a.repeats):
            for name, flags in RUNS.items():
                ms, last = run(a, name, flags, rnd)
                times[name].append(ms)
                loss[name] = last
                print(f"round {rnd}: {name:11s} median step {ms:8.2f} ms, loss at step "
                      f"{a.steps} {last:.6f}", flush=True)
    finally:
        if a.nodes == 2:
            subprocess.run(["bash", CLUSTER, "down", "zs"], capture_output=True)
    where = "one node" if a.nodes == 1 else f"2 namespaces x 2 ranks, {a.rate} links"
    print(f"\nDP4, {where}, {a.repeats} rounds, median of steps {a.warmup}..{a.steps - 1}:")
    base = statistics.median(times["zero2"])
    for name in RUNS:
        m = statistics.median(times[name])
        print(f"  {name:11s} {m:8.2f} ms  x{m / base:.3f} of zero2  loss {loss[name]:.6f} "
              f"({loss[name] - loss['zero2']:+.4f} nats)")


if __name__ == "__main__":
    main()
