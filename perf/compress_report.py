#!/usr/bin/env python3
"""Report of a perf/compress_compare.sh run: tables, verdicts, CSV and PNGs.

    perf/compress_report.py OUT_DIR

Reads OUT_DIR/meta.txt and the all_reduce_perf outputs OUT_DIR/main-<variant>-<rep>.txt
and OUT_DIR/sweep-<variant>-<rep>.txt (variant: tide = uncompressed Tide, a codec of
--compress, or mpi = Open MPI). Prints (stdout) per variant the median out-of-place time
and busbw, the wire bytes per rank (max over ranks, traffic counters), the inter-node
bytes per rank (mean over ranks) against the codec's theory, the uncompressed/compressed
time ratio and the largest errors of the checked run; then issue 17's verdicts; with a
sweep, per size the times of tide, auto, bf16 and int8 and auto against the best of
those three, with the codec auto's wire bytes match. Writes OUT_DIR/summary.csv,
OUT_DIR/sweep.csv, OUT_DIR/compress_time.png and OUT_DIR/compress_sweep.png (gnuplot).
The uncompressed Tide rows report rank 0's traffic (the plain tool prints no maxima).

Theory of the bytes a rank sends per All-Reduce call (docs/compression.md), n ranks (ppn
per node), N float32 elements in segments of G <= 2^20, block B: W(m) = 2 m (fp16, bf16),
4 ceil(m / B) + m (int8), 4 ceil(m / B) + ceil(m / 2) (int4); per segment, flat layout
(cmp_a2a) wire (n - 1) 2 W(ceil(G / n)), inter-node (n - ppn) 2 W(ceil(G / n));
hierarchical (cmp_hier) wire 2 (ppn - 1) W(C) + 2 (nodes - 1) W(ceil(C / nodes)), inter-node
2 (nodes - 1) W(ceil(C / nodes)), C = ceil(G / ppn); the table compares with the layout whose
inter-node bytes are the nearer. Top-k: (n - 1) 8 k and (n - ppn) 8 k with k = max(1,
ceil(ratio N)); uncompressed ring: 2 (n - 1) / n 4 N. Exit status 1 when a launch failed or a check counted wrong values.
"""

import csv
import glob
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

TARGETS = {"int8": 3.0, "fp16": 1.8, "bf16": 1.8, "int4": 5.0, "topk:0.01": 6.0}


def parse(path):
    """{size: row} of one tool output; row: time, busbw, wrong, wire, maxabs, maxrel,
    and from the comment lines r0_sent, r0_inter, wire_max, inter_sum."""
    rows, ok = {}, False
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"#\s+traffic\s+(\d+)\s+intra-sent\s+(\d+)\s+intra-recv\s+\d+\s+"
                         r"inter-sent\s+(\d+)", line)
            if m:
                r = rows.setdefault(int(m.group(1)), {})
                r["r0_sent"] = int(m.group(2)) + int(m.group(3))
                r["r0_inter"] = int(m.group(3))
                continue
            m = re.match(r"#\s+compress\s+(\d+)\s+wire-max\s+(\d+)\s+wire-sum\s+(\d+)\s+"
                         r"inter-max\s+(\d+)\s+inter-sum\s+(\d+)", line)
            if m:
                r = rows.setdefault(int(m.group(1)), {})
                r["wire_max"], r["inter_sum"] = int(m.group(2)), int(m.group(5))
                continue
            if line.startswith("# Out of bounds values"):
                ok = True
                continue
            f_ = line.split()
            if len(f_) < 13 or not f_[0].isdigit() or not f_[1].isdigit():
                continue
            r = rows.setdefault(int(f_[0]), {})
            try:
                r["time"], r["busbw"] = float(f_[5]), float(f_[7])
            except ValueError:
                continue
            try:
                r["time_ip"] = float(f_[9])
            except ValueError:
                pass
            r["wrong"] = sum(int(x) for x in (f_[8], f_[12]) if x.isdigit())
            if len(f_) >= 16:
                r["wire"] = int(f_[13])
                r["maxabs"] = None if f_[14] == "N/A" else float(f_[14])
                r["maxrel"] = None if f_[15] == "N/A" else float(f_[15])
    return rows, ok


