#!/usr/bin/env python3
"""Oracle test of one YOLO26 variant: generated C against Ultralytics / PyTorch.

    run_oracle.py --scale n --work build/work [--imgsz 640] [--backend xnnpack]

1. Builds a checkpoint with Ultralytics from its own yaml (fixed seed, realistic
   BN statistics), saved like a released .pt (cached in WORK).
2. ./carve generate -> CMake build of the package.
3. Layer by layer: the demo's --dump of every layer on the letterboxed sample
   image vs. the fused PyTorch model in fp64 on the same tensor (max abs error /
   max abs value <= 1e-4, or <= 3x PyTorch's own fp32 error where that is
   larger), and the final (1, 300, 6).
4. End to end on real images (bundled with ultralytics), letterbox included:
   the demo's --json vs. Ultralytics' predictor (same classes, boxes within
   1 px, scores within 1e-3).
Prints a one-line summary (max error, arena bytes) for the record.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import cv2  # noqa: E402
import oracle  # noqa: E402

IMAGES = ("bus.jpg", "zidane.jpg")


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    p = subprocess.run([str(c) for c in cmd], text=True, capture_output=True, **kw)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit(f"oracle: command failed with exit code {p.returncode}")
    return p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", required=True, choices="nsmlx")
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--backend", default="xnnpack")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--weights-format", default="blob", choices=("blob", "c-array"))
    args = ap.parse_args()

    model = f"yolo26{args.scale}"
    work = (args.work / f"{model}-{args.backend}-{args.imgsz}-{args.weights_format}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    # 1. checkpoint (cached: deterministic for the seed)
    pt = args.work.resolve() / "checkpoints" / f"{model}.pt"
    if not pt.exists():
        pt.parent.mkdir(parents=True, exist_ok=True)
        tmp = pt.with_suffix(".tmp.pt")
        oracle.make_checkpoint(f"{model}.yaml", tmp, seed=0)
        tmp.rename(pt)

    # 2. generate + build
    pkg = work / "pkg"
    gen = run([ROOT / "carve", "generate", ROOT / "manifests" / f"{model}.yaml", "--backend", args.backend,
               "--weights", pt, "--out", pkg, "--imgsz", args.imgsz, "--weights-format", args.weights_format, "--force"])
    print(gen.stdout.strip())
    run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", pkg / "build", "-j", "2"])
    demo = pkg / "build" / f"{model}_demo"
    header = (pkg / f"{model}.h").read_text()
    arena = int(re.search(r"_ARENA_BYTES (\d+)u", header).group(1))

    ok = True
    # 3. layer by layer on a real image's tensor
    image = oracle.sample_image(IMAGES[0])
    inp = work / "input.npy"
    oracle.make_input(image, args.imgsz, inp)
    # Against the exact (fp64) model; the bound is 1e-4, or 3x PyTorch's own fp32 error where the
    # model amplifies round-off so much that PyTorch itself misses 1e-4/3 (deep random l/x models do).
    ref32, ref64, our_dir = work / "ref", work / "ref64", work / "ours"
    oracle.reference_layers(pt, inp, ref32)
    oracle.reference_layers(pt, inp, ref64, dtype="float64")
    run([demo, "--input", inp, "--dump", our_dir, "--threads", "2"])
    ok &= oracle.compare_layers(our_dir, ref64, tol=args.tol, baseline=ref32, factor=3.0)
    stats = dict(oracle.LAST_STATS)
    worst = max(stats, key=lambda k: stats[k][0])
    ratio = max(r / b for r, b in stats.values() if b)

    # 4. end to end on real images, letterbox included
    latency = None
    for name in IMAGES:
        # The bundled JPEGs, decoded once by OpenCV (libjpeg-turbo, as Ultralytics reads them) and stored
        # losslessly: the demo's stb_image JPEG decoder rounds differently, which is not what this compares.
        img = work / (Path(name).stem + ".png")
        cv2.imwrite(str(img), cv2.imread(str(oracle.sample_image(name))))
        ref_json = work / f"ref-{Path(name).stem}.json"
        our_json = work / f"ours-{Path(name).stem}.json"
        oracle.reference_predict(pt, img, imgsz=args.imgsz, conf=0.25, out_json=ref_json)
        p = run([demo, img, "--json", "--threads", "2"])
        our_json.write_text(p.stdout)
        latency = json.loads(p.stdout)["timing_ms"]["median"]
        print(f"-- {name}: {len(json.loads(p.stdout)['detections'])} detections (ours), "
              f"{len(json.loads(ref_json.read_text())['detections'])} (Ultralytics)")
        ok &= oracle.compare_detections(our_json, ref_json, box_px=1.0, score_tol=1e-3)

    print(f"oracle {model} {args.backend} imgsz {args.imgsz} weights {args.weights_format}: {'PASS' if ok else 'FAIL'}; "
          f"max rel error {stats[worst][0]:.2e} ({worst}; PyTorch fp32 {stats[worst][1]:.2e}), "
          f"worst ratio to PyTorch {ratio:.2f}; arena {arena} bytes; latency {latency:.1f} ms (2 threads); "
          f"{time.time() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
