#!/usr/bin/env python3
"""Runs a program under a (real or imitated) launcher environment and checks
that every rank exits 0 -- or, with --expect-fail, that every rank fails.

Modes:
  torch          torchrun's variables; a torch TCPStore holds MASTER_PORT, so
                 Tide must meet on MASTER_PORT + 1. Skips (77) without torch.
  tide           tiderun's TIDE_* variables with a TIDE_SECRET.
  slurm          Slurm's variables on one node: the per-job file in /tmp.
  slurm-file     Slurm's variables with TIDE_RDZV_FILE.
  mpirun         mpirun (PMIx when Tide has it). Skips (77) without mpirun.
  mpirun-file    mpirun without a PMIx namespace: the per-job file in /tmp.
  mpirun-rdzv    mpirun without a PMIx namespace, with TIDE_RDZV_FILE.
  mpirun-spread  mpirun pretending each rank is on its own node (the root
                 listens on a routable address).
  require-auth   tiderun's variables as for a multi-node job, no secret and
                 TIDE_REQUIRE_AUTH=1 (use with --expect-fail).

Usage: launch_env.py MODE NP PROGRAM [ARGS...]
"""
import argparse
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
TIMEOUT_S = 180

# Variables a surrounding launcher may have set; they must not leak in.
LAUNCH_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "TIDE_")
LAUNCH_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "GROUP_RANK"}
KEEP = {"TIDE_DEBUG", "TIDE_DEBUG_FILE", "TIDE_TIMEOUT"}


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k in KEEP or not (k in LAUNCH_NAMES or k.startswith(LAUNCH_PREFIXES))}
    env.setdefault("TIDE_TIMEOUT", "60")
    return env


def free_port_pair():
    """A port p such that p and p + 1 were both free a moment ago."""
    for _ in range(100):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            p = a.getsockname()[1]
            if p >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", p + 1))
                except OSError:
                    continue
            return p
    raise RuntimeError("no free pair of ports")


def run_ranks(envs, cmd):
    procs = [subprocess.Popen(cmd, env=e) for e in envs]
    deadline = time.monotonic() + TIMEOUT_S
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append("timeout")
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return codes


def rank_envs(np_, per_rank):
    envs = []
    for r in range(np_):
        e = clean_env()
        e.update({k: str(v) for k, v in per_rank(r).items()})
        envs.append(e)
    return envs


def run_mpirun(mode, np_, cmd):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("mpirun not found: skipped")
        return SKIP, None
    env = clean_env()
    args = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "-np", str(np_), "-x", "TIDE_TIMEOUT"]
    for k in ("TIDE_DEBUG", "TIDE_DEBUG_FILE"):
        if k in env:
            args += ["-x", k]
    rdzv_dir = None
    wrap = []
    if mode in ("mpirun-file", "mpirun-rdzv"):
        wrap = ["env", "-u", "PMIX_NAMESPACE"]
    if mode == "mpirun-rdzv":
        rdzv_dir = tempfile.mkdtemp(prefix="tide-launch-")
        wrap += ["TIDE_RDZV_FILE=" + os.path.join(rdzv_dir, "id")]
    if mode == "mpirun-spread":
        wrap = ["env", "OMPI_COMM_WORLD_LOCAL_SIZE=1", "OMPI_COMM_WORLD_LOCAL_RANK=0"]
    try:
        p = subprocess.run(args + wrap + cmd, env=env, timeout=TIMEOUT_S)
        code = p.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    leftovers = os.listdir(rdzv_dir) if rdzv_dir else []
    if rdzv_dir:
        shutil.rmtree(rdzv_dir, ignore_errors=True)
    if leftovers:
        print("rendezvous directory not cleaned up: %s" % leftovers)
        return 1, None
    return None, [code]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect-fail", action="store_true")
    ap.add_argument("mode")
    ap.add_argument("np", type=int)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    np_, cmd = a.np, a.cmd
    store = None
    tmp_files = []

    if a.mode == "torch":
        try:
            import torch.distributed as dist  # noqa: F401  (slow import)
        except Exception as e:  # pylint: disable=broad-except
            print("torch.distributed unavailable (%s): skipped" % e)
            return SKIP
        port = free_port_pair()
        store = dist.TCPStore("127.0.0.1", port, np_, is_master=True, wait_for_workers=False)
        codes = run_ranks(rank_envs(np_, lambda r: {
            "RANK": r, "WORLD_SIZE": np_, "LOCAL_RANK": r, "LOCAL_WORLD_SIZE": np_,
            "GROUP_RANK": 0, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}), cmd)
    elif a.mode in ("tide", "require-auth"):
        port = free_port_pair()
        secret = secrets.token_hex(16)
        auth = a.mode == "require-auth"

        def tide_vars(r):
            v = {"TIDE_RANK": r, "TIDE_WORLD_SIZE": np_, "TIDE_LOCAL_RANK": 0 if auth else r,
                 "TIDE_LOCAL_WORLD_SIZE": 1 if auth else np_,
                 "TIDE_MASTER_ADDR": "127.0.0.1", "TIDE_MASTER_PORT": port}
            if auth:
                v["TIDE_REQUIRE_AUTH"] = 1
            else:
                v["TIDE_SECRET"] = secret
            return v
        codes = run_ranks(rank_envs(np_, tide_vars), cmd)
    elif a.mode in ("slurm", "slurm-file"):
        job = "%d%06d" % (os.getpid(), random.randrange(10 ** 6))
        extra = {}
        if a.mode == "slurm-file":
            d = tempfile.mkdtemp(prefix="tide-launch-")
            extra["TIDE_RDZV_FILE"] = os.path.join(d, "id")
            tmp_files.append(d)
        else:
            tmp_files.append("/tmp/tide-rdzv-%d-%s.0" % (os.geteuid(), job))
        codes = run_ranks(rank_envs(np_, lambda r: dict({
            "SLURM_PROCID": r, "SLURM_NTASKS": np_, "SLURM_LOCALID": r,
            "SLURM_STEP_NUM_NODES": 1, "SLURM_JOB_ID": job, "SLURM_STEP_ID": 0}, **extra)), cmd)
    elif a.mode.startswith("mpirun"):
        early, codes = run_mpirun(a.mode, np_, cmd)
        if early is not None:
            return early
    else:
        print("unknown mode %s" % a.mode)
        return 2

    del store
    leftover = []
    for f in tmp_files:
        if os.path.isdir(f):
            leftover += os.listdir(f)
            shutil.rmtree(f, ignore_errors=True)
        elif os.path.exists(f):
            leftover.append(f)
            os.unlink(f)
    print("%s: exit codes %s" % (a.mode, codes))
    if leftover:
        print("rendezvous file left behind: %s" % leftover)
        return 1
    if a.expect_fail:
        return 0 if all(c not in (0, "timeout") for c in codes) else 1
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
