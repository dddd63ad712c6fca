#!/usr/bin/env python3
"""Compressed data-parallel gradients train as well as plain ones.

The default model at DP2 for 201 steps, with --compress none and with
--compress CODEC (default int8): the loss of step 200 (the same global batch in
both runs) must be within 0.02 nats. Usage: compress_check.py TIDE_TRAIN
TIDERUN WORKDIR [--codec int8] [--tol 0.02]
"""
import argparse
import json
import os
import subprocess
import sys


def run(a, codec):
    metrics = os.path.join(a.workdir, f"compress_{codec}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [a.tiderun, "-n", "2", a.tide_train, "--dp", "2", "--steps", "201", "--decay-steps",
           "2000", "--eval-every", "0", "--log-every", "0", "--compress", codec, "--metrics",
           metrics]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return {r["step"]: r for r in map(json.loads, open(metrics))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("workdir")
    ap.add_argument("--codec", default="int8")
    ap.add_argument("--tol", type=float, default=0.02)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    plain, packed = run(a, "none"), run(a, a.codec)
    d = packed[200]["loss"] - plain[200]["loss"]
    print(f"step 200 loss: none {plain[200]['loss']:.6f}, {a.codec} {packed[200]['loss']:.6f}, "
          f"difference {d:+.6f} (tolerance {a.tol})")
    return 0 if abs(d) <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
