#!/usr/bin/env python3
"""Compare carve_nms_postprocess with Ultralytics' one-to-many head + non_max_suppression.

Usage: nms_vs_ultralytics.py PATH/TO/nms_tool

Builds Ultralytics' own heads without the one-to-one branch (end2end=False, reg_max=1, strides 8/16/32):
Detect, Segment26(nm=32), Pose26(kpt_shape=(17, 3)) and OBB26(ne=1), with random weights, runs each in
eval mode on feature maps, and feeds the raw per-level outputs (NHWC: cv2 box ltrb, cv3 class logits, and
cv4 mask coefficients, cv4_kpts(cv4(x)) keypoints or the cv4 raw angle) to the C code. The reference is
the head's decoded output through ultralytics.utils.nms.non_max_suppression exactly as
DetectionPredictor.postprocess calls it (multi_label False, classes None, nc 0 for detect else the class
count, rotated for obb), with torchvision imported as the predictor imports it (so detect, segment and pose
go through torchvision.ops.nms, obb through TorchNMS.fast_nms with batch_probiou).

The cases cover Ultralytics' defaults (conf 0.25, iou 0.7, max_det 300) and the edges: class-agnostic;
ties (constant feature maps: every inner anchor of a level has the same score); every box suppressed but
one per class (huge boxes); none suppressed (tiny boxes), with max_det cutting the kept boxes; conf above
every score; iou 0 and 1; more candidates than max_nms (30000); class offsets smaller than the boxes. The
rows must be the same detections in the same order (up to the order of scores within 1e-6, as the C
sigmoid may differ from torch's by an ulp), values within float rounding (REL_TOL).

Exits 0 with 'skipped' when torch, torchvision or ultralytics is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision  # noqa: F401  (the predictor imports it: non_max_suppression then uses its nms)
    from ultralytics.nn.modules.head import OBB26, Detect, Pose26, Segment26
    from ultralytics.utils import nms
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"nms_vs_ultralytics: skipped ({e})")
    sys.exit(0)

CH = (16, 32, 64)
STRIDES = (8.0, 16.0, 32.0)
REL_TOL = 2e-6  # relative to max(1, |value|): sigmoid, cos / sin and exp ulps


def nhwc(t):
    return np.ascontiguousarray(t[0].permute(1, 2, 0).numpy())


def build(task, nc):
    if task == "detect":
        head = Detect(nc=nc, reg_max=1, end2end=False, ch=CH)
    elif task == "segment":
        head = Segment26(nc=nc, nm=32, npr=32, reg_max=1, end2end=False, ch=CH)
    elif task == "pose":
        head = Pose26(nc=nc, kpt_shape=(17, 3), reg_max=1, end2end=False, ch=CH)
    else:
        head = OBB26(nc=nc, ne=1, reg_max=1, end2end=False, ch=CH)
    head.stride = torch.tensor(STRIDES)
    return head.eval()


def raw_extras(task, head, feats):
    """The raw one-to-many extra channels of each level, NCHW."""
    if task in ("segment", "obb"):
        return [head.cv4[i](feats[i]) for i in range(3)]
    if task == "pose":
        return [head.cv4_kpts[i](head.cv4[i](feats[i])) for i in range(3)]
    return None


def shape_head(head, feats, conf, box_px, box_gain, candidates, cls_bias):
    """Final conv biases: boxes about 8 grid cells wide (ltrb 4 + 0.3 x the conv: neighbours overlap by IoU
    0.6-0.8), or, when box_px is set, every ltrb distance box_px / 2 pixels (box_gain 0: exactly, whatever the
    features); class logits shifted so that `candidates` anchors score above conf (the threshold halfway
    between the candidates-th and the next best anchor's logit), or by cls_bias."""
    with torch.no_grad():
        for i, s in enumerate(STRIDES):
            box = head.cv2[i][-1]
            box.weight.mul_(box_gain)
            box.bias.mul_(box_gain).add_(4.0) if box_px is None else box.bias.fill_(box_px / 2 / s)
        if candidates is not None:
            best = torch.cat([head.cv3[i](feats[i]).amax(1).flatten() for i in range(3)]).sort(descending=True).values
            cls_bias = float(np.log(conf / (1 - conf))) - float(best[candidates - 1] + best[candidates]) / 2
        for i in range(3):
            head.cv3[i][-1].bias.add_(cls_bias)


def untie(got, ref):
    """Both row sets with the rows of each run of scores within 1e-6 sorted by class and box."""
    got, ref = got.copy(), ref.copy()
    start = 0
    for i in range(1, len(ref) + 1):
        if i == len(ref) or ref[i - 1, 4] - ref[i, 4] > 1e-6:
            for a in (got, ref):
                span = a[start:i]
                a[start:i] = span[np.lexsort((span[:, 1], span[:, 0], span[:, 5]))]
            start = i
    return got, ref


def run_case(tool, tmp, case, seed):
    task, nc, grids = case["task"], case["nc"], case["grids"]
    conf, iou, agnostic, max_det = case.get("conf", 0.25), case.get("iou", 0.7), case.get("agnostic", False), \
        case.get("max_det", 300)
    torch.manual_seed(seed)
    head = build(task, nc)
    if case.get("features") == "const":
        feats = [torch.full((1, c, h, w), 0.5) for c, (h, w) in zip(CH, grids)]
    else:
        feats = [torch.randn(1, c, h, w) * 2 for c, (h, w) in zip(CH, grids)]
    shape_head(head, feats, conf, case.get("box_px"), case.get("box_gain", 0.3), case.get("candidates"),
               case.get("cls_bias", 0.0))
    with torch.no_grad():
        out = head(feats)
        y = out[0][0] if task == "segment" else out[0]  # (1, 4 + nc + extra, A), decoded
        boxes = [head.cv2[i](feats[i]) for i in range(3)]
        logits = [head.cv3[i](feats[i]) for i in range(3)]
        extras = raw_extras(task, head, feats)
        ref = nms.non_max_suppression(y, conf, iou, None, agnostic, max_det=max_det,
                                      nc=0 if task == "detect" else nc, end2end=False, rotated=task == "obb")[0]
        candidates = int((y[0, 4:4 + nc].amax(0) > conf).sum())
    ref = ref.numpy()
    extra = 0 if extras is None else extras[0].shape[1]

    name = f"case{seed}"
    rows_path = os.path.join(tmp, f"{name}.rows.npy")
    args = [tool, rows_path, task, str(extra), repr(conf), repr(iou), str(int(agnostic)), str(max_det)]
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

    what = f"case {seed} ({case['why']})"
    assert got.shape == ref.shape, f"{what}: rows {got.shape}, Ultralytics {ref.shape}"
    got, ref = untie(got, ref)
    assert np.array_equal(got[:, 5], ref[:, 5]), f"{what}: classes differ"
    rel = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
    worst = float(rel.max()) if rel.size else 0.0
    assert worst <= REL_TOL, f"{what}: max rel diff {worst:.3g}"
    if "expect" in case:
        assert case["expect"](len(ref), candidates), f"{what}: {len(ref)} rows of {candidates} candidates"
    return len(ref), candidates, worst


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    torch.set_num_threads(1)  # a reference that is the same bits on every run (see e2e_task_vs_ultralytics.py)
    g80 = [(80, 80), (40, 40), (20, 20)]
    g60 = [(60, 80), (30, 40), (15, 20)]
    small = [(8, 8), (4, 4), (2, 2)]
    mid = [(16, 16), (8, 8), (4, 4)]
    suppressing = lambda kept, cand: 0 < kept < min(cand, 300)  # noqa: E731
    cases = [
        dict(why="detect, defaults", task="detect", nc=80, grids=g60, candidates=200, expect=suppressing),
        dict(why="detect, defaults, 1 class", task="detect", nc=1, grids=g80, candidates=200, expect=suppressing),
        dict(why="detect, agnostic", task="detect", nc=80, grids=g60, candidates=200, agnostic=True,
             expect=suppressing),
        dict(why="detect, conf 0.001, max_det cut", task="detect", nc=5, grids=g60, conf=0.001, max_det=100,
             expect=lambda kept, cand: kept == 100),
        dict(why="detect, ties (constant features)", task="detect", nc=3, grids=mid, features="const",
             cls_bias=1.0, expect=suppressing),
        dict(why="detect, ties, agnostic", task="detect", nc=3, grids=small, features="const", cls_bias=1.0,
             agnostic=True, expect=suppressing),
        dict(why="detect, all suppressed but one per class", task="detect", nc=4, grids=small, box_px=4000,
             box_gain=0.0, cls_bias=3.0, expect=lambda kept, cand: 0 < kept <= 4 < cand),
        dict(why="detect, all suppressed, agnostic", task="detect", nc=4, grids=small, box_px=4000, box_gain=0.0,
             cls_bias=3.0, agnostic=True, expect=lambda kept, cand: kept == 1),
        dict(why="detect, boxes wider than the class offset", task="detect", nc=4, grids=small, box_px=20000,
             box_gain=0.0, cls_bias=3.0, expect=suppressing),
        dict(why="detect, none suppressed", task="detect", nc=4, grids=small, box_px=2, box_gain=0.0, cls_bias=3.0,
             expect=lambda kept, cand: kept == cand),
        dict(why="detect, none suppressed, max_det cut", task="detect", nc=4, grids=g60, box_px=2, box_gain=0.0,
             cls_bias=3.0, max_det=300, expect=lambda kept, cand: kept == 300 and cand > 300),
        dict(why="detect, conf above every score", task="detect", nc=4, grids=small, conf=0.9999,
             expect=lambda kept, cand: kept == 0),
        dict(why="detect, iou 0", task="detect", nc=8, grids=g60, candidates=200, iou=0.0, expect=suppressing),
        dict(why="detect, iou 1", task="detect", nc=8, grids=g60, candidates=200, iou=1.0,
             expect=lambda kept, cand: kept == min(cand, 300)),
        dict(why="detect, more candidates than max_nms", task="detect", nc=2, grids=[(160, 160), (80, 80), (40, 40)],
             box_px=2, box_gain=0.0, cls_bias=3.0, expect=lambda kept, cand: cand > 30000 and kept == 300),
        dict(why="segment, defaults", task="segment", nc=80, grids=g60, candidates=200, expect=suppressing),
        dict(why="segment, agnostic, 3 classes", task="segment", nc=3, grids=g80, candidates=200, agnostic=True,
             expect=suppressing),
        dict(why="pose, defaults", task="pose", nc=1, grids=g80, candidates=200, expect=suppressing),
        dict(why="pose, ties", task="pose", nc=1, grids=mid, features="const", cls_bias=1.0, expect=suppressing),
        dict(why="obb, defaults", task="obb", nc=15, grids=g60, candidates=200, expect=suppressing),
        dict(why="obb, agnostic", task="obb", nc=15, grids=g60, candidates=200, agnostic=True, expect=suppressing),
        dict(why="obb, all suppressed but one per class", task="obb", nc=3, grids=small, box_px=4000, box_gain=0.0,
             cls_bias=3.0, expect=lambda kept, cand: 0 < kept <= 3 < cand),
        dict(why="obb, none suppressed", task="obb", nc=3, grids=small, box_px=2, box_gain=0.0, cls_bias=3.0,
             expect=lambda kept, cand: kept == cand),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for seed, case in enumerate(cases):
            kept, cand, worst = run_case(tool, tmp, case, seed)
            print(f"  case {seed:2d} {case['why']}: {cand} candidates -> {kept} rows, max rel diff {worst:.2g}")
    print(f"nms_vs_ultralytics: {len(cases)} cases match non_max_suppression on the one-to-many heads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
