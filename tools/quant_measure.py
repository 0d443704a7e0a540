#!/usr/bin/env python3
"""Measure carve's int8 choices on a model: range estimators x sensitivity thresholds, by the end-to-end agreement
of the simulated int8 graph with the float graph on held-out images (docs/quantization.md#measured-on-the-demo-model).

    python3 tools/train_demo.py render --out /tmp/calib --seed 0 --count 200
    python3 tools/train_demo.py render --out /tmp/held --seed 4000 --count 100
    python3 tools/quant_measure.py --calib /tmp/calib/images --held /tmp/held/images

Prints, per estimator and threshold: the conv / add ops kept in float and their share of the FLOPs, the float
detections (score > conf) matched by an int8 detection of the same class at IoU > 0.9 (evaluate.match), the int8
detections matching none, and the score differences.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "generator"))

from carve.compiler import float_graph  # noqa: E402
from carve.ir import op_flops  # noqa: E402
from carve.quant import calibrate, evaluate, images, rewrite, sensitivity  # noqa: E402


def limits_of(g, spec: str) -> dict:
    """The sensitivity thresholds of a variant: "default" (the pass's own), or "BOX:SCORE" in dB ("none": that
    criterion off), e.g. "55:30" (shared with tools/quant_map.py)."""
    limits = sensitivity.thresholds(g)
    if spec != "default":
        for c, v in zip(("box", "score"), spec.split(":")):
            limits[c] = -1e9 if v == "none" else float(v)
    return limits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(ROOT / "manifests" / "yolo26n-shapes.yaml"))
    ap.add_argument("--weights", default=str(ROOT / "assets" / "yolo26n-shapes.pt"))
    ap.add_argument("--imgsz", type=int)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--held", required=True, help="held-out images (their first --count, sorted)")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--estimators", default=",".join(calibrate.ESTIMATORS))
    ap.add_argument("--thresholds", default="none,default",
                    help="comma-separated: none (all int8), default (sensitivity.thresholds), or box:score in dB "
                         "(a detection head's two criteria; 'none' for one of them: not checked)")
    ap.add_argument("--errors", action="store_true", help="print every op's errors alone in int8")
    a = ap.parse_args(argv)

    g = float_graph(a.manifest, a.weights, a.imgsz)
    hw = tuple(g.meta["input_hw"])
    flops = {op.name: op_flops(g, op) for op in g.ops}
    total = sum(flops.values())
    t0 = time.perf_counter()
    calib = images.load_images(a.calib, g.meta["task"], hw)
    t1 = time.perf_counter()
    stats = calibrate.calibrate(g, calib, lambda s: print(s, file=sys.stderr), every=50)
    t2 = time.perf_counter()
    print(f"calibration: {len(calib)} images at {hw[0]}x{hw[1]} read in {t1 - t0:.1f} s, calibrated in "
          f"{t2 - t1:.1f} s")
    held = images.load_images(a.held, g.meta["task"], hw)
    inputs = [held.input(i) for i in range(min(a.count, len(held)))]
    print(f"held-out: {len(inputs)} images, conf {a.conf}")
    for est in a.estimators.split(","):
        ranges = calibrate.ranges(g, stats, est)
        q0 = rewrite.quantize(g, ranges)
        t3 = time.perf_counter()
        errors = sensitivity.measure(g, q0.graph, calib)
        print(f"[{est}] sensitivity pass: {time.perf_counter() - t3:.1f} s")
        if a.errors:
            for name, e in sorted(errors.items(), key=lambda kv: kv[1].output_db):
                crit = "  ".join(f"{c} {db:6.1f}" for c, db in e.criteria)
                print(f"  {crit}  dB at the outputs  {e.local_db:7.2f} dB local  {name}")
        for th in a.thresholds.split(","):
            if th == "none":
                keep = ()
            else:
                sel = sensitivity.select(g, ranges, calib, errors, limits_of(g, th))
                keep = sel.keep
                print(f"[{est}] {th}: measured " + "; ".join(
                    f"round {k} (+{len(r.added)}): " + ", ".join(f"{c} {db:.1f} dB" for c, db in r.criteria)
                    for k, r in enumerate(sel.rounds)))
            q = rewrite.quantize(g, ranges, keep) if keep else q0
            ag = evaluate.compare(g, q.graph, inputs, a.conf)
            share = sum(flops[k] for k in keep) / total
            print(f"[{est}] threshold {th:>4}: {len(keep):2d} float ({share:5.1%} of FLOPs): {ag.line()}"
                  + (f"  [{', '.join(keep)}]" if 0 < len(keep) <= 8 else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
