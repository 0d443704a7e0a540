#!/usr/bin/env python3
"""The demo's ``--coco FILE`` (issue 18, item 7), one task per run, scored with pycocotools like any other runtime.

    coco.py --task detect|segment|pose|obb|classify --work build/work

The task's package (detect: the shipped, trained yolo26n-shapes at 320 on a held-out shapes image; the others: the
suite's random-weight yolo26n-<task> checkpoints, seg/pose/obb at 160 and cls at 96, on Ultralytics' bus.jpg) is
built, and its demo run with ``--json --coco`` on a copy of the image named 000000000042.png (so image_id 42 comes
from the name; ``--image-id 7`` overrides it; bus.jpg is stored as PNG, since stb_image's JPEG decoder differs a
little from cv2's and random weights magnify that). Then:

1. the file loads with pycocotools' ``COCO.loadRes``, one result per detection (class) of the demo's own ``--json``,
   in its order, each with image_id, category_id (Ultralytics' class map: COCO's ids for COCO's 80 classes, else
   the class index + 1, both from Ultralytics' own tables), the score, and:
   bbox [x, y, w, h] = the --json box (detect, segment, pose); segment: the RLE decodes to exactly the --json mask
   (IoU 1) and is the string pycocotools.mask.encode gives for it; pose: the keypoints (x, y, confidence) of
   --json; obb: rbox = the --json box and angle, poly = Ultralytics' ops.xywhr2xyxyxyxy of it, segmentation that
   polygon, bbox its bounding box; classify: the shown top classes, each with the whole image as its bbox;
2. COCOeval, with Ultralytics' own predictions on the same image (tools/oracle.py reference_predict: the same
   checkpoint, input size and threshold; classify: its top 5 as whole-image boxes) as the ground truth, scores
   carve's file at AP >= 0.99 (bbox; segment: segm; pose: keypoints): carve's results are Ultralytics' in COCO's
   terms;
3. the file is written whole (no temporary file left); --coco into a missing folder fails naming it (exit 1).
classify also checks the demo's --out (the top classes drawn as label lines at the top-left corner) and --conf (only
the classes of probability >= X are printed, in --json, in the COCO file and drawn).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "firmware"))
import fwlib  # noqa: E402
from fwlib import REPO, log, run  # noqa: E402

TASKS = {  # task: (manifest, checkpoint, imgsz)
    "detect": ("yolo26n-shapes.yaml", REPO / "assets" / "yolo26n-shapes.pt", 320),
    "segment": ("yolo26n-seg.yaml", "yolo26n-seg.yaml", 160),
    "pose": ("yolo26n-pose.yaml", "yolo26n-pose.yaml", 160),
    "obb": ("yolo26n-obb.yaml", "yolo26n-obb.yaml", 160),
    "classify": ("yolo26n-cls.yaml", "yolo26n-cls.yaml", 96),
}
IOU_TYPE = {"detect": "bbox", "segment": "segm", "pose": "keypoints", "obb": "bbox", "classify": "bbox"}


def check(ok: bool, what: str) -> bool:
    log(f"  {'ok  ' if ok else 'FAIL'} {what}")
    return ok


def close(a, b, tol: float) -> bool:
    return len(a) == len(b) and bool(np.all(np.abs(np.asarray(a, float) - np.asarray(b, float)) <= tol))


def class_map(names: list) -> list:
    """Ultralytics' DetectionValidator class_map: COCO's category ids for COCO's 80 classes, else index + 1."""
    from ultralytics.data.converter import coco80_to_coco91_class
    from ultralytics.utils import YAML
    from ultralytics.utils.checks import check_yaml
    coco = list(YAML.load(check_yaml("coco.yaml"))["names"].values())
    return coco80_to_coco91_class() if names == coco else list(range(1, len(names) + 1))


def load_res(gt, path: Path):
    with contextlib.redirect_stdout(io.StringIO()):
        return gt.loadRes(str(path))


