#!/usr/bin/env python3
"""The accuracy gate of --precision fp16 (issue 20) without a GPU: COCO mAP of the cuda packages, fp32 and fp16,
EMULATED (built on the host with tests/cuda/cuda_emu.h: the same kernels, run on the CPU; its __half and
cublasGemmEx round as a GPU does, the summation order of the GEMMs differs), on the first N images of `make eval`'s
held-out set (bench/eval.py: the demo model at 320, 500 images of seed 3000, conf floor 0.001, COCOeval bbox).

    python3 bench/cuda_f16_eval.py [--images 100] [--out build/eval]

Prints a table (and writes <out>/cuda_f16_eval.json): mAP50-95 and mAP50 of carve cuda fp32 and fp16 (both
emulated) and Ultralytics' e2e predictor on the same images, and fp16 - fp32 in points. The gate of the issue is
|fp16 - fp32| <= 0.3 mAP50-95 points on a GPU; this is the emulated measurement of the same packages (about a
second an image per package on one core).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMU_HEADER = ROOT / "tests" / "cuda" / "cuda_emu.h"


def _eval_module():
    spec = importlib.util.spec_from_file_location("carve_bench_eval", ROOT / "bench" / "eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(ev, out: Path, precision: str) -> Path:
    pkg = out / "pkg" / f"{precision}-cuda-emu"
    cmd = [str(ROOT / "carve"), "generate", str(ev.MANIFEST), "--backend", "cuda", "--weights", str(ev.PT),
           "--out", str(pkg), "--force"] + (["--precision", precision] if precision != "fp32" else [])
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    subprocess.run(["cmake", "-S", str(pkg), "-B", str(pkg / "build"), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DCARVE_CUDA_EMULATION_HEADER={EMU_HEADER}"], check=True, capture_output=True, text=True)
    subprocess.run(["cmake", "--build", str(pkg / "build"), "-j", "2"], check=True, capture_output=True, text=True)
    return pkg / "build" / (ev.MANIFEST.stem.replace("-", "_") + "_demo")


def run(ev, exe: Path, todo: list, name: str) -> list:
    dets, t0 = [], time.time()
    with tempfile.TemporaryDirectory(prefix="carve-f16-eval-") as tmp:
        for i, (image_id, path) in enumerate(todo):
            res = Path(tmp) / f"{image_id}.json"
            subprocess.run([str(exe), str(path), "--coco", str(res), "--image-id", str(image_id), "--conf",
                            str(ev.CONF)], check=True, capture_output=True, text=True)
            dets += json.loads(res.read_text())
            if (i + 1) % 25 == 0 or i + 1 == len(todo):
                print(f"  {name}: {i + 1}/{len(todo)} images ({time.time() - t0:.0f} s)", flush=True)
    return dets


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "eval")
    args = ap.parse_args()
    ev = _eval_module()
    gt, images, calib = ev.prepare_data(args.out)
    keep = sorted(im["id"] for im in gt["images"])[:args.images]
    sub = dict(gt, images=[im for im in gt["images"] if im["id"] in keep],
               annotations=[a for a in gt["annotations"] if a["image_id"] in keep])
    ctx = ev.Context(sub, images, calib, args.out, 1)
    todo = ctx.image_list()
    rows = {}
    for precision in ("fp32", "fp16"):
        exe = build(ev, args.out, precision)
        rows[f"carve cuda {precision} (emulated)"] = ev.score(sub, run(ev, exe, todo, precision))
    dets, _ = ev.run_ultralytics(ctx, "e2e")
    rows["Ultralytics e2e (PyTorch fp32)"] = ev.score(sub, dets)
    print(f"\n{len(todo)} images of the held-out set (seed {ev.EVAL_SEED}), {len(sub['annotations'])} objects, "
          f"imgsz {ctx.imgsz}, conf >= {ev.CONF}\n")
    print("| system | mAP50-95 | mAP50 | detections |\n|---|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {100 * r['map50_95']:.2f} | {100 * r['map50']:.2f} | {r['detections']} |")
    d = 100 * (rows["carve cuda fp16 (emulated)"]["map50_95"] - rows["carve cuda fp32 (emulated)"]["map50_95"])
    print(f"\nfp16 - fp32: {d:+.2f} mAP50-95 points (gate: within 0.3)")
    (args.out / "cuda_f16_eval.json").write_text(json.dumps(dict(images=len(todo), rows=rows, delta_points=d),
                                                            indent=1) + "\n")
    return 0 if abs(d) <= 0.3 else 1


if __name__ == "__main__":
    sys.exit(main())
