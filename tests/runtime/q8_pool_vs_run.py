#!/usr/bin/env python3
"""carve_q8_run_pool (runtime/carve_q8.c) and its instruction-set variants (runtime/carve_q8_pool.h) against
carve_q8_run, byte for byte, on 1, 2, 3 and 7 threads.

Usage: q8_pool_vs_run.py [--exec "PREFIX ..."] [--expect NAME,...] [--expect-selected NAME] PATH/TO/q8_tool
(the options as q8_vs_arith.py's: a cross-compiled tool through qemu-aarch64, the variants it must run)

The cases are q8_vs_arith.py's (every kind, realistic parameters, strided and misaligned views, the trained demo
layers, the refusals) plus larger ops that the pool splits into many tiles: yolo26n-like depthwise 3x3 layers
(stride 1 and 2, channel counts off the 32-channel block, strided views), a 5x5 depthwise, grouped and dense
convolutions, adds, the SPPF max pool, copies, an upsample, the image's quantize and a dequantize. For every
variant this CPU runs (`q8_tool --variants`: portable, avx512, avx512vbmi, avx2, neon), q8_tool runs each case with
carve_q8_run, then with the variant on no pool and on pools of 1, 2, 3 and 7 threads, each on a fresh copy of
the arena: every pool run must return carve_q8_run's status and leave the whole arena equal to carve_q8_run's,
byte for byte (so nothing outside the output view is written either), and carve_q8_run's result must be
arith.py's (q8_vs_arith.check). The number of tiles of each case (the runtime's
CARVE_Q8_TASK_WORK rule, read from carve_q8.c) is printed; every kind must have a case of at least 4 tiles, so
the split is exercised.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import q8_vs_arith as qa  # noqa: E402
from carve.quant import arith  # noqa: E402  (q8_vs_arith put generator/ on the path)

THREADS = (0, 1, 2, 3, 7)  # carve_q8_run_pool's runs: 0 = a NULL pool
MIN_TILES = 4


def task_work() -> int:
    text = (qa.REPO / "runtime" / "carve_q8.c").read_text()
    return int(re.search(r"^#define CARVE_Q8_TASK_WORK (\d+)$", text, re.M).group(1))


def out_size(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def tiles(case: qa.Case, work: int) -> int:
    """How many tiles carve_q8_run_pool makes of this case (carve_q8.c's items / tile_items)."""
    f, kind = case.fields, case.kind
    if kind == "CONV":
        n = out_size(f["h"], f["kh"], f["stride"], f["pad"])
        per = out_size(f["w"], f["kw"], f["stride"], f["pad"]) * f["cout"] * f["kh"] * f["kw"] * (f["cin"] // f["groups"])
    elif kind == "MAXPOOL":
        n = out_size(f["h"], f["kh"], f["stride"], f["pad"])
        per = out_size(f["w"], f["kh"], f["stride"], f["pad"]) * f["cin"] * f["kh"] ** 2
    elif kind == "UPSAMPLE2X":
        n, per = f["h"], 4 * f["w"] * f["cin"]
    else:
        n, per = f["h"] * f["w"], f["cin"]
    tile = max(1, work // max(per, 1))
    return -(-n // tile)


def big_cases(rng) -> list:
    cases = []
    # (name, h, w, cin, cout, kh, stride, pad, groups, strided)
    for name, h, w, cin, cout, k, s, p, g, strided in [
            ("depthwise 3x3 s1 40x40x64 (yolo26n head)", 40, 40, 64, 64, 3, 1, 1, 64, False),
            ("depthwise 3x3 s1 23x37x80 strided", 23, 37, 80, 80, 3, 1, 1, 80, True),
            ("depthwise 3x3 s2 41x39x48 strided", 41, 39, 48, 48, 3, 2, 1, 48, True),
            ("depthwise 3x3 s1 20x20x70 (channel tail)", 20, 20, 70, 70, 3, 1, 1, 70, False),
            ("depthwise 5x5 s1 21x18x40", 21, 18, 40, 40, 5, 1, 2, 40, False),
            ("grouped 3x3 g4 20x22x32", 20, 22, 32, 32, 3, 1, 1, 4, False),
            ("dense 1x1 30x30x32 -> 48 strided", 30, 30, 32, 48, 1, 1, 0, 1, True),
            ("dense 3x3 s2 33x31x16 -> 24", 33, 31, 16, 24, 3, 2, 1, 1, False)]:
        for act in (True, False):
            extra = dict(in_extra=int(rng.integers(1, 9)), out_extra=int(rng.integers(1, 9))) if strided else {}
            cases.append(qa.conv_case(rng, f"conv {name}{' silu' if act else ''}", h, w, cin, cout, k, k, s, p, g,
                                      act, **extra))
    cases.append(qa.add_case(rng, "80x80x32", 80, 80, 32))
    cases.append(qa.add_case(rng, "50x50x24 strided", 50, 50, 24, strides=(8, 3, 5)))
    cases.append(qa.pool_case(rng, "5/1/2 20x20x64 (SPPF)", 20, 20, 64, 5, 1, 2, False))
    cases.append(qa.pool_case(rng, "3/2/1 41x40x24 strided", 41, 40, 24, 3, 2, 1, False, (5, 3)))
    cases.append(qa.copy_case(rng, "COPY", 128, 128, 8, (24, 16)))
    cases.append(qa.copy_case(rng, "UPSAMPLE2X", 20, 20, 64, (0, 64)))
    image = rng.uniform(0.0, 1.0, (224 * 224, 3)).astype(np.float32)
    scale, zp = arith.range_qparams(0.0, 1.0)
    cases.append(qa.quantize_case(rng, "a 224x224 image", image, scale, zp))
    cases.append(dequantize_case(rng, 40 * 40, 64))
    return cases


def dequantize_case(rng, pixels: int, c: int) -> qa.Case:
    q = rng.integers(-128, 128, (pixels, c)).astype(np.int8)
    scale, zp = qa.loguniform(rng, 1e-3, 1.0), int(rng.integers(-128, 128))
    arena = qa.Arena(rng)
    x_off = arena.view(q, c + 3, 1, 1)
    y_off = arena.out(pixels, c, c, 4, 4)
    return qa.Case(f"dequantize {pixels}x{c}", "DEQUANTIZE", arena, b"", arith.dequantize(q, scale, zp),
                   (y_off, pixels, c, c, np.float32), False, h=pixels, w=1, cin=c, in_stride=c + 3, out_stride=c,
                   in_off=x_off, out_off=y_off, in_zero=zp, scale=scale)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tool")
    qa.add_variant_args(ap)
    args = ap.parse_args()
    prefix = shlex.split(args.exec)
    rng = np.random.default_rng(23)
    cases = qa.all_cases(rng) + big_cases(rng)
    work = task_work()
    failed, most = 0, {}
    variants, selected = qa.tool_variants(prefix, args.tool)
    print(f"  carve_q8_run_pool variants run: {', '.join(variants)} (a package on this CPU selects {selected})")
    failed += qa.check_variants(args, variants, selected)
    results = [[] for _ in cases]
    for v in variants:
        for i, r in enumerate(qa.run_tool(prefix, args.tool, cases, v, THREADS)):
            results[i].append((v, r))
    for case, runs in zip(cases, results):
        status, arena = runs[0][1][0]
        problems = qa.check(case, status, arena)
        for v, r in runs:
            for threads, (st, ar) in zip(THREADS, r[1:]):
                if st != status:
                    problems.append(f"{v} on {threads} threads: status {st}, carve_q8_run {status}")
                elif ar != arena:
                    diff = int(np.sum(np.frombuffer(ar, np.uint8) != np.frombuffer(arena, np.uint8)))
                    problems.append(f"{v} on {threads} threads: {diff} bytes differ from carve_q8_run")
        if case.status == qa.OK:
            most[case.kind] = max(most.get(case.kind, 0), tiles(case, work))
        if problems:
            failed += 1
            print(f"FAIL {case.name}: " + "; ".join(problems))
    print(f"  most tiles per kind (CARVE_Q8_TASK_WORK {work}): {dict(sorted(most.items()))}")
    for kind in qa.KIND:
        if most.get(kind, 0) < MIN_TILES:
            print(f"FAIL {kind}: no case the pool splits into {MIN_TILES} tiles or more")
            failed += 1
    if failed:
        print(f"q8_pool_vs_run: {failed} FAILED ({len(cases)} cases)")
        return 1
    print(f"q8_pool_vs_run: ok ({len(cases)} cases x threads {THREADS} x variants {', '.join(variants)}: "
          "carve_q8_run's bytes, and arith's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
