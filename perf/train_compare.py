#!/usr/bin/env python3
"""Side-by-side speed and learning comparison of tide-train and PyTorch (CPU).

  /usr/bin/python3 perf/train_compare.py --tide-train build/trainer/tide-train \\
      --tiderun build/tools/tiderun/tiderun [--mode speed|learn|all] \\
      [--out FILE.json] [--plot FILE.png]

speed: a GPT of L=4, H=4, C=224 (--layers/--heads/--embd; 2.49 M parameters), ctx 64 (--ctx), global
  batch 32 (--batch), one BLAS thread per process (OPENBLAS_NUM_THREADS=1,
  torch.set_num_threads(1)). --steps (30) measured steps after --warm (5):
    torch      PyTorch eager, one process: forward + backward + clip_grad_norm_
               + AdamW step + zero_grad, median tokens/s over steps
    tide       tide-train, one rank: median tokens_per_s of its --metrics
    torch-ddp  PyTorch DDP over gloo, 2 processes of --batch/2 sequences each; global
               tokens per step / median step time (a barrier ends each step)
    tide-dp2   tiderun -n 2 tide-train --dp 2, same global batch
  run in turn (torch, tide, torch-ddp, tide-dp2) --repeats (2) times; the
  table shows each repeat and the median, the ratios tide/torch and
  tide-dp2/torch-ddp, tide's median mfu and, when tide-train prints a line
  `gemm peak: <x> GFLOP/s`, that peak. Both sides clip gradients at 1.0.
learn: nanoGPT's small configuration (L4 H4 C128, ctx 64, batch 12, 2000
  steps (--learn-steps), lr 1e-3 -> 1e-4, warmup 100, wd 0.1, clip 1, AdamW,
  eval every 250 over 20 batches, the fortunes text): tide-train --steps 0
  --export writes the initial weights; tiderun -n 2 tide-train --dp 2 trains
  from them, and PyTorch (one process, global batch 12: the same as DDP 2)
  trains from the same file over the same windows. Reports both final
  val_loss values and their difference; --plot draws the validation and
  (smoothed) training curves when matplotlib is installed.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

for _k, _v in (("OPENBLAS_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "1"),
               ("GLOO_SOCKET_IFNAME", "lo")):
    os.environ.setdefault(_k, _v)
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "trainer"))
import nanogpt_ref as ref  # noqa: E402

VOCAB = 256
LEARN = dict(layers=4, heads=4, embd=128, ctx=64, batch=12, lr=1e-3, min_lr=1e-4, warmup=100,
             weight_decay=0.1, clip=1.0, eval_every=250, eval_batches=20)


def tide_flags(**f) -> list[str]:
    out = []
    for k, v in f.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def run_tide(cmd: list[str], metrics: str | None) -> tuple[dict[int, dict], str]:
    """Runs a tide-train command; returns its metrics (merged by step) and its stdout."""
    print("  $", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"exit status {p.returncode}: {' '.join(cmd)}\n{(p.stdout + p.stderr)[-3000:]}")
    merged: dict[int, dict] = {}
    if metrics is None:
        return merged, p.stdout
    with open(metrics) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                for k, v in rec.items():
                    merged.setdefault(int(rec["step"]), {}).setdefault(k, v)
    return merged, p.stdout


# ------------------------------------------------------------------ speed --
def timed_steps(model, opt, batch, steps: int, clip: float, sync=None) -> list[float]:
    """Seconds of each training step (batch(s) -> (x, y)); `sync` ends a step."""
    times = []
    for s in range(steps):
        t0 = time.perf_counter()
        x, y = batch(s)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
    return times


def speed_model(a) -> ref.GPT:
    model = ref.GPT(ref.GPTConfig(a.layers, a.heads, a.embd, a.ctx, VOCAB))
    model.init_weights(a.seed)
    return model


def torch_eager_speed(a, data: ref.TextData) -> float:
    """Median tokens/s of PyTorch eager, one process, global batch --batch."""
    model = speed_model(a)
    opt = ref.make_optimizer(model, "adamw", 1e-3, 0.1)
    times = timed_steps(model, opt, lambda s: data.train_batch(a.seed, s, a.batch,
                                                               a.ctx),
                        a.warm + a.steps, 1.0)
    return a.batch * a.ctx / statistics.median(times[a.warm:])


def ddp_worker(spec: dict) -> None:
    """One rank of the gloo DDP run (started by torch_ddp_speed)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    a = argparse.Namespace(**spec["args"])
    data = ref.TextData.from_source(a.data)
    model = DDP(speed_model(a))
    opt = ref.make_optimizer(model.module, "adamw", 1e-3, 0.1)
    per = a.batch // world
    times = timed_steps(model, opt, lambda s: data.train_batch(
        a.seed, s, a.batch, a.ctx, first=rank * per, count=per),
        a.warm + a.steps, 1.0, sync=dist.barrier)
    if rank == 0:
        with open(spec["result"], "w") as f:
            json.dump({"times": times}, f)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_ddp_speed(a, workdir: str, world: int = 2) -> float:
    """Global tokens/s of PyTorch DDP (gloo), `world` processes, global batch --batch."""
    result = os.path.join(workdir, "ddp.json")
    spec = json.dumps({"args": vars(a), "result": result})
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ddp-worker", spec],
                              env=dict(env, RANK=str(r))) for r in range(world)]
    if any(p.wait() != 0 for p in procs):
        sys.exit("a DDP rank failed")
    with open(result) as f:
        times = json.load(f)["times"]
    return a.batch * a.ctx / statistics.median(times[a.warm:])


