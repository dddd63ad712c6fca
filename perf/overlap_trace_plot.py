#!/usr/bin/env python3
"""Picture of one overlapped step from an overlap_bench --trace file.

  perf/overlap_trace_plot.py TRACE.json OUT.png [LAYERS]

Takes the last overlapped step of the trace (its LAYERS compute events, default
16: overlap_bench records compute only in the overlapped phase, so the last
LAYERS of them are the last step's) and every bucket All-Reduce from that step's
first compute on, and draws them as two rows of boxes over time (ms from the
step's start) with gnuplot (pngcairo). Python 3 standard library and
/usr/bin/gnuplot only. Exit status 1 on a bad trace or a gnuplot failure.
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 1
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    with open(sys.argv[1]) as f:
        events = json.load(f)["traceEvents"]
    compute = sorted((e for e in events if e.get("cat") == "compute"), key=lambda e: e["ts"])
    comm = sorted((e for e in events if e.get("cat") == "comm"), key=lambda e: e["ts"])
    if len(compute) < layers:
        print("trace has %d compute events, fewer than %d layers" % (len(compute), layers),
              file=sys.stderr)
        return 1
    step = compute[-layers:]
    t0 = step[0]["ts"]
    comm = [e for e in comm if e["ts"] >= t0]
    with tempfile.TemporaryDirectory() as tmp:
        dat = os.path.join(tmp, "boxes.dat")
        with open(dat, "w") as out:
            # x_center y x_half y_half color
            for e in step:
                x0, x1 = (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3
                out.write("%.3f 1 %.3f 0.35 1\n" % ((x0 + x1) / 2, (x1 - x0) / 2))
            for e in comm:
                x0, x1 = (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3
                out.write("%.3f 0 %.3f 0.35 2\n" % ((x0 + x1) / 2, (x1 - x0) / 2))
        end = max([(e["ts"] + e["dur"] - t0) / 1e3 for e in step + comm])
        gp = "\n".join([
            'set terminal pngcairo noenhanced size 1100,300 font "sans,11"',
            'set output "%s"' % os.path.abspath(sys.argv[2]),
            'set title "overlap_bench: one overlapped step (rank 0): compute per layer, '
            'then each bucket\'s All-Reduce"',
            "set xlabel 'ms from the step start'",
            "set xrange [0:%.3f]" % (end * 1.02),
            "set yrange [-0.6:1.6]",
            'set ytics ("bucket All-Reduce" 0, "compute (layer)" 1)',
            "set style fill solid 0.7 border lc rgb 'black'",
            "unset key",
            "set palette defined (1 '#4a90d9', 2 '#e07b39')",
            "unset colorbox",
            "plot '%s' using 1:2:3:4:5 with boxxyerror lc palette" % dat,
        ])
        r = subprocess.run(["gnuplot"], input=gp, text=True)
        if r.returncode != 0:
            return 1
    print("%s: %d compute and %d bucket events over %.1f ms" % (sys.argv[2], len(step), len(comm),
                                                                end))
    return 0


if __name__ == "__main__":
    sys.exit(main())
