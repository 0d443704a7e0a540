#!/usr/bin/env python3
"""The accuracy gates of the cuda backend's reduced precisions (issue 20: TF32, the fp32 packages' default, and
--precision fp16, each within 0.3 mAP50-95 points of strict float32) without a GPU: COCO mAP of the cuda packages,
EMULATED (built on the host with tests/cuda/cuda_emu.h: the same kernels, run on the CPU; its TF32 GEMM inputs,
__half and cublasGemmEx round as a GPU does, the summation order of the GEMMs differs), on the first N images of
`make eval`'s held-out set (bench/eval.py: the demo model at 320, 500 images of seed 3000, conf floor 0.001,
COCOeval bbox).

    python3 bench/cuda_f16_eval.py [--images 100] [--out build/eval]

Prints a table (and writes <out>/cuda_f16_eval.json): mAP50-95 and mAP50 of carve cuda fp32 run with strict float32
convolutions (the demo's --strict-fp32, options.tf32 = 0), the same package with TF32 (its default), the fp16
package, and Ultralytics' e2e predictor on the same images; then TF32 - strict and fp16 - strict in points. Exits 1
when either is beyond 0.3 points. This is the emulated measurement of the packages (about a second an image per
run on one core), not a GPU run.
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


def run(ev, exe: Path, todo: list, name: str, extra: tuple = ()) -> list:
    dets, t0 = [], time.time()
    with tempfile.TemporaryDirectory(prefix="carve-f16-eval-") as tmp:
        for i, (image_id, path) in enumerate(todo):
            res = Path(tmp) / f"{image_id}.json"
            subprocess.run([str(exe), str(path), "--coco", str(res), "--image-id", str(image_id), "--conf",
                            str(ev.CONF), *extra], check=True, capture_output=True, text=True)
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
    fp32 = build(ev, args.out, "fp32")
    strict, tf32, fp16 = ("carve cuda fp32, --strict-fp32 (emulated)", "carve cuda fp32, TF32: the default (emulated)",
                          "carve cuda fp16 (emulated)")
    rows[strict] = ev.score(sub, run(ev, fp32, todo, "fp32 strict", ("--strict-fp32",)))
    rows[tf32] = ev.score(sub, run(ev, fp32, todo, "fp32 TF32"))
    rows[fp16] = ev.score(sub, run(ev, build(ev, args.out, "fp16"), todo, "fp16"))
    dets, _ = ev.run_ultralytics(ctx, "e2e")
    rows["Ultralytics e2e (PyTorch fp32)"] = ev.score(sub, dets)
    print(f"\n{len(todo)} images of the held-out set (seed {ev.EVAL_SEED}), {len(sub['annotations'])} objects, "
          f"imgsz {ctx.imgsz}, conf >= {ev.CONF}\n")
    print("| system | mAP50-95 | mAP50 | detections |\n|---|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {100 * r['map50_95']:.2f} | {100 * r['map50']:.2f} | {r['detections']} |")
    deltas = {name: 100 * (rows[row]["map50_95"] - rows[strict]["map50_95"])
              for name, row in (("tf32", tf32), ("fp16", fp16))}
    print()
    for name, d in deltas.items():
        print(f"{name} - strict fp32: {d:+.2f} mAP50-95 points (gate: within 0.3): {'met' if abs(d) <= 0.3 else 'NOT met'}")
    (args.out / "cuda_f16_eval.json").write_text(json.dumps(dict(images=len(todo), rows=rows, delta_points=deltas),
                                                            indent=1) + "\n")
    return 0 if all(abs(d) <= 0.3 for d in deltas.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
