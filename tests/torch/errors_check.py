#!/usr/bin/env python3
"""tide_torch's init methods, and its failures reaching Python as exceptions
with Tide's message, in time, instead of hangs:
  tcp, file init_process_group("tide", init_method="tcp://..." / "file://...",
            rank=, world_size=) rendezvous and all_reduce (3 ranks).
  timeout   the group's timeout (init_process_group(timeout=6 s)) is
            honoured: rank 1 never joins an all_reduce; rank 0's wait()
            raises RuntimeError naming tide and the timeout within 6-30 s.
  dead      rank 1 exits right after init; rank 0's all_reduce raises.
Driver: errors_check.py --tiderun TIDERUN (exits 77 without torch/tide_torch).
"""
import os
import subprocess
import sys
import time

if "RANK" not in os.environ:
    try:
        import torch  # noqa: F401
        import tide_torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e}")
        sys.exit(77)
    tiderun = sys.argv[sys.argv.index("--tiderun") + 1]
    bad = 0
    for mode in ["tcp", "file", "timeout", "dead"]:
        t0 = time.time()
        n = "3" if mode in ("tcp", "file") else "2"
        rc = subprocess.call([tiderun, "-n", n, "--timeout", "90", sys.executable,
                              os.path.abspath(__file__), mode])
        print(f"== {mode}: exit {rc} in {time.time() - t0:.1f} s", flush=True)
        bad += rc != 0
    sys.exit(1 if bad else 0)

import datetime  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tide_torch  # noqa: E402,F401

mode = sys.argv[1]
if mode in ("tcp", "file"):
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if mode == "tcp":
        url = f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}"
    else:  # every rank names the same fresh file: the job id is tiderun's
        url = f"file:///tmp/tide-torch-init-{os.environ['TIDE_JOB_ID']}"
    dist.init_process_group("tide", init_method=url, rank=rank, world_size=n)
    t = torch.full((1000,), float(rank))
    dist.all_reduce(t)
    ok = t[0].item() == n * (n - 1) / 2 and dist.get_backend() == "tide"
    print(f"rank {rank} ({mode}): all_reduce {'ok' if ok else 'WRONG: ' + str(t[0].item())}",
          flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if mode == "file" and rank == 0:
        try:
            os.unlink(url[len("file://"):])
        except FileNotFoundError:
            pass
    sys.exit(0 if ok else 1)
dist.init_process_group("tide", timeout=datetime.timedelta(seconds=6))
rank = dist.get_rank()
t = torch.ones(1 << 16)
dist.all_reduce(t)  # the group works
if rank == 1:
    if mode == "timeout":
        time.sleep(10)  # never joins; exits after rank 0 has given up
    os._exit(0)  # no destroy: a dead peer
time.sleep(0.5 if mode == "dead" else 0)
t0 = time.time()
try:
    dist.all_reduce(t)
except RuntimeError as e:
    took = time.time() - t0
    msg = str(e)
    print(f"rank 0 ({mode}): RuntimeError after {took:.1f} s: {msg}", flush=True)
    ok = "tide all_reduce" in msg.replace("allreduce", "all_reduce") and took < 30
    if mode == "timeout":
        ok = ok and "timeout" in msg and took >= 5
    os._exit(0 if ok else 1)
print(f"rank 0 ({mode}): all_reduce returned without an error", flush=True)
os._exit(1)
