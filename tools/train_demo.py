#!/usr/bin/env python3
"""Train carve's demo model, yolo26n-shapes: YOLO26n detecting coloured shapes, from scratch, on the CPU.

    python3 tools/train_demo.py                     # render, train, write assets/yolo26n-shapes.pt and samples
    python3 tools/train_demo.py --samples-only      # only (re)write the held-out sample PNGs in assets/
    python3 tools/train_demo.py render --out DIR --seed 2000 --count 20   # held-out images + YOLO labels

No pretrained weights exist for this task and none can be downloaded, so the dataset is rendered here with numpy
and OpenCV, deterministically for a seed: every image is drawn from its own generator seeded with (seed, index).
Five classes, each a shape with its own hue family (jittered in hue, saturation and brightness):

    0 circle   red          1 square   blue (rotated)     2 triangle green (rotated)
    3 star     yellow       4 cross    magenta (a plus sign, rotated)

1-6 objects per image, sized 8-40 % of the image's short side, on textured backgrounds (gradients, blurred noise,
stripes, checkerboards, grey clutter lines and blobs), with sensor noise and a little blur on top. Objects may
overlap, but one is kept only if every object keeps at least 60 % of its pixels visible, so the labels (the box of
the whole shape) stay honest. Labels are YOLO txt (class cx cy w h, normalised).

Seeds: training images use seed 0, validation seed 1, the sample PNGs in assets/ seed 1000, the test
(tests/oracle/test_demo_model.py) renders its held-out set with seed 2000 and the accuracy evaluation (make eval,
bench/eval.py) its 500 images with seed 3000: none of these images is seen in training. (make eval calibrates its
int8 systems with training images: seed 0.)

The dataset is written under build/demo-data/ (not committed); the trainer's runs go under build/demo-train/.
The best checkpoint (already stripped by Ultralytics: EMA weights, fp16, no optimizer) is re-saved with a fixed
date and repository-relative paths in its train_args, and copied to assets/yolo26n-shapes.pt.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# Nothing may be fetched: no update checks, no fonts, no telemetry, no auto-install of requirements.
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "False")

NAMES = ["circle", "square", "triangle", "star", "cross"]
HUES = [0, 110, 60, 28, 150]  # OpenCV hue (0-179): red, blue, green, yellow, magenta
TRAIN_SEED, VAL_SEED, SAMPLE_SEED, TEST_SEED, EVAL_SEED = 0, 1, 1000, 2000, 3000
IMGSZ = 320
CHECKPOINT_DATE = "2026-01-14T00:00:00+00:00"
ASSETS = ROOT / "assets"
CHECKPOINT = ASSETS / "yolo26n-shapes.pt"
SAMPLE_SIZES = [(480, 360), (400, 400), (360, 480), (512, 320)]  # (width, height) of the sample PNGs

# ---------------------------------------------------------------------------------------------------------------------
# rendering (numpy + OpenCV only: the test imports this without torch)
# ---------------------------------------------------------------------------------------------------------------------


def _hsv_to_bgr(h: float, s: float, v: float) -> tuple[int, int, int]:
    import cv2

    px = np.array([[[h % 180, s, v]]], np.uint8)
    b, g, r = cv2.cvtColor(px, cv2.COLOR_HSV2BGR)[0, 0]
    return int(b), int(g), int(r)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A textured, mostly low-saturation background (float32 BGR, 0-255)."""
    import cv2

    kind = rng.integers(0, 4)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.clip(rng.uniform(40, 215) + rng.normal(0, 22, 3), 25, 230).astype(np.float32)  # greyish, tinted
    tint = rng.normal(0, 6, 3).astype(np.float32)
    if kind == 0:  # linear gradient between two greyish colours
        a = rng.uniform(0, 2 * math.pi)
        t = ((xx * math.cos(a) + yy * math.sin(a)) / max(h, w) + 1) / 2
        c2 = np.clip(base + rng.normal(0, 50, 3), 20, 235).astype(np.float32)
        img = base[None, None] * (1 - t[..., None]) + c2[None, None] * t[..., None]
    elif kind == 1:  # blurred noise: clouds
        k = int(rng.integers(4, 24))
        small = rng.normal(0, 1, (h // k + 2, w // k + 2, 1)).astype(np.float32)
        cloud = cv2.resize(small[..., 0], (w, h), interpolation=cv2.INTER_CUBIC)[..., None]
        img = base[None, None] + cloud * rng.uniform(15, 45)
    elif kind == 2:  # stripes
        a = rng.uniform(0, math.pi)
        period = rng.uniform(6, 40)
        s = np.sin(2 * math.pi * (xx * math.cos(a) + yy * math.sin(a)) / period)
        img = base[None, None] + s[..., None] * rng.uniform(10, 35)
    else:  # checkerboard
        cell = int(rng.integers(8, 40))
        chk = (((xx // cell) + (yy // cell)) % 2 * 2 - 1).astype(np.float32)
        img = base[None, None] + chk[..., None] * rng.uniform(10, 35)
    img = img + tint[None, None]
    img = np.ascontiguousarray(np.clip(img, 0, 255).astype(np.float32))
    # clutter: grey lines and blobs that are not objects
    for _ in range(int(rng.integers(0, 8))):
        g = float(rng.uniform(20, 235))
        col = tuple(float(np.clip(g + rng.normal(0, 10), 0, 255)) for _ in range(3))
        if rng.random() < 0.5:
            p1 = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            p2 = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            cv2.line(img, p1, p2, col, int(rng.integers(1, 4)), cv2.LINE_AA)
        else:
            c = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            ax = (int(rng.integers(3, max(4, min(h, w) // 6))), int(rng.integers(3, max(4, min(h, w) // 6))))
            cv2.ellipse(img, c, ax, float(rng.uniform(0, 180)), 0, 360, col, -1, cv2.LINE_AA)
    return img


def _shape_points(cls: int, cx: float, cy: float, r: float, angle: float) -> np.ndarray:
    """Polygon (N, 2) float of a class's shape with circumradius r; the circle is a 64-gon."""
    if cls == 0:
        t = np.linspace(0, 2 * math.pi, 64, endpoint=False)
        rad = np.full_like(t, r)
    elif cls == 1:
        t = np.arange(4) * math.pi / 2 + math.pi / 4
        rad = np.full_like(t, r)
    elif cls == 2:
        t = np.arange(3) * 2 * math.pi / 3 - math.pi / 2
        rad = np.full_like(t, r)
    elif cls == 3:
        t = np.arange(10) * math.pi / 5 - math.pi / 2
        rad = np.where(np.arange(10) % 2 == 0, r, r * 0.45)
    else:  # cross: a plus sign of arm half-width r/3
        a = r / 3.0
        p = np.array([(a, -r), (a, -a), (r, -a), (r, a), (a, a), (a, r), (-a, r), (-a, a), (-r, a), (-r, -a),
                      (-a, -a), (-a, -r)], np.float64)
        t = np.arctan2(p[:, 1], p[:, 0])
        rad = np.hypot(p[:, 0], p[:, 1])
    t = t + (angle if cls != 0 else 0.0)
    return np.stack([cx + rad * np.cos(t), cy + rad * np.sin(t)], 1)


def render_image(seed: int, index: int, width: int | None = None, height: int | None = None):
    """Render image `index` of the set with `seed`.

    Returns (image, labels): image uint8 BGR (H, W, 3); labels a list of (class_id, x1, y1, x2, y2) in pixels
    (the box of the whole shape, clipped to the image), each object at least 60 % visible.
    """
    import cv2

    rng = np.random.default_rng([seed, index])
    if width is None or height is None:
        w, h = [(320, 320), (384, 288), (288, 384), (416, 320), (320, 256)][int(rng.integers(0, 5))]
    else:
        w, h = width, height
    img = _background(rng, h, w)
    owner = np.full((h, w), -1, np.int32)  # which object each pixel shows
    areas, labels = [], []
    short = min(h, w)
    n_target = int(rng.integers(1, 7))
    attempts = 0
    SS = 4  # sub-pixel bits for cv2.fillPoly
    while len(labels) < n_target and attempts < 40:
        attempts += 1
        cls = int(rng.integers(0, len(NAMES)))
        size = rng.uniform(0.08, 0.40) * short  # box side, roughly
        r = size / 2 * (1.15 if cls == 2 else 1.0)
        cx, cy = rng.uniform(r * 0.7, w - r * 0.7), rng.uniform(r * 0.7, h - r * 0.7)
        pts = _shape_points(cls, cx, cy, r, float(rng.uniform(0, 2 * math.pi)))
        mask = np.zeros((h, w), np.uint8)
        cv2.fillPoly(mask, [np.round(pts * (1 << SS)).astype(np.int32)], 1, cv2.LINE_8, SS)
        full = int(mask.sum())
        if full < 30:
            continue
        x1, y1 = np.clip(pts.min(0), 0, [w, h])
        x2, y2 = np.clip(pts.max(0), 0, [w, h])
        # the shape may leave the image by a little, but at least 75 % of it stays inside
        ideal = cv2.contourArea(pts.astype(np.float32))
        if full < 0.75 * ideal or x2 - x1 < 6 or y2 - y1 < 6:
            continue
        trial = owner.copy()
        trial[mask > 0] = len(labels)
        counts = np.bincount(trial[trial >= 0].ravel(), minlength=len(labels) + 1)
        if any(counts[k] < 0.6 * areas[k] for k in range(len(labels))):
            continue  # would hide too much of an earlier object
        owner = trial
        areas.append(full)
        labels.append((cls, float(x1), float(y1), float(x2), float(y2)))
        # paint: class hue, jittered; a soft shading gradient across the shape
        hue = HUES[cls] + rng.normal(0, 4)
        col = np.array(_hsv_to_bgr(hue, rng.uniform(150, 255), rng.uniform(140, 255)), np.float32)
        a = rng.uniform(0, 2 * math.pi)
        yy, xx = np.nonzero(mask)
        shade = 1 + 0.15 * ((xx - cx) * math.cos(a) + (yy - cy) * math.sin(a)) / max(r, 1)
        img[yy, xx] = np.clip(col[None] * shade[:, None], 0, 255)
        if rng.random() < 0.5:  # an outline
            dark = tuple(float(c) * 0.5 for c in col)
            cv2.polylines(img, [np.round(pts * (1 << SS)).astype(np.int32)], True, dark, 1, cv2.LINE_AA, SS)
    img = img + rng.normal(0, rng.uniform(2, 10), img.shape).astype(np.float32)
    if rng.random() < 0.3:
        img = cv2.GaussianBlur(img, (3, 3), 0)
    return np.clip(np.round(img), 0, 255).astype(np.uint8), labels


def yolo_label_lines(labels, w: int, h: int) -> str:
    return "".join(f"{c} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}\n"
                   for c, x1, y1, x2, y2 in labels)


def render_set(out: Path, seed: int, count: int, split: str | None = None) -> Path:
    """Write `count` PNG images and YOLO labels: out/images[/split]/NNNNN.png, out/labels[/split]/NNNNN.txt."""
    import cv2

    im_dir = out / "images" / (split or "")
    lb_dir = out / "labels" / (split or "")
    im_dir.mkdir(parents=True, exist_ok=True)
    lb_dir.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        img, labels = render_image(seed, i)
        h, w = img.shape[:2]
        cv2.imwrite(str(im_dir / f"{seed}_{i:05d}.png"), img)
        (lb_dir / f"{seed}_{i:05d}.txt").write_text(yolo_label_lines(labels, w, h))
    return out


def write_samples(assets: Path = ASSETS, seed: int = SAMPLE_SEED) -> list[Path]:
    """The held-out sample PNGs (seed 1000) and their ground truth (assets/shapes-N.json)."""
    import cv2

    assets.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (w, h) in enumerate(SAMPLE_SIZES):
        # Pick the first rendering with at least 4 objects: the demo should show several boxes.
        k = 0
        while True:
            img, labels = render_image(seed, i * 100 + k, w, h)
            if len(labels) >= 4:
                break
            k += 1
        p = assets / f"shapes-{i + 1}.png"
        cv2.imwrite(str(p), img, [cv2.IMWRITE_PNG_COMPRESSION, 9])
        gt = {"seed": seed, "index": i * 100 + k, "width": w, "height": h,
              "objects": [{"class_id": c, "class": NAMES[c], "box": [round(v, 2) for v in b]}
                          for c, *b in labels]}
        p.with_suffix(".json").write_text(json.dumps(gt, indent=1) + "\n")
        out.append(p)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# training (torch + ultralytics, imported lazily)
# ---------------------------------------------------------------------------------------------------------------------


def _no_downloads() -> None:
    """Keep Ultralytics off the network: dataset checks would otherwise try to download Arial.ttf."""
    import ultralytics.data.utils as du
    import ultralytics.utils.checks as uc

    du.check_font = lambda *a, **k: None
    uc.check_font = lambda *a, **k: None
    from ultralytics.utils import SETTINGS

    for k in ("sync", "clearml", "comet", "dvc", "mlflow", "raytune", "tensorboard", "wandb"):
        SETTINGS[k] = False  # in memory only (dict assignment does not save the settings file)


def finalize_checkpoint(best: Path, out: Path, data_yaml: Path, seconds: float) -> dict:
    """Re-save the trainer's stripped best.pt with a fixed date and repository-relative paths; check it."""
    import torch

    ckpt = torch.load(best, map_location="cpu", weights_only=False)
    model = ckpt["model"]
    assert ckpt.get("ema") is None and ckpt.get("optimizer") is None, "best.pt is not stripped"
    assert all(p.dtype == torch.float16 for p in model.parameters()), "best.pt is not fp16"
    assert list(model.names.values()) == NAMES, model.names
    ckpt["date"] = CHECKPOINT_DATE
    rel = {"data": "build/demo-data/shapes.yaml", "project": "build/demo-train"}
    ckpt["train_args"] = {**ckpt["train_args"], **rel}
    if isinstance(getattr(model, "args", None), dict):
        model.args = {**model.args, **{k: v for k, v in rel.items() if k in model.args}}
    ckpt["train_time_s"] = round(seconds)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, out)
    mb = out.stat().st_size / 1e6
    if mb > 6.0:
        raise SystemExit(f"train_demo: {out} is {mb:.1f} MB (> 6 MB)")
    return ckpt


def train(args) -> None:
    data = (ROOT / args.data).resolve()
    if args.fresh and data.exists():
        shutil.rmtree(data)
    t0 = time.time()
    stamp = data / f"rendered-{TRAIN_SEED}-{args.train}-{VAL_SEED}-{args.val}"
    if not stamp.exists():
        for sub in ("images", "labels"):
            shutil.rmtree(data / sub, ignore_errors=True)
        render_set(data, TRAIN_SEED, args.train, "train")
        render_set(data, VAL_SEED, args.val, "val")
        stamp.touch()
    yaml_path = data / "shapes.yaml"
    yaml_path.write_text(f"path: {data}\ntrain: images/train\nval: images/val\nnames:\n"
                         + "".join(f"  {i}: {n}\n" for i, n in enumerate(NAMES)))
    print(f"train_demo: dataset {args.train} train + {args.val} val images in {data} ({time.time() - t0:.0f} s)",
          flush=True)

    import torch

    torch.set_num_threads(args.threads)
    _no_downloads()
    from ultralytics import YOLO

    project = (ROOT / args.project).resolve()
    t1 = time.time()
    model = YOLO("yolo26n.yaml")
    model.train(data=str(yaml_path), imgsz=IMGSZ, epochs=args.epochs, batch=args.batch, device="cpu",
                workers=args.workers, plots=False, val=True, seed=0, deterministic=True, pretrained=False,
                amp=False, project=str(project), name="shapes", exist_ok=True, cache=False,
                close_mosaic=args.close_mosaic, patience=args.epochs, verbose=True, fraction=1.0,
                optimizer=args.optimizer, lr0=args.lr0, nbs=args.batch, cls=args.cls, cos_lr=False, warmup_epochs=args.warmup_epochs)
    seconds = time.time() - t1
    best = project / "shapes" / "weights" / "best.pt"
    ckpt = finalize_checkpoint(best, ROOT / args.out, yaml_path, seconds)
    m = ckpt.get("train_metrics", {})
    print(f"train_demo: trained in {seconds / 60:.1f} min; {args.out}: {(ROOT / args.out).stat().st_size / 1e6:.2f} MB; "
          + ", ".join(f"{k} {v:.3f}" for k, v in m.items() if isinstance(v, float)), flush=True)
    for p in write_samples():
        print(f"train_demo: sample {p.relative_to(ROOT)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("render", help="render a labelled image set (YOLO layout) with a seed")
    r.add_argument("--out", required=True, type=Path)
    r.add_argument("--seed", type=int, default=TEST_SEED)
    r.add_argument("--count", type=int, default=20)
    ap.add_argument("--samples-only", action="store_true", help="only write the sample PNGs into assets/")
    ap.add_argument("--train", type=int, default=480, help="training images (seed 0)")
    ap.add_argument("--val", type=int, default=60, help="validation images (seed 1)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--close-mosaic", type=int, default=5)
    ap.add_argument("--cls", type=float, default=0.5, help="classification loss gain")
    ap.add_argument("--optimizer", default="AdamW")
    ap.add_argument("--lr0", type=float, default=0.002)
    ap.add_argument("--warmup-epochs", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--data", default="build/demo-data", help="dataset folder (relative to the repository)")
    ap.add_argument("--project", default="build/demo-train", help="Ultralytics runs folder")
    ap.add_argument("--out", default=str(CHECKPOINT.relative_to(ROOT)), help="checkpoint to write")
    ap.add_argument("--fresh", action="store_true", help="re-render the dataset even if present")
    a = ap.parse_args(argv)
    if a.cmd == "render":
        render_set(a.out, a.seed, a.count)
        print(f"{a.out}: {a.count} images with seed {a.seed}")
    elif a.samples_only:
        for p in write_samples():
            print(p)
    else:
        train(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
