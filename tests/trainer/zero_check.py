#!/usr/bin/env python3
"""tide-train's ZeRO stages give ZeRO 0's results and the formulas' memory.

1. Losses: for a fixed seed the first N losses (and gradient norms) with
   --zero 1, 2 and 3 at DP2, DP4, DP2 x 2 micro-batches, TP2 x DP2, PP2 x DP2
   and DP3 with odd sizes (padding)
   match --zero 0 at the same layout within the trainer's fp32 tolerance
   (docs/trainer.md: 1e-4 relative).
2. Memory: the start report's model-state bytes are within 3% of the ZeRO
   formula it prints (fp32: 16 psi, 8 psi + 8 psi/Nd, 4 psi + 12 psi/Nd), and
   every --metrics line has the mem_* keys.
3. --mem-cap: a cap the ZeRO-0 state does not fit fails at start on every
   rank with the error naming what did not fit; ZeRO 3 at DP4 trains under it.
4. Checkpoints: a ZeRO-2 DP2 checkpoint resumes at ZeRO-1 DP4, and a ZeRO-3
   DP4 one at ZeRO-1 DP2, each within the tolerance of an uninterrupted
   ZeRO-0 run.
5. --compress-params int8 (ZeRO-3's quantized weight gathers) and --compress
   int8 at ZeRO 2 (the compressed Reduce-Scatter) stay within 0.02 nats of
   ZeRO 0; bad --zero, --compress-params, --mem-cap and
   --checkpoint-activations values are errors on every rank.
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
           "pp2dp2": (4, ["--dp", "2", "--pp", "2", "--micro-batches", "2"]),
           # uneven sizes over 3 ranks: every bucket padded
           "dp3odd": (3, ["--dp", "3", "--heads", "11", "--embd", "121", "--vocab", "259",
                          "--ctx", "31", "--batch", "9"])}


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
    r.check(True, "part 1: ZeRO 1, 2 and 3 against ZeRO 0")
    for lay in a.layouts.split(","):
        n, flags = LAYOUTS[lay]
        base, _ = r.go(f"{lay}_z0", n, flags + ["--steps", str(a.steps), "--zero", "0"])
        if base is None:
            continue
        for z in (1, 2, 3):
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
    # L=8, C=128: 16 psi = 25.5 MiB of fp32 training state, more than the cap;
    # ZeRO 3 at DP4 holds 16 psi/4 = 6.4 MiB of it plus its gathered blocks,
    # rings and staging.
    model = ["--layers", "8", "--embd", "128", "--ctx", "16", "--batch", "4", "--steps", "3",
             "--mem-cap", "20M"]
    _, p = r.go("cap_z0", 4, ["--dp", "4", "--zero", "0"] + model, expect_ok=False)
    text = p.stdout + p.stderr
    named = text.count("--mem-cap") >= 4 and "does not fit" in text
    r.check(p.returncode != 0 and named,
            "ZeRO 0 at DP4 under --mem-cap 20M fails at start on every rank, naming what: " +
            next((ln.strip() for ln in text.splitlines() if "does not fit" in ln), "(no message)"))
    rows, p = r.go("cap_z3", 4, ["--dp", "4", "--zero", "3"] + model)
    peak = max(x["mem_peak"] for x in rows) if rows else 0
    r.check(rows is not None and len(rows) == 3 and peak <= 20 * 2**20,
            f"ZeRO 3 at DP4 trains under the same cap (peak {peak / 2**20:.2f} MiB)")
    if rows is not None:
        memory(r, p.stdout, "cap model zero 3")


def resume(a, r):
    r.check(True, "part 4: checkpoints across stages")
    ref, _ = r.go("ref_z0", 2, ["--dp", "2", "--zero", "0", "--steps", "20"])
    # (saved at D, stage) -> (resumed at D, stage)
    for (d0, z0), (d1, z1) in (((2, 2), (4, 1)), ((2, 1), (4, 3)), ((4, 3), (2, 1))):
        ck = os.path.join(a.workdir, f"ckpt_z{z0}_dp{d0}")
        shutil.rmtree(ck, ignore_errors=True)
        first, _ = r.go(f"ck_z{z0}_dp{d0}", d0, ["--dp", str(d0), "--zero", str(z0), "--steps",
                                                 "10", "--checkpoint-every", "10",
                                                 "--checkpoint-dir", ck])
        rows, p = r.go(f"resume_z{z1}_dp{d1}", d1, ["--dp", str(d1), "--zero", str(z1),
                                                    "--steps", "20", "--resume",
                                                    "--checkpoint-dir", ck])
        if ref is None or first is None or rows is None:
            continue
        d = rel([x["loss"] for x in first + rows], [x["loss"] for x in ref])
        r.check(len(rows) == 10 and d <= a.tol and "resume: step 10" in p.stdout,
                f"ZeRO-{z0} DP{d0} checkpoint at step 10 resumed at ZeRO-{z1} DP{d1}: 20 losses "
                f"within {d:.3e} of an uninterrupted ZeRO-0 DP2 run")


def codec_and_errors(a, r):
    r.check(True, "part 5: --compress-params and bad flags")
    base, _ = r.go("cp_z0", 2, ["--dp", "2", "--zero", "0", "--steps", str(a.steps)])
    rows, _ = r.go("cp_int8", 2, ["--dp", "2", "--zero", "3", "--compress-params", "int8",
                                  "--steps", str(a.steps)])
    if base is not None and rows is not None:
        d = max(abs(x["loss"] - y["loss"]) for x, y in zip(rows, base))
        r.check(len(rows) == a.steps and d <= 0.02,
                f"ZeRO-3 DP2 with int8 parameter gathers: losses within {d:.4f} nats of ZeRO 0 "
                "(bar 0.02)")
    rows, _ = r.go("rs_int8", 2, ["--dp", "2", "--zero", "2", "--compress", "int8",
                                  "--steps", str(a.steps)])
    if base is not None and rows is not None:
        d = max(abs(x["loss"] - y["loss"]) for x, y in zip(rows, base))
        r.check(len(rows) == a.steps and d <= 0.02,
                f"ZeRO-2 DP2 with --compress int8 (compressed Reduce-Scatter): losses within "
                f"{d:.4f} nats of ZeRO 0 (bar 0.02)")
    for flags, want in ((["--zero", "4"], "--zero 4"),
                        (["--zero", "2", "--compress-params", "int8"], "needs --zero 3"),
                        (["--zero", "3", "--compress-params", "topk"], "--compress-params topk"),
                        (["--mem-cap", "12Q"], "--mem-cap 12Q"),
                        (["--checkpoint-activations", "every:0"], "--checkpoint-activations")):
        _, p = r.go("bad", 2, ["--dp", "2", "--steps", "1"] + flags, expect_ok=False)
        text = p.stdout + p.stderr
        r.check(p.returncode != 0 and text.count(want) >= 2,
                f"{' '.join(flags)}: an error naming '{want}' on every rank")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("workdir")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--only", default="losses,cap,resume,codec")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    r = Run(a)
    parts = {"losses": losses, "cap": cap, "resume": resume, "codec": codec_and_errors}
    for part in a.only.split(","):
        parts[part](a, r)
    print("zero_check: " + ("FAIL" if r.failed else "pass"))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
