#!/usr/bin/env python3
"""A tide-train job survives a SIGKILLed rank and continues bit-identically.

1. Reference: DP2xTP2, uninterrupted, --steps N2 with checkpoints.
2. The same job under `tiderun --max-restarts 1 ... --resume`: once the
   metrics show step K (random), one rank (random) gets SIGKILL. The job must
   finish by itself, tiderun must say it restarted, and every loss after the
   restart must equal the reference's bit for bit (metrics print 17 digits).
3. Its last checkpoint resumed at DP4 continues within 1e-4 of the reference.
Usage: restart_check.py TIDE_TRAIN TIDERUN WORKDIR [--seed S]
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

MODEL = ["--layers", "2", "--heads", "4", "--embd", "64", "--ctx", "32", "--batch", "8",
         "--lr", "3e-3", "--warmup", "2", "--eval-every", "0", "--log-every", "0",
         "--decay-steps", "40", "--checkpoint-every", "5"]


def losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "loss" in r:
            out[r["step"]] = r["loss"]  # the last occurrence wins (after a restart)
    return out


def rank_pids(job_pid):
    """The tide-train ranks started by tiderun `job_pid`: {rank: pid}."""
    pids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != job_pid:
                continue
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
            for e in env:
                if e.startswith(b"TIDE_RANK="):
                    pids[int(e[10:])] = int(d)
        except (OSError, ValueError, IndexError):
            pass
    return pids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tide_train")
    ap.add_argument("tiderun")
    ap.add_argument("workdir")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    W = lambda *p: os.path.join(a.workdir, *p)
    lay = ["--dp", "2", "--tp", "2"]

    ref = subprocess.run([a.tiderun, "-n", "4", a.tide_train] + MODEL + lay + [
        "--steps", "40", "--checkpoint-dir", W("ref_ckpt"), "--metrics", W("ref.jsonl")],
        capture_output=True, text=True, timeout=600)
    if ref.returncode != 0:
        sys.exit(f"FAIL: the reference run exited {ref.returncode}\n{ref.stderr}")
    want = losses(W("ref.jsonl"))

    kill_at = rng.randint(6, a.steps - 6)
    victim = rng.randrange(4)
    print(f"seed {a.seed}: SIGKILL to rank {victim} once step {kill_at} is reported")
    job = subprocess.Popen([a.tiderun, "--max-restarts", "1", "-n", "4", a.tide_train] + MODEL +
                           lay + ["--steps", str(a.steps), "--resume", "--checkpoint-dir",
                                  W("ckpt"), "--metrics", W("job.jsonl")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.time() + 300
    while killed is None and time.time() < deadline and job.poll() is None:
        try:
            seen = losses(W("job.jsonl"))
        except (OSError, ValueError):
            seen = {}
        if seen and max(seen) >= kill_at:
            pids = rank_pids(job.pid)
            if victim in pids:
                os.kill(pids[victim], signal.SIGKILL)
                killed = max(seen)
        time.sleep(0.01)
    out, err = job.communicate(timeout=600)
    if killed is None:
        sys.exit(f"FAIL: could not kill rank {victim} (job exit {job.returncode})\n{err}")
    print(f"killed rank {victim} after step {killed}; job exit {job.returncode}")
    if job.returncode != 0:
        sys.exit(f"FAIL: the job did not complete after the restart\n{out}\n{err}")
    if "restarting the job" not in err:
        sys.exit(f"FAIL: tiderun did not report a restart\n{err}")
    got = losses(W("job.jsonl"))
    bad = [s for s in range(a.steps) if got.get(s) != want.get(s)]
    for s in range(a.steps):
        mark = "" if s not in bad else "   <-- differs"
        print(f"  step {s:3d}: {got.get(s)!r:24} reference {want.get(s)!r}{mark}")
    if bad:
        sys.exit(f"FAIL: losses after the restart differ from the uninterrupted run at {bad}")
    print("losses after the restart are bit-identical to the uninterrupted run")

    # The job's last checkpoint (step a.steps) resumed at DP4.
    shutil.copytree(W("ckpt"), W("ckpt4"))
    p = subprocess.run([a.tiderun, "-n", "4", a.tide_train] + MODEL + [
        "--dp", "4", "--steps", str(a.steps + 10), "--resume", "--checkpoint-dir", W("ckpt4"),
        "--metrics", W("dp4.jsonl")], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL: resuming at DP4 exited {p.returncode}\n{p.stderr}")
    dp4 = losses(W("dp4.jsonl"))
    worst = 0.0
    for s in range(a.steps, a.steps + 10):
        rel = abs(dp4[s] - want[s]) / abs(want[s])
        worst = max(worst, rel)
        print(f"  DP4 step {s}: {dp4[s]!r} reference {want[s]!r} rel {rel:.2e}")
    if worst > 1e-4:
        sys.exit(f"FAIL: DP4 resume differs by {worst:.2e} relative (> 1e-4)")
    print(f"resumed at DP4: within {worst:.2e} relative of the uninterrupted run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
