"""YOLO26 heads (ultralytics/nn/modules/head.py), one builder per head class.

Only the inference branch is built: the end-to-end ``one2one_*`` convs and
the NMS-free post-processing. A new head is a new function in ``HEADS``.
"""

from __future__ import annotations

from ..errors import CarveError
from .modules import Ctx


def _detect_branches(ctx: Ctx, p: str, feats: list, nc: int, reg_max: int = 1) -> list:
    """Per level: box distances (4 raw ltrb) and class logits (nc) of the one2one branch."""
    ch0 = ctx.gb.shape(feats[0])[2]
    c2 = max(16, ch0 // 4, reg_max * 4)
    c3 = max(ch0, min(nc, 100))
    out = []
    for i, x in enumerate(feats):
        ci = ctx.gb.shape(x)[2]
        b = ctx.conv(f"{p}.one2one_cv2.{i}.0", x, c2, 3)
        b = ctx.conv(f"{p}.one2one_cv2.{i}.1", b, c2, 3)
        box = ctx.conv2d(f"{p}.one2one_cv2.{i}.2", b, 4 * reg_max)
        c = ctx.conv(f"{p}.one2one_cv3.{i}.0.0", x, ci, 3, g=ci)       # DWConv
        c = ctx.conv(f"{p}.one2one_cv3.{i}.0.1", c, c3, 1)
        c = ctx.conv(f"{p}.one2one_cv3.{i}.1.0", c, c3, 3, g=c3)       # DWConv
        c = ctx.conv(f"{p}.one2one_cv3.{i}.1.1", c, c3, 1)
        cls = ctx.conv2d(f"{p}.one2one_cv3.{i}.2", c, nc)
        out.append((box, cls))
    return out


def detect(ctx: Ctx, p: str, feats: list, nc: int, imgsz: int, max_det: int) -> tuple:
    """Detect (end2end, reg_max 1): rows (1, k, 6) = x1, y1, x2, y2, score, class."""
    levels = _detect_branches(ctx, p, feats, nc)
    inputs, strides = [], []
    for box, cls in levels:
        inputs += [box, cls]
        strides.append(imgsz // ctx.gb.shape(box)[0])
    (y,) = ctx.gb.add("e2e_detect", f"{p}.e2e", inputs, ctx.layer,
                      dict(nc=nc, k=max_det, strides=tuple(strides), inputs_per_level=2, extra_channels=0),
                      source=f"end-to-end top-k (k={max_det}) + gather", outputs=["output0"])
    return y, {"output0": y}


HEADS = {"Detect": detect}


def build_head(ctx: Ctx, kind: str, p: str, feats: list, nc: int, imgsz: int, max_det: int) -> tuple:
    if kind not in HEADS:
        raise CarveError(f"{p}: head {kind} is not supported yet (supported: {', '.join(HEADS)})")
    return HEADS[kind](ctx, p, feats, nc, imgsz, max_det)
