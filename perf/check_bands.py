#!/usr/bin/env python3
"""Checks a perf/compare.sh result against issue 3's acceptance bands.

  perf/check_bands.py OUT_DIR   (reads OUT_DIR/medians.csv)

The peer at each size is the better of Open MPI ob1 and ucx. Ratios are time
ratios (best MPI time / Tide time) up to 64 KiB and busbw ratios (Tide / best
MPI) above. A band holds when the geometric mean of its per-size ratios meets
the target and no size is below 0.9x the target. Bands with no measured size
are not printed. Exit status 0 when every printed band holds, 1 otherwise.
"""
import csv
import math
import os
import sys

SMALL_MAX = 64 << 10
MIB = 1 << 20
BANDS = [  # collective, ranks, min bytes, max bytes, target
    ("all_reduce", 2, 8, 8 * MIB, 1.0),
    ("all_reduce", 2, 32 * MIB, 256 * MIB, 1.5),
    ("all_reduce", 4, 8, 64 << 10, 1.0),
    ("all_reduce", 4, 1 * MIB, 8 * MIB, 1.2),
    ("all_reduce", 4, 32 * MIB, 1 << 62, 1.5),
] + [(c, n, 1 * MIB, 1 << 62, 1.0)
     for c in ("all_gather", "reduce_scatter", "broadcast") for n in (2, 4)]


def main():
    out = sys.argv[1]
    med = {}
    with open(os.path.join(out, "medians.csv")) as f:
        for r in csv.DictReader(f):
            key = (r["coll"], int(r["ranks"]), r["lib"], int(r["size"]))
            med[key] = (float(r["busbw"]), float(r["time_us"]))

    def ratio(coll, n, size):
        tide = med.get((coll, n, "tide", size))
        peers = [med[k] for k in ((coll, n, lib, size) for lib in ("ob1", "ucx")) if k in med]
        if tide is None or not peers:
            return None
        if size <= SMALL_MAX:
            return min(p[1] for p in peers) / tide[1] if tide[1] > 0 else None
        best = max(p[0] for p in peers)
        return tide[0] / best if best > 0 else None

    sizes = sorted({k[3] for k in med if k[3] > 0})
    ok_all = True
    print("== Acceptance bands (issue 3): geomean of Tide / best Open MPI, min size ratio")
    for coll, n, lo, hi, target in BANDS:
        rs = [r for r in (ratio(coll, n, s) for s in sizes if lo <= s <= hi) if r]
        if not rs:
            continue
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
        ok = geo >= target and min(rs) >= 0.9 * target
        ok_all &= ok
        top = "up" if hi >= 1 << 62 else f"{hi >> 20}M" if hi >= MIB else f"{hi >> 10}K"
        low = f"{lo >> 20}M" if lo >= MIB else f"{lo}B"
        print(f"  {coll:15s} {n} ranks {low:>4}-{top:<5} target {target:.1f}: geomean "
              f"{geo:5.2f}, min {min(rs):5.2f} over {len(rs):2d} sizes  {'holds' if ok else 'FAILS'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
