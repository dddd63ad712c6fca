#!/usr/bin/env python3
"""torch.distributed over tide and over gloo, side by side (docs/pytorch.md).

    perf/torch_compare.py [-B build] [--ranks 2,4] [--ops all_reduce,all_gather,reduce_scatter]
                          [-b 8] [-e 256M] [--repeats 3] [--ddp] [--plot docs/img/torch_allreduce.png]

Collectives: for each rank count and op, `tiderun -n N` runs this script's
worker once per backend, alternating tide and gloo --repeats times; each
worker times the op from -b to -e bytes (x4 steps; the buffer's total size as
nccl-tests counts it) and the medians over the repeats are printed in
nccl-tests' columns with tide/gloo ratios (time: tide/gloo; busbw: tide/gloo).
--ddp: the median DDP step time of perf/ddp_train.py's small MLP and small
transformer over both backends (alternating), and their ratio.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def busbw_factor(op, n):
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def worker(args):
    import torch
    import torch.distributed as dist
    if args.backend == "tide":
        import tide_torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = []
    sizes = []
    size = args.begin
    while size <= args.end:
        sizes.append(size)
        size *= 4
    if sizes[-1] != args.end:
        sizes.append(args.end)  # the last size always (8 B x 4^k skips 256 MiB)
    for size in sizes:
        count = max(1, size // 4)
        if args.op != "all_reduce":
            count = max(n, count // n * n)
        total = count * 4
        buf = torch.ones(count)
        if args.op == "all_reduce":
            def once():
                dist.all_reduce(buf)
        elif args.op == "all_gather":  # the list forms: gloo (1.13) has no *_tensor ones
            inp = torch.ones(count // n)
            outs = list(buf.chunk(n))

            def once():
                dist.all_gather(outs, inp)
        else:
            out = torch.ones(count // n)
            ins = list(buf.chunk(n))

            def once():
                dist.reduce_scatter(out, ins)
        iters = max(3, min(200, int(2e8 / max(total, 1) ** 1.0 // 1)))
        warm = max(1, iters // 10)
        try:
            once()
        except RuntimeError as e:  # the backend lacks the operation
            if rank == 0:
                with open(args.out, "w") as f:
                    json.dump({"unsupported": str(e)}, f)
            return
        for _ in range(warm):
            once()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            once()
        dist.barrier()
        us = 1e6 * (time.perf_counter() - t0) / iters
        # Every rank's time; the slowest counts (as nccl-tests' average over ranks would).
        t = torch.tensor([us], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rows.append({"bytes": total, "count": count, "us": t.item()})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def run_worker(tiderun, env, n, backend, op, b, e):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [tiderun, "-n", str(n), "--timeout", "1200", sys.executable, os.path.abspath(__file__),
           "--worker", "--backend", backend, "--op", op, "-b", str(b), "-e", str(e), "--out", out]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        rows = json.load(f)
    os.unlink(out)
    return rows


def collectives(args, tiderun, env):
    results = {}
    for n in args.ranks:
        for op in args.ops:
            runs = {"tide": [], "gloo": []}
            for rep in range(args.repeats):
                for backend in (["tide", "gloo"] if rep % 2 == 0 else ["gloo", "tide"]):
                    runs[backend].append(run_worker(tiderun, env, n, backend, op, args.begin, args.end))
            missing = {b: runs[b][0]["unsupported"] for b in runs if isinstance(runs[b][0], dict)}
            for b, why in missing.items():
                print(f"\n# {op}, {n} ranks: {b} cannot run it ({why})")
                runs[b] = [[{"us": float("nan")} for _ in runs["tide"][0]]] if b != "tide" else runs[b]
            if "tide" in missing:
                continue
            med = {b: [statistics.median(r[i]["us"] for r in runs[b]) for i in range(len(runs[b][0]))]
                   for b in runs}
            rows = runs["tide"][0]
            f = busbw_factor(op, n)
            print(f"\n# {op}, {n} ranks, float32 sum, median of {args.repeats} alternating runs")
            print(f"# {'size':>10} {'count':>10} | {'tide us':>10} {'algbw':>7} {'busbw':>7} | "
                  f"{'gloo us':>10} {'algbw':>7} {'busbw':>7} | {'time t/g':>8} {'busbw t/g':>9}")
            table = []
            for i, r in enumerate(rows):
                tt, tg = med["tide"][i], med["gloo"][i]
                ab_t, ab_g = r["bytes"] / tt / 1e3, r["bytes"] / tg / 1e3
                print(f"  {r['bytes']:>10} {r['count']:>10} | {tt:>10.1f} {ab_t:>7.2f} {ab_t * f:>7.2f} | "
                      f"{tg:>10.1f} {ab_g:>7.2f} {ab_g * f:>7.2f} | {tt / tg:>8.3f} {tg / tt:>9.2f}")
                table.append({"bytes": r["bytes"], "tide_us": tt, "gloo_us": tg,
                              "tide_busbw": ab_t * f, "gloo_busbw": ab_g * f})
            results[f"{op}/{n}"] = table
    return results


def ddp(args, tiderun, env):
    out = {}
    for model in ["mlp", "transformer"]:
        for n in args.ranks:
            times = {"tide": [], "gloo": []}
            for rep in range(args.repeats):
                for backend in (["tide", "gloo"] if rep % 2 == 0 else ["gloo", "tide"]):
                    p = subprocess.run([tiderun, "-n", str(n), sys.executable,
                                        os.path.join(HERE, "ddp_train.py"), "--backend", backend,
                                        "--model", model, "--steps", str(args.ddp_steps)],
                                       env=env, check=True, stdout=subprocess.PIPE, text=True)
                    line = [l for l in p.stdout.splitlines() if l.startswith("ddp:")][0]
                    times[backend].append(float(line.split("step_ms=")[1].split()[0]))
            t, g = statistics.median(times["tide"]), statistics.median(times["gloo"])
            print(f"ddp {model:<11} {n} ranks: step tide {t:8.2f} ms, gloo {g:8.2f} ms, tide/gloo {t / g:.3f}")
            out[f"{model}/{n}"] = {"tide_ms": t, "gloo_ms": g}
    return out


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    keys = [k for k in results if k.startswith("all_reduce/")]
    fig, axes = plt.subplots(1, len(keys), figsize=(6 * len(keys), 4), squeeze=False)
    for ax, k in zip(axes[0], keys):
        rows = results[k]
        x = [r["bytes"] for r in rows]
        ax.loglog(x, [r["tide_busbw"] for r in rows], "o-", label="tide")
        ax.loglog(x, [r["gloo_busbw"] for r in rows], "s-", label="gloo")
        ax.set_title(f"torch.distributed.all_reduce, {k.split('/')[1]} ranks (one node)")
        ax.set_xlabel("bytes")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="tide")
    ap.add_argument("--op", default="all_reduce")
    ap.add_argument("--out", default="")
    ap.add_argument("-B", "--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter")
    ap.add_argument("-b", "--begin", default="8")
    ap.add_argument("-e", "--end", default="256M")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ddp", action="store_true", help="also the DDP step times")
    ap.add_argument("--ddp-only", action="store_true")
    ap.add_argument("--ddp-steps", type=int, default=40)
    ap.add_argument("--plot", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.begin, args.end = parse_size(str(args.begin)), parse_size(str(args.end))
    if args.worker:
        return worker(args)
    args.ranks = [int(x) for x in args.ranks.split(",")]
    args.ops = args.ops.split(",")
    tiderun = os.path.join(args.build, "tools", "tiderun", "tiderun")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(args.build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    results = {} if args.ddp_only else collectives(args, tiderun, env)
    if args.ddp or args.ddp_only:
        results["ddp"] = ddp(args, tiderun, env)
    if args.plot and not args.ddp_only:
        plot(results, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
