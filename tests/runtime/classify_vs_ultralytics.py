#!/usr/bin/env python3
"""Compare the classification helpers with Ultralytics' classify predictor.

Usage: classify_vs_ultralytics.py PATH/TO/classify_tool

1. Preprocess: random uint8 images of many shapes (square, portrait, landscape,
   1-pixel sides, smaller than the crop, already the crop size) go through
   ClassificationPredictor.preprocess itself (8.4.190: its host transforms
   Resize + CenterCrop from classify_transforms(size) on a PIL image, then
   BGR->RGB, /255 and Normalize on the tensor; and the single-step path with the
   full transforms) and through carve_classify_preprocess; the float results
   must be equal bit for bit (the largest difference is printed).
2. Softmax: the probabilities of Ultralytics' Classify head (eval: softmax of
   its logits) vs carve_softmax of the same logits; also torch.softmax of wide,
   shifted and one-hot-like logit vectors. The largest absolute difference is
   printed and must stay below 2e-7.
3. Top-k: carve_topk_probs vs Probs.top5 / top5conf on the head's output and
   torch.topk on random vectors.

Exits 0 with 'skipped' when torch, torchvision, PIL or ultralytics is missing.
"""

import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

try:
    import numpy as np
    import torch
    import torchvision.transforms as T
    from ultralytics.data.augment import classify_transforms
    from ultralytics.engine.results import Probs
    from ultralytics.models.yolo.classify import ClassificationPredictor
    from ultralytics.nn.modules.head import Classify
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"classify_vs_ultralytics: skipped ({e})")
    sys.exit(0)

SHAPES = [  # (h, w)
    (224, 224), (224, 300), (300, 224), (480, 640), (640, 480), (1080, 810), (810, 1080),
    (333, 517), (223, 225), (225, 224), (100, 50), (7, 13), (1, 1), (1, 1000), (1000, 1),
    (2000, 1500), (1500, 4000), (256, 256), (112, 112), (449, 447),
]
SIZES = [224, 225]
SOFTMAX_TOL = 2e-7


def make_image(rng, h, w):
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 255.0 / max(w - 1, 1) + yy * 128.0 / max(h - 1, 1))[..., None] * [1.0, 0.5, 0.25]
    return np.clip(base + rng.integers(-60, 61, (h, w, 3)), 0, 255).astype(np.uint8)


def make_predictor(size, split):
    """A ClassificationPredictor with the transforms setup_source gives a .pt model."""
    p = ClassificationPredictor()
    p.transforms = classify_transforms(size)
    tfl = p.transforms.transforms
    p.host_transforms = T.Compose(tfl[:2]) if split else None
    p.device_transform = tfl[-1] if split else None
    p.device = torch.device("cpu")
    p.model = SimpleNamespace(fp16=False, device=torch.device("cpu"))
    return p


def run(tool, *args):
    subprocess.run([tool, *map(str, args)], check=True)


def check_preprocess(tool, tmp, rng):
    worst, checked = 0.0, 0
    for size in SIZES:
        predictors = [make_predictor(size, True), make_predictor(size, False)]
        for h, w in SHAPES:
            bgr = make_image(rng, h, w)
            refs = [p.preprocess([bgr.copy()])[0].permute(1, 2, 0).numpy() for p in predictors]
            assert np.array_equal(refs[0], refs[1]), "the predictor's two paths disagree"
            ip, op = os.path.join(tmp, "img.npy"), os.path.join(tmp, "out.npy")
            np.save(ip, np.ascontiguousarray(bgr[..., ::-1]).astype(np.float32))  # RGB
            run(tool, "pre", op, ip, size)
            got = np.load(op)
            assert got.shape == refs[0].shape, (got.shape, refs[0].shape)
            diff = float(np.abs(got - refs[0]).max())
            worst = max(worst, diff)
            assert diff == 0.0, f"{h}x{w} -> {size}: max diff {diff * 255:.3g} / 255, " \
                f"{int((got != refs[0]).sum())} values differ"
            checked += 1
    return checked, worst


def check_softmax_topk(tool, tmp, rng):
    worst = 0.0
    torch.manual_seed(0)
    head = Classify(64, 1000).eval()
    with torch.no_grad():
        probs, logits = head(torch.randn(1, 64, 7, 7) * 3)
    vectors = [(logits[0].numpy(), probs[0].numpy())]
    for x in [rng.standard_normal(1000) * 10, rng.standard_normal(3) * 50 + 80,
              np.array([30.0, -30.0, 0.0, 29.0]), rng.standard_normal(1) * 5,
              rng.standard_normal(10001)]:
        x = torch.tensor(x, dtype=torch.float32)
        vectors.append((x.numpy(), torch.softmax(x, 0).numpy()))
    xp, op = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    for x, ref in vectors:
        np.save(xp, x)
        run(tool, "softmax", op, xp)
        got = np.load(op)
        worst = max(worst, float(np.abs(got - ref).max()))
    assert worst <= SOFTMAX_TOL, worst

    # Top-k: Probs.top5 on the head's output, torch.topk elsewhere.
    p = probs[0]
    np.save(xp, p.numpy())
    run(tool, "topk", op, xp, 5)
    got = np.load(op)
    r = Probs(p)
    assert got[:, 0].astype(int).tolist() == r.top5, (got[:, 0], r.top5)
    assert np.array_equal(got[:, 1], r.top5conf.numpy())
    for n, k in [(1000, 1), (1000, 5), (7, 7), (7, 10), (1, 1)]:
        v = torch.rand(n)
        np.save(xp, v.numpy())
        run(tool, "topk", op, xp, k)
        got = np.load(op)
        ref = torch.topk(v, min(k, n))
        assert np.array_equal(got[:, 0].astype(int), ref.indices.numpy())
        assert np.array_equal(got[:, 1], ref.values.numpy())
    return worst


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        checked, worst = check_preprocess(tool, tmp, rng)
        print(f"  preprocess: {checked} image/size pairs vs ClassificationPredictor.preprocess, "
              f"max |diff| {worst:.3g}")
        sm = check_softmax_topk(tool, tmp, rng)
        print(f"  softmax: max |diff| {sm:.3g} vs Classify / torch.softmax; top-k == top5 / topk")
    print("classify_vs_ultralytics: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
