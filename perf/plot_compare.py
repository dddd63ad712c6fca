#!/usr/bin/env python3
"""Report of a perf/compare.sh run: tables, CSV, JSON and gnuplot PNGs.

    perf/plot_compare.py OUT_DIR

Reads OUT_DIR/runs.tsv (one line per tool launch), the raw tool outputs under
OUT_DIR/raw/, OUT_DIR/stream.txt (stream_probe) and OUT_DIR/meta.json, all
written by compare.sh. Writes:
  runs.csv      every out-of-place (and in-place) row of every launch
  medians.csv   per collective, ranks, library and size: median busbw and time
  results.json  meta, stream bandwidth, roofline, runs and medians
  <coll>_n<N>.png (+ .dat, plot.gp)  busbw vs size, log x, one line per library
  <coll>_n<N>_time.png                time vs size, log-log, one line per library
and prints one table per collective and rank count, then the verdicts of
issue 16 (blocking All-Reduce time against the best Open MPI at 2 ranks, 8 B to
64 KiB; the -z 0 / -z 1 bound when tideZ0 ran). Uses the standard library
and /usr/bin/gnuplot only. Exit status 1 when a launch failed or a check
counted wrong values, else 0.
"""

import csv
import json
import os
import shutil
import statistics
import subprocess
import sys

LIBS = ["tide", "tideZ0", "ob1", "ucx", "tideB"]
LABEL = {"tide": "Tide", "tideZ0": "Tide (-z 0, host stream)", "ob1": "Open MPI (ob1/vader)",
         "ucx": "Open MPI (UCX)", "tideB": "Tide (variant B)"}
SHORT = {"tide": "tide", "tideZ0": "tide-z0", "ob1": "mpi-ob1", "ucx": "mpi-ucx",
         "tideB": "tideB"}
# Libraries that are not a peer: never counted in "best MPI".
TIDES = ("tide", "tideZ0", "tideB")
NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather",
         "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast", "reduce": "Reduce",
         "alltoall": "AlltoAll", "sendrecv": "SendRecv"}
ROOF_MIN_BYTES = 16 << 20  # roofline fractions only where DRAM bandwidth rules


