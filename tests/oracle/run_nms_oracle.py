#!/usr/bin/env python3
"""Oracle test of the NMS head: carve --head nms against what a user sees first in Ultralytics.

    run_nms_oracle.py --task detect --work build/work [--image shapes-4.png] [--weights PT | --random --scale n] [--keep]

The reference is `YOLO(pt).predict(img)` with every argument at Ultralytics' default (conf 0.25, iou 0.7, max_det
300, the checkpoint's imgsz, the rect letterbox with minimal padding, nms=None: the one-to-many head and
non-maximum suppression): tools/oracle.py reference_predict_default. carve is generated with --head nms at the
input shape that letterbox picked for the image (e.g. 224x320 for the 512x320 shapes-4.png at 320, 640x480 for
the 810x1080 bus.jpg at 640), so that both see the same pixels, built, and its demo run on the image (--json,
--conf 0.25). The detections must agree (tools/oracle.py compare_detections): same classes, boxes within 1 px,
scores within 1e-3; segment: masks IoU >= 0.99 (against the retina_masks rendering of the same detections,
which is what carve's _mask gives; a few prototype cells of difference allowed, see compare_detections);
pose: keypoints within 1 px, visibility within 1e-3; obb: angle within 1e-3 rad.

So that the comparison means something, the reference must keep at least 3 detections with scores that
spread, and its NMS must have removed candidates (more anchors above conf than detections kept).

Checkpoints: detect uses the trained demo model (assets/yolo26n-shapes.pt, manifests/yolo26n-shapes.yaml) on
a held-out sample image; segment, pose and obb a random-weight yolo26<scale> with calibrated BN statistics and
a one-to-many head calibrated to keep tens of candidates on bus.jpg (tools/oracle.py make_checkpoint), on the
bundled bus.jpg (decoded by OpenCV and stored as PNG: carve's JPEG decoder rounds differently); `--random`
gives detect such a checkpoint too (and bus.jpg). `--weights` and `--image` pick others (any image path, or an
Ultralytics asset name).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import cv2  # noqa: E402
import oracle  # noqa: E402

# task -> (manifest and Ultralytics config suffix, default image)
TASKS = {"detect": ("", "shapes-4.png"), "segment": ("-seg", "bus.jpg"), "pose": ("-pose", "bus.jpg"),
         "obb": ("-obb", "bus.jpg")}
DEMO_WEIGHTS = ROOT / "assets" / "yolo26n-shapes.pt"
DEMO_MANIFEST = ROOT / "manifests" / "yolo26n-shapes.yaml"
MIN_DETECTIONS = 3
MIN_SCORE_RANGE = 0.05


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    p = subprocess.run([str(c) for c in cmd], text=True, capture_output=True, **kw)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit(f"nms oracle: command failed with exit code {p.returncode}")
    return p


def lossless(image: str, work: Path) -> Path:
    """The image as a PNG: a path as given (PNG) or decoded by OpenCV as Ultralytics reads it (JPEG)."""
    p = Path(image) if Path(image).exists() else (ROOT / "assets" / image if (ROOT / "assets" / image).exists()
                                                  else oracle.sample_image(image))
    if p.suffix.lower() == ".png":
        return p
    out = work / (p.stem + ".png")
    cv2.imwrite(str(out), cv2.imread(str(p)))
    return out


def spread_problems(ref: dict) -> list:
    """Why the reference would prove little: too few detections, flat scores, or an NMS that removed nothing."""
    dets = ref["detections"]
    scores = [d["score"] for d in dets]
    out = []
    if len(dets) < MIN_DETECTIONS:
        out.append(f"the reference keeps {len(dets)} detections (< {MIN_DETECTIONS})")
    elif max(scores) - min(scores) < MIN_SCORE_RANGE:
        out.append(f"the reference's scores span {max(scores) - min(scores):.3g} (< {MIN_SCORE_RANGE})")
    if ref["candidates"] <= len(dets):
        out.append(f"the NMS removed nothing ({ref['candidates']} candidates, {len(dets)} kept)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="detect", choices=tuple(TASKS))
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--scale", default="n", choices="nsmlx", help="of the random-weight checkpoints")
    ap.add_argument("--random", action="store_true", help="detect: a random-weight checkpoint, not the demo model")
    ap.add_argument("--weights", type=Path, help="a checkpoint instead of the default one (manifest picked by carve)")
    ap.add_argument("--image", help="an image path or an Ultralytics asset name (default: the task's)")
    ap.add_argument("--backend", default="xnnpack")
    ap.add_argument("--keep", action="store_true", help="keep the package's build after a pass")
    args = ap.parse_args()
    t0 = time.time()
    suffix, default_image = TASKS[args.task]
    demo = args.task == "detect" and not args.random and not args.weights
    image_name = args.image or (default_image if demo or args.task != "detect" else "bus.jpg")

    # 1. checkpoint and manifest
    if args.weights:
        pt, manifest = args.weights.resolve(), None
    elif demo:
        pt, manifest = DEMO_WEIGHTS, DEMO_MANIFEST
    else:
        model = f"yolo26{args.scale}{suffix}"
        pt, manifest = args.work.resolve() / "nms-checkpoints" / f"{model}.pt", ROOT / "manifests" / f"{model}.yaml"
        if not pt.exists():
            tmp = pt.with_suffix(".tmp.pt")
            oracle.make_checkpoint(f"{model}.yaml", tmp, seed=0)
            tmp.rename(pt)
    work = (args.work / f"nms-{args.task}-{Path(pt).stem}-{Path(image_name).stem}-{args.backend}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    img = lossless(image_name, work)

    # 2. Ultralytics with its defaults: the detections and the letterbox shape it picked
    ref_json = work / "ref.json"
    ref = oracle.reference_predict_default(pt, img, out_json=ref_json)
    h, w = ref["imgsz"]
    print(f"-- Ultralytics predict() defaults on {img.name}: letterbox {h}x{w}, conf {ref['conf']}, iou {ref['iou']}, "
          f"{ref['candidates']} candidates -> {len(ref['detections'])} detections")

    # 3. carve --head nms at that shape
    pkg = work / "pkg"
    gen = [ROOT / "carve", "generate"] + ([manifest] if manifest else []) + [
        "--checkpoint", pt, "--backend", args.backend, "--head", "nms", "--imgsz", h, w, "--out", pkg, "--force"]
    print(run(gen).stdout.strip())
    run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", pkg / "build", "-j", "2"])
    exe = next((pkg / "build").glob("*_demo"))
    p = run([exe, img, "--json", "--conf", ref["conf"], "--threads", "2"])
    our_json = work / "ours.json"
    our_json.write_text(p.stdout)
    ours = json.loads(p.stdout)
    print(f"-- carve --head nms: {len(ours.get('detections') or [])} detections")

    # 4. compare, and make sure the comparison means something
    ok = oracle.compare_detections(our_json, ref_json)
    problems = spread_problems(ref)
    for msg in problems:
        print(f"  reference too weak: {msg}")
    ok &= not problems
    print(f"nms oracle {args.task} ({Path(pt).name} on {img.name}, {h}x{w}, {args.backend}): "
          f"{'PASS' if ok else 'FAIL'}; {time.time() - t0:.0f} s")
    if ok and not args.keep:
        shutil.rmtree(pkg / "build", ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
