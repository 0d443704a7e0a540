#!/usr/bin/env python3
"""--weights-dtype f16: half-precision weight storage, widened to float32 at create.

    f16.py --work build/work [--imgsz 320]

yolo26n (random Ultralytics weights, realistic BN statistics) generated twice, f32 and f16 (linked blob),
both run on the letterboxed bus.jpg tensor with every layer dumped (demo --input --dump).

A. Against Ultralytics' fp16-weight model: the fused PyTorch model with every weight and bias rounded to
   float16 (what the f16 package stores: carve rounds the BN-folded weights, which are bit-identical to
   Ultralytics' fused ones), evaluated in float64. Bound per layer: the oracle's, max(1e-4, 3 x PyTorch's own
   fp32 error on that model). This checks the f16 path exactly: storage, widening, layouts.
B. Against the f32 package: what f16 storage costs. Each layer of the f16 package may be at most 1.5 x as far
   from the f32 package as Ultralytics' fp16-weight model is from the f32 package (at least 1e-4): the
   same rounding of the same weights moves both by the same amount, up to float32 round-off. The errors are
   printed (docs/firmware.md quotes them).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import log, run  # noqa: E402

import oracle  # noqa: E402  (tools/, on sys.path through fwlib)


def fp16_weights(load_fused):
    """oracle.load_fused, with every floating parameter and buffer of the fused model rounded to float16."""
    def load(weights, dtype="float32"):
        torch = oracle._torch()
        model = load_fused(weights, "float32")
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                if t.dtype == torch.float32:
                    t.copy_(t.half().float())
        return model.double() if dtype == "float64" else model
    return load


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=320)
    args = ap.parse_args()
    t = fwlib.Timer()
    work = fwlib.fresh(args.work.resolve() / "firmware-f16")
    pt = fwlib.checkpoint(args.work)
    sz = ("--imgsz", str(args.imgsz))
    dumps = {}
    inp = work / "input.npy"
    oracle.make_input(oracle.sample_image("bus.jpg"), args.imgsz, inp)
    for dtype in ("f32", "f16"):
        pkg = fwlib.generate("yolo26n.yaml", pt, work / dtype, *sz, "--weights-dtype", dtype)
        fwlib.cmake_build(pkg, pkg / "build")
        dumps[dtype] = work / f"dump-{dtype}"
        run([pkg / "build" / "yolo26n_demo", "--input", inp, "--dump", dumps[dtype]])
    ref64, ref32 = work / "ultra16-64", work / "ultra16-32"
    plain = oracle.load_fused
    oracle.load_fused = fp16_weights(plain)
    try:
        oracle.reference_layers(pt, inp, ref64, dtype="float64")
        oracle.reference_layers(pt, inp, ref32)
    finally:
        oracle.load_fused = plain

    log("A. f16 package vs Ultralytics' fp16-weight model (float64), bound max(1e-4, 3 x PyTorch fp32):")
    ok_a = oracle.compare_layers(dumps["f16"], ref64, tol=1e-4, baseline=ref32, factor=3.0)
    worst_a = max(oracle.LAST_STATS.values(), key=lambda v: v[0])[0]
    log("B. f16 package vs f32 package, bound max(1e-4, 1.5 x Ultralytics fp16-weight model vs f32 package):")
    ok_b = oracle.compare_layers(dumps["f16"], dumps["f32"], tol=1e-4, baseline=ref32, factor=1.5)
    stats = dict(oracle.LAST_STATS)
    worst = max(stats, key=lambda k: stats[k][0])
    log(f"f16: {'PASS' if ok_a and ok_b else 'FAIL'}; vs Ultralytics fp16-weight model: max rel error {worst_a:.2e}; "
        f"vs the f32 package: max rel error {stats[worst][0]:.2e} ({worst}; Ultralytics' fp16-weight model: "
        f"{stats[worst][1]:.2e}); output0 {stats['output0.npy'][0]:.2e} ({t})")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok_a and ok_b else 1


if __name__ == "__main__":
    sys.exit(main())
