#!/usr/bin/env python3
"""DDP over tide equals DDP over gloo: perf/ddp_train.py (a plain DDP script
whose only tide lines are the backend string and `import tide_torch`) trains
a small MLP and a small transformer for 50 steps at 2 and 4 ranks, each
started by `tiderun -n N`, once with --backend tide and once with --backend
gloo (so a gloo script runs unchanged under tiderun). Every parameter tensor
must agree within 1e-5 relative (||tide - gloo|| / ||gloo|| over all the
parameters; the worst single tensor is printed too: two valid summation
orders part by ~1e-7 per step, and small tensors such as LayerNorm biases
can amplify that), and so must the losses. Then the int8 compression hook: it trains (the loss falls as without
it) and its parameters stay near the uncompressed ones.

    ddp_check.py --tiderun TIDERUN --script perf/ddp_train.py --workdir DIR
Exits 77 when torch or tide_torch cannot be imported.
"""
import argparse
import os
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--tiderun", required=True)
ap.add_argument("--script", required=True)
ap.add_argument("--workdir", required=True)
ap.add_argument("--ranks", default="2,4")
ap.add_argument("--steps", type=int, default=50)
args = ap.parse_args()
try:
    import torch
    import tide_torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)
os.makedirs(args.workdir, exist_ok=True)


def train(backend, model, n, extra=()):
    out = os.path.join(args.workdir, f"{backend}-{model}-{n}{'-'.join([''] + list(extra))}.pt")
    cmd = [args.tiderun, "-n", str(n), "--timeout", "300", sys.executable, args.script,
           "--backend", backend, "--model", model, "--steps", str(args.steps), "--out", out,
           *extra]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("ddp:")]
    print(f"  {' '.join(lines) or '(no result line)'}  [{time.time() - t0:.1f} s]", flush=True)
    if p.returncode != 0:
        print(p.stdout[-3000:])
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}")
    return torch.load(out)


def flat(params):
    return torch.cat([v.double().flatten() for v in params.values()])


def rel(a, b):
    return ((a.double() - b.double()).norm() / (b.double().norm() + 1e-30)).item()


failures = []
for n in [int(x) for x in args.ranks.split(",")]:
    for model in ["mlp", "transformer"]:
        print(f"== {model}, {n} ranks", flush=True)
        t, g = train("tide", model, n), train("gloo", model, n)
        whole = rel(flat(t["params"]), flat(g["params"]))
        worst = max((rel(t["params"][k], g["params"][k]), k) for k in g["params"])
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(t["losses"], g["losses"]))
        print(f"  parameters: {whole:.2e} relative (per tensor at most {worst[0]:.2e}, "
              f"{worst[1]}); losses {lw:.2e}", flush=True)
        if not whole <= 1e-5 or not lw <= 1e-5:
            failures.append(f"{model} at {n} ranks: parameters {whole:.2e}, losses {lw:.2e} "
                            f"(bar 1e-5)")

print("== transformer, 2 ranks, tide_torch.compression_hook('int8')", flush=True)
plain = train("tide", "transformer", 2)
hooked = train("tide", "transformer", 2, ["--hook", "int8"])
drift = max(rel(hooked["params"][k], plain["params"][k]) for k in plain["params"])
gap = abs(hooked["losses"][-1] - plain["losses"][-1])
print(f"  loss {hooked['losses'][0]:.4f} -> {hooked['losses'][-1]:.4f} (uncompressed "
      f"{plain['losses'][-1]:.4f}, gap {gap:.4f}); parameters within {drift:.2e} relative", flush=True)
if not hooked["losses"][-1] < 0.5 * hooked["losses"][0] or not gap <= 0.05 or not 0 < drift < 0.05:
    failures.append(f"int8 hook: loss {hooked['losses'][0]:.4f} -> {hooked['losses'][-1]:.4f}, "
                    f"gap {gap:.4f} (bar 0.05), drift {drift:.2e} (0 < d < 0.05)")
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
