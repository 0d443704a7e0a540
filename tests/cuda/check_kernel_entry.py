#!/usr/bin/env python3
"""Every CUDA kernel of the runtime starts with CARVE_CU_KERNEL_ENTRY().

carve launches its kernels with programmatic dependent launch allowed (runtime/carve_cuda.h, CARVE_LAUNCH): on sm_90+
a kernel may start while the one before it on the stream still runs, and only the griddepcontrol.wait of
CARVE_CU_KERNEL_ENTRY() makes it wait for that kernel's results. A kernel without it, as its first statement, would
read its inputs before they are written: a race the emulation (launches in order) cannot show. This checks the
source of every __global__ function in the given files (default: runtime/carve_cuda*.cu / .h).

    check_kernel_entry.py [FILE...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
KERNEL = re.compile(r"^[^/\n]*__global__\b", re.M)


def kernels(text: str):
    """(name, first statement of the body) of every __global__ function defined in text."""
    for m in KERNEL.finditer(text):
        brace = text.find("{", m.end())
        semi = text.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration
        head = text[m.start():brace]
        name = re.findall(r"(\w+)\s*\(", head)
        body = text[brace + 1:].lstrip()
        yield (name[0] if name else "?"), body.split("\n", 1)[0].strip()


def main(argv: list) -> int:
    files = [Path(a) for a in argv] or sorted(ROOT.glob("runtime/carve_cuda*.cu")) + sorted(ROOT.glob("runtime/carve_cuda*.h"))
    bad, count = [], 0
    for f in files:
        for name, first in kernels(f.read_text()):
            count += 1
            if first != "CARVE_CU_KERNEL_ENTRY();":
                bad.append(f"{f.name}: kernel {name} starts with '{first}', not CARVE_CU_KERNEL_ENTRY();")
    for b in bad:
        print(f"check_kernel_entry: {b}")
    if count == 0:
        print("check_kernel_entry: no kernels found")
        return 1
    print(f"check_kernel_entry: {count - len(bad)} of {count} kernels start with CARVE_CU_KERNEL_ENTRY()")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
