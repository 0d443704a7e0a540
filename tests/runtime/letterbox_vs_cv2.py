#!/usr/bin/env python3
"""Compare carve_letterbox with Ultralytics' LetterBox (cv2.resize INTER_LINEAR).

Usage: letterbox_vs_cv2.py PATH/TO/letterbox_tool

Writes random images of many sizes as PNG, letterboxes them with the C tool and
with ultralytics.data.augment.LetterBox(new_shape, auto=False), and compares:
the C floats must equal the Ultralytics uint8 image / 255 in float32 (reported
as the largest difference in uint8 units; the test fails above 1), the letterbox
geometry must match, and boxes mapped back with carve_scale_boxes_xyxy must
equal ultralytics.utils.ops.scale_boxes. Exits 0 with 'skipped' when cv2,
numpy or ultralytics is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import cv2
    import numpy as np
    import torch
    from ultralytics.data.augment import LetterBox
    from ultralytics.utils import ops
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"letterbox_vs_cv2: skipped ({e})")
    sys.exit(0)

# (h, w) of the source images; each with every output shape below.
SOURCE_SHAPES = [
    (1, 1), (1, 10000), (10000, 1), (2, 3), (5, 1280), (7, 1280), (17, 3), (37, 53),
    (100, 133), (300, 299), (333, 333), (480, 640), (639, 640), (640, 640), (641, 639),
    (720, 1280), (810, 1080), (1080, 810), (1280, 1280), (1500, 2000), (2000, 30),
]
OUTPUT_SHAPES = [(640, 640), (480, 640), (1024, 1024), (224, 320)]  # (h, w)
MAX_ALLOWED_DIFF = 1  # uint8 units


def make_image(rng, h, w):
    """Noise over a smooth gradient: exercises every rounding path."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 255.0 / max(w - 1, 1) + yy * 128.0 / max(h - 1, 1))[..., None] * [1.0, 0.5, 0.25]
    noise = rng.integers(-40, 41, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    rng = np.random.default_rng(0)
    boxes = np.concatenate(
        [rng.uniform(-50, 1100, (64, 2)), rng.uniform(-50, 1100, (64, 2))], axis=1
    ).astype(np.float32)
    boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2])

    worst = 0
    inexact = 0
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "boxes.npy"), boxes)
        images = []
        for i, (h, w) in enumerate(SOURCE_SHAPES):
            bgr = make_image(rng, h, w)
            path = os.path.join(tmp, f"img{i}.png")
            assert cv2.imwrite(path, bgr)  # the file holds RGB = bgr[..., ::-1]
            images.append((path, bgr))

        for out_h, out_w in OUTPUT_SHAPES:
            args = [tool, str(out_w), str(out_h), os.path.join(tmp, "boxes.npy")]
            for i, (path, _) in enumerate(images):
                args += [path, os.path.join(tmp, f"out{i}_{out_h}x{out_w}")]
            subprocess.run(args, check=True)

            letterbox = LetterBox(new_shape=(out_h, out_w), auto=False)
            for i, (path, bgr) in enumerate(images):
                prefix = os.path.join(tmp, f"out{i}_{out_h}x{out_w}")
                c_rgb = np.load(prefix + ".img.npy")
                c_bgr = c_rgb[..., ::-1]
                ref = letterbox(image=bgr.copy())
                assert ref.shape == c_bgr.shape, (bgr.shape, ref.shape, c_bgr.shape)
                ref_f = ref.astype(np.float32) / np.float32(255)
                diff = np.abs(np.rint(c_bgr * 255).astype(np.int32) - ref.astype(np.int32))
                worst = max(worst, int(diff.max()))
                inexact += int((c_bgr != ref_f).sum())
                if diff.max() > 0:
                    print(f"  {bgr.shape[:2]} -> {(out_h, out_w)}: max diff {diff.max()}, "
                          f"{int((diff > 0).sum())} of {diff.size} values differ")

                # Geometry and scale_boxes.
                h, w = bgr.shape[:2]
                params = letterbox.get_params({"img": bgr})
                info = np.load(prefix + ".info.npy")
                new_w, new_h = params["new_unpad"]
                assert (info[1], info[2], info[3], info[4]) == (
                    params["left"], params["top"], new_w, new_h
                ), (bgr.shape, info, params)
                ref_boxes = ops.scale_boxes((out_h, out_w), torch.from_numpy(boxes.copy()), (h, w))
                c_boxes = np.load(prefix + ".boxes.npy")
                box_diff = np.abs(c_boxes - ref_boxes.numpy())
                assert np.all(box_diff <= 1e-6 * np.maximum(1.0, np.abs(c_boxes))), (
                    bgr.shape, (out_h, out_w), float(box_diff.max())
                )
                checked += 1

    print(
        f"letterbox_vs_cv2: {checked} image/shape pairs vs cv2 {cv2.__version__}: "
        f"max |C - cv2| = {worst} (uint8 units), {inexact} float values not bit-equal, "
        f"scale_boxes ok"
    )
    return 0 if worst <= MAX_ALLOWED_DIFF else 1


if __name__ == "__main__":
    sys.exit(main())
