#!/usr/bin/env python3
"""Compare the mask functions of carve_mask.h with Ultralytics.

Usage: mask_vs_ultralytics.py PATH/TO/mask_tool

1. Logits: a real Segment26 head (random weights, end2end, eval) gives rows
   [box, score, class, 32 coefficients] and Proto26 prototypes; carve_mask_logits
   on the rows and the NHWC prototypes must equal coeffs @ protos (torch, float)
   within 2e-5 relative to the largest |term|.
2. Native masks, exact logits: for letterbox inputs of 640x640, 480x640 and
   320x320 and original images of many shapes (among them 1080x810, 810x1080,
   720x1280 and 1280x720, and ones whose padding makes process_mask_native
   upsample 1x, 2x and 4x first), random logits and boxes in original pixels,
   carve_mask_native must give exactly ops.process_mask_native's masks. The
   logits go through process_mask_native unchanged by passing them as the
   prototypes with identity coefficients.
3. End to end: the head's rows, boxes mapped with ops.scale_boxes, masks from
   carve_mask_logits + carve_mask_native vs ops.process_mask_native(proto, coeffs):
   only pixels whose logit is within float rounding of 0 may differ; IoU >= 0.99.
4. RLE: carve_rle_encode of random masks, blobs and edge cases decoded with
   pycocotools' rules (column-major runs starting with background) must give the
   mask back, and carve_rle_string of the counts must be pycocotools.mask.encode's
   compressed string, byte for byte (where pycocotools is installed).

Exits 0 with 'skipped' when torch or ultralytics is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from ultralytics.nn.modules.head import Segment26
    from ultralytics.utils import ops
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"mask_vs_ultralytics: skipped ({e})")
    sys.exit(0)

# (h, w) of original images.
SOURCE_SHAPES = [
    (1080, 810), (810, 1080), (720, 1280), (1280, 720), (640, 640), (480, 640), (333, 517),
    (517, 333), (17, 1000), (1000, 7), (1, 1), (2000, 1500), (101, 99),
]
# (h, w) of the network input, a letterbox of the original; prototypes are a quarter.
INPUT_SHAPES = [(640, 640), (480, 640), (320, 320)]


def run(tool, *args):
    subprocess.run([tool, *map(str, args)], check=True)


def upsample_factor(mh, mw, h, w):
    """The f that process_mask_native picks (read from its source, for the report)."""
    import math

    gain = min(4 * mh / h, 4 * mw / w)
    pad = (4 * mh - max(round(h * gain), 1)) | (4 * mw - max(round(w * gain), 1))
    return 4 // math.gcd(4, pad | pad // 2)


def random_boxes(rng, n, h, w):
    """Boxes in original pixels: random, fractional, whole image, outside, empty."""
    x = np.sort(rng.uniform(-0.1 * w, 1.1 * w, (n, 2)), axis=1)
    y = np.sort(rng.uniform(-0.1 * h, 1.1 * h, (n, 2)), axis=1)
    boxes = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], 1)
    boxes = np.clip(boxes, 0, [w, h, w, h])  # as scale_boxes clips
    boxes[0] = [0, 0, w, h]
    if n > 2:
        boxes[1] = [w * 0.25 + 0.5, h * 0.25 + 0.5, w * 0.75 + 0.5, h * 0.75 - 0.5]
    if n > 3:
        boxes[2] = [w / 2, h / 2, w / 2, h]  # empty
    return boxes.astype(np.float32)


def check_native_exact(tool, tmp, rng):
    """Masks from the same logits must be equal bit for bit."""
    checked, factors = 0, set()
    for in_h, in_w in INPUT_SHAPES:
        mh, mw = in_h // 4, in_w // 4
        for h, w in SOURCE_SHAPES:
            n = 5
            logits = (rng.standard_normal((n, mh, mw)) * 3).astype(np.float32)
            # Smooth blobs as well as noise: real masks are smooth.
            yy, xx = np.mgrid[0:mh, 0:mw]
            logits[1] = (4 - np.hypot(yy - mh / 2, xx - mw / 3) / 6).astype(np.float32)
            boxes = random_boxes(rng, n, h, w)
            ref = ops.process_mask_native(
                torch.from_numpy(logits), torch.eye(n), torch.from_numpy(boxes.copy()), (h, w)
            ).numpy()
            lp, bp, op = (os.path.join(tmp, f) for f in ("l.npy", "b.npy", "m.npy"))
            np.save(lp, logits)
            np.save(bp, boxes)
            run(tool, "native", op, lp, bp, w, h)
            got = np.load(op)
            assert got.shape == ref.shape, (got.shape, ref.shape)
            bad = int((got != ref).sum())
            assert bad == 0, f"input {in_h}x{in_w}, image {h}x{w}: {bad} pixels differ"
            factors.add(upsample_factor(mh, mw, h, w))
            checked += 1
    return checked, sorted(factors)


def check_end_to_end(tool, tmp, seed):
    """Segment26 rows and protos -> masks, through carve_mask_logits."""
    torch.manual_seed(seed)
    ch = (16, 32, 64)
    head = Segment26(nc=4, nm=32, npr=32, reg_max=1, end2end=True, ch=ch)
    head.stride = torch.tensor([8.0, 16.0, 32.0])
    head.end2end = True
    head.max_det = 20
    head.eval()
    in_h, in_w = 480, 640
    feats = [torch.randn(1, c, in_h // s, in_w // s) for c, s in zip(ch, (8, 16, 32))]
    with torch.no_grad():
        (y, proto), _ = head(feats)
    rows, proto = y[0].numpy(), proto[0]
    rp, pp, lp = (os.path.join(tmp, f) for f in ("rows.npy", "protos.npy", "logits.npy"))
    np.save(rp, rows)
    np.save(pp, np.ascontiguousarray(proto.permute(1, 2, 0).numpy()))
    run(tool, "logits", lp, rp, 6, pp)
    got_logits = np.load(lp)
    coeffs = torch.from_numpy(rows[:, 6:])
    ref_logits = (coeffs @ proto.reshape(32, -1)).reshape(-1, *proto.shape[1:]).numpy()
    scale = (np.abs(rows[:, 6:])[:, :, None, None] * np.abs(proto.numpy())[None]).sum(1)
    logit_err = float((np.abs(got_logits - ref_logits) / np.maximum(scale, 1e-30)).max())
    assert logit_err <= 2e-5, logit_err

    worst_iou, differing = 1.0, 0
    for h, w in [(1080, 810), (720, 1280), (333, 517)]:
        boxes = ops.scale_boxes((in_h, in_w), torch.from_numpy(rows[:, :4].copy()), (h, w))
        ref = ops.process_mask_native(proto, coeffs, boxes, (h, w)).numpy()
        bp, op = os.path.join(tmp, "b.npy"), os.path.join(tmp, "m.npy")
        np.save(bp, boxes.numpy())
        run(tool, "native", op, lp, bp, w, h)
        got = np.load(op)
        for g, r in zip(got, ref):
            union = np.logical_or(g, r).sum()
            if union:
                worst_iou = min(worst_iou, np.logical_and(g, r).sum() / union)
        differing += int((got != ref).sum())
    assert worst_iou >= 0.99, worst_iou
    return logit_err, worst_iou, differing


def rle_decode(counts, h, w):
    """pycocotools' rleDecode: alternating runs of 0 and 1, column-major."""
    flat = np.zeros(h * w, np.uint8)
    pos, value = 0, 0
    for c in counts:
        flat[pos : pos + c] = value
        pos += c
        value ^= 1
    assert pos == h * w, (pos, h * w)
    return flat.reshape(w, h).T


