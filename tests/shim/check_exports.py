#!/usr/bin/env python3
"""Checks that the NCCL shim exports every function nccl.h declares.

usage: check_exports.py <nccl.h> <libnccl.so.2>

Collects the functions nccl.h declares (the `ncclResult_t  ncclX(` lines,
plus the ones returning const char* or void) and checks that `nm -D` lists
each as a defined symbol, together with its `pncclX` profiling alias.
"""
import re
import subprocess
import sys


def declared(header):
    text = open(header, encoding="utf-8", errors="replace").read()
    names = set(re.findall(r"^\s*(?:ncclResult_t|const\s+char\s*\*|void)\s+p?(nccl\w+)\s*\(",
                           text, re.M))
    return sorted(names)


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    names = declared(sys.argv[1])
    have = exported(sys.argv[2])
    missing = sorted({s for n in names for s in (n, "p" + n) if s not in have})
    api = names
    print(f"nccl.h declares {len(api)} functions; "
          f"{sum(1 for n in api if n.startswith('nccl'))} checked with their pnccl aliases")
    if len(api) < 30:
        print("FAIL: suspiciously few declarations parsed from", sys.argv[1])
        return 1
    if missing:
        print("FAIL: not exported:", " ".join(missing))
        return 1
    print("PASS: every declared function and its pnccl alias is exported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
