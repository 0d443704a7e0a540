#!/usr/bin/env python3
"""Sums a Nsight Compute CSV of kernel durations (tools/gpu_carry/bench.sh's NCU=1 step:
`ncu --metrics gpu__time_duration.sum --csv --print-units base`) by kernel name.

    ncu_sum.py NCU.csv [--top 25]

Prints the number of kernels, the sum of their durations (the GPU's busy time when kernels run one after
another: what a run would take with no launch gaps) and the kernels that take the most, grouped by name.
Compared with the CUDA Graph's time of the same run, it splits a run into kernel time and gaps.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    lines = open(args.csv, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"ncu_sum.py: {args.csv}: no ncu CSV header (\"ID\", ...)")
    by, count, total = defaultdict(lambda: [0, 0.0]), 0, 0.0
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        ns *= {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1)
        name = re.sub(r"\(.*", "", r["Kernel Name"])[:70]
        by[name][0] += 1
        by[name][1] += ns
        count += 1
        total += ns
    print(f"{count} kernels, {total / 1e3:.1f} us of kernel time")
    print("| kernel | launches | us | share |\n|---|---:|---:|---:|")
    for name, (n, ns) in sorted(by.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"| {name} | {n} | {ns / 1e3:.1f} | {100 * ns / total:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