def check_rle(tool, tmp, rng):
    masks = [
        np.zeros((5, 7)), np.ones((5, 7)), np.zeros((0, 4)), np.zeros((1, 1)), np.ones((1, 1)),
        rng.integers(0, 2, (13, 17)), rng.integers(0, 2, (1, 50)), rng.integers(0, 2, (50, 1)),
    ]
    yy, xx = np.mgrid[0:300, 0:401]
    masks.append((np.hypot(yy - 150, xx - 180) < 90) | (xx > 390))
    big = np.zeros((1000, 1200))  # runs of up to a million pixels: counts of 4 and 5 groups, both signs of delta
    big[rng.integers(0, 1000, 6), rng.integers(0, 1200, 6)] = 1
    big[400:420, 10:1100] = 1
    masks.append(big)
    try:
        from pycocotools import mask as coco_mask
    except ImportError:
        coco_mask = None
        print("  rle strings: skipped (no pycocotools)")
    for m in masks:
        m = m.astype(np.float32)
        ip, op = os.path.join(tmp, "rle_in.npy"), os.path.join(tmp, "rle_out.npy")
        np.save(ip, m)
        run(tool, "rle", op, ip)
        counts = np.load(op).astype(np.int64)
        if m.size:
            assert np.array_equal(rle_decode(counts, *m.shape), m.astype(np.uint8)), m.shape
            assert counts[0] == 0 if m.flat[0] else True
            assert np.all(counts[1:] > 0)
        else:
            assert list(counts) == [0]
        if coco_mask is not None and m.size:
            sp = os.path.join(tmp, "rle_str.txt")
            run(tool, "rlestr", sp, ip)
            with open(sp, "rb") as f:
                ours = f.read()
            ref = coco_mask.encode(np.asfortranarray(m.astype(np.uint8)))["counts"]
            assert ours == ref, (m.shape, ours[:80], ref[:80])
    return len(masks)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        checked, factors = check_native_exact(tool, tmp, rng)
        print(f"  native masks: {checked} input/image shape pairs bit-exact vs process_mask_native "
              f"(upsample factors {factors})")
        logit_err, iou, differing = check_end_to_end(tool, tmp, 0)
        print(f"  end to end: logits max rel err {logit_err:.2g}, min IoU {iou:.6f}, "
              f"{differing} pixels differ (logits within rounding of 0)")
        n_rle = check_rle(tool, tmp, rng)
        print(f"  rle: {n_rle} masks round-trip through the COCO decoder; compressed strings equal pycocotools'")
    print("mask_vs_ultralytics: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