def ground_truth(task: str, ref: dict, cmap: list, image_id: int, width: int, height: int):
    """A COCO ground truth of Ultralytics' own predictions (reference_predict's JSON)."""
    from pycocotools import mask as mask_util
    from pycocotools.coco import COCO
    from ultralytics.utils import ops
    import torch
    anns = []
    for i, d in enumerate(ref["detections"]):
        a = {"id": i + 1, "image_id": image_id, "category_id": cmap[d["class_id"]], "iscrowd": 0}
        if task == "obb":
            poly = ops.xywhr2xyxyxyxy(torch.tensor([[*d["box"], d["angle"]]], dtype=torch.float64)).numpy()[0]
            x0, y0 = poly.min(0)
            x1, y1 = poly.max(0)
        else:
            x0, y0, x1, y1 = d["box"]
        a["bbox"] = [x0, y0, x1 - x0, y1 - y0]
        a["area"] = (x1 - x0) * (y1 - y0)
        if task == "segment":
            m = np.asfortranarray(np.asarray(mask_from_counts(d["mask"]), np.uint8))
            a["segmentation"] = mask_util.encode(m)
            a["area"] = float(mask_util.area(a["segmentation"]))
        if task == "pose":
            a["keypoints"] = [v for x, y, _ in d["keypoints"] for v in (x, y, 2)]
            a["num_keypoints"] = len(d["keypoints"])
        anns.append(a)
    gt = COCO()
    gt.dataset = {"images": [{"id": image_id, "width": width, "height": height}], "annotations": anns,
                  "categories": [{"id": c, "name": str(c)} for c in sorted(set(cmap))]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
    return gt


def coco_ap(gt, dt, iou_type: str) -> float:
    """COCOeval's AP (IoU 0.50:0.95, all areas) with up to 1000 results an image (its summary stops at 100; the
    random-weight models give more)."""
    from pycocotools.cocoeval import COCOeval
    ev = COCOeval(gt, dt, iou_type)
    ev.params.maxDets = [1, 10, 1000] if iou_type != "keypoints" else [1000]
    with contextlib.redirect_stdout(io.StringIO()):
        ev.evaluate()
        ev.accumulate()
    p = ev.eval["precision"][:, :, :, 0, -1]  # (iou, recall, category, area 'all', the last maxDets)
    return float(p[p > -1].mean()) if np.any(p > -1) else -1.0


def mask_from_counts(rle: dict) -> np.ndarray:
    """The (h, w) 0/1 mask of an uncompressed COCO RLE (the demo's --json and reference_predict's "mask")."""
    h, w = rle["size"]
    counts = np.asarray(rle["counts"], np.int64)
    return np.repeat(np.arange(len(counts)) % 2, counts).reshape((h, w), order="F").astype(np.uint8)


def check_results(task: str, res: list, ours: dict, cmap: list, image_id: int) -> bool:
    from pycocotools import mask as mask_util
    from ultralytics.utils import ops
    import torch
    items = ours["top5"] if task == "classify" else ours["detections"]
    ok = check(len(res) == len(items) and len(items) > 0, f"{len(res)} results for the demo's {len(items)}")
    ok &= check(all(r["image_id"] == image_id for r in res), f"image_id {image_id}")
    ok &= check([r["category_id"] for r in res] == [cmap[d["class_id"]] for d in items],
                f"category_id = Ultralytics' class map of class_id ({cmap[:3]}...)")
    if cmap != list(range(1, len(cmap) + 1)):  # COCO's ids: some results must show the gaps
        ok &= check(any(r["category_id"] != d["class_id"] + 1 for r, d in zip(res, items)),
                    "COCO's category ids (not the class index + 1) for COCO's 80 classes")
    ok &= check(close([r["score"] for r in res], [d["score"] for d in items], 6e-6), "scores")
    if task == "classify":
        return ok & check(all(r["bbox"] == [0, 0, ours["image"]["width"], ours["image"]["height"]] for r in res),
                          "bbox = the whole image")
    if task == "obb":
        rb = np.array([[*d["box"], d["angle"]] for d in items])
        poly = ops.xywhr2xyxyxyxy(torch.tensor(rb, dtype=torch.float64)).numpy().reshape(-1, 8)
        ok &= check(all(close(r["rbox"], b, 1.5e-3) for r, b in zip(res, rb)), "rbox = the --json box and angle")
        ok &= check(all(close(r["poly"], p, 2e-3) for r, p in zip(res, poly)), "poly = ops.xywhr2xyxyxyxy(rbox)")
        ok &= check(all(r["segmentation"] == [r["poly"]] for r in res), "segmentation = [poly]")
        bb = [[p[0::2].min(), p[1::2].min(), p[0::2].max() - p[0::2].min(), p[1::2].max() - p[1::2].min()]
              for p in poly]
        return ok & check(all(close(r["bbox"], b, 3e-3) for r, b in zip(res, bb)), "bbox = the corners' bounds")
    ok &= check(all(close(r["bbox"], [d["box"][0], d["box"][1], d["box"][2] - d["box"][0], d["box"][3] - d["box"][1]],
                          2.5e-3) for r, d in zip(res, items)), "bbox = the --json box as x, y, w, h")
    if task == "pose":
        ok &= check(all(close(r["keypoints"], [v for kp in d["keypoints"] for v in kp], 1.5e-3)
                        for r, d in zip(res, items)), "keypoints = the --json keypoints")
    if task == "segment":
        same, strings, spread = True, True, set()
        for r, d in zip(res, items):
            ref = mask_from_counts(d["mask"])
            got = mask_util.decode(r["segmentation"])
            same &= got.shape == ref.shape and np.array_equal(got, ref)
            strings &= mask_util.encode(np.asfortranarray(ref))["counts"].decode() == r["segmentation"]["counts"]
            spread.add(int(ref.sum()))
        ok &= check(same, "every mask decodes to the demo's --json mask (IoU 1)")
        ok &= check(strings, "every counts string is pycocotools.mask.encode's")
        ok &= check(len(spread) > 1, f"the masks differ ({len(spread)} sizes)")
    return ok


def check_classify_out(demo: Path, image: Path, work: Path, ours: dict) -> bool:
    """--conf between the 2nd and 3rd probability shows two classes everywhere; --out draws what is shown."""
    import cv2
    probs = [d["score"] for d in ours["top5"]]
    ok = check(probs[1] > probs[2], f"top-5 probabilities spread ({probs[0]:.4f} .. {probs[4]:.4f})")
    conf = (probs[1] + probs[2]) / 2
    src = cv2.imread(str(image))[:, :, ::-1]
    h, w = src.shape[:2]
    s = max(1, (w + h) // 1000)
    margin = int(0.03 * h + 0.5)
    for shown, extra in ((5, []), (2, ["--conf", f"{conf:.6f}"])):
        out, coco = work / f"cls-{shown}.png", work / f"cls-{shown}.json"
        p = run([demo, image, "--out", out, "--coco", coco, *extra])
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("  ")]
        j = json.loads(run([demo, image, "--json", *extra]).stdout)
        ok &= check(len(lines) == shown and len(j["top5"]) == shown and len(json.loads(coco.read_text())) == shown,
                    f"--conf {extra[1] if extra else 'default (0)'}: {shown} classes printed, in --json and --coco")
        got = cv2.imread(str(out))[:, :, ::-1].astype(int)
        changed = np.argwhere(np.any(got != src, axis=2))
        rows = (changed[:, 0].min(), changed[:, 0].max() + 1) if len(changed) else (0, 0)
        ok &= check(rows == (margin, margin + shown * 9 * s), f"--out: {shown} label lines of {9 * s} px drawn "
                    f"from row {margin} (rows {rows[0]}..{rows[1] - 1} changed)")
        ok &= check(all(tuple(got[margin + i * 9 * s, margin]) == (64, 64, 64) for i in range(shown)),
                    "each line on Results.plot's dark grey")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True, choices=sorted(TASKS))
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the package's build folder")
    args = ap.parse_args()
    t = fwlib.Timer()
    try:
        import pycocotools.cocoeval  # noqa: F401
    except ImportError as e:
        sys.exit(f"demo_coco: pycocotools is needed (tools/install.sh --test): {e}")
    import oracle

    manifest, ckpt, imgsz = TASKS[args.task]
    work = fwlib.fresh(args.work.resolve() / f"demo-coco-{args.task}")
    pt = ckpt if isinstance(ckpt, Path) else fwlib.checkpoint(args.work, ckpt)
    image = work / "000000000042.png"
    if args.task == "detect":
        shutil.copy(fwlib.IMAGE, image)
    else:  # as PNG: stb_image and cv2 decode JPEGs a little differently, which random weights magnify
        import cv2
        cv2.imwrite(str(image), cv2.imread(str(oracle.sample_image("bus.jpg"))))
    pkg = fwlib.generate(manifest, pt, work / "pkg", "--imgsz", str(imgsz))
    fwlib.cmake_build(pkg, pkg / "build")
    demo = next((pkg / "build").glob("*_demo"))

    results = work / "results.json"
    ours = json.loads(run([demo, image, "--json", "--coco", results]).stdout)
    names = [n for _, n in sorted(oracle_names(pt).items())]
    cmap = class_map(names)
    width, height = ours["image"]["width"], ours["image"]["height"]
    ref = oracle.reference_predict(pt, image, imgsz, 0.25 if args.task == "classify" else default_conf(demo))
    if args.task == "classify":  # Ultralytics' top 5 as image-level labels: whole-image boxes
        ref["detections"] = [dict(d, box=[0, 0, width, height]) for d in ref["top5"]]
    gt = ground_truth(args.task, ref, cmap, 42, width, height)
    dt = load_res(gt, results)
    res = [dt.anns[i] for i in sorted(dt.anns)]
    log(f"{args.task}: COCO.loadRes read {len(res)} results from {results.name}")
    ok = check_results(args.task, json.loads(results.read_text()), ours, cmap, 42)
    ok &= check(len(res) == len(json.loads(results.read_text())), "loadRes kept every result")
    ap = coco_ap(gt, dt, IOU_TYPE[args.task])
    ok &= check(ap >= 0.99, f"COCOeval {IOU_TYPE[args.task]} AP {ap:.4f} against Ultralytics' "
                f"{len(ref['detections'])} predictions as ground truth (>= 0.99)")
    other = work / "id7.json"
    run([demo, image, "--coco", other, "--image-id", "7"])
    ok &= check({r["image_id"] for r in json.loads(other.read_text())} == {7}, "--image-id 7 overrides the name")
    ok &= check(not list(work.glob("*.tmp")), "no temporary file left")
    p = run([demo, image, "--coco", work / "missing" / "r.json"], check=False)
    ok &= check(p.returncode == 1 and f"cannot write {work / 'missing' / 'r.json'}" in p.stderr,
                f"--coco into a missing folder: exit {p.returncode}, {p.stderr.strip()}")
    if args.task == "classify":
        ok &= check_classify_out(demo, image, work, ours)
    if not args.keep:
        shutil.rmtree(work / "pkg" / "build", ignore_errors=True)
    log(f"demo_coco_{args.task}: {'PASS' if ok else 'FAIL'} ({t})")
    return 0 if ok else 1


def oracle_names(pt: Path) -> dict:
    """The checkpoint's class names (carve's own safe reader: a .pt is never unpickled)."""
    sys.path.insert(0, str(REPO / "generator"))
    from carve.checkpoint import read_checkpoint
    names = read_checkpoint(pt).names
    return names if isinstance(names, dict) else dict(enumerate(names))


def default_conf(demo: Path) -> float:
    """The demo's default threshold: <NAME>_DEFAULT_CONF of the package's header."""
    name = demo.name[:-len("_demo")]
    header = (demo.parents[1] / f"{name}.h").read_text()
    return float(re.search(rf"#define {name.upper()}_DEFAULT_CONF ([0-9.e+-]+)f?", header).group(1))


if __name__ == "__main__":
    sys.exit(main())
