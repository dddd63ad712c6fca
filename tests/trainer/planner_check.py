#!/usr/bin/env python3
"""The layout planner (tide-train --plan, --layout auto) over real processes.

  - `--plan --world 8` ranks every D x T x P = 8 the model allows (T dividing
    heads and width, P at most the layers, D dividing the batch), each row's
    numbers finite and positive, fastest first, and ends with `choice:`;
  - a second `--plan` with the same `--profile FILE` measures nothing and
    prints the same ranking;
  - `--plan` for 8 nodes of the DGX-like fixture (64 ranks, more than this
    machine) runs and prices the inter-node layouts;
  - `--layout auto` under tiderun -n 4 prints its choice, trains it, and its
    losses equal a manual run with those flags;
  - errors: --plan without --world, a corrupt profile, --layout bogus: a
    message and a non-zero exit.
Usage: planner_check.py TIDE_TRAIN TIDERUN WORKDIR FIXTURE_DIR
"""
import json
import math
import os
import re
import subprocess
import sys

MODEL = ["--layers", "4", "--heads", "4", "--embd", "64", "--ctx", "32", "--batch", "8"]
QUIET = ["--eval-every", "0", "--log-every", "0", "--lr", "3e-3", "--warmup", "2"]
ROW = re.compile(r"^\s*(\d+)\s+dp (\d+) x tp (\d+) x pp (\d+)\s+(\d+)\s+(.*)$")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def rows_of(out):
    rows = []
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            nums = [float(x) for x in m[6].split()[-9:-1]]  # step .. mem
            rows.append(((int(m[2]), int(m[3]), int(m[4])), nums, line))
    return rows


def main():
    exe, tiderun, work, fixtures = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    prof = os.path.join(work, "profile.json")
    if os.path.exists(prof):
        os.remove(prof)
    p = run([exe, "--plan", "--world", "8", "--profile", prof] + MODEL)
    check(p.returncode == 0, f"--plan --world 8 exits 0 ({p.stderr.strip()[-200:]})")
    rows = rows_of(p.stdout)
    want = {(d, t, 8 // (d * t)) for d in (1, 2, 4, 8) for t in (1, 2, 4, 8)
            if d * t <= 8 and 8 % (d * t) == 0 and 4 % t == 0 and 8 // (d * t) <= 4}
    check({r[0] for r in rows} == want,
          f"every layout is ranked ({sorted({r[0] for r in rows})} vs {sorted(want)})")
    steps = [r[1][0] for r in rows]
    check(all(math.isfinite(x) and x > 0 for r in rows for x in r[1][:1] + r[1][-1:]),
          "step times and memory are finite and positive")
    check(steps == sorted(steps) or all(b >= a * 0.999 for a, b in zip(steps, steps[1:])),
          "fastest first")
    choice = [x for x in p.stdout.splitlines() if x.startswith("choice: ")]
    check(len(choice) == 1 and "--dp" in choice[0], f"a choice line: {choice}")
    check(os.path.exists(prof), "the profile is written")
    p2 = run([exe, "--plan", "--world", "8", "--profile", prof] + MODEL)
    check("0 (tp, micro-batch) points measured" in p2.stdout, "the saved profile is reused")
    check(rows_of(p2.stdout) == rows, "the same ranking from the saved profile")

    dgx = os.path.join(fixtures, "dgx_h100.tide.xml")
    p = run([exe, "--plan", "--world", "64", "--nodes", "8", "--topo-file", dgx, "--cores",
             "112", "--profile", prof] + MODEL[:-1] + ["64"])
    big = rows_of(p.stdout)
    check(p.returncode == 0 and len(big) > 0 and any(r[1][2] > 0 for r in big),
          f"--plan on 8 DGX-like nodes: {len(big)} layouts, data-parallel traffic priced")

    metrics = os.path.join(work, "auto.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    p = run([tiderun, "-n", "4", exe] + MODEL + QUIET +
            ["--layout", "auto", "--profile", prof, "--steps", "4", "--metrics", metrics])
    auto = [x for x in p.stdout.splitlines() if x.startswith("layout auto: ")]
    check(p.returncode == 0 and len(auto) == 1, f"--layout auto trains ({p.stderr.strip()[-300:]})")
    if auto:
        flags = auto[0][len("layout auto: "):].split(" (predicted")[0].split()
        a = [json.loads(x)["loss"] for x in open(metrics)]
        os.remove(metrics)
        p = run([tiderun, "-n", "4", exe] + MODEL + QUIET + flags +
                ["--steps", "4", "--metrics", metrics])
        b = [json.loads(x)["loss"] for x in open(metrics)] if p.returncode == 0 else []
        check(a == b and len(a) == 4, f"--layout auto ({' '.join(flags)}) = the same flags by hand")

    p = run([exe, "--plan"] + MODEL)
    check(p.returncode != 0 and "--world" in p.stderr, "--plan without --world is named")
    bad = os.path.join(work, "bad.json")
    open(bad, "w").write("{not json")
    p = run([exe, "--plan", "--world", "2", "--profile", bad] + MODEL)
    check(p.returncode != 0 and "--profile" in p.stderr, "a corrupt profile is named")
    p = run([tiderun, "-n", "2", exe] + MODEL + QUIET + ["--layout", "bogus", "--steps", "1"])
    check(p.returncode != 0 and p.stderr.count("--layout bogus") >= 2,
          "--layout bogus: an error on every rank")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
