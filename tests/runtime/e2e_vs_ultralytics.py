#!/usr/bin/env python3
"""Compare carve_e2e_postprocess with Ultralytics' own end2end Detect head.

Usage: e2e_vs_ultralytics.py PATH/TO/e2e_tool

Builds Detect(nc, reg_max=1, end2end=True) with random weights and strides
8/16/32, runs it in eval mode on random feature maps of a 640x640 and a 480x640
input, feeds the raw one2one box and class outputs (per level, NHWC) to the C
postprocess and checks that the (k, 6) rows match Detect.forward's
[x1, y1, x2, y2, score, class] rows: same anchors and classes in the same order,
values within float rounding. Rows of exactly equal scores are compared in
(class, box) order: rare with random logits, but the 640x640 case's 512000
float32 scores can hold a pair, and torch.topk leaves their order open (carve's
order of ties is covered by test_e2e.c). Exits 0 with 'skipped' when torch or
ultralytics is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from ultralytics.nn.modules.head import Detect
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"e2e_vs_ultralytics: skipped ({e})")
    sys.exit(0)


def tie_order(rows):
    """Rows in their own score order, rows of exactly equal scores by class then box: float32 scores of a few
    hundred thousand random logits do tie now and then (80x80 anchors x 80 classes), and torch.topk leaves their
    order open."""
    return rows[np.lexsort((rows[:, 3], rows[:, 2], rows[:, 1], rows[:, 0], rows[:, 5], -rows[:, 4]))]


def run_case(tool, tmp, name, nc, k, grids, seed):
    torch.manual_seed(seed)
    ch = (16, 32, 64)
    head = Detect(nc=nc, reg_max=1, end2end=True, ch=ch)
    head.stride = torch.tensor([8.0, 16.0, 32.0])
    head.end2end = True
    head.max_det = k
    head.eval()
    feats = [torch.randn(1, c, h, w) * 2 for c, (h, w) in zip(ch, grids)]
    with torch.no_grad():
        y, _ = head(feats)
        boxes = [head.one2one_cv2[i](feats[i]) for i in range(3)]
        logits = [head.one2one_cv3[i](feats[i]) for i in range(3)]
    ref = y[0].numpy()

    args = [tool, os.path.join(tmp, f"{name}.rows.npy"), str(k)]
    for i, (b, c) in enumerate(zip(boxes, logits)):
        bp, cp = os.path.join(tmp, f"{name}.box{i}.npy"), os.path.join(tmp, f"{name}.cls{i}.npy")
        np.save(bp, np.ascontiguousarray(b[0].permute(1, 2, 0).numpy()))
        np.save(cp, np.ascontiguousarray(c[0].permute(1, 2, 0).numpy()))
        args += [bp, cp, str(int(head.stride[i]))]
    subprocess.run(args, check=True)
    got = np.load(os.path.join(tmp, f"{name}.rows.npy"))

    assert got.shape == ref.shape, (got.shape, ref.shape)
    got, ref = tie_order(got), tie_order(ref)
    assert np.array_equal(got[:, 5], ref[:, 5]), f"{name}: classes differ"
    score_err = float(np.abs(got[:, 4] - ref[:, 4]).max())
    box_err = float((np.abs(got[:, :4] - ref[:, :4]) / np.maximum(1.0, np.abs(ref[:, :4]))).max())
    assert score_err <= 1e-6 and box_err <= 1e-6, (name, score_err, box_err)
    return got.shape[0], score_err, box_err


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    cases = [
        ("square", 80, 300, [(80, 80), (40, 40), (20, 20)]),
        ("rect", 80, 300, [(60, 80), (30, 40), (15, 20)]),
        ("few_classes", 3, 50, [(8, 8), (4, 4), (2, 2)]),
        ("k_is_A", 2, 84, [(8, 8), (4, 4), (2, 2)]),
        ("k_over_A", 5, 1000, [(4, 6), (2, 3), (1, 2)]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, nc, k, grids) in enumerate(cases):
            rows, score_err, box_err = run_case(tool, tmp, name, nc, k, grids, seed)
            print(f"  {name}: nc={nc} k={k} -> {rows} rows, max score diff {score_err:.2g}, "
                  f"max box rel diff {box_err:.2g}")
    print(f"e2e_vs_ultralytics: {len(cases)} cases match Detect.forward (end2end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
