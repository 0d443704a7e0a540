#!/usr/bin/env python3
"""Regenerating an int8 package from the same calibration images gives the same bytes, every file.

    regenerate.py --work DIR [--imgsz 128]

The first generation is the shared portable package of tests/int8/int8pkg.py (``carve generate --precision int8``
on 32 rendered images at 128, the package int8_vs_simulator checks); the second runs the same command in a new
process, on a copy of the calibration folder at another path and into another output folder. Every file of the
two packages (the C sources, the weights, the runtime, README, CMakeLists.txt and quant.json) must be byte-identical:
the quantization pass (calibration, range estimation, sensitivity, rewrite) and the emission are deterministic, and
no path of the calibration folder or of the output gets into a package (checked too: neither path appears in any
file). About 5 s at 128 (the pass on one BLAS thread, as the command runs it).
tests/generator/test_quant.py's test_quant_json_byte_identical_on_regeneration checks quant.json alone, in one
process; this is the whole package, through the command.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import int8pkg  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=int8pkg.IMGSZ)
    args = ap.parse_args()
    t0 = time.time()
    first = int8pkg.package(args.work, "portable", args.imgsz)
    work = int8pkg.root(args.work) / f"regenerate-{args.imgsz}"
    shutil.rmtree(work, ignore_errors=True)
    calib = shutil.copytree(int8pkg.calib_dir(args.work), work / "another-calibration-folder")
    second = work / "another-output-folder"
    t1 = time.time()
    int8pkg.generate(second, "portable", args.imgsz, calib)
    a, b = int8pkg.package_files(first), int8pkg.package_files(second)
    problems = [f"{name}: only in the {'first' if name in a else 'second'} package" for name in sorted(set(a) ^ set(b))]
    problems += [f"{name}: differs ({len(a[name])} and {len(b[name])} bytes)" for name in sorted(set(a) & set(b))
                 if a[name] != b[name]]
    for path in (calib, second, int8pkg.calib_dir(args.work), first):
        problems += [f"{name}: holds the path {path}" for name, data in b.items() if str(path).encode() in data]
    if "quant.json" not in b:
        problems.append("no quant.json in the package")
    for p in problems:
        print(f"FAIL {p}")
    if not problems:
        shutil.rmtree(work, ignore_errors=True)
    print(f"regenerate: {'ok' if not problems else 'FAILED'}: {len(b)} files, {sum(map(len, b.values()))} bytes "
          f"{'identical' if not problems else 'compared'} (quant.json {len(b.get('quant.json', b''))} bytes; the "
          f"first package ready in {t1 - t0:.0f} s, the second generated in {time.time() - t1:.0f} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
