#!/usr/bin/env python3
"""Acceptance checks of tide-train against the PyTorch reference (nanogpt_ref.py).

  /usr/bin/python3 tests/trainer/torch_check.py --tide-train PATH --workdir DIR \\
      [--tiderun PATH] {step,adamw,lamb,score,dp,all}

Exit status: 0 every selected check passed, 1 a check failed (every number of
a violated tolerance is printed), 77 skipped (no torch).

Every check uses the same tiny GPT (L=2, H=4, C=64, T=32, vocab 256), global
batch 4, seed 1, lr 1e-3 → 1e-4 (warmup 2, decay 10), weight decay 0.1,
clip 1.0, on a deterministic ~200 KB text file written into DIR, and starts
from tide-train's own exported initial weights (--steps 0 --export), so both
sides begin from identical parameters:

  step   one step: the loss, every gradient tensor (--dump-grads), the total
         gradient norm and the lr of step 0 agree with PyTorch's on the same
         batch, and the weights after the AdamW update (--export) agree: the
         model, the data windows, the backward pass, clipping and one
         optimizer step are right.
  adamw  ten AdamW steps: the losses of all ten steps, the schedule's lr and
         the validation losses (steps 0, 5, 10) agree, and every metrics line
         has the contract's fields: the optimizer's state, weight decay
         groups and the schedule are right over several steps.
  lamb   the same with --optimizer lamb (LAMB, You et al. 2020, Algorithm 2).
  score  tide-train --score of weights trained 20 steps agrees with PyTorch's
         nats per byte of the same weights on the same 20 KB file.
  dp     (needs --tiderun) adamw over `tiderun -n 2 tide-train --dp 2`: two
         data-parallel ranks see the same global batch as one.
  all    step, adamw, lamb, score, and dp when --tiderun is given.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
try:
    import torch
except ImportError as e:  # the torch suite skips without torch
    print(f"SKIP: PyTorch is not importable ({e}); use /usr/bin/python3 with python3-torch")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt_ref as ref  # noqa: E402

LAYERS, HEADS, EMBD, CTX, VOCAB = 2, 4, 64, 32, 256
BATCH, SEED = 4, 1
LR, MIN_LR, WARMUP, DECAY, WD, CLIP = 1e-3, 1e-4, 2, 10, 0.1, 1.0
EVAL_EVERY, EVAL_BATCHES = 5, 2
DATA_BYTES, SCORE_BYTES = 200_000, 20_000
TOL_LOSS, TOL_GRAD, TOL_NORM, TOL_LR, TOL_SCORE = 1e-5, 1e-4, 1e-5, 1e-6, 1e-5
UPDATE_ABS = 1e-2  # the step check's per-element update tolerance, in units of lr
ZERO_ABS = 1e-7
METRIC_KEYS = ("step", "loss", "grad_norm", "lr", "step_ms", "tokens_per_s", "mfu")


class Failure(Exception):
    """A check failed; the message says what and shows the numbers."""


def rel_err(got: float, want: float) -> float:
    return abs(got - want) / abs(want) if want != 0 else abs(got)


class Tide:
    """Runs tide-train (optionally under tiderun) with the checks' configuration."""

    def __init__(self, exe: str, workdir: str, tiderun: str | None):
        self.exe, self.workdir, self.tiderun = exe, workdir, tiderun
        self.data, self.score_file = prepare_data(workdir)
        self._init = None

    def path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    def flags(self, **over) -> list[str]:
        """The common flags; `over` adds or replaces (a later flag wins in tide-train)."""
        f = dict(layers=LAYERS, heads=HEADS, embd=EMBD, ctx=CTX, vocab=VOCAB, batch=BATCH,
                 seed=SEED, lr=LR, min_lr=MIN_LR, warmup=WARMUP, decay_steps=DECAY,
                 weight_decay=WD, clip=CLIP, optimizer="adamw", data=self.data,
                 eval_every=EVAL_EVERY, eval_batches=EVAL_BATCHES)
        f.update(over)
        out = []
        for k, v in f.items():
            out += ["--" + k.replace("_", "-"), str(v)]
        return out

    def run(self, args: list[str], ranks: int = 1) -> str:
        cmd = [self.exe] + args
        if ranks > 1:
            cmd = [self.tiderun, "-n", str(ranks), self.exe, "--dp", str(ranks)] + args
        print("  $", " ".join(cmd), flush=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired as e:
            raise Failure(f"timed out after 900 s: {' '.join(cmd)}") from e
        except OSError as e:
            raise Failure(f"cannot run {cmd[0]}: {e}") from e
        if p.returncode != 0:
            tail = (p.stdout + p.stderr)[-3000:]
            raise Failure(f"exit status {p.returncode}: {' '.join(cmd)}\n{tail}")
        return p.stdout

    def init(self) -> str:
        """tide-train's initial weights (--steps 0 --export), written once."""
        if self._init is None:
            path = self.path("init.safetensors")
            self.run(self.flags(steps=0, export=path))
            if not os.path.exists(path):
                raise Failure(f"--steps 0 --export {path} wrote no file")
            self._init = path
        return self._init

    def load(self, path: str) -> ref.GPT:
        """The weights as a reference GPT, checking names, shapes and the metadata."""
        try:
            model = ref.load_model(path)
        except (ValueError, KeyError, OSError) as e:
            raise Failure(f"{path}: {e}") from e
        want = ref.GPTConfig(LAYERS, HEADS, EMBD, CTX, VOCAB)
        if model.config != want:
            raise Failure(f"{path}: metadata gives {model.config}, the flags {want}")
        return model


def prepare_data(workdir: str) -> tuple[str, str]:
    """data.txt: the first 200 KB of the fortunes text (or generated text when
    absent); score.txt: its last 20 KB (the validation bytes)."""
    os.makedirs(workdir, exist_ok=True)
    try:
        raw = ref.read_text_source(ref.FORTUNES)[:DATA_BYTES]
    except OSError:
        raw = b""
    if len(raw) < DATA_BYTES:
        words = [b"tide", b"train", b"gradient", b"ring", b"of", b"the", b"a", b"reduce",
                 b"token", b"byte", b"model", b"step", b"and", b"loss", b"\n"]
        out, x = [], 0
        while sum(map(len, out)) < DATA_BYTES:
            x = ref.splitmix64(x)
            out.append(words[x % len(words)] + b" ")
        raw = b"".join(out)[:DATA_BYTES]
    data, score = os.path.join(workdir, "data.txt"), os.path.join(workdir, "score.txt")
    for path, blob in ((data, raw), (score, raw[-SCORE_BYTES:])):
        with open(path, "wb") as f:
            f.write(blob)
    return data, score


def read_metrics(path: str) -> dict[int, dict]:
    """The --metrics lines merged by step (a val_loss line may stand apart)."""
    if not os.path.exists(path):
        raise Failure(f"no metrics file {path}")
    merged: dict[int, dict] = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                step = int(rec["step"])
            except (ValueError, KeyError) as e:
                raise Failure(f"{path}:{n}: not a metrics record: {line.strip()!r}") from e
            for k, v in rec.items():
                merged.setdefault(step, {}).setdefault(k, v)
    return merged


def compare_series(title: str, rows: list[tuple], tol: float) -> list[str]:
    """Prints `rows` of (label, tide, torch) with their relative errors; returns
    the labels out of tolerance."""
    print(f"  {title} (tolerance {tol:g} relative)")
    print(f"    {'':<10} {'tide-train':>20} {'torch':>20} {'rel err':>10}")
    bad = []
    for label, got, want in rows:
        if got is None:
            print(f"    {label:<10} {'missing':>20} {want:>20.12g}   MISSING")
            bad.append(str(label))
            continue
        try:
            e = rel_err(float(got), want)
        except (TypeError, ValueError):
            print(f"    {label:<10} {got!r:>20} {want:>20.12g}   NOT A NUMBER")
            bad.append(str(label))
            continue
        flag = "" if e <= tol else "   OUT OF TOLERANCE"
        print(f"    {label:<10} {float(got):>20.12g} {want:>20.12g} {e:>10.2e}{flag}")
        if e > tol:
            bad.append(str(label))
    return bad


def check_step(tide: Tide) -> None:
    """One step: loss, gradients, grad_norm, lr and the AdamW update."""
    init = tide.init()
    grads, metrics, after = (tide.path(n) for n in ("grads.safetensors", "m_step.jsonl",
                                                    "step1.safetensors"))
    tide.run(tide.flags(steps=1, init_from=init, dump_grads=grads, metrics=metrics,
                        export=after))
    model = tide.load(init)
    w0 = {n: t.clone() for n, t in ref.model_state(model).items()}
    x, y = ref.TextData(ref.read_text_source(tide.data)).train_batch(SEED, 0, BATCH, CTX)
    _, loss = model(x, y)
    loss.backward()
    want = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    names = ref.param_names(model.config)
    try:
        got, _ = ref.read_tensors(grads)
    except (ValueError, OSError) as e:
        raise Failure(f"--dump-grads file {grads}: {e}") from e
    problems = []
    if "lm_head.weight" in got:  # tolerated when it is the tied gradient itself
        if not torch.equal(got.pop("lm_head.weight"), got.get("transformer.wte.weight")):
            problems.append("lm_head.weight in the gradients differs from transformer.wte.weight")
    extra = sorted(set(got) - set(names))
    if extra:
        problems.append(f"unexpected gradient tensors {extra}")
    print(f"  gradients (tolerance {TOL_GRAD:g} relative Frobenius; "
          f"{ZERO_ABS:g} absolute for an all-zero reference)")
    print(f"    {'name':<36} {'shape':>12} {'|g_torch|':>12} {'|g_tide|':>12} {'error':>10}")
    for n in names:
        g_ref = want[n]
        if n not in got:
            print(f"    {n:<36} {'':>12} {float(g_ref.norm()):>12.5g} {'missing':>12}")
            problems.append(f"{n} missing from {grads}")
            continue
        g = got[n]
        if tuple(g.shape) != tuple(g_ref.shape):
            problems.append(f"{n}: shape {list(g.shape)}, expected {list(g_ref.shape)}")
            continue
        ref_norm, diff = float(g_ref.norm()), float((g - g_ref).norm())
        err, tol = (diff / ref_norm, TOL_GRAD) if ref_norm > 0 else (diff, ZERO_ABS)
        flag = "" if err <= tol else "   OUT OF TOLERANCE"
        shape = "x".join(map(str, g.shape))
        print(f"    {n:<36} {shape:>12} {ref_norm:>12.5g} {float(g.norm()):>12.5g} "
              f"{err:>10.2e}{flag}")
        if err > tol:
            problems.append(f"gradient {n}: error {err:.3e} > {tol:g}")
    norm = ref.grad_norm_and_clip(model, CLIP)
    m = read_metrics(metrics).get(0, {})
    for key, got_v, want_v, tol in (("loss", m.get("loss"), float(loss), TOL_LOSS),
                                    ("grad_norm", m.get("grad_norm"), norm, TOL_NORM),
                                    ("lr", m.get("lr"), ref.get_lr(0, LR, MIN_LR, WARMUP, DECAY),
                                     TOL_LR)):
        problems += [f"step 0 {key}" for _ in compare_series(key, [(0, got_v, want_v)], tol)]
    # The update: AdamW from the clipped gradient with step 0's lr. Adam's first
    # step moves each element by about ±lr, so an element whose gradient is
    # within rounding of 0 may legitimately move the other way: per tensor, at
    # most max(1, n/1000) elements may differ by more than UPDATE_ABS·lr.
    lr0 = ref.get_lr(0, LR, MIN_LR, WARMUP, DECAY)
    opt = ref.make_optimizer(model, "adamw", LR, WD)
    for group in opt.param_groups:
        group["lr"] = lr0
    opt.step()
    w1_ref = ref.model_state(model)
    w1 = ref.model_state(tide.load(after))
    print(f"  update of step 0 (--export after 1 step; an element is off when it differs "
          f"by > {UPDATE_ABS:g}·lr = {UPDATE_ABS * lr0:.3g})")
    print(f"    {'name':<36} {'|dw_torch|':>12} {'rel err':>10} {'off':>6} {'allowed':>8}")
    for n in names:
        d_ref, d_got = w1_ref[n] - w0[n], w1[n] - w0[n]
        e = float((d_got - d_ref).norm()) / max(float(d_ref.norm()), 1e-30)
        off = int(((d_got - d_ref).abs() > UPDATE_ABS * lr0).sum())
        allowed = max(1, d_ref.numel() // 1000)
        flag = "" if off <= allowed else "   OUT OF TOLERANCE"
        print(f"    {n:<36} {float(d_ref.norm()):>12.5g} {e:>10.2e} {off:>6} {allowed:>8}{flag}")
        if off > allowed:
            problems.append(f"update of {n}: {off} elements off (> {allowed})")
    if problems:
        raise Failure("; ".join(problems))


def torch_run(init: str, data_path: str, optimizer: str, steps: int) -> dict[int, dict]:
    model = ref.load_model(init)
    data = ref.TextData(ref.read_text_source(data_path))
    recs = ref.train(model, data, BATCH, CTX, steps, optimizer, lr=LR, min_lr=MIN_LR,
                     warmup=WARMUP, decay_steps=DECAY, weight_decay=WD, clip=CLIP,
                     eval_every=EVAL_EVERY, eval_batches=EVAL_BATCHES, seed=SEED)
    out: dict[int, dict] = {}
    for r in recs:
        out.setdefault(r["step"], {}).update(r)
    return out


def check_training(tide: Tide, optimizer: str, ranks: int = 1, steps: int = 10) -> None:
    """`steps` steps from the same weights: per-step loss and lr, the validation losses."""
    init = tide.init()
    metrics = tide.path(f"m_{optimizer}_{ranks}.jsonl")
    tide.run(tide.flags(steps=steps, init_from=init, optimizer=optimizer, metrics=metrics),
             ranks)
    got = read_metrics(metrics)
    want = torch_run(init, tide.data, optimizer, steps)
    problems = []
    for s in range(steps):
        missing = [k for k in METRIC_KEYS if k not in got.get(s, {})]
        if missing:
            problems.append(f"metrics of step {s} lack {missing}")
    bad = compare_series("loss per step", [(s, got.get(s, {}).get("loss"), want[s]["loss"])
                                           for s in range(steps)], TOL_LOSS)
    problems += [f"loss of step {s}" for s in bad]
    bad = compare_series("lr per step", [(s, got.get(s, {}).get("lr"), want[s]["lr"])
                                         for s in range(steps)], TOL_LR)
    problems += [f"lr of step {s}" for s in bad]
    evals = sorted(s for s in want if "val_loss" in want[s])
    bad = compare_series("val_loss", [(s, got.get(s, {}).get("val_loss"), want[s]["val_loss"])
                                      for s in evals], TOL_LOSS)
    problems += [f"val_loss of step {s}" for s in bad]
    stray = sorted(s for s in got if "val_loss" in got[s] and s not in evals)
    if stray:
        problems.append(f"val_loss at steps {stray}, expected only at {evals}")
    print("  grad_norm per step, tide / torch (information only):")
    for s in range(steps):
        g = got.get(s, {}).get("grad_norm")
        print(f"    {s:<10} {'missing' if g is None else f'{float(g):.9g}':>20} "
              f"{want[s]['grad_norm']:>20.9g}")
    if problems:
        raise Failure("; ".join(problems))


def check_score(tide: Tide) -> None:
    """tide-train --score vs the reference's nats per byte of the same weights."""
    init = tide.init()
    weights = tide.path("trained20.safetensors")
    tide.run(tide.flags(steps=20, init_from=init, export=weights))
    out = tide.run(["--score", tide.score_file, "--init-from", weights, "--ctx", str(CTX),
                    "--layers", str(LAYERS), "--heads", str(HEADS), "--embd", str(EMBD),
                    "--vocab", str(VOCAB)])
    lines = [ln for ln in out.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if not last.startswith("score:"):
        raise Failure(f"the last stdout line of --score is {last!r}, not 'score: <value>'")
    text = last.split(":", 1)[1].strip()
    try:
        got = float(text)
    except ValueError as e:
        raise Failure(f"cannot parse the score {text!r}") from e
    digits = len(text.lower().split("e")[0].replace("-", "").replace(".", "").lstrip("0"))
    want = ref.score(tide.load(weights), ref.read_text_source(tide.score_file), CTX)
    print(f"  torch score {want!r} nats/byte over {(SCORE_BYTES - 1) // CTX} windows")
    bad = compare_series("score", [("score", got, want)], TOL_SCORE)
    if digits < 9:
        bad.append(f"the score {text!r} has {digits} significant digits, fewer than 9")
    if bad:
        raise Failure("; ".join(bad))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tide-train", required=True, help="the tide-train executable")
    ap.add_argument("--workdir", required=True, help="a folder for data, weights and metrics")
    ap.add_argument("--tiderun", help="the tiderun launcher (for the dp check)")
    ap.add_argument("check", choices=["step", "adamw", "lamb", "score", "dp", "all"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not os.access(args.tide_train, os.X_OK):
        print(f"FAIL: {args.tide_train} is not an executable")
        return 1
    if args.check == "dp" and not args.tiderun:
        print("FAIL: the dp check needs --tiderun")
        return 1
    tide = Tide(os.path.abspath(args.tide_train), os.path.abspath(args.workdir), args.tiderun)
    checks = {"step": ("one step: loss, gradients, grad_norm, lr, the update",
                       lambda: check_step(tide)),
              "adamw": ("10 AdamW steps: losses, lr, val_loss", lambda: check_training(
                  tide, "adamw")),
              "lamb": ("10 LAMB steps: losses, lr, val_loss", lambda: check_training(
                  tide, "lamb")),
              "score": ("--score of 20-step weights", lambda: check_score(tide)),
              "dp": ("10 AdamW steps over tiderun -n 2 --dp 2", lambda: check_training(
                  tide, "adamw", ranks=2))}
    names = [args.check] if args.check != "all" else \
        ["step", "adamw", "lamb", "score"] + (["dp"] if args.tiderun else [])
    failed = []
    for name in names:
        what, fn = checks[name]
        print(f"== {name}: {what}", flush=True)
        try:
            fn()
            print(f"PASS {name}", flush=True)
        except Failure as e:
            print(f"FAIL {name}: {e}", flush=True)
            failed.append(name)
    print("torch_check:", "FAILED " + " ".join(failed) if failed else "passed " + " ".join(names))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
