#!/usr/bin/env python3
"""tide-train's mixed precision (--precision bf16|fp16) tracks fp32.

1. Curves: 300 steps at DP2 x ZeRO-2 with fp32, bf16 and fp16 (the fp16
   loss scale doubling every 50 clean steps, so it overflows and skips now
   and then by itself): every step's loss within 0.05 nats of fp32's, the
   mean of the last 50 within 0.01 (docs/zero.md, "Mixed precision").
2. Layouts: ZeRO 1, 2 and 3 (DP2), TP2, PP2 and DP2 x PP2 x ZeRO-2 give the
   first 20 losses of ZeRO-0 DP2 in the same precision within 1e-4
   relative (the ZeRO stages: exactly); DP3 with odd sizes (padded shards)
   at ZeRO 1 and 3 exactly as ZeRO 0.
3. Memory: model states over the mixed-precision formula (16 psi, 4 psi +
   12 psi/Nd, 2 psi + 14 psi/Nd, 16 psi/Nd) within 3% at Nd 2 and 4.
4. Loss scale: --force-overflow 5 skips step 5 (printed, "skipped": 1 with
   the old scale in --metrics), halves the scale for step 6 and trains on;
   the scale doubles after --loss-scale-window clean steps; an overflow at
   --min-loss-scale is one clear error on every rank (exit non-zero).
5. Checkpoints: an fp16 ZeRO-3 checkpoint resumes at ZeRO-1 with the same
   losses and the loss scale restored; bad flags are errors.
Usage: precision_check.py TIDE_TRAIN TIDERUN WORKDIR
Exit 0: pass, 1: fail (every number printed).
"""
import os
import re
import shutil
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_check import Run, rel  # noqa: E402  (the same runner and measure)

# The 300-step curves at nanoGPT's schedule (zero_check's TINY trains 40).
CURVE = ["--ctx", "64", "--steps", "300", "--lr", "1e-3", "--warmup", "100",
         "--decay-steps", "300"]


def go(r, name, ranks, flags, expect_ok=True):
    rows, p = r.go(name, ranks, flags, expect_ok)
    return [x for x in rows or [] if "loss" in x], p


def curves(r):
    runs = {}
    for p in ["fp32", "bf16", "fp16"]:
        runs[p], _ = go(r, "curve_" + p, 2, CURVE + ["--dp", "2", "--zero", "2",
                                                   "--precision", p, "--loss-scale-window", "50"])
    base = [x["loss"] for x in runs["fp32"]]
    for p in ["bf16", "fp16"]:
        got = [x["loss"] for x in runs[p]]
        if len(got) != 300 or len(base) != 300:
            r.check(False, f"{p}: 300 steps ({len(got)}, fp32 {len(base)})")
            continue
        worst = max(abs(a - b) for a, b in zip(got, base))
        tail = abs(sum(got[-50:]) / 50 - sum(base[-50:]) / 50)
        skipped = sum(x.get("skipped", 0) for x in runs[p])
        r.check(worst <= 0.05 and tail <= 0.01,
                f"{p} over 300 steps: largest |loss - fp32| {worst:.4f} nats (<= 0.05), last 50 "
                f"steps' mean {sum(got[-50:]) / 50:.4f} against {sum(base[-50:]) / 50:.4f} "
                f"(|diff| {tail:.4f} <= 0.01); {skipped} steps skipped")
        if p == "fp16":
            r.check(skipped >= 1, f"fp16: the loss scale's own overflows skipped {skipped} steps")


def layouts(r):
    for p in ["bf16", "fp16"]:
        base, _ = go(r, f"{p}_z0", 2, ["--steps", "20", "--dp", "2", "--precision", p])
        want = [x["loss"] for x in base]
        for name, n, flags, tol in [
                ("z1", 2, ["--dp", "2", "--zero", "1"], 0.0),
                ("z2", 2, ["--dp", "2", "--zero", "2"], 0.0),
                ("z3", 2, ["--dp", "2", "--zero", "3"], 0.0),
                ("tp2", 2, ["--tp", "2"], 1e-4),
                ("pp2", 2, ["--pp", "2", "--micro-batches", "2"], 1e-4),
                ("dp2pp2z2", 4, ["--dp", "2", "--pp", "2", "--micro-batches", "2", "--zero",
                                 "2"], 1e-4)]:
            rows, _ = go(r, f"{p}_{name}", n, flags + ["--steps", "20", "--precision", p])
            d = rel([x["loss"] for x in rows], want)
            r.check(d <= tol, f"{p} {name}: first 20 losses against ZeRO-0 DP2, largest relative "
                              f"difference {d:.2e} (<= {tol:g})")


def uneven(r):
    odd = ["--dp", "3", "--heads", "11", "--embd", "121", "--vocab", "259", "--ctx", "31",
           "--batch", "9", "--steps", "10", "--precision", "bf16"]
    base, _ = go(r, "odd_z0", 3, odd + ["--zero", "0"])
    for z in ["1", "3"]:
        rows, p = go(r, "odd_z" + z, 3, odd + ["--zero", z])
        m = re.search(r"measured/formula ([\d.]+); shard padding (\d+) elements", p.stdout)
        d = rel([x["loss"] for x in rows], [x["loss"] for x in base])
        r.check(m is not None and abs(float(m.group(1)) - 1) <= 0.03 and d == 0.0,
                f"bf16 DP3 uneven sizes, ZeRO-{z}: padding {m.group(2) if m else '?'} elements, "
                f"ratio {m.group(1) if m else '?'}, losses against ZeRO 0 {d:.1e}")


