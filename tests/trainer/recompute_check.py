#!/usr/bin/env python3
"""Activation checkpointing changes memory and time, never the numbers.

For --checkpoint-activations none, every:2, sqrt and selective on one rank:
  - the first step's gradients (--dump-grads) are byte for byte those of
    none, and the losses and gradient norms of every step equal to the digit;
  - the accounted activation memory (mem_act) is within 10% of the
    per-layer model below;
  - the step time against none is reported (median of the steps after the
    first).
Then every:2 at TP2 and sqrt at PP2 x 1f1b against none at the same layout
(losses and norms to the digit).

Per-layer model (floats; N = B*T tokens of a micro-batch, C width, Cl and Fl
this rank's attention and MLP widths, A = B*heads*T*T, V the vocabulary):
  a block keeps   b = 3NC + 4N + 4N*Cl + 2N*Fl + A   (+ its input r = NC)
  none            L(b + r) + r
  every:K         ceil(L/K) r + r + K(b + r)        (segment inputs; one segment)
  selective       L(b - A + r) + r + A + N*Cl       (one block's probabilities)
plus, in every mode, the head's (NC + 5N + NV) and the backward scratch
(2NC + 4N*Cl + 2N*Fl + NV).
Usage: recompute_check.py TIDE_TRAIN TIDERUN WORKDIR
"""
import json
import math
import os
import statistics
import subprocess
import sys

L, H, C, T, B, V = 6, 4, 64, 32, 4, 256
MODEL = ["--layers", str(L), "--heads", str(H), "--embd", str(C), "--ctx", str(T),
         "--batch", str(B), "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
         "--log-every", "0", "--steps", "6"]
failed = False


def check(ok, msg):
    global failed
    print(("ok   " if ok else "FAIL ") + msg)
    failed |= not ok


def run(tide_train, tiderun, workdir, name, flags, ranks=1, dump=False):
    metrics = os.path.join(workdir, name + ".jsonl")
    grads = os.path.join(workdir, name + ".safetensors")
    for f in (metrics, grads):
        if os.path.exists(f):
            os.remove(f)
    cmd = [tiderun, "-n", str(ranks), tide_train] + MODEL + flags + ["--metrics", metrics]
    if dump:
        cmd += ["--dump-grads", grads]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL {name}: exit {p.returncode}\n{' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    rows = [json.loads(x) for x in open(metrics)]
    blob = open(grads, "rb").read() if dump else b""
    return rows, blob


def predicted(mode, layers=L):
    N, Cl, Fl, A = B * T, C, 4 * C, B * H * T * T
    r = N * C
    b = 3 * N * C + 4 * N + 4 * N * Cl + 2 * N * Fl + A
    fixed = (N * C + 5 * N + N * V) + (2 * N * C + 4 * N * Cl + 2 * N * Fl + N * V)
    if mode == "none":
        return 4 * (layers * (b + r) + r + fixed)
    if mode == "selective":
        return 4 * (layers * (b - A + r) + r + A + N * Cl + fixed)
    k = math.ceil(math.sqrt(layers)) if mode == "sqrt" else int(mode.split(":")[1])
    return 4 * (math.ceil(layers / k) * r + r + k * (b + r) + fixed)


def main():
    tide_train, tiderun, workdir = sys.argv[1:4]
    os.makedirs(workdir, exist_ok=True)
    base, base_grads = run(tide_train, tiderun, workdir, "none", [], dump=True)
    t0 = statistics.median(x["step_ms"] for x in base[1:])
    print(f"none: mem_act {base[0]['mem_act']} bytes (model {predicted('none')}), step "
          f"{t0:.2f} ms")
    for mode in ("none", "every:2", "sqrt", "selective"):
        rows, grads = run(tide_train, tiderun, workdir, mode.replace(":", ""),
                          ["--checkpoint-activations", mode], dump=True)
        same = grads == base_grads and all(
            x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"] for x, y in zip(rows, base))
        act, model = rows[0]["mem_act"], predicted(mode)
        t = statistics.median(x["step_ms"] for x in rows[1:])
        check(same and abs(act - model) <= 0.1 * model,
              f"{mode:9s}: gradients {'bit-identical' if same else 'DIFFER'}, mem_act {act} "
              f"bytes vs model {model} ({act / model:.3f}; {act / base[0]['mem_act']:.2f} of "
              f"none), step {t:.2f} ms ({t / t0 - 1:+.0%} vs none)")
    for name, ranks, lay, mode in (("tp2", 2, ["--tp", "2"], "every:2"),
                                   ("pp2", 2, ["--pp", "2", "--micro-batches", "2"], "sqrt")):
        ref, _ = run(tide_train, tiderun, workdir, name + "_none", lay, ranks)
        rows, _ = run(tide_train, tiderun, workdir, name + "_" + mode.replace(":", ""),
                      lay + ["--checkpoint-activations", mode], ranks)
        same = len(rows) == len(ref) and all(
            x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"] for x, y in zip(rows, ref))
        check(same, f"{name} {mode}: losses and gradient norms equal to none's to the digit")
    print("recompute_check: " + ("FAIL" if failed else "pass"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
