#!/usr/bin/env python3
"""Nsight Compute's source page (`ncu --import R --page source --csv --print-source cuda,sass`, ncu_detail.sh's
source-TAG.csv) per source line: warp instructions executed and warp-state samples, the lines that issue most
first (rows of the same file and line summed). Needs a build with -lineinfo (tools/gpu_carry/wrap_build.sh gives the
bench's builds one). An inlined function's instructions count at its own lines and at the line calling it, so the
lines' total exceeds the kernel's (230k against 208k for the e2e head of 2026-11-28).
  python3 tools/gpu_carry/ncu_lines.py OUT/source-TAG.csv [--top 40]"""

import argparse
import csv
import sys


def lines(path: str) -> list:
    """(instructions, samples, file, line, source) of each source line with instructions or samples."""
    out: dict = {}
    file, head = "?", None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "File Path":
                file = row[1].rsplit("/", 1)[-1]
            elif row[0] == "Line No":
                head = row
            elif head is not None and len(row) == len(head) and row[0].isdigit():
                d = dict(zip(head, row))
                num = [int((d.get(k) or "0").replace(",", "") or 0)
                       for k in ("Instructions Executed", "Warp Stall Sampling (All Samples)")]
                key = (file, int(row[0]))
                ins, smp, _ = out.get(key, (0, 0, ""))
                out[key] = (ins + num[0], smp + num[1], row[1].strip())
    return [(ins, smp, file, line, src) for (file, line), (ins, smp, src) in out.items() if ins or smp]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    rows = lines(a.csv)
    if not rows:
        print(f"{a.csv}: no source lines (a build without -lineinfo, or a SASS-only page)", file=sys.stderr)
        return 1
    print(f"{sum(r[0] for r in rows)} warp instructions, {sum(r[1] for r in rows)} samples, {len(rows)} lines")
    for ins, smp, file, line, src in sorted(rows, reverse=True)[:a.top]:
        print(f"{ins:8d} {smp:6d}  {file}:{line}  {src[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