def tide_speed(a, workdir: str, ranks: int) -> dict:
    """Median tokens_per_s (and mfu) of tide-train's measured steps."""
    metrics = os.path.join(workdir, f"speed_{ranks}.jsonl")
    flags = tide_flags(layers=a.layers, heads=a.heads, embd=a.embd, ctx=a.ctx,
                       vocab=VOCAB, batch=a.batch, steps=a.warm + a.steps, seed=a.seed,
                       lr=1e-3, min_lr=1e-4, warmup=100, decay_steps=2000, weight_decay=0.1,
                       clip=1.0, optimizer="adamw", data=a.data, metrics=metrics,
                       eval_every=10 ** 9, eval_batches=1)  # evaluates at step 0 only
    cmd = [a.tide_train] + flags
    if ranks > 1:
        cmd = [a.tiderun, "-n", str(ranks), a.tide_train, "--dp", str(ranks)] + flags
    if os.path.exists(metrics):
        os.remove(metrics)  # tide-train appends; each repeat starts afresh
    recs, out = run_tide(cmd, metrics)
    steps = [recs[s] for s in sorted(recs) if a.warm <= s < a.warm + a.steps and "loss" in recs[s]]
    res = {"tokens_per_s": statistics.median(float(r["tokens_per_s"]) for r in steps),
           "from_step_ms": statistics.median(a.batch * a.ctx * 1e3 / float(r["step_ms"])
                                             for r in steps),
           "mfu": statistics.median(float(r["mfu"]) for r in steps)}
    for line in out.splitlines():
        if line.strip().startswith("gemm peak:"):
            try:
                res["gemm_peak_gflops"] = float(line.split(":", 1)[1].split()[0])
            except (IndexError, ValueError):
                pass
    if abs(res["from_step_ms"] / res["tokens_per_s"] - 1) > 0.2:
        print(f"  note: tokens_per_s {res['tokens_per_s']:.0f} differs from global batch / "
              f"step_ms {res['from_step_ms']:.0f} (per-rank rate?)")
    return res


def speed(a, workdir: str) -> dict:
    data = ref.TextData.from_source(a.data)
    runs: dict[str, list] = {n: [] for n in ("torch", "tide", "torch-ddp", "tide-dp2")}
    extra: dict[str, list] = {"tide_mfu": [], "tide-dp2_mfu": [], "gemm_peak_gflops": []}
    for rep in range(a.repeats):
        print(f"-- repeat {rep + 1}/{a.repeats}", flush=True)
        runs["torch"].append(torch_eager_speed(a, data))
        print(f"  torch eager: {runs['torch'][-1]:.0f} tokens/s", flush=True)
        if a.tide_train:
            t = tide_speed(a, workdir, 1)
            runs["tide"].append(t["tokens_per_s"])
            extra["tide_mfu"].append(t["mfu"])
            if "gemm_peak_gflops" in t:
                extra["gemm_peak_gflops"].append(t["gemm_peak_gflops"])
        runs["torch-ddp"].append(torch_ddp_speed(a, workdir))
        print(f"  torch ddp:   {runs['torch-ddp'][-1]:.0f} tokens/s", flush=True)
        if a.tide_train and a.tiderun:
            t = tide_speed(a, workdir, 2)
            runs["tide-dp2"].append(t["tokens_per_s"])
            extra["tide-dp2_mfu"].append(t["mfu"])
    med = {n: statistics.median(v) for n, v in runs.items() if v}
    res = {"model": dict(layers=a.layers, heads=a.heads, embd=a.embd, ctx=a.ctx,
                         batch=a.batch, steps=a.steps, warm=a.warm),
           "runs": runs, "median_tokens_per_s": med}
    if "tide" in med:
        res["tide/torch"] = med["tide"] / med["torch"]
    if "tide-dp2" in med:
        res["tide-dp2/torch-ddp"] = med["tide-dp2"] / med["torch-ddp"]
    for k, v in extra.items():
        if v:
            res[k] = statistics.median(v)
    print(f"\n{'run':<11} {'tokens/s per repeat':>28} {'median':>10}")
    for n in runs:
        if runs[n]:
            per = " ".join(f"{x:8.0f}" for x in runs[n])
            print(f"{n:<11} {per:>28} {med[n]:>10.0f}")
    for k in ("tide/torch", "tide-dp2/torch-ddp", "tide_mfu", "tide-dp2_mfu", "gemm_peak_gflops"):
        if k in res:
            print(f"{k:<20} {res[k]:.3f}")
    return res


