#!/usr/bin/env python3
"""Pipeline-parallel tide-train over real processes.

layouts: for a fixed seed the first N losses (and gradient norms) at PP2,
  PP4, DP2xPP2, TP2xPP2 and DP2xTP2xPP2 (8 ranks), for each schedule (gpipe,
  1f1b, interleaved with V = 2, zb), match the one-rank run within the
  trainer's layout tolerance (relative 1e-4: fp32 sums in another order), and
  every step reports a bubble in [0, 1).
kill: a rank SIGKILLed in the middle of a pipeline step (ranks started
  directly, torchrun-style, so no launcher stops the others) makes every other
  rank exit non-zero within a bound of TIDE_TIMEOUT, each naming a peer
  rank in its message; at P = 2, 3 and 4.
Usage: pipeline_check.py TIDE_TRAIN TIDERUN WORKDIR [layouts|kill|all] [--steps N]
Exit 0: pass, 1: fail (every number printed).
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time

MODEL = ["--layers", "8", "--heads", "4", "--embd", "32", "--ctx", "16", "--batch", "8",
         "--micro-batches", "4", "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
         "--log-every", "0"]
LAYOUTS = {"pp2": (2, ["--pp", "2"]), "pp4": (4, ["--pp", "4"]),
           "dp2pp2": (4, ["--dp", "2", "--pp", "2"]), "tp2pp2": (4, ["--tp", "2", "--pp", "2"]),
           "dp2tp2pp2": (8, ["--dp", "2", "--tp", "2", "--pp", "2"])}
SCHEDULES = {"gpipe": ["--schedule", "gpipe"], "1f1b": ["--schedule", "1f1b"],
             "interleaved": ["--schedule", "interleaved", "--virtual-stages", "2"],
             "zb": ["--schedule", "zb"]}


def run(a, ranks, extra, name):
    metrics = os.path.join(a.workdir, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [a.tiderun, "-n", str(ranks), a.tide_train] + MODEL + extra + [
        "--steps", str(a.steps), "--metrics", metrics]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print(f"FAIL {name}: exit {p.returncode}\n{' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
        return None
    return [json.loads(line) for line in open(metrics)]


def layouts(a):
    base = run(a, 1, [], "pp_base")
    if base is None:
        return False
    ok_all = True
    worst = 0.0
    for lay in a.layouts.split(","):
        n, flags = LAYOUTS[lay]
        for sch in a.schedules.split(","):
            rows = run(a, n, flags + SCHEDULES[sch], f"{lay}_{sch}")
            if rows is None:
                ok_all = False
                continue
            rel = max(abs(r["loss"] - b["loss"]) / abs(b["loss"]) for r, b in zip(rows, base))
            relg = max(abs(r["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"])
                       for r, b in zip(rows, base))
            bub = [r.get("bubble", -1.0) for r in rows]
            ok = (len(rows) == len(base) == a.steps and rel <= a.tol and relg <= 10 * a.tol
                  and all(0.0 <= x < 1.0 for x in bub))
            worst = max(worst, rel)
            ok_all &= ok
            med = sorted(bub)[len(bub) // 2]
            print(f"{lay:10s} {sch:12s} max rel loss diff {rel:.3e}  grad_norm {relg:.3e}  "
                  f"median bubble {med:.3f}  {'ok' if ok else 'FAIL'}", flush=True)
            if not ok:
                for s, (r, b) in enumerate(zip(rows, base)):
                    print(f"   step {s}: {r['loss']!r} vs 1 rank {b['loss']!r}  bubble {r.get('bubble')}")
    print(f"worst relative loss difference {worst:.3e} (tolerance {a.tol:g})")
    return ok_all


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_one(a, p, rng):
    """P ranks of a pure pipeline, started directly; SIGKILL one mid-step."""
    timeout = 8
    metrics = os.path.join(a.workdir, f"kill{p}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    port = free_port()
    procs = []
    for r in range(p):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(p), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(p), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   TIDE_TIMEOUT=str(timeout))
        for k in ("TIDE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
            env.pop(k, None)
        cmd = [a.tide_train] + MODEL + ["--pp", str(p), "--micro-batches", "8", "--layers", "8",
                                         "--embd", "128", "--steps", "100000",
                                         "--metrics", metrics]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 3:
            break
        if any(x.poll() is not None for x in procs):
            break
        time.sleep(0.05)
    victim = rng.randrange(p)
    time.sleep(rng.uniform(0.0, 0.05))  # somewhere inside a step
    procs[victim].send_signal(signal.SIGKILL)
    t0 = time.time()
    ok = True
    bound = 3 * timeout + 10
    for r, x in enumerate(procs):
        if r == victim:
            x.wait()
            continue
        try:
            _, err = x.communicate(timeout=max(1.0, t0 + bound - time.time()))
        except subprocess.TimeoutExpired:
            for y in procs:
                y.kill()
            print(f"FAIL P={p}: rank {r} still running {bound} s after rank {victim} was killed")
            return False
        took = time.time() - t0
        named = re.search(r"rank \d+|peer \d+", err) is not None
        good = x.returncode != 0 and named
        ok &= good
        lines = [ln for ln in err.splitlines() if "error:" in ln] or err.strip().splitlines()
        last = lines[0] if lines else "(no message)"
        print(f"P={p}: killed rank {victim}; rank {r} exit {x.returncode} after {took:.1f} s "
              f"(TIDE_TIMEOUT {timeout}): {last[:220]}  {'ok' if good else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("workdir")
    ap.add_argument("what", nargs="?", default="all", choices=["layouts", "kill", "all"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    ok = True
    if a.what in ("layouts", "all"):
        ok &= layouts(a)
    if a.what in ("kill", "all"):
        rng = random.Random(a.seed)
        print(f"kill: seed {a.seed}")
        for p in (2, 3, 4):
            ok &= kill_one(a, p, rng)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
