"""YOLO26 heads (ultralytics/nn/modules/head.py), one builder per head class.

Only one inference branch is built, the one ``HeadSpec.head`` names:

* ``e2e``: the end-to-end ``one2one_*`` convs and the NMS-free top-k (``e2e_detect``), what Ultralytics runs with
  ``predict(nms=False)``;
* ``nms``: the one-to-many convs (``cv2``, ``cv3``, ``cv4`` / ``cv4_kpts``) and non-maximum suppression
  (``nms_detect``), what ``predict()`` runs by default.

The other branch's weights are never read, so ``prune_weights`` leaves them out of the package. A new head is a
new function in ``HEADS``. Every builder returns ``(layer output tensor, {graph output role: tensor})``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import CarveError
from .modules import Ctx


@dataclass(frozen=True)
class HeadSpec:
    """What a head builder needs beyond its inputs: parse_model's scaling and the checkpoint's settings."""

    nc: int
    imgsz: int          # input height: a level's stride is imgsz // its height (= width ratio: both /32)
    max_det: int
    width: float
    max_channels: int
    kpt_shape: tuple = (17, 3)
    head: str = "e2e"   # "e2e": one2one branch + top-k; "nms": one-to-many branch + NMS
    iou: float = 0.7    # nms: the suppression's IoU threshold
    agnostic: bool = False  # nms: class-agnostic suppression

    @property
    def branch(self) -> str:
        """The module-name prefix of the chosen branch's convs: ``one2one_`` (e2e) or none (nms)."""
        return "one2one_" if self.head == "e2e" else ""


def _scaled(c: int, spec: HeadSpec) -> int:
    return int(math.ceil(min(c, spec.max_channels) * spec.width / 8) * 8)


def _check_branch(ctx: Ctx, p: str, spec: HeadSpec) -> None:
    """--head nms needs the one-to-many branch, which a model fused for end-to-end inference has dropped (the
    checkpoint reader already refuses heads without the one-to-one branch)."""
    first = f"{p}.cv2.0.0.conv.weight"
    if spec.head == "nms" and first not in ctx.ckpt.tensors:
        raise CarveError(f"{p}: the checkpoint has no one-to-many branch (cv2, cv3), which --head nms runs "
                         f"({first} is missing)", location=ctx.ckpt.path,
                         hint="generate with --head e2e, or from the checkpoint before fuse() dropped that branch")


