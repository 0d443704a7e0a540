#!/usr/bin/env python3
"""Oracle test of one YOLO26 variant: generated C against Ultralytics / PyTorch.

    run_oracle.py --scale n --work build/work [--task detect] [--imgsz 640 | --imgsz H W] [--backend xnnpack]

Through ctest (CMakeLists.txt): `make test` runs oracle_yolo26n (detect) and
oracle_yolo26<scale>_<task> for the other tasks the generator supports (CARVE_ORACLE_DEFAULT_TASKS; the
cache option -DCARVE_ORACLE_TASKS="detect;pose" picks others): n of every task and l of segment (at --imgsz
320) to fit the CI budget; -DCARVE_ORACLE_SCALES picks the scales. `make test-full`
(-DCARVE_ORACLE_FULL=ON, every task) runs all 25 variants at their manifests' sizes (640, obb 1024,
classify 224). One variant by hand:
    python3 tests/oracle/run_oracle.py --task segment --scale n --work /tmp/o [--keep]
WORK keeps the checkpoints, the package and the JSONs; the layer dumps and the package build are deleted
after a pass unless --keep (a failure keeps everything).

1. Builds a checkpoint with Ultralytics from its own yaml (yolo26{S}{,-seg,-pose,-obb,-cls}.yaml, fixed
   seed, realistic BN statistics), saved like a released .pt (cached in WORK).
2. ./carve generate manifests/yolo26{S}{,-seg,-pose,-obb,-cls}.yaml -> CMake build of the package.
3. Layer by layer: the demo's --dump of every layer on the sample image's tensor (letterboxed; classify:
   resized and centre-cropped) vs. the fused PyTorch model in fp64 on the same tensor (max abs error / max
   abs value <= 1e-4, or <= 3x PyTorch's own fp32 error where that is larger): every layer_XX.npy, the
   head's rows (1,300,6|38|57|7) matched row by row, or classify's (1,nc) probabilities, output0.npy, and
   segment's prototypes output1.npy (1,32,H/4,W/4).
4. End to end on real images (bundled with ultralytics), pre- and post-processing included: the demo's
   --json vs. Ultralytics' predictor (same classes, boxes within 1 px, scores within 1e-3; segment: mask IoU
   >= 0.99 or a few prototype cells' worth of pixels; pose: keypoints within 1 px, visibility within 1e-3;
   obb: angle within 1e-3 rad; classify: same top-5 with probabilities within 1e-4), each tolerance widened
   to 4x PyTorch's own fp32 error where the model amplifies round-off beyond it (oracle.calibrated_tolerances).
   See tools/oracle.py compare_detections.
Prints a one-line summary (max error, arena bytes) for the record.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import cv2  # noqa: E402
import oracle  # noqa: E402

IMAGES = ("bus.jpg", "zidane.jpg")
# task -> (file-name suffix of the manifest and the Ultralytics config, default --imgsz: the manifest's)
TASKS = {"detect": ("", 640), "segment": ("-seg", 640), "pose": ("-pose", 640), "obb": ("-obb", 1024),
         "classify": ("-cls", 224)}


STEPS: dict = {}  # step -> seconds, printed before the summary (CI budget)


class step:
    """`with step("name"):` adds the block's wall time to STEPS[name]."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.time()

    def __exit__(self, *exc):
        STEPS[self.name] = STEPS.get(self.name, 0.0) + time.time() - self.t


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
    ap.add_argument("--task", default="detect", choices=tuple(TASKS))
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, nargs="+", metavar="SIZE",
                    help="input size: one value (square) or HEIGHT WIDTH (default: the manifest's: 640, obb 1024, "
                         "classify 224)")
    ap.add_argument("--backend", default="xnnpack")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--weights-format", default="blob", choices=("blob", "c-array", "file"))
    ap.add_argument("--keep", action="store_true", help="keep the layer dumps and the package's build after a pass")
    args = ap.parse_args()

    suffix, default_imgsz = TASKS[args.task]
    imgsz = args.imgsz or [default_imgsz]
    if len(imgsz) > 2:
        ap.error("--imgsz takes one size or HEIGHT WIDTH")
    hw = (imgsz[0], imgsz[-1])
    args.imgsz = hw[0] if hw[0] == hw[1] else f"{hw[0]}x{hw[1]}"  # for names and messages
    model = f"yolo26{args.scale}{suffix}"
    prefix = model.replace("-", "_")  # the package's C prefix
    work = (args.work / f"{model}-{args.backend}-{args.imgsz}-{args.weights_format}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    # 1. checkpoint (cached: deterministic for the seed)
    pt = oracle.checkpoint_dir(args.work.resolve()) / f"{model}.pt"
    if not pt.exists():
        pt.parent.mkdir(parents=True, exist_ok=True)
        tmp = pt.with_suffix(".tmp.pt")
        with step("checkpoint"):
            oracle.make_checkpoint(f"{model}.yaml", tmp, seed=0)
        tmp.rename(pt)

    # 2. generate + build
    pkg = work / "pkg"
    with step("generate"):
        gen = run([ROOT / "carve", "generate", ROOT / "manifests" / f"{model}.yaml", "--backend", args.backend,
                   "--weights", pt, "--out", pkg, "--imgsz", *sorted(set(hw), key=hw.index), "--weights-format",
                   args.weights_format,
                   "--force"])
    print(gen.stdout.strip())
    with step("build"):
        run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"])
        run(["cmake", "--build", pkg / "build", "-j", "2"])
    demo = pkg / "build" / f"{prefix}_demo"
    header = (pkg / f"{prefix}.h").read_text()
    arena = int(re.search(r"_ARENA_BYTES (\d+)u", header).group(1))

    ok = True
    # 3. layer by layer on a real image's tensor
    image = oracle.sample_image(IMAGES[0])
    inp = work / "input.npy"
    oracle.make_input(image, hw, inp, task=args.task)
    # Against the exact (fp64) model; the bound is 1e-4, or 3x PyTorch's own fp32 error where the
    # model amplifies round-off so much that PyTorch itself misses 1e-4/3 (deep random l/x models do).
    ref32, ref64, our_dir = work / "ref", work / "ref64", work / "ours"
    with step("reference"):
        oracle.reference_layers(pt, inp, ref32)
        oracle.reference_layers(pt, inp, ref64, dtype="float64")
    with step("demo"):
        run([demo, "--input", inp, "--dump", our_dir, "--threads", "2"])
    with step("compare"):
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
        with step("reference"):
            oracle.reference_predict(pt, img, imgsz=hw, conf=0.25, out_json=ref_json)
        with step("demo"):
            p = run([demo, img, "--json", "--threads", "2"])
        our_json.write_text(p.stdout)
        ours, ref = json.loads(p.stdout), json.loads(ref_json.read_text())
        latency = ours["timing_ms"]["median"]
        if args.task == "classify":
            top = lambda r: [d["class_id"] for d in r.get("top5") or []]  # noqa: E731
            print(f"-- {name}: top5 {top(ours)} (ours), {top(ref)} (Ultralytics)")
        else:
            print(f"-- {name}: {len(ours.get('detections') or [])} detections (ours), "
                  f"{len(ref['detections'])} (Ultralytics)")
        # The tolerances of the docstring, or 4x PyTorch's own fp32 error on this model where that is larger
        # (deep random l/x models: obb angles, scores); see oracle.calibrated_tolerances.
        tols = oracle.calibrated_tolerances(ref32, ref64, ref_json)
        defaults = dict(box_px=1.0, score_tol=1e-3, kpt_px=1.0, kpt_vis_tol=1e-3, angle_tol=1e-3, prob_tol=1e-4)
        wider = {k: v for k, v in tols.items() if v > defaults[k]}
        if wider:
            print("   tolerances widened to 4x PyTorch's fp32 error: "
                  + ", ".join(f"{k} {v:.3g}" for k, v in wider.items()))
        with step("compare"):
            ok &= oracle.compare_detections(our_json, ref_json, **tols)

    print("steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in STEPS.items()))
    print(f"oracle {model} {args.backend} imgsz {args.imgsz} weights {args.weights_format}: {'PASS' if ok else 'FAIL'}; "
          f"max rel error {stats[worst][0]:.2e} ({worst}; PyTorch fp32 {stats[worst][1]:.2e}), "
          f"worst ratio to PyTorch {ratio:.2f}; arena {arena} bytes; latency {latency:.1f} ms (2 threads); "
          f"{time.time() - t0:.0f} s")
    if ok and not args.keep:
        # A pass keeps the JSONs and the package sources; the layer dumps (the fp64 ones alone are 1.2 GB for
        # yolo26x-obb at 1024) and the build go, so that the whole suite's work folder fits a CI disk.
        for d in (ref32, ref64, our_dir, pkg / "build"):
            shutil.rmtree(d, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
