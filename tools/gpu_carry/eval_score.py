#!/usr/bin/env python3
"""Scores what tools/gpu_carry/eval_device.sh wrote (issue 20's accuracy gate on a GPU): COCO mAP50-95 and mAP50
of the demo model's cuda packages, strict float32, TF32 and fp16, on the carried held-out images (bench/eval.py's
score), and TF32 - strict and fp16 - strict in points. Exits 1 when either is beyond 0.3 points.

    eval_score.py CARRY_DIR RESULTS_DIR
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    carry, results = Path(sys.argv[1]), Path(sys.argv[2])
    spec = importlib.util.spec_from_file_location("carve_bench_eval", ROOT / "bench" / "eval.py")
    ev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ev)
    gt = json.loads((carry / "gt.json").read_text())
    rows = {}
    for name in ("strict", "tf32", "fp16"):
        path = results / f"eval-{name}.json"
        if not path.exists():
            print(f"eval_score: {path}: missing")
            return 1
        rows[name] = ev.score(gt, json.loads(path.read_text()))
    print(f"{len(gt['images'])} held-out images, {len(gt['annotations'])} objects\n")
    print("| carve cuda | mAP50-95 | mAP50 | detections |\n|---|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {100 * r['map50_95']:.2f} | {100 * r['map50']:.2f} | {r['detections']} |")
    ok = True
    for name in ("tf32", "fp16"):
        d = 100 * (rows[name]["map50_95"] - rows["strict"]["map50_95"])
        ok &= abs(d) <= 0.3
        print(f"{name} - strict fp32: {d:+.2f} mAP50-95 points (gate: within 0.3): {'met' if abs(d) <= 0.3 else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