def memory(r):
    for nd in [2, 4]:
        for z in [0, 1, 2, 3]:
            _, p = go(r, f"mem_d{nd}_z{z}", nd, ["--layers", "2", "--embd", "128", "--steps", "1",
                                                "--dp", str(nd), "--zero", str(z),
                                                "--precision", "bf16"])
            m = re.search(r"memory formula: ZeRO-\d bf16.*?: (.*?) = .*measured/formula ([\d.]+)",
                          p.stdout)
            ratio = float(m.group(2)) if m else float("nan")
            r.check(m is not None and abs(ratio - 1.0) <= 0.03,
                    f"bf16 Nd {nd} ZeRO-{z}: model states / ({m.group(1) if m else '?'}) = "
                    f"{ratio:.4f}")


def loss_scale(r):
    rows, p = go(r, "force", 2, ["--steps", "12", "--dp", "2", "--zero", "2", "--precision",
                                "fp16", "--force-overflow", "5", "--loss-scale-window", "4"])
    by = {x["step"]: x for x in rows}
    ok = (len(rows) == 12 and by[5].get("skipped") == 1 and by[5]["grad_norm"] is None and
          by[6]["loss_scale"] == by[5]["loss_scale"] / 2 and by[6].get("skipped") == 0)
    s5 = by[5]["loss_scale"] if len(rows) == 12 else 0
    line = f"step 5: fp16 gradients overflowed: step skipped, loss scale {s5:.0f} -> {s5 / 2:.0f}"
    r.check(ok and line in p.stdout,
            f"--force-overflow 5: step 5 skipped at scale {s5:.0f} ('{line}'), step 6 at half "
            f"of it, 12 steps trained")
    # The scale's rule, replayed from the skipped flags (this model may also
    # overflow by itself when the scale doubles): halve after a skipped
    # step, double after 4 clean steps in a row.
    scales = [by[s]["loss_scale"] for s in range(12)] if len(rows) == 12 else []
    want, scale, clean = [], 65536, 0
    for s in range(len(scales)):
        want.append(scale)
        if by[s]["skipped"]:
            scale, clean = scale / 2, 0
        else:
            clean += 1
            if clean == 4:
                scale, clean = scale * 2, 0
    r.check(scales and scales == want and 131072 in scales,
            f"the scale halves on a skip and doubles after 4 clean steps: {scales}")
    _, p = go(r, "minimum", 2, ["--steps", "6", "--dp", "2", "--precision", "fp16",
                               "--loss-scale", "4", "--min-loss-scale", "4",
                               "--force-overflow", "2"], expect_ok=False)
    n = p.stderr.count("fp16 loss scale at its minimum (4)")
    r.check(p.returncode != 0 and n == 2,
            f"an overflow at the minimum scale: exit {p.returncode}, the error on {n} of 2 ranks")


def checkpoints(r):
    ck = os.path.join(r.a.workdir, "ck")
    ck2 = os.path.join(r.a.workdir, "ck2")
    for d in (ck, ck2):
        shutil.rmtree(d, ignore_errors=True)
    flags = ["--steps", "16", "--dp", "2", "--precision", "fp16", "--loss-scale-window", "3"]
    full, _ = go(r, "ck_full", 2, flags + ["--zero", "3", "--checkpoint-dir", ck,
                                          "--checkpoint-every", "8"])
    os.makedirs(ck2)
    shutil.copytree(os.path.join(ck, "step_00000008"), os.path.join(ck2, "step_00000008"))
    part, _ = go(r, "ck_resume", 2, flags + ["--zero", "1", "--checkpoint-dir", ck2, "--resume"])
    a = [(x["loss"], x["loss_scale"]) for x in full if x["step"] >= 8]
    b = [(x["loss"], x["loss_scale"]) for x in part]
    d = rel([x[0] for x in b], [x[0] for x in a])
    r.check(len(a) == 8 and [x[1] for x in a] == [x[1] for x in b] and d <= 1e-6,
            f"fp16 ZeRO-3 checkpoint at step 8 resumed at ZeRO-1: losses within {d:.1e}, "
            f"scales {[x[1] for x in b]}")
    for bad, text in [(["--precision", "fp8"], "--precision fp8: expected fp32, bf16 or fp16"),
                      (["--precision", "bf16", "--force-overflow", "3"],
                       "--force-overflow needs --precision fp16"),
                      (["--precision", "fp16", "--force-overflow", "x"], "--force-overflow x"),
                      (["--precision", "bf16", "--dump-grads", "/tmp/g"],
                       "--dump-grads needs --precision fp32")]:
        _, p = go(r, "bad", 2, ["--steps", "1", "--dp", "2"] + bad, expect_ok=False)
        r.check(p.returncode != 0 and p.stderr.count(text) == 2,
                f"{' '.join(bad)}: '{text}' on both ranks")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    a = types.SimpleNamespace(tide_train=sys.argv[1], tiderun=sys.argv[2], workdir=sys.argv[3])
    r = Run(a)
    os.makedirs(a.workdir, exist_ok=True)
    for part in (curves, layouts, uneven, memory, loss_scale, checkpoints):
        part(r)
    print("precision_check:", "FAILED" if r.failed else "passed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
