"""YOLO26 frontend: architecture yaml + scale + checkpoint -> IR Graph.

Mirrors Ultralytics' ``parse_model`` (nn/tasks.py): repeats scaled by depth,
channels by width (capped by max_channels, rounded up to 8), C3k2's c3k
forced on m/l/x, heads extended with the input channels.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import CarveError
from ..ir import GraphBuilder, Layer, validate
from ..manifest import format_hw, input_hw, manifest_for
from . import modules as M
from .heads import HEADS, HeadSpec, build_head

_SCALED = {"Conv", "C3k2", "SPPF", "C2PSA"}
_REPEATED = {"C3k2", "C2PSA"}
_KNOWN = _SCALED | {"nn.Upsample", "Concat"} | set(HEADS)


def _make_divisible(x: float, divisor: int = 8) -> int:
    return int(math.ceil(x / divisor) * divisor)


def check_same_architecture(arch: dict, ckpt, scale: str, manifest) -> None:
    """The checkpoint's embedded yaml must describe the manifest's architecture and scale."""
    y = ckpt.yaml
    if not y:
        return
    for part in ("backbone", "head"):
        rows = y.get(part, [])
        if not (isinstance(rows, list) and all(isinstance(r, list) and len(r) == 4 for r in rows)):
            raise CarveError(f"the checkpoint's yaml '{part}' is not a list of [from, repeats, module, args] rows",
                             location=ckpt.path, hint="the checkpoint's attributes are damaged or not from Ultralytics")
        theirs = [list(map(_norm, row)) for row in rows]
        ours = [list(map(_norm, row)) for row in arch[part]]
        if theirs != ours:
            found = sorted({str(r[2]) for r in theirs} - {str(r[2]) for r in ours})
            raise CarveError(
                f"architecture differs from {manifest.arch_config.rsplit('/', 1)[-1]} in its {part}"
                + (f" (modules not in YOLO26: {', '.join(found)})" if found else ""),
                location=ckpt.path, hint="carve supports the YOLO26 family; is this a YOLOv8/YOLO11/RT-DETR checkpoint?")
    ck_scale = y.get("scale")
    if ck_scale and not isinstance(ck_scale, str):
        raise CarveError(f"the checkpoint's yaml scale is {ck_scale!r:.40}, not a name", location=ckpt.path)
    if ck_scale and ck_scale != scale:
        right = manifest_for(manifest.task, ck_scale, ckpt.names, manifest.path)  # the task's manifest, not detect's
        raise CarveError(f"checkpoint is scale '{ck_scale}' but {manifest.path} names scale '{scale}'",
                         location=ckpt.path, hint=f"use {right}" if right else None)


def _norm(v):
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.lower() in ("none", "null"):
        return None
    return v


def build_graph(manifest, arch: dict, ckpt, imgsz=None, head: dict | None = None):
    """Build the IR for one YOLO26 variant at an input of ``imgsz``: one size (square) or (height, width);
    None: the manifest's. ``head``: {"head": "e2e" | "nms", "iou", "agnostic"} (compiler.head_options); None:
    the manifest's head with Ultralytics' defaults."""
    in_h, in_w = input_hw(imgsz or manifest.imgsz)
    for v in (in_h, in_w):
        if v <= 0 or v % 32:
            raise CarveError(f"--imgsz {format_hw((in_h, in_w))}: {v} must be a positive multiple of 32")
    if manifest.task == "classify" and in_h != in_w:
        raise CarveError(f"--imgsz {format_hw((in_h, in_w))}: classification takes a square input "
                         "(Ultralytics' centre crop)", location=manifest.where("input.imgsz"))
    check_same_architecture(arch, ckpt, manifest.scale, manifest)
    depth, width, max_ch = arch["scales"][manifest.scale]
    nc = M.checked_number((ckpt.yaml or {}).get("nc", arch.get("nc", 80)), "yaml.nc", ckpt.path, 1, 100000)
    head_path = f"model.{len(arch['backbone']) + len(arch['head']) - 1}"
    head_info = ckpt.modules.get(head_path)
    if head_info and "nc" in head_info.attrs:
        nc = M.checked_number(head_info.attrs["nc"], f"{head_path}.nc", ckpt.path, 1, 100000)
    max_det = M.checked_number(head_info.attrs.get("max_det", 300), f"{head_path}.max_det", ckpt.path, 1,
                               100000) if head_info else 300

    gb = GraphBuilder(manifest.name, (in_h, in_w, 3))
    # BN eps when the checkpoint does not say: initialize_weights sets 1e-3 on det-type models; cls keeps 1e-5
    ctx = M.Ctx(gb=gb, ckpt=ckpt, default_eps=1e-5 if manifest.task == "classify" else 1e-3)
    kpt = (ckpt.yaml or {}).get("kpt_shape") or arch.get("kpt_shape") or (17, 3)
    if not (isinstance(kpt, (list, tuple)) and len(kpt) == 2):
        raise CarveError(f"yaml.kpt_shape: {kpt!r:.60} where [keypoints, 2 or 3] is expected", location=ckpt.path)
    kpt = (M.checked_number(kpt[0], "yaml.kpt_shape[0]", ckpt.path, 1, 1000),
           M.checked_number(kpt[1], "yaml.kpt_shape[1]", ckpt.path, 2, 3))
    head = dict(head or {"head": manifest.head, "iou": 0.7, "agnostic": False})
    spec = HeadSpec(nc=nc, imgsz=in_h, max_det=max_det, width=width, max_channels=max_ch, kpt_shape=kpt,
                    head=head["head"] or "e2e", iou=head["iou"], agnostic=head["agnostic"])
    outs: list = []
    outputs: dict = {}
    layers = arch["backbone"] + arch["head"]
    for i, (f, n, m, args) in enumerate(layers):
        ctx.layer = i
        p = f"model.{i}"
        m = str(m)
        if m not in _KNOWN:
            raise CarveError(f"{p}: module {m} is not supported (supported: {', '.join(sorted(_KNOWN))})",
                             location=manifest.arch_config)
        srcs = [f] if isinstance(f, int) else list(f)
        ins = [outs[s] if s >= 0 else outs[i + s] for s in srcs] if i else [gb.input]
        args = [nc if a == "nc" else _norm(a) for a in args]
        n = max(round(n * depth), 1) if n > 1 else n
        x = ins[0]
        if m in _SCALED:
            c2 = _make_divisible(min(args[0], max_ch) * width)
        if m == "Conv":
            y = ctx.conv(p, x, c2, args[1] if len(args) > 1 else 1, args[2] if len(args) > 2 else 1)
        elif m == "C3k2":
            use_c3k = bool(args[1]) if len(args) > 1 else False
            if manifest.scale in "mlx":
                use_c3k = True
            e = float(args[2]) if len(args) > 2 else 0.5
            attn = bool(args[3]) if len(args) > 3 else False
            y = M.c3k2(ctx, p, x, c2, n, use_c3k, e, attn)
        elif m == "SPPF":
            y = M.sppf(ctx, p, x, c2, *[int(a) for a in args[1:3]], shortcut=bool(args[3]) if len(args) > 3 else False)
        elif m == "C2PSA":
            y = M.c2psa(ctx, p, x, c2, n)
        elif m == "nn.Upsample":
            y = M.upsample(ctx, p, x, int(args[1]))
        elif m == "Concat":
            y = ctx.concat(p, ins)
        else:
            y, outputs = build_head(ctx, m, p, ins, args, spec)
        outs.append(y)
        gb.layers.append(Layer(index=i, type=m, output=y, sources=tuple(srcs)))

    names = list(manifest.classes) if manifest.classes else None
    if names is None and ckpt.names:
        names = [ckpt.names[k] for k in sorted(ckpt.names)]
    if names is None:
        names = [f"class{j}" for j in range(nc)]
    if len(names) != nc:
        raise CarveError(f"classes: {len(names)} names given but the checkpoint has nc={nc}",
                         location=manifest.where("classes"))
    # imgsz: an int for a square input (as before), "HxW" otherwise; input_hw: always (height, width)
    meta = dict(task=manifest.task, nc=nc, names=names, imgsz=in_h if in_h == in_w else format_hw((in_h, in_w)),
                input_hw=(in_h, in_w), scale=manifest.scale,
                max_det=max_det, conf=manifest.conf, manifest=manifest.path, weights=Path(ckpt.path).name,
                head=None if manifest.task == "classify" else spec.head, iou=spec.iou, agnostic=spec.agnostic,
                provenance=dict(manifest.provenance), weights_sha256=ckpt.sha256)
    graph = gb.build(outputs, meta)
    validate(graph)
    return graph
