#!/usr/bin/env python3
"""Compare the task drawing helpers of carve_io.h with Ultralytics' Annotator.

Usage: draw_vs_ultralytics.py PATH/TO/draw_tool

1. carve_draw_mask vs Annotator.masks on one mask (the blend Results.plot uses):
   bit-identical images for several colours and alphas.
2. carve_draw_keypoints vs Annotator.kpts(radius=5, kpt_line=True, conf 0.25), as
   Results.plot draws pose results, for random people on a 480x640 image.
   Ultralytics draws with cv2 and anti-aliasing, carve without, so the check is
   on the shape and the colours: the IoU of the drawn pixels (Ultralytics' at
   half strength or more), and the share of
   pixels both drew where carve's colour equals the one Ultralytics drew at full
   strength (its BGR palette shown as RGB).
3. carve_draw_rotated_box vs Annotator.box_label on ops.xywhr2xyxyxyxy corners
   (cv2.polylines, 8-connected, line width 2): IoU of the drawn pixels.

Thresholds are below; the measured values are printed. Exits 0 with 'skipped'
when cv2, torch or ultralytics is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import cv2  # noqa: F401  (Annotator draws with it)
    import numpy as np
    import torch
    from ultralytics.utils import ops
    from ultralytics.utils.plotting import Annotator
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"draw_vs_ultralytics: skipped ({e})")
    sys.exit(0)

MIN_KPT_IOU = 0.8
MIN_KPT_COLOUR_AGREEMENT = 0.95
MIN_RBOX_IOU = 0.85


def run(tool, *args):
    subprocess.run([tool, *map(str, args)], check=True)


def draw(tool, tmp, kind, image, data, *extra):
    ip, dp, op = (os.path.join(tmp, f) for f in ("img.npy", "data.npy", "out.npy"))
    np.save(ip, image.astype(np.float32))
    np.save(dp, np.asarray(data, np.float32))
    run(tool, kind, op, ip, dp, *extra)
    return np.load(op).astype(np.uint8)


def iou(a, b):
    return np.logical_and(a, b).sum() / max(np.logical_or(a, b).sum(), 1)


def check_mask(tool, tmp, rng):
    h, w = 37, 53
    img = rng.integers(0, 256, (h, w, 3)).astype(np.uint8)
    mask = rng.integers(0, 2, (h, w)).astype(np.uint8)
    checked = 0
    for color, alpha in [((255, 56, 56), 0.5), ((4, 42, 255), 0.3), ((0, 0, 0), 1.0),
                         ((7, 200, 9), 0.0)]:
        ann = Annotator(img.copy())
        ann.masks(torch.from_numpy(mask)[None], colors=[color], alpha=alpha)
        ref = ann.result()  # per channel, so the channel order does not matter
        got = draw(tool, tmp, "mask", img, mask, *color, alpha)
        assert np.array_equal(got, ref), (color, alpha, int((got != ref).sum()))
        checked += 1
    return checked


def check_keypoints(tool, tmp, rng):
    h, w = 480, 640
    people = []
    for _ in range(6):
        cx, cy = rng.uniform(60, w - 60), rng.uniform(80, h - 80)
        k = np.zeros((17, 3), np.float32)
        k[:, 0] = cx + rng.uniform(-50, 50, 17)
        k[:, 1] = cy + rng.uniform(-70, 70, 17)
        k[:, 2] = rng.uniform(0, 1, 17)
        people.append(k)
    people.append(np.array([[5.5, 3.2, 0.9]] * 17, np.float32))  # near the corner
    people = np.stack(people)

    black = np.zeros((h, w, 3), np.uint8)
    ann = Annotator(black.copy())
    for k in people:
        ann.kpts(k, radius=5, kpt_line=True)
    ref = ann.result()[..., ::-1]  # BGR -> RGB
    got = draw(tool, tmp, "kpts", black, people, 0.25)

    # Anti-aliasing fades Ultralytics' edges: its drawn pixels are those at half
    # strength or more.
    drawn_ref, drawn_got = ref.max(2) >= 128, got.any(2)
    overlap = iou(drawn_ref, drawn_got)
    colours = ann.kpt_color.tolist() + ann.limb_color.tolist()
    palette = {tuple(int(v) for v in c[::-1]) for c in colours}
    full = np.array([tuple(p) in palette for p in ref.reshape(-1, 3).tolist()]).reshape(h, w)
    both = full & drawn_got
    agreement = float((got[both] == ref[both]).all(1).mean())
    assert overlap >= MIN_KPT_IOU, overlap
    assert agreement >= MIN_KPT_COLOUR_AGREEMENT, agreement
    return overlap, agreement


def check_rotated_boxes(tool, tmp, rng):
    h, w = 480, 640
    rows = np.stack([rng.uniform(0, w, 12), rng.uniform(0, h, 12), rng.uniform(5, 300, 12),
                     rng.uniform(5, 200, 12), rng.uniform(-np.pi, np.pi, 12)], 1).astype(np.float32)
    rows[0] = [320, 240, 200, 100, 0.0]
    rows[1] = [100, 100, 80, 40, np.pi / 2]
    black = np.zeros((h, w, 3), np.uint8)
    color = (255, 0, 0)
    ann = Annotator(black.copy())
    for corners in ops.xywhr2xyxyxyxy(torch.from_numpy(rows)):
        ann.box_label(corners.tolist(), "", color=color)
    ref = ann.result()
    got = draw(tool, tmp, "rbox", black, rows, *color, ann.lw)
    overlap = iou(ref.any(2), got.any(2))
    assert overlap >= MIN_RBOX_IOU, overlap
    assert np.all(got[got.any(2)] == color)
    return overlap


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        n = check_mask(tool, tmp, rng)
        print(f"  draw_mask: {n} colour/alpha pairs bit-identical to Annotator.masks")
        overlap, agreement = check_keypoints(tool, tmp, rng)
        print(f"  keypoints: IoU {overlap:.3f} of drawn pixels vs Annotator.kpts (anti-aliased), "
              f"colour agreement {agreement:.3f}")
        overlap = check_rotated_boxes(tool, tmp, rng)
        print(f"  rotated boxes: IoU {overlap:.3f} of drawn pixels vs Annotator.box_label "
              "(polylines)")
    print("draw_vs_ultralytics: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
