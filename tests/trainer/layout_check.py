#!/usr/bin/env python3
"""tide-train gives the same losses at every data x tensor parallel layout.

For a fixed seed the first N losses at DP2, TP2, DP2xTP2, DP4 and TP4 (and
with two micro-batches at 1 rank and DP2) must match the one-rank run within a relative tolerance (default 1e-4, fp32
reductions in another order), for AdamW and LAMB; the gradient norms too.
Usage: layout_check.py TIDE_TRAIN TIDERUN WORKDIR [--steps N] [--layouts ...]
Exit 0: pass, 1: fail (every number printed).
"""
import argparse
import json
import os
import subprocess
import sys

TINY = ["--layers", "2", "--heads", "4", "--embd", "64", "--ctx", "32", "--batch", "8",
        "--lr", "3e-3", "--warmup", "2", "--eval-every", "0", "--log-every", "0"]


def run(tide_train, tiderun, workdir, ranks, extra, steps, name):
    metrics = os.path.join(workdir, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [tiderun, "-n", str(ranks), tide_train] + TINY + extra + [
        "--steps", str(steps), "--metrics", metrics]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL {name}: exit {p.returncode}\n{' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    rows = [json.loads(line) for line in open(metrics)]
    return [r["loss"] for r in rows], [r["grad_norm"] for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("workdir")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--optimizers", default="adamw,lamb")
    ap.add_argument("--layouts", default="dp2,tp2,dp2tp2,dp4,tp4,mb2,dp2mb2")
    ap.add_argument("--data", default="")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    data = ["--data", a.data] if a.data else []
    layouts = {"dp2": (2, ["--dp", "2"]), "tp2": (2, ["--tp", "2"]),
               "dp2tp2": (4, ["--dp", "2", "--tp", "2"]), "dp4": (4, ["--dp", "4"]),
               "tp4": (4, ["--tp", "4"]), "mb2": (1, ["--micro-batches", "2"]),
               "dp2mb2": (2, ["--dp", "2", "--micro-batches", "2"])}
    worst = 0.0
    failed = False
    for opt in a.optimizers.split(","):
        base_l, base_g = run(a.tide_train, a.tiderun, a.workdir, 1,
                             data + ["--optimizer", opt], a.steps, f"{opt}_1")
        for lay in a.layouts.split(","):
            n, flags = layouts[lay]
            l, g = run(a.tide_train, a.tiderun, a.workdir, n, data + flags + ["--optimizer", opt],
                       a.steps, f"{opt}_{lay}")
            rel = max(abs(x - y) / abs(y) for x, y in zip(l, base_l))
            relg = max(abs(x - y) / abs(y) for x, y in zip(g, base_g))
            worst = max(worst, rel)
            ok = len(l) == len(base_l) == a.steps and rel <= a.tol and relg <= 10 * a.tol
            failed |= not ok
            print(f"{opt:6s} {lay:7s} max rel loss diff {rel:.3e}  grad_norm {relg:.3e}  "
                  f"{'ok' if ok else 'FAIL'}")
            if not ok:
                for s, (x, y) in enumerate(zip(l, base_l)):
                    print(f"   step {s}: {x!r} vs 1 rank {y!r}")
    print(f"worst relative loss difference {worst:.3e} (tolerance {a.tol:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
