#!/usr/bin/env python3
"""docs/trainer.md's flag table is the one tide-train declares.

Usage: doc_check.py TIDE_TRAIN DOCS/TRAINER.MD [--write]
The table lies between the markers <!-- flags:begin --> and <!-- flags:end -->
and must equal `tide-train --help-markdown`; --write replaces it.
"""
import subprocess
import sys


def main():
    exe, doc = sys.argv[1], sys.argv[2]
    table = subprocess.run([exe, "--help-markdown"], capture_output=True, text=True,
                           check=True).stdout
    text = open(doc).read()
    begin, end = "<!-- flags:begin -->\n", "<!-- flags:end -->"
    if begin not in text or end not in text:
        sys.exit(f"{doc}: no {begin.strip()} ... {end} section")
    head, rest = text.split(begin, 1)
    current, tail = rest.split(end, 1)
    if current == table:
        return 0
    if "--write" in sys.argv:
        open(doc, "w").write(head + begin + table + end + tail)
        print(f"{doc}: flag table rewritten")
        return 0
    print(f"{doc}: the flag table differs from `tide-train --help-markdown`; run\n"
          f"  {sys.argv[0]} {exe} {doc} --write")
    return 1


if __name__ == "__main__":
    sys.exit(main())