def _box_cls(ctx: Ctx, p: str, x: str, i: int, ch0: int, spec: HeadSpec) -> tuple:
    """One level of the chosen branch's box (4 raw ltrb distances) and class (nc logits) convs: one2one_cv2 /
    one2one_cv3 (e2e) or cv2 / cv3 (nms), the same layers (Detect deep-copies one into the other)."""
    b_ = spec.branch
    c2 = max(16, ch0 // 4, 4)
    c3 = max(ch0, min(spec.nc, 100))
    ci = ctx.gb.shape(x)[2]
    b = ctx.conv(f"{p}.{b_}cv2.{i}.0", x, c2, 3)
    b = ctx.conv(f"{p}.{b_}cv2.{i}.1", b, c2, 3)
    box = ctx.conv2d(f"{p}.{b_}cv2.{i}.2", b, 4)
    c = ctx.conv(f"{p}.{b_}cv3.{i}.0.0", x, ci, 3, g=ci)       # DWConv
    c = ctx.conv(f"{p}.{b_}cv3.{i}.0.1", c, c3, 1)
    c = ctx.conv(f"{p}.{b_}cv3.{i}.1.0", c, c3, 3, g=c3)       # DWConv
    c = ctx.conv(f"{p}.{b_}cv3.{i}.1.1", c, c3, 1)
    cls = ctx.conv2d(f"{p}.{b_}cv3.{i}.2", c, spec.nc)
    return box, cls


def _levels(ctx: Ctx, p: str, feats: list, spec: HeadSpec, extra=None) -> list:
    """Per level (box, cls) or (box, cls, extra(ctx, p, x, i)) of the chosen branch."""
    _check_branch(ctx, p, spec)
    ch0 = ctx.gb.shape(feats[0])[2]
    levels = []
    for i, x in enumerate(feats):
        box, cls = _box_cls(ctx, p, x, i, ch0, spec)
        levels.append((box, cls) if extra is None else (box, cls, extra(x, i)))
    return levels


def _post(ctx: Ctx, p: str, levels: list, spec: HeadSpec, task: str, extra: int) -> str:
    """The head's post-processing over per-level (box, cls[, extra]) tensors: rows (1, k, 6 + extra). e2e: the
    end-to-end top-k (``e2e_detect``); nms: decode, confidence filter and non-maximum suppression
    (``nms_detect``), as Ultralytics' non_max_suppression with its predictor's arguments."""
    inputs, strides = [], []
    for lv in levels:
        inputs += list(lv)
        strides.append(spec.imgsz // ctx.gb.shape(lv[0])[0])
    attrs = dict(nc=spec.nc, k=spec.max_det, strides=tuple(strides), inputs_per_level=len(levels[0]),
                 extra_channels=extra, task=task)
    if spec.head == "nms":
        attrs.update(iou=float(spec.iou), agnostic=bool(spec.agnostic))
        (y,) = ctx.gb.add("nms_detect", f"{p}.nms", inputs, ctx.layer, attrs,
                          source=f"one-to-many decode + {'class-agnostic' if spec.agnostic else 'class-aware'} NMS "
                                 f"(iou {spec.iou:g}, max_det {spec.max_det}) ({task})", outputs=["output0"])
        return y
    (y,) = ctx.gb.add("e2e_detect", f"{p}.e2e", inputs, ctx.layer, attrs,
                      source=f"end-to-end top-k (k={spec.max_det}) + gather ({task})", outputs=["output0"])
    return y


def detect(ctx: Ctx, p: str, feats: list, args: list, spec: HeadSpec) -> tuple:
    """Detect (reg_max 1): rows (1, k, 6) = x1, y1, x2, y2, score, class."""
    y = _post(ctx, p, _levels(ctx, p, feats, spec), spec, "detect", 0)
    return y, {"output0": y}


def _extra_branch(ctx: Ctx, p: str, x: str, c4: int, cout: int, final: str) -> str:
    """Conv3x3 -> Conv3x3 -> plain 1x1 conv: the extra branch of seg/obb (pose names its last conv apart)."""
    e = ctx.conv(f"{p}.0", x, c4, 3)
    e = ctx.conv(f"{p}.1", e, c4, 3)
    return ctx.conv2d(final, e, cout)


def segment26(ctx: Ctx, p: str, feats: list, args: list, spec: HeadSpec) -> tuple:
    """Segment26: rows (1, k, 6 + nm) with raw mask coefficients, and prototypes (H/4, W/4, nm) from Proto26."""
    nm = int(args[1]) if len(args) > 1 else 32
    npr = _scaled(int(args[2]) if len(args) > 2 else 256, spec)
    c4 = max(ctx.gb.shape(feats[0])[2] // 4, nm)
    cv4 = f"{p}.{spec.branch}cv4"
    levels = _levels(ctx, p, feats, spec, lambda x, i: _extra_branch(ctx, f"{cv4}.{i}", x, c4, nm, f"{cv4}.{i}.2"))
    y = _post(ctx, p, levels, spec, "segment", nm)
    protos = proto26(ctx, f"{p}.proto", feats, npr, nm)
    return y, {"output0": y, "output1": protos}


def proto26(ctx: Ctx, p: str, feats: list, c_: int, c2: int) -> str:
    """Proto26: f = P3 + up2(refine0(P4)) + up4(refine1(P5)); cv3(cv2(deconv(cv1(feat_fuse(f)))))."""
    ch0 = ctx.gb.shape(feats[0])[2]
    f = feats[0]
    for i, x in enumerate(feats[1:]):
        r = ctx.conv(f"{p}.feat_refine.{i}", x, ch0, 1)
        for j in range(i + 1):  # nearest x2^(i+1) as exact x2 steps
            r = ctx.gb.add("upsample_nearest", f"{p}.feat_refine.{i}.up{j}", [r], ctx.layer, dict(scale=2),
                           source="Upsample x2 nearest")[0]
        f = ctx.add(f"{p}.add{i}", f, r)
    f = ctx.conv(f"{p}.feat_fuse", f, c_, 3)
    f = ctx.conv(f"{p}.cv1", f, c_, 3)
    cin = ctx.gb.shape(f)[2]
    params = {"weight": ctx.param(f"{p}.upsample.weight", (cin, c_, 2, 2)),
              "bias": ctx.param(f"{p}.upsample.bias", (c_,))}
    f = ctx.gb.add("deconv2d", f"{p}.upsample", [f], ctx.layer,
                   dict(kernel=(2, 2), stride=2, pad=0, groups=1, cin=cin, cout=c_, act="none"), params,
                   f"ConvTranspose2d 2x2/2 {cin}->{c_} +bias")[0]
    f = ctx.conv(f"{p}.cv2", f, c_, 3)
    return ctx.conv(f"{p}.cv3", f, c2, 1, out="output1")


def pose26(ctx: Ctx, p: str, feats: list, args: list, spec: HeadSpec) -> tuple:
    """Pose26: rows (1, k, 6 + nk) with keypoints decoded to input pixels (x, y) and sigmoid visibility."""
    nkpt, ndim = spec.kpt_shape
    nk = nkpt * ndim
    c4 = max(ctx.gb.shape(feats[0])[2] // 4, nkpt * (ndim + 2))
    b_ = spec.branch

    def kpts(x, i):
        e = ctx.conv(f"{p}.{b_}cv4.{i}.0", x, c4, 3)
        e = ctx.conv(f"{p}.{b_}cv4.{i}.1", e, c4, 3)
        return ctx.conv2d(f"{p}.{b_}cv4_kpts.{i}", e, nk)
    y = _post(ctx, p, _levels(ctx, p, feats, spec, kpts), spec, "pose", nk)
    return y, {"output0": y}


def obb26(ctx: Ctx, p: str, feats: list, args: list, spec: HeadSpec) -> tuple:
    """OBB26: rows (1, k, 7) = cx, cy, w, h, score, class, raw angle (radians)."""
    ne = int(args[1]) if len(args) > 1 else 1
    c4 = max(ctx.gb.shape(feats[0])[2] // 4, ne)
    cv4 = f"{p}.{spec.branch}cv4"
    levels = _levels(ctx, p, feats, spec, lambda x, i: _extra_branch(ctx, f"{cv4}.{i}", x, c4, ne, f"{cv4}.{i}.2"))
    y = _post(ctx, p, levels, spec, "obb", ne)
    return y, {"output0": y}


def classify(ctx: Ctx, p: str, feats: list, args: list, spec: HeadSpec) -> tuple:
    """Classify: softmax(linear(avgpool(Conv1x1 c1->1280))), probabilities (1, 1, nc)."""
    x = feats[0]
    c_ = 1280
    x = ctx.conv(f"{p}.conv", x, c_, 1)
    x = ctx.gb.add("global_avgpool", f"{p}.pool", [x], ctx.layer, source="AdaptiveAvgPool2d(1)")[0]
    params = {"weight": ctx.param(f"{p}.linear.weight", (spec.nc, c_)), "bias": ctx.param(f"{p}.linear.bias", (spec.nc,))}
    x = ctx.gb.add("linear", f"{p}.linear", [x], ctx.layer, dict(cin=c_, cout=spec.nc), params,
                   f"Linear {c_}->{spec.nc}")[0]
    y = ctx.gb.add("softmax", f"{p}.softmax", [x], ctx.layer, source="softmax over classes", outputs=["output0"])[0]
    return y, {"output0": y}


HEADS = {"Detect": detect, "Segment26": segment26, "Pose26": pose26, "OBB26": obb26, "Classify": classify}


def build_head(ctx: Ctx, kind: str, p: str, feats: list, args: list, spec: HeadSpec) -> tuple:
    if kind not in HEADS:
        raise CarveError(f"{p}: head {kind} is not supported (supported: {', '.join(HEADS)})")
    return HEADS[kind](ctx, p, feats, args, spec)