def bus_factor(coll, n):
    """busbw / algbw of each tool (as its bus_factor in perf/*.cc)."""
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def human(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


def load_json(path):
    """meta.json as written by compare.sh (a line may start with a comma)."""
    try:
        with open(path) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return {}


def parse_rows(path):
    """Result rows of one nccl-tests-style output: dicts with oop and ip columns."""
    rows = []
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return rows
    for line in lines:
        f = line.split()
        if len(f) < 9 or not line.startswith(" ") or not f[0].isdigit():
            continue
        try:
            row = {"size": int(f[0]), "count": int(f[1]), "type": f[2], "op": f[3],
                   "time_us": float(f[5]), "algbw": float(f[6]), "busbw": float(f[7]),
                   "wrong": f[8]}
        except ValueError:
            continue
        if len(f) >= 13:
            try:
                row.update({"ip_time_us": float(f[9]), "ip_busbw": float(f[11]),
                            "ip_wrong": f[12]})
            except ValueError:  # in-place N/A
                pass
        rows.append(row)
    return rows


def parse_stream(path):
    """stream_probe table: list of (size, {column: GB/s}) and the column names."""
    cols, table = [], []
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return cols, table
    for line in lines:
        f = line.split()
        if line.startswith("#") and "size(B)" in line:
            cols = f[2:]
        elif f and f[0].isdigit() and cols:
            table.append((int(f[0]), dict(zip(cols, map(float, f[1:])))))
    return cols, table


def parse_roofline(path):
    """stream_probe --roofline output: {"copy_gbs", "floor_busbw", "staged_busbw"}."""
    res = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return None
    for line in lines:
        f = line.split()
        if line.startswith("# ring") and "bandwidth" in f:
            res["copy_gbs"] = float(f[f.index("bandwidth") + 1])
        elif len(f) == 4 and f[0] in ("floor", "staged"):
            res[f[0] + "_busbw"] = float(f[3])
    return res if len(res) == 3 else None


def median(xs):
    return statistics.median(xs) if xs else None


def fmt(v, spec="%7.3f", width=7):
    return spec % v if v is not None else "-".rjust(width)


def verdicts(med, libs, mpis):
    """Issue 16's acceptance on these medians (information; never fails the run)."""
    def t(lib, n, size):
        m = med.get(("all_reduce", n, lib, size))
        return m["time_us"] if m and m["time_us"] > 0 else None

    sizes = sorted({k[3] for k in med if k[0] == "all_reduce" and 8 <= k[3] <= 65536})
    if not sizes:
        return
    print("\n== issue 16 verdicts (All-Reduce, medians)")
    if "tide" in libs and mpis:
        ratios = []
        for size in sizes:
            best = min((t(l, 2, size) for l in mpis if t(l, 2, size)), default=None)
            tide = t("tide", 2, size)
            if best and tide:
                ratios.append((size, best / tide))
        if ratios:
            geo = statistics.geometric_mean([r for _, r in ratios])
            low = min(ratios, key=lambda x: x[1])
            ok = geo >= 1.0 and low[1] >= 0.8
            print("  2 ranks, 8 B-64 KiB, best MPI time / Tide time: geomean %.2f (>= 1.0), "
                  "lowest %.2f at %s (>= 0.8): %s" % (geo, low[1], human(low[0]),
                                                     "holds" if ok else "FAILS"))
    if "tideZ0" in libs and "tide" in libs:
        for n in sorted({k[1] for k in med if k[0] == "all_reduce" and k[2] == "tideZ0"}):
            worst = None
            for size in sizes:
                z0, z1 = t("tideZ0", n, size), t("tide", n, size)
                if z0 and z1:
                    slack = z0 / (1.5 * z1 + 2.0)  # <= 1: within 1.5 x (-z 1) + 2 us
                    if worst is None or slack > worst[1]:
                        worst = (size, slack, z0, z1)
            if worst:
                print("  %d ranks, 8 B-64 KiB, -z 0 within 1.5 x (-z 1) + 2 us: worst at %s "
                      "(%.2f us against %.2f us, %.0f%% of the bound): %s" % (
                          n, human(worst[0]), worst[2], worst[3], 100 * worst[1],
                          "holds" if worst[1] <= 1.0 else "FAILS"))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    meta = load_json(os.path.join(out, "meta.json"))
    split = int(meta.get("split", 65536))
    stream = parse_stream(os.path.join(out, "stream.txt"))

    runs, failures = [], []
    with open(os.path.join(out, "runs.tsv")) as f:
        for launch in csv.DictReader(f, delimiter="\t"):
            rows = parse_rows(os.path.join(out, launch["file"]))
            wrong = sum(int(r[k]) for r in rows for k in ("wrong", "ip_wrong")
                        if str(r.get(k, "")).isdigit())
            if launch["rc"] != "0" or wrong or not rows:
                failures.append("%s N=%s %s rep %s %s: rc=%s wrong=%d rows=%d (%s)" % (
                    launch["coll"], launch["ranks"], launch["lib"], launch["rep"],
                    launch["band"], launch["rc"], wrong, len(rows), launch["file"]))
            if launch["rc"] != "0":
                continue  # a launch that failed may have printed partial rows
            n = int(launch["ranks"])
            for r in rows:
                r.update({"coll": launch["coll"], "ranks": n, "lib": launch["lib"],
                          "rep": int(launch["rep"]), "band": launch["band"]})
                # The tools print GB/s with 2 decimals; recompute from the time so
                # that small sizes keep their precision.
                if r["time_us"] > 0:
                    r["busbw"] = r["size"] / (r["time_us"] * 1e3) * bus_factor(r["coll"], n)
                runs.append(r)

    run_fields = ["coll", "ranks", "lib", "rep", "band", "size", "count", "type", "op",
                  "time_us", "algbw", "busbw", "wrong", "ip_time_us", "ip_busbw", "ip_wrong"]
    with open(os.path.join(out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=run_fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(runs)

    groups = {}
    for r in runs:
        groups.setdefault((r["coll"], r["ranks"], r["lib"], r["size"]), []).append(r)
    medians = []
    for (coll, n, lib, size), rs in sorted(groups.items()):
        medians.append({"coll": coll, "ranks": n, "lib": lib, "size": size, "runs": len(rs),
                        "busbw": median([r["busbw"] for r in rs]),
                        "time_us": median([r["time_us"] for r in rs]),
                        "busbw_min": min(r["busbw"] for r in rs),
                        "busbw_max": max(r["busbw"] for r in rs)})
    with open(os.path.join(out, "medians.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["coll", "ranks", "lib", "size", "runs", "busbw",
                                          "time_us", "busbw_min", "busbw_max"])
        w.writeheader()
        w.writerows(medians)
    med = {(m["coll"], m["ranks"], m["lib"], m["size"]): m for m in medians}

    # ---- stream probe and roofline ----
    cols, table = stream
    print("\n== stream_probe (float32 GB/s; copy counts 2 x size bytes, add 3 x size)")
    if table:
        print("  %12s  " % "size(B)" + "  ".join("%9s" % c for c in cols))
        for size, vals in table:
            print("  %12s  " % human(size) + "  ".join("%9.2f" % vals[c] for c in cols))
    else:
        print("  (no stream_probe output)")
    roof = {}
    for n in sorted({m["ranks"] for m in medians}):
        r = parse_roofline(os.path.join(out, "roofline_n%d.txt" % n))
        if r is None or n < 2:
            continue
        roof[n] = r
        bw = r["copy_gbs"]
        print("  ring All-Reduce roofline, %d ranks: copy %.2f GB/s at 256M -> busbw ceiling "
              "%.3f GB/s (floor: input read + output written once), %.3f GB/s (staged: every "
              "transfer through memory)" % (n, bw, roof[n]["floor_busbw"], roof[n]["staged_busbw"]))

    # ---- tables ----
    libs = [l for l in LIBS if any(m["lib"] == l for m in medians)]
    mpis = [l for l in libs if l not in TIDES]
    plots = []
    for coll in sorted({m["coll"] for m in medians}, key=lambda c: list(NAMES).index(c)):
        for n in sorted({m["ranks"] for m in medians if m["coll"] == coll}):
            sizes = sorted({m["size"] for m in medians if m["coll"] == coll and m["ranks"] == n})
            reps = max(m["runs"] for m in medians if m["coll"] == coll and m["ranks"] == n)
            print("\n== %s, %d ranks: busbw GB/s, median of %d runs (float32 sum, out-of-place)"
                  % (NAMES.get(coll, coll), n, reps))
            head = "  %10s" % "size(B)" + "".join("  %8s" % SHORT[l] for l in libs)
            if "tide" in libs and mpis:
                head += "  %9s" % "tide/best"
                if "tideB" in libs:
                    head += "  %9s" % "tideB/tide"
                head += "  |  %9s" % "t_tide_us" + "".join("  %9s" % ("t_" + l) for l in mpis)
                head += "  %9s" % "bestT/tide"
                if "tideZ0" in libs:
                    head += "  %9s" % "tz0/tide"
            roof_col = coll == "all_reduce" and n in roof and "tide" in libs
            if roof_col:
                head += "  %8s" % "tide/roof"
            print(head)
            if "tide" in libs and mpis:
                print("  (tide/best: Tide busbw / best MPI busbw; bestT/tide: best MPI time / "
                      "Tide time, sizes <= %s; > 1 means Tide is faster)" % human(split))
                if "tideB" in libs:
                    print("  (tideB: Tide with %s; tideB/tide: its busbw / Tide's)"
                          % (meta.get("variant_env") or "no extra environment"))
            for size in sizes:
                get = lambda l: med.get((coll, n, l, size))
                line = "  %10s" % human(size)
                for l in libs:
                    line += "  " + fmt(get(l)["busbw"] if get(l) else None, "%8.3f", 8)
                if "tide" in libs and mpis:
                    tide = get("tide")
                    best = max((get(l)["busbw"] for l in mpis if get(l)), default=None)
                    ratio = (tide["busbw"] / best if tide and best else None)
                    line += "  " + fmt(ratio, "%9.2f", 9)
                    if "tideB" in libs:
                        vb = get("tideB")
                        line += "  " + fmt(vb["busbw"] / tide["busbw"] if vb and tide and
                                           tide["busbw"] > 0 else None, "%9.2f", 9)
                    if size <= split:
                        line += "  |  " + fmt(tide["time_us"] if tide else None, "%9.1f", 9)
                        for l in mpis:
                            line += "  " + fmt(get(l)["time_us"] if get(l) else None, "%9.1f", 9)
                        best_t = min((get(l)["time_us"] for l in mpis if get(l)), default=None)
                        line += "  " + fmt(best_t / tide["time_us"]
                                           if tide and best_t and tide["time_us"] > 0 else None,
                                           "%9.2f", 9)
                        if "tideZ0" in libs:
                            z0 = get("tideZ0")
                            line += "  " + fmt(z0["time_us"] / tide["time_us"]
                                               if z0 and tide and tide["time_us"] > 0 else None,
                                               "%9.2f", 9)
                    elif roof_col:
                        line += " " * (5 + 11 * (len(mpis) + 2) - 2)
                if roof_col and size >= ROOF_MIN_BYTES and get("tide"):
                    line += "  %7.0f%%" % (100 * get("tide")["busbw"] / roof[n]["floor_busbw"])
                print(line.rstrip())
            plots.append((coll, n, sizes))
            if roof_col:
                print("  tide/roof: Tide busbw / floor roofline busbw (%.3f GB/s), sizes >= %s"
                      % (roof[n]["floor_busbw"], human(ROOF_MIN_BYTES)))

    verdicts(med, libs, mpis)

    if failures:
        print("\n== FAILED launches or checks:")
        for f in failures:
            print("  " + f)

    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta,
                   "stream": [{"size": s, **v} for s, v in table],
                   "roofline": {str(k): v for k, v in roof.items()},
                   "failures": failures, "medians": medians, "runs": runs}, f, indent=1)

    # ---- plots ----
    gp = [
        'set terminal pngcairo size 960,600 font "sans,11"',
        'set logscale x 2', 'set grid', 'set key top left',
        'set xlabel "size (bytes)"', 'set ylabel "bus bandwidth (GB/s)"', 'set yrange [0:*]',
    ]
    for coll, n, sizes in plots:
        base = "%s_n%d" % (coll, n)
        has_roof = coll == "all_reduce" and n in roof
        with open(os.path.join(out, base + ".dat"), "w") as f:
            f.write("# size " + " ".join(libs) + " floor_roofline staged_roofline\n")
            for size in [x for x in sizes if x > 0]:  # log x: no 0-byte rows
                vals = ["%g" % med[(coll, n, l, size)]["busbw"] if (coll, n, l, size) in med
                        else "NaN" for l in libs]
                for key in ("floor_busbw", "staged_busbw"):
                    vals.append("%g" % roof[n][key]
                                if has_roof and size >= ROOF_MIN_BYTES else "NaN")
                f.write("%d %s\n" % (size, " ".join(vals)))
        pos = [x for x in sizes if x > 0]
        tics = ", ".join('"%s" %d' % (human(x), x) for x in pos)
        gp += ['set output "%s.png"' % base,
               'set title "%s, %d ranks: median busbw of %s"' % (
                   NAMES.get(coll, coll), n, ", ".join(LABEL[l] for l in libs)),
               "set xtics (%s) rotate by -45" % tics,
               "set xrange [%g:%g]" % (pos[0] / 1.5, pos[-1] * 1.5) if pos else "set autoscale x"]
        series = ['"%s.dat" using 1:%d with linespoints lw 2 title "%s"' % (base, i + 2, LABEL[l])
                  for i, l in enumerate(libs)]
        if has_roof and sizes and sizes[-1] >= ROOF_MIN_BYTES:
            series.append('"%s.dat" using 1:%d with lines dt 2 lw 2 lc "black" '
                          'title "memory roofline (floor)"' % (base, len(libs) + 2))
            series.append('"%s.dat" using 1:%d with lines dt 3 lw 2 lc "gray40" '
                          'title "memory roofline (staged)"' % (base, len(libs) + 3))
        gp.append("plot " + ", ".join(series))
        # Time against size (log-log): where a reader sees latency.
        with open(os.path.join(out, base + "_time.dat"), "w") as f:
            f.write("# size " + " ".join(libs) + " (median time, us)\n")
            for size in pos:
                f.write("%d %s\n" % (size, " ".join(
                    "%g" % med[(coll, n, l, size)]["time_us"] if (coll, n, l, size) in med
                    else "NaN" for l in libs)))
        gp += ['set output "%s_time.png"' % base,
               'set title "%s, %d ranks: median time of %s"' % (
                   NAMES.get(coll, coll), n, ", ".join(LABEL[l] for l in libs)),
               'set logscale y 10', 'set ylabel "time (us)"', 'set yrange [*:*]',
               "plot " + ", ".join('"%s_time.dat" using 1:%d with linespoints lw 2 title "%s"'
                                   % (base, i + 2, LABEL[l]) for i, l in enumerate(libs)),
               'unset logscale y', 'set ylabel "bus bandwidth (GB/s)"', 'set yrange [0:*]']
    with open(os.path.join(out, "plot.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    if shutil.which("gnuplot"):
        res = subprocess.run(["gnuplot", "plot.gp"], cwd=out, capture_output=True, text=True)
        if res.returncode != 0:
            print("gnuplot failed: " + res.stderr.strip(), file=sys.stderr)
        else:
            print("\nplots: " + ", ".join(os.path.join(out, "%s_n%d.png" % (c, n))
                                         for c, n, _ in plots))
    else:
        print("\ngnuplot not found; plot script left in " + os.path.join(out, "plot.gp"))
    print("csv/json: %s/{runs.csv,medians.csv,results.json}" % out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
