#!/usr/bin/env python3
"""Compare carve_e2e_postprocess_task and the coordinate mapping with Ultralytics.

Usage: e2e_task_vs_ultralytics.py PATH/TO/task_tool

Builds Ultralytics' own YOLO26 task heads with random weights, reg_max=1,
end2end=True and strides 8/16/32 -- Segment26(nm=32), Pose26(kpt_shape=(17, 3))
and OBB26(ne=1) -- plus Detect, runs each in eval mode on random feature maps,
feeds the raw one2one outputs (per level, NHWC: box ltrb, class logits and the
task's extra channels: mask coefficients, one2one_cv4_kpts(one2one_cv4(x)), or
the raw angle) to the C post-processing and checks that the rows equal the
head's output y: same anchors and classes in the same order
(up to the order of equal scores, which torch.topk leaves open), boxes, scores,
keypoints, angles and coefficients within float rounding (the tolerances below;
the largest differences are printed).

Then maps those rows back from the input (8 x the P3 grid) to source images of several sizes with
carve_scale_boxes_xyxy, carve_scale_coords and carve_scale_boxes_xywhr and
compares them with ops.scale_boxes, ops.scale_coords and
ops.scale_boxes(xywh=True) on the same rows.

Exits 0 with 'skipped' when torch or ultralytics is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from ultralytics.nn.modules.head import OBB26, Detect, Pose26, Segment26
    from ultralytics.utils import ops
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"e2e_task_vs_ultralytics: skipped ({e})")
    sys.exit(0)

CH = (16, 32, 64)
STRIDES = (8.0, 16.0, 32.0)
REL_TOL = 2e-6  # relative to max(1, |value|): float rounding, cos/sin and exp ulps


def nhwc(t):
    return np.ascontiguousarray(t[0].permute(1, 2, 0).numpy())


def build(task, nc):
    if task == "detect":
        head = Detect(nc=nc, reg_max=1, end2end=True, ch=CH)
    elif task == "segment":
        head = Segment26(nc=nc, nm=32, npr=32, reg_max=1, end2end=True, ch=CH)
    elif task == "pose":
        head = Pose26(nc=nc, kpt_shape=(17, 3), reg_max=1, end2end=True, ch=CH)
    else:
        head = OBB26(nc=nc, ne=1, reg_max=1, end2end=True, ch=CH)
    head.stride = torch.tensor(STRIDES)
    head.end2end = True
    return head


def raw_extras(task, head, feats):
    """The raw one2one extra channels of each level, NCHW."""
    if task == "segment":
        return [head.one2one_cv4[i](feats[i]) for i in range(3)]
    if task == "pose":
        return [head.one2one_cv4_kpts[i](head.one2one_cv4[i](feats[i])) for i in range(3)]
    if task == "obb":
        return [head.one2one_cv4[i](feats[i]) for i in range(3)]
    return None


def untie(got, ref):
    """Both row sets with the rows of each run of equal scores sorted by class and box.

    torch.topk leaves the order of equal scores open (the C code puts the lower
    anchor-rank * nc + class index first, test_e2e.c checks that), and random
    heads do produce exactly equal sigmoids; a run is a maximal span of ref rows
    whose consecutive scores differ by at most 1e-6 (the C sigmoid may differ
    from torch's by an ulp).
    """
    got, ref = got.copy(), ref.copy()
    start = 0
    for i in range(1, len(ref) + 1):
        if i == len(ref) or ref[i - 1, 4] - ref[i, 4] > 1e-6:
            for a in (got, ref):
                span = a[start:i]
                a[start:i] = span[np.lexsort((span[:, 1], span[:, 0], span[:, 5]))]
            start = i
    return got, ref


def run_case(tool, tmp, task, nc, k, grids, seed):
    torch.manual_seed(seed)
    head = build(task, nc)
    head.max_det = k
    head.eval()
    feats = [torch.randn(1, c, h, w) * 2 for c, (h, w) in zip(CH, grids)]
    with torch.no_grad():
        out = head(feats)
        y = out[0][0] if task == "segment" else out[0]
        boxes = [head.one2one_cv2[i](feats[i]) for i in range(3)]
        logits = [head.one2one_cv3[i](feats[i]) for i in range(3)]
        extras = raw_extras(task, head, feats)
    ref = y[0].numpy()
    extra = 0 if extras is None else extras[0].shape[1]

    name = f"{task}{seed}"
    rows_path = os.path.join(tmp, f"{name}.rows.npy")
    args = [tool, "e2e", rows_path, str(k), task, str(extra)]
    for i in range(3):
        paths = [os.path.join(tmp, f"{name}.{part}{i}.npy") for part in ("box", "cls", "ext")]
        np.save(paths[0], nhwc(boxes[i]))
        np.save(paths[1], nhwc(logits[i]))
        if extras is not None:
            np.save(paths[2], nhwc(extras[i]))
        else:
            paths[2] = "-"
        args += paths + [str(int(STRIDES[i]))]
    subprocess.run(args, check=True)
    got = np.load(rows_path)

    assert got.shape == ref.shape, (task, got.shape, ref.shape)
    got, ref = untie(got, ref)
    assert np.array_equal(got[:, 5], ref[:, 5]), f"{task}: classes differ"
    rel = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
    worst = {
        "box": float(rel[:, :4].max()),
        "score": float(rel[:, 4].max()),
        "extra": float(rel[:, 6:].max()) if extra else 0.0,
    }
    assert max(worst.values()) <= REL_TOL, (task, worst)
    return got, worst


def check_scaling(tool, tmp, task, rows, in_h, in_w):
    """Rows of an in_h x in_w input mapped back to several source sizes."""
    worst = 0.0
    for src_h, src_w in [(1080, 810), (720, 1280), (640, 640), (333, 517), (17, 1000)]:
        kinds = {"pose": ["xyxy", "kpts"], "obb": ["xywhr"]}.get(task, ["xyxy"])
        for kind in kinds:
            data = rows[:, 6:] if kind == "kpts" else rows[:, :4]
            data = np.ascontiguousarray(data)
            in_path = os.path.join(tmp, "scale_in.npy")
            out_path = os.path.join(tmp, "scale_out.npy")
            np.save(in_path, data)
            args = [kind, src_w, src_h, in_w, in_h]
            subprocess.run([tool, "scale", out_path, in_path, *map(str, args)], check=True)
            got = np.load(out_path)
            t = torch.from_numpy(data.copy())
            if kind == "xyxy":
                ref = ops.scale_boxes((in_h, in_w), t, (src_h, src_w)).numpy()
            elif kind == "xywhr":
                ref = ops.scale_boxes((in_h, in_w), t, (src_h, src_w), xywh=True).numpy()
            else:
                kp = t.view(len(t), -1, 3)
                ref = ops.scale_coords((in_h, in_w), kp, (src_h, src_w)).view(len(t), -1).numpy()
            assert got.shape == ref.shape
            diff = float((np.abs(got - ref) / np.maximum(1.0, np.abs(ref))).max())
            assert diff <= 1e-6, (task, kind, (src_h, src_w), diff)
            if kind == "kpts":  # visibility untouched
                assert np.array_equal(got[:, 2::3], data[:, 2::3])
            worst = max(worst, diff)
    return worst


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    # One torch thread: the reference must be the same on every run. With 2 threads, the 128x128 OBB case's
    # reference moved by 7.3e-6 (relative) in 2 of 8 runs with the machine loaded, while the C rows were the same
    # bits every time (probably torch's split of the elementwise decode between threads, vector loops and scalar
    # tails computing cos / sin differently). Reproduce: run this script with two `yes > /dev/null` beside it.
    torch.set_num_threads(1)
    cases = [
        # task, nc, k, grids (P3, P4, P5)
        ("segment", 80, 300, [(80, 80), (40, 40), (20, 20)]),
        ("segment", 3, 1, [(60, 80), (30, 40), (15, 20)]),
        ("pose", 1, 300, [(80, 80), (40, 40), (20, 20)]),
        ("pose", 1, 50, [(60, 80), (30, 40), (15, 20)]),
        ("pose", 2, 1000, [(4, 6), (2, 3), (1, 2)]),
        ("obb", 15, 300, [(128, 128), (64, 64), (32, 32)]),
        ("obb", 15, 1, [(60, 80), (30, 40), (15, 20)]),
        ("obb", 1, 84, [(8, 8), (4, 4), (2, 2)]),
        ("detect", 80, 300, [(60, 80), (30, 40), (15, 20)]),
    ]
    scale_worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (task, nc, k, grids) in enumerate(cases):
            rows, worst = run_case(tool, tmp, task, nc, k, grids, seed)
            in_h, in_w = grids[0][0] * 8, grids[0][1] * 8
            scale_worst = max(scale_worst, check_scaling(tool, tmp, task, rows, in_h, in_w))
            print(f"  {task}: nc={nc} k={k} grids={grids[0]}.. -> {rows.shape}, max rel diff "
                  + ", ".join(f"{key} {v:.2g}" for key, v in worst.items()))
    print(f"e2e_task_vs_ultralytics: {len(cases)} cases match the heads' eval output; "
          f"scale_boxes / scale_coords / scale_boxes(xywh) max rel diff {scale_worst:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
