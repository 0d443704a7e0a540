#!/usr/bin/env python3
"""COCO mAP of int8 variants of the demo model: the sensitivity pass's thresholds against the held-out set of
`make eval` (docs/quantization.md#sensitivity-pass).

    make eval EVAL_ARGS="--systems carve-fp32-xnnpack"      # renders build/eval/{images,calib,gt.json} once
    OPENBLAS_NUM_THREADS=1 python3 tools/quant_map.py default 55:30 legacy

Calibrates once on build/eval/calib (the eval's 200 images), measures every op alone once (sensitivity.measure), then
per variant: the ops selected (sensitivity.select with those thresholds), an xnnpack package of that graph (CMake
Release, in build/quant-map/<variant>), its demo's `--coco` on the 500 held-out images, COCOeval (bench/eval.py's
score). A variant: `default` (sensitivity.thresholds), `box:score` in dB (`none`: that criterion not checked), or
`legacy` (the op-alone rule of quant.json version 1: an op whose raw head-tensor SQNR alone is below 35 dB; given
here as the ops `model.2.cv1,model.4.cv1` it chose on this calibration) or `ops:A,B,...` (those ops in float32).
About a minute per variant on 2 cores after the calibration and the pass (a few minutes).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "generator"), str(ROOT / "bench")]

from carve.compiler import compile_model, float_graph  # noqa: E402
from carve.ir import op_flops  # noqa: E402
from carve.quant import calibrate, images, rewrite, sensitivity  # noqa: E402
from quant_measure import limits_of  # noqa: E402  (tools/, this script's folder)
import eval as ev  # noqa: E402

MANIFEST, WEIGHTS = ROOT / "manifests" / "yolo26n-shapes.yaml", ROOT / "assets" / "yolo26n-shapes.pt"
EVAL = ROOT / "build" / "eval"
LEGACY = ("model.2.cv1", "model.4.cv1")


def package_map(graph, out: Path, gt: dict) -> dict:
    files = compile_model(str(MANIFEST), "xnnpack", str(WEIGHTS), graph_hook=lambda g: graph).files
    for rel, data in files.items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    subprocess.run(["cmake", "-S", out, "-B", out / "build", "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   capture_output=True)
    subprocess.run(["cmake", "--build", out / "build", "-j2"], check=True, capture_output=True)
    exe = out / "build" / "yolo26n_shapes_demo"
    dets = []
    with tempfile.TemporaryDirectory() as tmp:
        for im in gt["images"]:
            res = Path(tmp) / f"{im['id']}.json"
            subprocess.run([exe, EVAL / "images" / im["file_name"], "--coco", res, "--image-id", str(im["id"]),
                            "--conf", "0.001", "--threads", "1"], check=True, capture_output=True)
            dets += json.loads(res.read_text())
    return ev.score(gt, dets)


def main(argv=None) -> int:
    variants = (argv if argv is not None else sys.argv[1:]) or ["default"]
    if not (EVAL / "gt.json").is_file():
        raise SystemExit(f"quant_map: {EVAL}/gt.json missing: run `make eval` (any system) first")
    gt = json.loads((EVAL / "gt.json").read_text())
    g = float_graph(str(MANIFEST), str(WEIGHTS))
    calib = images.load_images(EVAL / "calib", g.meta["task"], tuple(g.meta["input_hw"]))
    ranges = calibrate.ranges(g, calibrate.calibrate(g, calib))
    errors = sensitivity.measure(g, rewrite.quantize(g, ranges).graph, calib)
    flops = {op.name: op_flops(g, op) for op in g.ops if op.kind in rewrite.QUANTIZABLE}
    for v in variants:
        if v == "legacy" or v.startswith("ops:"):
            keep = LEGACY if v == "legacy" else tuple(sorted(v[4:].split(",")))
            rounds = ""
        else:
            sel = sensitivity.select(g, ranges, calib, errors, limits_of(g, v))
            keep = sel.keep
            rounds = " | ".join(", ".join(f"{c} {db:.1f}" for c, db in r.criteria) for r in sel.rounds)
        s = package_map(rewrite.quantize(g, ranges, keep).graph, ROOT / "build" / "quant-map" / v.replace(":", "-")
                        .replace(",", "_")[:60], gt)
        share = sum(flops[k] for k in keep) / sum(flops.values())
        print(f"{v}: {len(keep)} float ({share:.1%} of the FLOPs) {list(keep)}; measured {rounds}; "
              f"mAP50-95 {100 * s['map50_95']:.2f} mAP50 {100 * s['map50']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
