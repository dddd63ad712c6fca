#!/usr/bin/env python3
"""tide-train's ZeRO stages give ZeRO 0's results and the formulas' memory.

1. Losses: for a fixed seed the first N losses (and gradient norms) with
   --zero 1 and 2 at DP2, DP4, DP2 x 2 micro-batches, TP2 x DP2 and PP2 x DP2
   match --zero 0 at the same layout within the trainer's fp32 tolerance
   (docs/trainer.md: 1e-4 relative).
2. Memory: the start report's model-state bytes are within 3% of the ZeRO
   formula it prints (fp32: 16 psi, 8 psi + 8 psi/Nd, 4 psi + 12 psi/Nd), and
   every --metrics line has the mem_* keys.
3. --mem-cap: a cap the ZeRO-0 state does not fit fails at start on every
   rank with the error naming what did not fit; ZeRO 2 at DP4 trains under it.
4. Checkpoints: a ZeRO-2 DP2 checkpoint resumes at ZeRO-1 DP4 and continues
   within the tolerance of an uninterrupted ZeRO-0 run.
Usage: zero_check.py TIDE_TRAIN TIDERUN WORKDIR [--steps N] [--only PART,...]
Exit 0: pass, 1: fail (every number printed).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

TINY = ["--layers", "2", "--heads", "4", "--embd", "64", "--ctx", "32", "--batch", "8",
        "--lr", "3e-3", "--warmup", "2", "--eval-every", "0", "--log-every", "0",
        "--decay-steps", "40"]
LAYOUTS = {"dp2": (2, ["--dp", "2"]), "dp4": (4, ["--dp", "4"]),
           "dp2mb2": (2, ["--dp", "2", "--micro-batches", "2"]),
           "tp2dp2": (4, ["--dp", "2", "--tp", "2"]),
           "pp2dp2": (4, ["--dp", "2", "--pp", "2", "--micro-batches", "2"])}


class Run:
    def __init__(self, a):
        self.a = a
        self.failed = False

    def go(self, name, ranks, flags, expect_ok=True):
        metrics = os.path.join(self.a.workdir, name + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        cmd = [self.a.tiderun, "-n", str(ranks), self.a.tide_train] + TINY + flags + [
            "--metrics", metrics]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if (p.returncode == 0) != expect_ok:
            print(f"FAIL {name}: exit {p.returncode}\n{' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
            self.failed = True
            return None, p
        rows = [json.loads(line) for line in open(metrics)] if os.path.exists(metrics) else []
        return rows, p

    def check(self, ok, msg):
        print(("ok   " if ok else "FAIL ") + msg)
        self.failed |= not ok


def rel(xs, ys):
    if len(xs) != len(ys) or not xs:
        return float("inf")
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(xs, ys))


def losses(a, r):
    r.check(True, "part 1: ZeRO 1 and 2 against ZeRO 0")
    for lay in a.layouts.split(","):
        n, flags = LAYOUTS[lay]
        base, _ = r.go(f"{lay}_z0", n, flags + ["--steps", str(a.steps), "--zero", "0"])
        if base is None:
            continue
        for z in (1, 2):
            rows, p = r.go(f"{lay}_z{z}", n, flags + ["--steps", str(a.steps), "--zero", str(z)])
            if rows is None:
                continue
            dl = rel([x["loss"] for x in rows], [x["loss"] for x in base])
            dg = rel([x["grad_norm"] for x in rows], [x["grad_norm"] for x in base])
            keys = all(k in rows[0] for k in ("mem_params", "mem_grads", "mem_optim", "mem_act",
                                               "mem_comm", "mem_peak"))
            r.check(dl <= a.tol and dg <= 10 * a.tol and len(rows) == a.steps and keys,
                    f"{lay:7s} zero {z}: max rel loss diff {dl:.3e}, grad_norm {dg:.3e}, "
                    f"mem_* keys {'present' if keys else 'MISSING'}")
            memory(r, p.stdout, f"{lay} zero {z}")


def memory(r, out, what):
    m = re.search(r"measured/formula ([0-9.]+); shard padding (\d+)", out)
    if m is None:
        r.check(False, f"{what}: no 'memory formula:' line")
        return
    ratio = float(m.group(1))
    r.check(abs(ratio - 1.0) <= 0.03,
            f"{what}: model states / formula {ratio:.4f} (padding {m.group(2)} elements)")


def cap(a, r):
    r.check(True, "part 3: --mem-cap")
    # The tiny model's ZeRO-0 state is 1.81 MiB; ZeRO 2 at DP4 holds 0.8 MiB
    # of model states and about 2.8 MiB in all (activations 0.94 MiB).
    flags = ["--steps", "3", "--mem-cap", "2.9M"]
    _, p = r.go("cap_z0", 4, ["--dp", "4", "--zero", "0"] + flags, expect_ok=False)
    text = p.stdout + p.stderr
    named = text.count("--mem-cap") >= 4 and "does not fit" in text
    r.check(p.returncode != 0 and named,
            "ZeRO 0 at DP4 under --mem-cap 2.9M fails at start on every rank, naming what: " +
            next((ln.strip() for ln in text.splitlines() if "does not fit" in ln), "(no message)"))
    rows, _ = r.go("cap_z2", 4, ["--dp", "4", "--zero", "2"] + flags)
    r.check(rows is not None and len(rows) == 3 and max(x["mem_peak"] for x in rows) <= 2.9 * 2**20,
            "ZeRO 2 at DP4 trains under the same cap")


def resume(a, r):
    r.check(True, "part 4: checkpoints across stages")
    ck = os.path.join(a.workdir, "ckpt_z2")
    shutil.rmtree(ck, ignore_errors=True)
    ref, _ = r.go("ref_z0", 2, ["--dp", "2", "--zero", "0", "--steps", "20"])
    first, _ = r.go("ck_z2", 2, ["--dp", "2", "--zero", "2", "--steps", "10",
                                 "--checkpoint-every", "10", "--checkpoint-dir", ck])
    rows, p = r.go("resume_z1", 4, ["--dp", "4", "--zero", "1", "--steps", "20", "--resume",
                                    "--checkpoint-dir", ck])
    if ref is None or first is None or rows is None:
        return
    d = rel([x["loss"] for x in first + rows], [x["loss"] for x in ref])
    r.check(len(rows) == 10 and d <= a.tol and "resume: step 10" in p.stdout,
            f"ZeRO-2 DP2 checkpoint at step 10 resumed at ZeRO-1 DP4: 20 losses within {d:.3e} "
            "of an uninterrupted ZeRO-0 DP2 run")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("workdir")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--only", default="losses,cap,resume")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    r = Run(a)
    parts = {"losses": losses, "cap": cap, "resume": resume}
    for part in a.only.split(","):
        parts[part](a, r)
    print("zero_check: " + ("FAIL" if r.failed else "pass"))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
