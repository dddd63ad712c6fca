#!/usr/bin/env python3
"""Report for perf/cluster_compare.sh: medians over repetitions per size.

usage: cluster_report.py DIR "auto ring hier ... mpi"

Reads DIR/<variant>-<rep>.txt (nccl-tests-style output of the perf tools),
prints one table (median out-of-place busbw per variant, ratios, predicted vs
measured times, inter-node traffic per op) and writes DIR/summary.csv and
DIR/summary.json.
"""
import glob
import json
import os
import re
import statistics
import sys


def parse(path):
    """Returns ({size: (time_us, busbw, wrong)}, {size: inter-node bytes sent per op},
    {count: {algo: predicted_us}}, {count: chosen})."""
    rows, traffic, pred, chosen = {}, {}, {}, {}
    with open(path, errors="replace") as f:
        for line in f:
            # The cost model's table for the measured calls: rank 0's float32
            # lines (the harness's own bookkeeping calls use other types).
            m = re.search(r"\[0\] TIDE INFO choice: \S+ (\d+) x float32 on .*?:(.*) -> (\S+)", line)
            if m:
                count = int(m.group(1))
                table = dict((a, float(u)) for a, u in re.findall(r" (\S+) ([0-9.e+]+) us", m.group(2)))
                pred[count] = table
                chosen[count] = m.group(3)
                continue
            m = re.match(r"#\s+traffic\s+(\d+)\s+.*inter-sent\s+(\d+)", line)
            if m:
                traffic[int(m.group(1))] = int(m.group(2))
                continue
            f_ = line.split()
            if len(f_) >= 9 and f_[0].isdigit() and f_[1].isdigit():
                try:
                    rows[int(f_[0])] = (float(f_[5]), float(f_[7]), int(f_[8]))
                except ValueError:
                    pass
    return rows, traffic, pred, chosen


def main():
    d, variants = sys.argv[1], sys.argv[2].split()
    data = {}  # variant -> size -> [busbw...]
    times = {}
    wrong = 0
    traffic = {}
    pred, chosen = {}, {}
    for v in variants:
        for path in sorted(glob.glob(os.path.join(d, f"{v}-*.txt"))):
            rows, tr, p, ch = parse(path)
            for size, (t, bw, w) in rows.items():
                data.setdefault(v, {}).setdefault(size, []).append(bw)
                times.setdefault(v, {}).setdefault(size, []).append(t)
                wrong += w
            for size, b in tr.items():
                traffic.setdefault(v, {})[size] = b
            if v == "auto":
                for c, table in p.items():
                    for a, us in table.items():
                        pred.setdefault(c, {}).setdefault(a, []).append(us)
                chosen.update(ch)
    pred = {c: {a: statistics.median(x) for a, x in t.items()} for c, t in pred.items()}
    med = {v: {s: statistics.median(x) for s, x in sz.items()} for v, sz in data.items()}
    medt = {v: {s: statistics.median(x) for s, x in sz.items()} for v, sz in times.items()}
    sizes = sorted(set().union(*[set(x) for x in med.values()])) if med else []
    forced = [v for v in variants if v not in ("auto", "mpi") and v in med]
    head = ["size"] + [v for v in variants if v in med]
    ratios = []
    if "hier" in med and "ring" in med:
        ratios.append("hier/ring")
    if "auto" in med and "mpi" in med:
        ratios.append("auto/mpi")
    if "auto" in med and forced:
        ratios.append("auto/best")
    print("median out-of-place busbw (GB/s); ratios from median times (> 1: the first is "
          "faster); chosen = the cost model's pick")
    print(" ".join(f"{h:>10}" for h in head + ratios) + "     chosen")
    summary = []
    for s in sizes:
        row = {"size": s}
        cells = [f"{s:>10}"]
        for v in head[1:]:
            bw = med[v].get(s)
            row[v] = bw
            cells.append(f"{bw:>10.3f}" if bw is not None else f"{'-':>10}")
        # Ratios from median times (busbw is printed with 2 decimals only):
        # a/b = time(b) / time(a), > 1 when a is faster.
        for r in ratios:
            a, b = r.split("/")
            ta = medt[a].get(s)
            if b == "best":
                cand = [medt[v].get(s) for v in forced if medt[v].get(s)]
                tb = min(cand) if cand else None
            else:
                tb = medt[b].get(s)
            val = tb / ta if ta and tb else None
            row[r] = val
            cells.append(f"{val:>10.2f}" if val else f"{'-':>10}")
        count = s // 4
        row["chosen"] = chosen.get(count, "?")
        print(" ".join(cells) + f"     {row['chosen']}")
        summary.append(row)
    if pred:
        print("\npredicted vs measured time (us, median out-of-place)")
        print(f"{'size':>10} " + " ".join(f"{a + ' pred':>12} {a + ' meas':>12} {'err':>6}"
                                          for a in forced))
        for s in sizes:
            p = pred.get(s // 4, {})
            cells = [f"{s:>10}"]
            for a in forced:
                pu, mu = p.get(a), medt.get(a, {}).get(s)
                err = f"{(pu - mu) / mu * 100:+5.0f}%" if pu and mu else "     -"
                cells.append(f"{pu if pu else float('nan'):>12.1f} {mu if mu else float('nan'):>12.1f} {err:>6}")
            print(" ".join(cells))
    if traffic:
        print("\ninter-node bytes sent per operation (rank 0)")
        tv = [v for v in variants if v in traffic]
        print(f"{'size':>10} " + " ".join(f"{v:>12}" for v in tv))
        for s in sizes:
            print(f"{s:>10} " + " ".join(f"{traffic[v].get(s, 0):>12}" for v in tv))
    print(f"\n#wrong total: {wrong}")
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"rows": summary, "predicted": pred, "traffic": traffic, "wrong": wrong}, f,
                  indent=1)
    with open(os.path.join(d, "summary.csv"), "w") as f:
        keys = list(summary[0].keys()) if summary else []
        f.write(",".join(keys) + "\n")
        for row in summary:
            f.write(",".join("" if row[k] is None else str(row[k]) for k in keys) + "\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
