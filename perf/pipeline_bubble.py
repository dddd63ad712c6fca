#!/usr/bin/env python3
"""Measured pipeline bubbles of tide-train against its simulator.

For each P and schedule, runs tide-train under tiderun on this machine (the
issue's model: 8 layers x 128 wide, 4 heads, ctx 64, batch 16, M micro-batches),
takes the per-step `bubble` of the metrics file (the mean over stages of idle
time over the pipeline phase's wall time), drops the first --warmup steps and
reports the median of the next --steps; repeats alternate the schedules
(--repeats rounds) and the table gives the median of the runs' medians, each
run's median, and `tide-train --simulate` for the same P, M and schedule.

Usage: pipeline_bubble.py TIDE_TRAIN TIDERUN [--pp 2,4] [--micro-batches 8]
       [--repeats 3] [--steps 10] [--warmup 2] [--workdir DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--layers", "8", "--heads", "4", "--embd", "128", "--ctx", "64", "--batch", "16",
         "--eval-every", "0", "--log-every", "0"]
SCHEDULES = {"gpipe": ["--schedule", "gpipe"], "1f1b": ["--schedule", "1f1b"],
             "interleaved": ["--schedule", "interleaved", "--virtual-stages", "2"],
             "zb": ["--schedule", "zb"]}


def simulated(a, p, sch):
    out = subprocess.run([a.tide_train, "--simulate", "--pp", str(p), "--micro-batches",
                          str(a.micro_batches)] + SCHEDULES[sch], capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()
    return float(out[-1].split()[-1])


def measured(a, p, sch):
    metrics = os.path.join(a.workdir, f"bubble_p{p}_{sch}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [a.tiderun, "-n", str(p), a.tide_train] + MODEL + SCHEDULES[sch] + [
        "--pp", str(p), "--micro-batches", str(a.micro_batches),
        "--steps", str(a.warmup + a.steps), "--metrics", metrics]
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
    rows = [json.loads(line) for line in open(metrics)]
    return statistics.median(r["bubble"] for r in rows[a.warmup:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("--pp", default="2,4")
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--workdir", default=tempfile.mkdtemp(prefix="tide-bubble-"))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    print(f"# {os.cpu_count()} CPUs; M = {a.micro_batches}; median of steps {a.warmup}.."
          f"{a.warmup + a.steps - 1} per run; {a.repeats} alternating runs")
    print("| P | schedule | simulated | measured (median of runs) | runs |")
    print("|---|---|---|---|---|")
    for p in (int(x) for x in a.pp.split(",")):
        runs = {s: [] for s in SCHEDULES}
        for _ in range(a.repeats):
            for sch in SCHEDULES:
                runs[sch].append(measured(a, p, sch))
        for sch in SCHEDULES:
            med = statistics.median(runs[sch])
            each = ", ".join(f"{x:.3f}" for x in runs[sch])
            print(f"| {p} | {sch} | {simulated(a, p, sch):.3f} | {med:.3f} | {each} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