def parse_compare(path):
    """{variant: {size: [row per round]}} of an all_reduce_perf --compare output (the
    "#  compare SIZE VARIANT ROUND TIME WIRE" lines; none is uncompressed Tide, "tide"),
    whether it ended, and its #wrong."""
    data, ok, wrong = {}, False, {}
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"#\s+compare\s+(\d+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s+(\d+)", line)
            if m:
                v = "tide" if m.group(2) == "none" else m.group(2)
                data.setdefault(v, {}).setdefault(int(m.group(1)), []).append(
                    {"time": float(m.group(4)), "wire_max": int(m.group(5)), "wrong": 0})
            m = re.match(r"\s*(\d+)\s+\d+\s.*#wrong (\d+)\s*$", line)
            if m:  # the size's summary: elements beyond the bound over its codecs
                wrong[int(m.group(1))] = int(m.group(2))
            if line.startswith("# Out of bounds values"):
                ok = True
    return data, ok, wrong


def load(d, mode):
    """{variant: {size: [row per repetition (or round)]}}, failures."""
    data, failures = {}, []
    for path in sorted(glob.glob(os.path.join(d, mode + "-*-*.txt"))):
        base = os.path.basename(path)[len(mode) + 1:-4]
        variant, _ = base.rsplit("-", 1)
        if variant == "compare":  # every variant of one launch, alternating
            rows, ok, wrong = parse_compare(path)
            if not ok:
                failures.append(path)
            for v, sizes in rows.items():
                for size, rs in sizes.items():
                    if v == "auto" and rs:  # counted once per size
                        rs[0]["wrong"] = wrong.get(size, 0)
                    data.setdefault(v, {}).setdefault(size, []).extend(rs)
            continue
        variant = variant.replace("_", ":") if variant.startswith("topk") else variant
        rows, ok = parse(path)
        if not ok:
            failures.append(path)
        for size, row in rows.items():
            if "time" in row:
                data.setdefault(variant, {}).setdefault(size, []).append(row)
    return data, failures


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def worst(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return max(vals) if vals else None


def wire_bytes(codec, s, block):
    """W(s): bytes of one encoded shard of s float32 elements."""
    return {"fp16": 2 * s, "bf16": 2 * s, "int8": 4 * -(-s // block) + s,
            "int4": 4 * -(-s // block) + -(-s // 2)}.get(codec)


SEGMENT = 1 << 20  # the compressed All-Reduce's pipeline segment (elements)


def segments(count):
    return [min(SEGMENT, count - o) for o in range(0, count, SEGMENT)]


def theory(codec, n, ppn, count, block):
    """{layout: (wire bytes per rank, inter-node bytes per rank)} of one All-Reduce call,
    per segment of 2^20 elements summed. flat (cmp_a2a): the all-to-all over all n ranks,
    n - ppn of a rank's n - 1 peers remote; hier (cmp_hier): an intra-node reduce-scatter
    into chunks of ceil(G / ppn), the all-to-all of each chunk among the nodes (shards of
    ceil(chunk / nodes), nodes - 1 remote peers) and an intra-node gather. top-k: the
    all-gather of pairs. Uncompressed: the ring's wire bytes, no inter-node theory."""
    nodes = n // ppn
    if codec in ("tide", "none"):
        return {"ring": (2.0 * (n - 1) / n * 4 * count, None)}
    if codec.startswith("topk"):
        ratio = float(codec.split(":")[1]) if ":" in codec else 0.01
        k = max(1, math.ceil(ratio * count))
        return {"flat": ((n - 1) * 8 * k, (n - ppn) * 8 * k)}
    if wire_bytes(codec, 1, block) is None:
        return {}
    flat = hier = (0, 0)
    for g in segments(count):
        w = wire_bytes(codec, -(-g // n), block)
        flat = (flat[0] + (n - 1) * 2 * w, flat[1] + (n - ppn) * 2 * w)
        c = -(-g // ppn)
        wi = wire_bytes(codec, c, block)
        wh = wire_bytes(codec, -(-c // nodes), block)
        hier = (hier[0] + 2 * (ppn - 1) * wi + 2 * (nodes - 1) * wh,
                hier[1] + 2 * (nodes - 1) * wh)
    out = {"flat": flat}
    if nodes > 1:
        out["hier"] = hier
    return out


def closest(measured, layouts):
    """(layout, (wire, inter)) of `layouts` whose inter-node theory is nearest to
    `measured`; the first layout when nothing was measured; (None, (None, None)) when
    there is no theory."""
    if not layouts:
        return None, (None, None)
    if measured is None or any(v[1] is None for v in layouts.values()):
        return next(iter(layouts.items()))
    return min(layouts.items(), key=lambda kv: abs(measured - kv[1][1]))


def human(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


def fmt(v, spec, width):
    return ("%" + spec) % v if v is not None else "-".rjust(width)


def wire_of(rows, n):
    """(wire per rank, inter-node per rank, source): maxima of the compressed tool, else
    rank 0's counters."""
    if any("wire_max" in r for r in rows):
        inter = med(rows, "inter_sum")
        return med(rows, "wire_max"), inter / n if inter is not None else None, "max"
    return med(rows, "r0_sent"), med(rows, "r0_inter"), "r0"


def main_table(data, meta, out):
    n, ppn, block = meta["n"], meta["ppn"], meta["block"]
    variants = ["tide"] + [v for v in meta["codecs"] if v in data] + \
        (["mpi"] if "mpi" in data else [])
    variants = [v for v in variants if v in data]
    sizes = sorted(set().union(*[set(data[v]) for v in variants])) if variants else []
    summary = []
    for size in sizes:
        count = size // 4
        print("All-Reduce %d B float32 sum, %d x %d ranks, link %s: medians of %d runs"
              % (size, meta["nodes"], ppn, meta["rate"],
                 max(len(data[v].get(size, [])) for v in variants)))
        print("%-11s %11s %11s %7s %12s %12s %12s %12s %7s %8s %10s %6s" % (
            "variant", "time(us)", "in-place", "busbw", "wire/rank", "inter/rank",
            "theory/rank", "inter-theory", "i/theo", "tide/x", "maxabs", "#wrong"))
        t_tide = med(data.get("tide", {}).get(size, []), "time")
        for v in variants:
            rows = data[v].get(size, [])
            if not rows:
                continue
            t = med(rows, "time")
            wire, inter, src = wire_of(rows, n) if v != "mpi" else (None, None, "")
            layout, (th, ith) = closest(inter, theory(v, n, ppn, count, block)
                                        if v != "mpi" else {})
            ratio = inter / ith if inter is not None and ith else None
            speed = t_tide / t if t_tide and t else None
            wrong = sum(r.get("wrong", 0) for r in rows)
            row = {"size": size, "variant": v, "time_us": t, "time_ip_us": med(rows, "time_ip"),
                   "busbw": med(rows, "busbw"),
                   "wire_per_rank": wire, "inter_per_rank": inter, "traffic_source": src,
                   "theory_wire": th, "theory_inter": ith, "inter_layout": layout,
                   "inter_over_theory": ratio,
                   "tide_over_variant": speed, "maxabs": worst(rows, "maxabs"),
                   "maxrel": worst(rows, "maxrel"), "wrong": wrong, "runs": len(rows)}
            summary.append(row)
            print("%-11s %11.0f %11s %7.3f %12s %12s %12s %12s %7s %8s %10s %6d" % (
                v, t, fmt(row["time_ip_us"], ".0f", 11), row["busbw"],
                fmt(wire, ".0f", 12) + ("*" if src == "r0" else ""),
                fmt(inter, ".0f", 12), fmt(th, ".0f", 12),
                fmt(ith, ".0f", 12) + {"flat": "f", "hier": "h"}.get(layout, "") if ith
                else fmt(None, "", 12),
                fmt(ratio, ".3f", 7), fmt(speed, ".2f", 8), fmt(row["maxabs"], ".3g", 10),
                wrong))
        print("  (time: out-of-place, the verdicts' figure; in-place: the same tool's in-place "
              "column, its own compressor;\n   *: rank 0's counters; inter: mean over ranks; "
              "theory: of the layout, flat "
              "(f, cmp_a2a) or hierarchical\n   (h, cmp_hier), whose inter-node bytes are the "
              "nearer; i/theo: inter/rank over its theory;\n   tide/x: uncompressed Tide time / "
              "this time)")
        verdicts(summary, size)
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        if summary:
            w = csv.DictWriter(f, fieldnames=list(summary[0].keys()))
            w.writeheader()
            w.writerows(summary)
    return summary


def verdicts(summary, size):
    by = {r["variant"]: r for r in summary if r["size"] == size}
    lines = []
    for codec, target in TARGETS.items():
        r = by.get(codec)
        if r and r["tide_over_variant"]:
            ok = r["tide_over_variant"] >= target
            lines.append("  %-9s tide/%s = %.2f (>= %.1f) %s" % (
                codec, codec, r["tide_over_variant"], target, "PASS" if ok else "FAIL"))
    if "int8" in by and "bf16" in by and by["bf16"]["time_us"]:
        q = by["int8"]["time_us"] / by["bf16"]["time_us"]
        lines.append("  int8/bf16 time = %.2f (<= 0.6) %s" % (q, "PASS" if q <= 0.6 else "FAIL"))
    for v, r in by.items():
        if r["inter_over_theory"] is not None:
            ok = abs(r["inter_over_theory"] - 1) <= 0.02
            lines.append("  %-9s inter-node bytes / theory = %.4f (within 2%%) %s" % (
                v, r["inter_over_theory"], "PASS" if ok else "FAIL"))
    if lines:
        print("verdicts (issue 17, %d B):" % size)
        print("\n".join(lines))
    print()


def sweep_table(data, meta, out):
    n, ppn, block = meta["n"], meta["ppn"], meta["block"]
    variants = [v for v in ("tide", "auto", "bf16", "int8") if v in data]
    sizes = sorted(set().union(*[set(data[v]) for v in variants])) if variants else []
    print("auto sweep: median out-of-place time (us), %d x %d ranks, link %s" % (
        meta["nodes"], ppn, meta["rate"]))
    print("%10s " % "size" + " ".join("%11s" % v for v in variants) +
          " %10s %8s %12s  %s" % ("auto/best", "verdict", "auto wire", "auto ~"))
    rows_out = []
    for size in sizes:
        t = {v: med(data[v].get(size, []), "time") for v in variants}
        best = [t[v] for v in ("tide", "bf16", "int8") if t.get(v)]
        ratio = min(best) / t["auto"] if best and t.get("auto") else None
        aw, _, _ = wire_of(data.get("auto", {}).get(size, []), n)
        like = "?"
        if aw:
            cands = {}
            for c in ("fp16", "int8", "int4"):  # each codec's wire theory nearest auto's
                walls = [v[0] for v in theory(c, n, ppn, size // 4, block).values()]
                cands[c] = min(walls, key=lambda w: abs(aw - w))
            cands["none"] = wire_of(data.get("tide", {}).get(size, []), n)[0]
            for c, th in cands.items():
                if th and abs(aw - th) <= 0.05 * th:
                    like = "bf16/fp16" if c == "fp16" else c
        row = {"size": size, **{"time_" + v: t[v] for v in variants},
               "auto_over_best": ratio, "auto_wire": aw, "auto_like": like}
        rows_out.append(row)
        print("%10d " % size + " ".join(fmt(t[v], "11.1f", 11) for v in variants) +
              " %10s %8s %12s  %s" % (fmt(ratio, ".3f", 10),
                                      "-" if ratio is None else
                                      ("PASS" if ratio >= 0.95 else "FAIL"),
                                      fmt(aw, ".0f", 12), like))
    print("  (auto/best: best of tide, bf16, int8 time / auto time, >= 0.95 passes; auto ~: "
          "the codec whose wire bytes auto's match within 5%)\n")
    with open(os.path.join(out, "sweep.csv"), "w", newline="") as f:
        if rows_out:
            w = csv.DictWriter(f, fieldnames=list(rows_out[0].keys()))
            w.writeheader()
            w.writerows(rows_out)
    return rows_out, variants


def plots(out, summary, sweep, sweep_variants):
    gp = ['set terminal pngcairo size 960,600 font "sans,11"', "set grid"]
    if summary:
        size = max(r["size"] for r in summary)
        rows = [r for r in summary if r["size"] == size]
        with open(os.path.join(out, "compress_time.dat"), "w") as f:
            f.write("# variant median_time_ms tide_over_variant\n")
            for r in rows:
                f.write('"%s" %g %g\n' % (r["variant"], r["time_us"] / 1e3,
                                          r["tide_over_variant"] or 0))
        gp += ['set output "compress_time.png"',
               'set title "All-Reduce %d MiB float32, median time per variant"'
               % (size >> 20),
               "set style data histograms", "set style fill solid 0.7 border -1",
               "set boxwidth 0.7", 'set ylabel "time (ms)"', "set yrange [0:*]",
               "set logscale y", "set yrange [*:*]", "unset key",
               'plot "compress_time.dat" using 2:xtic(1) lc rgb "#4070a0", '
               "'' using 0:2:(sprintf(\"%.2fx\", $3)) with labels offset 0,1 notitle",
               "unset logscale y", "set style data lines"]
    if sweep:
        with open(os.path.join(out, "compress_sweep.dat"), "w") as f:
            f.write("# size " + " ".join(sweep_variants) + " auto_over_best\n")
            for r in sweep:
                vals = [r.get("time_" + v) for v in sweep_variants] + [r["auto_over_best"]]
                f.write("%d %s\n" % (r["size"], " ".join(
                    "%g" % x if x is not None else "NaN" for x in vals)))
        k = len(sweep_variants)
        tics = ", ".join('"%s" %d' % (human(r["size"]), r["size"]) for r in sweep)
        gp += ['set output "compress_sweep.png"', "set logscale x 2", "set logscale y 10",
               "set xtics (%s) rotate by -45" % tics,
               "set xrange [%g:%g]" % (sweep[0]["size"] / 1.5, sweep[-1]["size"] * 1.5),
               'set title "All-Reduce: auto against uncompressed, bf16 and int8"',
               'set xlabel "size (bytes)"', 'set ylabel "median time (us)"',
               'set y2label "auto/best"', "set y2range [0:2]", "set y2tics", "set key top left",
               "plot " + ", ".join(
                   '"compress_sweep.dat" using 1:%d with linespoints lw 2 title "%s"'
                   % (i + 2, v) for i, v in enumerate(sweep_variants)) +
               ', "compress_sweep.dat" using 1:%d axes x1y2 with lines dt 2 lw 2 lc "black" '
               'title "auto/best (right)"' % (k + 2)]
    if len(gp) == 2:
        return
    with open(os.path.join(out, "plot.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    if not shutil.which("gnuplot"):
        print("gnuplot not found; plot script left in " + os.path.join(out, "plot.gp"))
        return
    res = subprocess.run(["gnuplot", "plot.gp"], cwd=out, capture_output=True, text=True)
    if res.returncode != 0:
        print("gnuplot failed: " + res.stderr.strip(), file=sys.stderr)
    else:
        print("plots: " + ", ".join(os.path.join(out, p) for p in
                                    ("compress_time.png", "compress_sweep.png")
                                    if os.path.exists(os.path.join(out, p))))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    meta = {}
    with open(os.path.join(out, "meta.txt")) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            meta[k] = v
    meta["nodes"], meta["ppn"] = int(meta["nodes"]), int(meta["ppn"])
    meta["n"], meta["block"] = meta["nodes"] * meta["ppn"], int(meta["block"])
    meta["codecs"] = meta["codecs"].split()
    print("git %s, %s, load at start %s" % (meta.get("git"), meta.get("date"), meta.get("load")))
    main_data, f1 = load(out, "main")
    sweep_data, f2 = load(out, "sweep")
    summary = main_table(main_data, meta, out) if main_data else []
    sweep, sv = sweep_table(sweep_data, meta, out) if sweep_data else ([], [])
    plots(out, summary, sweep, sv)
    wrong = sum(r["wrong"] for r in summary) + sum(
        r.get("wrong", 0) for v in sweep_data.values() for rows in v.values() for r in rows)
    csvs = [c for c in ("summary.csv", "sweep.csv") if os.path.exists(os.path.join(out, c))]
    print("csv: %s; #wrong total: %d" % (", ".join(os.path.join(out, c) for c in csvs), wrong))
    for path in f1 + f2:
        print("FAILED launch (no summary line): " + path)
    return 1 if wrong or f1 or f2 else 0


if __name__ == "__main__":
    sys.exit(main())