# ------------------------------------------------------------------ learn --
def learn(a, workdir: str) -> dict:
    c = dict(LEARN, steps=a.learn_steps, decay_steps=a.learn_steps, seed=a.seed)
    model_flags = dict(layers=c["layers"], heads=c["heads"], embd=c["embd"], ctx=c["ctx"],
                       vocab=VOCAB)
    init = os.path.join(workdir, "learn_init.safetensors")
    metrics = os.path.join(workdir, "learn_tide.jsonl")
    flags = tide_flags(**model_flags, batch=c["batch"], seed=c["seed"], lr=c["lr"],
                       min_lr=c["min_lr"], warmup=c["warmup"], decay_steps=c["decay_steps"],
                       weight_decay=c["weight_decay"], clip=c["clip"], optimizer="adamw",
                       data=a.data, eval_every=c["eval_every"], eval_batches=c["eval_batches"])
    run_tide([a.tide_train] + flags + tide_flags(steps=0, export=init), None)
    t0 = time.perf_counter()
    tide, _ = run_tide([a.tiderun, "-n", "2", a.tide_train, "--dp", "2"] + flags
                       + tide_flags(steps=c["steps"], init_from=init, metrics=metrics), metrics)
    tide_s = time.perf_counter() - t0
    print(f"  tide-train dp2: {tide_s:.1f} s; PyTorch from the same weights ...", flush=True)
    model = ref.load_model(init)
    data = ref.TextData.from_source(a.data)
    t0 = time.perf_counter()
    recs = ref.train(model, data, c["batch"], c["ctx"], c["steps"], "adamw", lr=c["lr"],
                     min_lr=c["min_lr"], warmup=c["warmup"], decay_steps=c["decay_steps"],
                     weight_decay=c["weight_decay"], clip=c["clip"],
                     eval_every=c["eval_every"], eval_batches=c["eval_batches"], seed=c["seed"])
    torch_s = time.perf_counter() - t0
    ours: dict[int, dict] = {}
    for r in recs:
        ours.setdefault(r["step"], {}).update(r)

    def curves(m: dict[int, dict]) -> dict:
        return {"val": [(s, m[s]["val_loss"]) for s in sorted(m) if "val_loss" in m[s]],
                "train": [(s, m[s]["loss"]) for s in sorted(m) if "loss" in m[s]]}

    res = {"config": c, "tide": curves(tide), "torch": curves(ours),
           "tide_seconds": tide_s, "torch_seconds": torch_s}
    final = c["steps"]
    tv, pv = tide.get(final, {}).get("val_loss"), ours[final]["val_loss"]
    res.update(final_val_loss_tide=tv, final_val_loss_torch=pv,
               difference=None if tv is None else tv - pv)
    print(f"\n{'step':>6} {'val tide dp2':>14} {'val torch':>12}")
    for s, v in res["torch"]["val"]:
        t = tide.get(s, {}).get("val_loss")
        print(f"{s:>6} {'-' if t is None else f'{t:.4f}':>14} {v:>12.4f}")
    print(f"final val_loss: tide {tv}, torch {pv:.5f}, difference "
          f"{'n/a' if tv is None else f'{tv - pv:+.5f}'}")
    if a.plot:
        plot(res, a.plot)
    return res


def smooth(points: list, width: int = 50) -> tuple[list, list]:
    xs, ys, acc = [], [], []
    for s, v in points:
        acc.append(v)
        if len(acc) > width:
            acc.pop(0)
        xs.append(s)
        ys.append(sum(acc) / len(acc))
    return xs, ys


def plot(res: dict, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, style in (("tide", "-"), ("torch", "--")):
        label = "tide-train dp2" if name == "tide" else "PyTorch"
        xs, ys = smooth(res[name]["train"])
        ax.plot(xs, ys, style, alpha=0.5, label=f"{label} train (mean of 50)")
        val = res[name]["val"]
        ax.plot([s for s, _ in val], [v for _, v in val], style, marker="o", label=f"{label} val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per byte)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"plot: {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tide-train", help="the tide-train executable (speed: optional)")
    ap.add_argument("--tiderun", help="the tiderun launcher")
    ap.add_argument("--mode", choices=["speed", "learn", "all"], default="all")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--plot", help="learn: draw the curves into this PNG")
    ap.add_argument("--data", default=ref.FORTUNES, help="text file or folder")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=224)
    ap.add_argument("--batch", type=int, default=32, help="speed: global batch")
    ap.add_argument("--ctx", type=int, default=64, help="speed: context length")
    ap.add_argument("--steps", type=int, default=30, help="speed: measured steps")
    ap.add_argument("--warm", type=int, default=5, help="speed: warm-up steps")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--learn-steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", help="keep the runs' files here (default: a temporary folder)")
    ap.add_argument("--ddp-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ddp_worker:
        ddp_worker(json.loads(a.ddp_worker))
        return 0
    torch.set_num_threads(1)
    for k in ("tide_train", "tiderun"):
        if getattr(a, k):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    if a.mode in ("learn", "all") and not (a.tide_train and a.tiderun):
        ap.error("learn needs --tide-train and --tiderun")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = a.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        res = {}
        if a.mode in ("speed", "all"):
            res["speed"] = speed(a, workdir)
        if a.mode in ("learn", "all"):
            res["learn"] = learn(a, workdir)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"results: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
