"""Lowering shared by the C backends: graph + memory plan -> the program dict the templates render.

Every C backend runs the same IR on the same memory plan; what differs is how a
compute op (conv, deconv, max pool, add, global average pool, fully connected,
softmax, channel copy) is executed and how its weights are laid out. ``lower``
walks the graph once and calls the backend's ``Layouts`` for the weight layouts
and its ``prefix`` for the descriptor kinds (``CARVE_XNN_CONV``,
``CARVE_PT_CONV``, ...). The result holds:

* ``ops``: one descriptor per compute op, in run order: ``kind`` (prefix +
  CONV / DECONV / MAXPOOL / COPY / ADD / GAP / FC / SOFTMAX), ``name`` and
  ``fields`` (shapes, pixel strides, weight offsets and arena offsets in floats,
  the latter as C expressions over the storage constants);
* ``layers``: per Ultralytics layer, the C function name and its steps (``op``
  with an optional SiLU / residual ``epilogue``, ``view``, ``upsample``,
  ``attention``, ``e2e``, and ``conv3x3s2`` / ``conv3x3s1_wino`` / ``dwconv3x3``: a convolution
  the backend runs as a runtime kernel (``RUNTIME_CONVS``) rather than a
  descriptor, see ``CBackend.runtime_conv``), each with FLOPs and a shape comment;
* ``blob``: the weights (little-endian float32, each tensor 64-byte aligned);
* sizes: storages, outputs, arena bytes, the largest attention, anchors.

Rules shared by the backends' ``lowerable`` tables live here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import CarveError
from ..ir import Graph, op_flops
from ..planner import Plan
from . import Backend
from .emit_c import CPackage, c_ident

E2E_TASKS = {"detect": "CARVE_E2E_DETECT", "segment": "CARVE_E2E_SEGMENT", "pose": "CARVE_E2E_POSE",
             "obb": "CARVE_E2E_OBB"}


# ---- Rules (op, graph) -> None when lowerable, else the reason ---------------

def always(op, graph):
    return None


def square_conv_rule(op, graph):
    if op.attrs["kernel"][0] != op.attrs["kernel"][1]:
        return "non-square conv kernels are not lowered"
    return None


def upsample_x2_rule(op, graph):
    return None if op.attrs["scale"] == 2 else f"nearest upsample x{op.attrs['scale']} (only x2 is lowered)"


def e2e_rule(op, graph):
    task = op.attrs.get("task", "detect")
    return None if task in E2E_TASKS else f"end-to-end post-processing for task '{task}'"


def deconv_rule(op, graph):
    k, s = op.attrs["kernel"], op.attrs["stride"]
    ok = k[0] == k[1] == s and op.attrs.get("pad", 0) == 0 and op.attrs.get("groups", 1) == 1
    return None if ok else "transposed conv other than kernel = stride, pad 0, groups 1"


# The rules of the CPU backends (xnnpack, portable): every kind the YOLO26 frontend produces, with these limits.
CPU_RULES = {
    "conv2d": square_conv_rule,
    "maxpool2d": always,
    "upsample_nearest": upsample_x2_rule,
    "concat": always,
    "slice": always,
    "attention": always,
    "e2e_detect": e2e_rule,
    "add": always,  # on contiguous tensors; lower() checks the plan
    "deconv2d": deconv_rule,
    "global_avgpool": always,
    "linear": always,
    "softmax": always,
}


# Convolution step kinds a backend may choose with CBackend.runtime_conv -> the runtime function that runs them.
RUNTIME_CONVS = {"conv3x3s2": "carve_conv3x3s2_small_cin", "conv3x3s1_wino": "carve_conv3x3s1_winograd",
                 "dwconv3x3": "carve_dwconv3x3"}
# Those of them that add a residual before the store (the others get an epilogue step after them).
RESIDUAL_RUNTIME_CONVS = {"conv3x3s1_wino"}


# ---- Weight layouts ----------------------------------------------------------

@dataclass(frozen=True)
class Layouts:
    """How a backend stores each weight tensor in the blob, from PyTorch's layout:
    conv (out, in/groups, kh, kw), deconv (in, out, kh, kw), linear (out, in)."""

    conv: Callable[[np.ndarray, dict], np.ndarray]
    deconv: Callable[[np.ndarray, dict], np.ndarray]
    linear: Callable[[np.ndarray, dict], np.ndarray]


# ---- C backends ----------------------------------------------------------------

class CBackend(Backend):
    """A backend whose package is C rendered by ``emit_c.CPackage`` from ``lower()``'s program.

    Subclasses set ``name``, ``description``, ``lowerable``, ``template_vars``, ``prefix`` (of the
    descriptor kinds), ``layouts`` and ``runtime`` (the runtime files every package copies)."""

    prefix = ""
    layouts: Layouts
    runtime: tuple = ()
    # runtime_conv(attrs) -> a step kind (RUNTIME_CONVS) for a conv2d this backend runs as a carve runtime
    # kernel instead of a descriptor of its own, or None; runtime_conv_layout gives its weights' layout.
    # None: every conv is a descriptor.
    runtime_conv: Callable[[dict], str | None] | None = None
    # runtime_conv_layout(kind, w) -> the weights of a runtime_conv step of that kind, from PyTorch's (out, in,
    # kh, kw); Layouts.conv stays the descriptors' (a slice of a conv may match a runtime kernel's rule).
    runtime_conv_layout: Callable[[str, np.ndarray], np.ndarray] | None = None
    # conv_slices(attrs) -> [(c0, c1), ...]: the output-channel ranges a conv2d descriptor is split into, each
    # its own descriptor writing channels c0..c1 of the same output (one weight slice each, taken from PyTorch's
    # layout before Layouts.conv), or None for one descriptor. None: no conv is split.
    conv_slices: Callable[[dict], list | None] | None = None
    # CARVE_LETTERBOX_BANDS of runtime/carve_pre.h as this backend's runtime is built: 8 with a thread pool, 1
    # with CARVE_RT_NO_THREADS; each band takes 2 rows of 3 int32 per input column of the scratch.
    letterbox_bands = 1

    def runtime_files(self, graph: Graph) -> tuple:
        """The runtime sources a package of this graph uses (copied into it): masks only for segmentation."""
        masks = ("carve_mask.h", "carve_mask.c") if "output1" in graph.outputs else ()
        return self.runtime + masks

    def lower(self, graph: Graph, plan: Plan) -> dict:
        """The program the templates render: weight blob, op descriptor table and per-layer steps."""
        return lower(graph, plan, self.name, self.prefix, self.layouts, self.runtime_conv, self.conv_slices,
                     self.letterbox_bands, self.runtime_conv_layout)

    def emit(self, graph: Graph, plan: Plan, options) -> dict:
        return CPackage(self, graph, plan, self.lower(graph, plan), options).files()


# ---- Program -----------------------------------------------------------------

def lower(graph: Graph, plan: Plan, backend: str, prefix: str, layouts: Layouts,
          runtime_conv: Callable[[dict], str | None] | None = None,
          conv_slices: Callable[[dict], list | None] | None = None, letterbox_bands: int = 1,
          runtime_conv_layout: Callable[[str, np.ndarray], np.ndarray] | None = None) -> dict:
    """The program the templates render (see the module docstring); ``runtime_conv``, ``conv_slices``,
    ``letterbox_bands``, ``runtime_conv_layout``: see ``CBackend``."""
    blob = WeightBlob()
    ops: list = []      # compute op descriptors, in run order
    layers = {layer.index: dict(index=layer.index, type=layer.type,
                                fn=f"layer_{layer.index:02d}_{c_ident(layer.type.replace('nn.', '')).lower()}",
                                output=layer.output, steps=[]) for layer in graph.layers}
    copy_set = set(plan.copies)
    v = plan.views
    storages = storage_macros(graph, plan)

    def off(t, extra: int = 0):
        """The arena offset of a tensor as a C expression: its storage's constant + channel offset."""
        macro = storages[v[t].storage]["macro"]
        k = v[t].offset + extra
        return f"{macro} + {k}" if k else macro

    def shape(t):
        h, w, c = graph.tensors[t].shape
        return f"({h},{w},{c})"

    def contiguous(t):
        return v[t].offset == 0 and v[t].stride == graph.tensors[t].shape[2]

    def add_op(kind: str, op_name: str, **fields) -> int:
        ops.append(dict(kind=prefix + kind, name=op_name, fields=fields))
        return len(ops) - 1

    for op in graph.ops:
        steps = layers[op.layer]["steps"]
        head = dict(name=op.name, source=op.source, flops=op_flops(graph, op),
                    shapes=" + ".join(shape(t) for t in op.inputs) + " -> " + " , ".join(shape(t) for t in op.outputs))
        x, y = op.inputs[0], op.outputs[0]
        h, w, c = graph.tensors[x].shape
        if op.kind == "conv2d" and runtime_conv is not None and runtime_conv(op.attrs):
            # a runtime kernel with the bias and activation in registers; a residual in it too, or after it
            kind = runtime_conv(op.attrs)
            residual = op.inputs[1] if len(op.inputs) > 1 else None
            oh, ow, oc = graph.tensors[y].shape
            fused = dict(r_off=off(residual), r_stride=v[residual].stride) if residual else None
            epi = None
            if residual and kind not in RESIDUAL_RUNTIME_CONVS:
                epi = dict(y_off=off(y), y_stride=v[y].stride, pixels=oh * ow, channels=oc, act="CARVE_ACT_NONE",
                           **fused)
                fused = None
            steps.append(dict(head, kind=kind, fn=RUNTIME_CONVS[kind], x_off=off(x), x_stride=v[x].stride, h=h, w=w,
                              cin=op.attrs["cin"], cout=op.attrs["cout"],
                              weight_off=blob.add(runtime_conv_layout(kind, graph.weights[op.params["weight"]])),
                              bias_off=blob.add(graph.weights[op.params["bias"]]), y_off=off(y), y_stride=v[y].stride,
                              act="CARVE_ACT_SILU" if op.attrs["act"] == "silu" else "CARVE_ACT_NONE",
                              residual=fused, epilogue=epi))
        elif op.kind in ("conv2d", "deconv2d"):
            wt = graph.weights[op.params["weight"]]
            bias = graph.weights[op.params["bias"]]
            k = op.attrs["kernel"][0]
            cout = op.attrs["cout"]
            parts = (conv_slices(op.attrs) if conv_slices is not None and op.kind == "conv2d" else None) or [(0, cout)]
            if parts != [(0, cout)] and (op.attrs["groups"] != 1 or parts[0][0] != 0 or parts[-1][1] != cout
                                         or any(a[1] != b[0] or a[0] >= a[1] for a, b in zip(parts, parts[1:]))):
                raise AssertionError(f"{op.name}: conv_slices gave {parts}")  # pragma: no cover - a backend's bug
            indices = []
            for c0, c1 in parts:
                attrs = dict(op.attrs, cout=c1 - c0)
                lw = layouts.conv(wt[c0:c1], attrs) if op.kind == "conv2d" else layouts.deconv(wt, attrs)
                indices.append(add_op("CONV" if op.kind == "conv2d" else "DECONV",
                                      op.name if len(parts) == 1 else f"{op.name} [out {c0}:{c1}]",
                                      kh=k, kw=k, stride=op.attrs["stride"], pad=op.attrs["pad"],
                                      groups=op.attrs["groups"], cin=op.attrs["cin"], cout=c1 - c0, h=h, w=w,
                                      in_stride=v[x].stride, out_stride=v[y].stride, weight_off=blob.add(lw),
                                      bias_off=blob.add(bias[c0:c1]), in_off=off(x), out_off=off(y, c0)))
            i = indices[0]
            epi = None
            residual = op.inputs[1] if len(op.inputs) > 1 else None
            if op.attrs["act"] == "silu" or residual:
                oh, ow, oc = graph.tensors[y].shape
                epi = dict(y_off=off(y), y_stride=v[y].stride, r_off=off(residual) if residual else None,
                           r_stride=v[residual].stride if residual else 0, pixels=oh * ow, channels=oc,
                           act="CARVE_ACT_SILU" if op.attrs["act"] == "silu" else "CARVE_ACT_NONE")
            steps.append(dict(head, kind="op", index=i, epilogue=epi,
                              slices=[dict(index=j, c0=c0, c1=c1) for j, (c0, c1) in zip(indices, parts)]
                              if len(parts) > 1 else None))
        elif op.kind == "maxpool2d":
            i = add_op("MAXPOOL", op.name, kh=op.attrs["kernel"], kw=op.attrs["kernel"],
                       stride=op.attrs["stride"], pad=op.attrs["pad"], cin=c, h=h, w=w,
                       in_stride=v[x].stride, out_stride=v[y].stride, in_off=off(x), out_off=off(y))
            steps.append(dict(head, kind="op", index=i, epilogue=None))
        elif op.kind == "add":
            if not all(contiguous(t) for t in (*op.inputs, y)):
                raise CarveError(f"{op.name}: backend '{backend}' lowers an unfused add only on contiguous tensors",
                                 hint="no files were written")
            i = add_op("ADD", op.name, cin=c, h=h, w=w, in_stride=c, out_stride=c,
                       in_off=off(x), in2_off=off(op.inputs[1]), out_off=off(y))
            steps.append(dict(head, kind="op", index=i, epilogue=None))
        elif op.kind == "global_avgpool":
            i = add_op("GAP", op.name, cin=c, h=h, w=w, in_stride=v[x].stride,
                       out_stride=v[y].stride, in_off=off(x), out_off=off(y))
            steps.append(dict(head, kind="op", index=i, epilogue=None))
        elif op.kind == "linear":
            i = add_op("FC", op.name, cin=op.attrs["cin"], cout=op.attrs["cout"], h=1, w=1,
                       in_stride=v[x].stride, out_stride=v[y].stride,
                       weight_off=blob.add(layouts.linear(graph.weights[op.params["weight"]], op.attrs)),
                       bias_off=blob.add(graph.weights[op.params["bias"]]), in_off=off(x), out_off=off(y))
            steps.append(dict(head, kind="op", index=i, epilogue=None))
        elif op.kind == "softmax":
            i = add_op("SOFTMAX", op.name, cin=c, h=1, w=1, in_stride=v[x].stride,
                       out_stride=v[y].stride, in_off=off(x), out_off=off(y))
            steps.append(dict(head, kind="op", index=i, epilogue=None))
        elif op.kind == "concat":
            slot = 0
            copied = False
            for t in op.inputs:
                ct = graph.tensors[t].shape[2]
                if (op.name, t) in copy_set:
                    th, tw, _ = graph.tensors[t].shape
                    i = add_op("COPY", f"{op.name} <- {t}", cin=ct, h=th, w=tw,
                               in_stride=v[t].stride, out_stride=v[y].stride, in_off=off(t),
                               out_off=off(y, slot))
                    steps.append(dict(head, kind="op", index=i, epilogue=None, what=f"copy {t} into its slot"))
                    copied = True
                slot += ct
            if not copied:
                steps.append(dict(head, kind="view", what="concat: inputs were written in place"))
        elif op.kind == "slice":
            steps.append(dict(head, kind="view", what="split: a strided view, no copy"))
        elif op.kind == "upsample_nearest":
            steps.append(dict(head, kind="upsample", x_off=off(x), x_stride=v[x].stride, h=h, w=w, c=c,
                              y_off=off(y), y_stride=v[y].stride))
        elif op.kind == "attention":
            o, vv = op.outputs
            a = op.attrs
            steps.append(dict(head, kind="attention", qkv_off=off(x), qkv_stride=v[x].stride, n=h * w,
                              heads=a["heads"], key_dim=a["key_dim"], head_dim=a["head_dim"],
                              scale=float(np.float32(a["scale"])), o_off=off(o), o_stride=v[o].stride,
                              v_off=off(vv), v_stride=v[vv].stride))
        elif op.kind == "e2e_detect":
            a = op.attrs
            per = a["inputs_per_level"]
            levels = []
            for li in range(0, len(op.inputs), per):
                box, cls = op.inputs[li], op.inputs[li + 1]
                ex = op.inputs[li + 2] if per > 2 else None
                lh, lw, _ = graph.tensors[box].shape
                levels.append(dict(box_off=off(box), box_stride=v[box].stride, cls_off=off(cls),
                                   cls_stride=v[cls].stride, extra_off=off(ex) if ex else None,
                                   extra_stride=v[ex].stride if ex else 0, h=lh, w=lw,
                                   stride=a["strides"][li // per]))
            _, k, row = graph.tensors[y].shape
            steps.append(dict(head, kind="e2e", levels=levels, nc=a["nc"], k=k, row=row,
                              extra=a["extra_channels"], task=E2E_TASKS[a.get("task", "detect")],
                              rows_off=off(y)))
        else:  # pragma: no cover - check() refuses these first
            raise AssertionError(op.kind)

    out0 = graph.outputs["output0"]
    for lay in layers.values():
        t = lay["output"]
        lh, lw, lc = graph.tensors[t].shape
        lay.update(out_off=off(t), out_h=lh, out_w=lw, out_c=lc, out_stride=v[t].stride,
                   is_rows=(t == out0 and graph.meta["task"] != "classify"),
                   flops=sum(st["flops"] for st in lay["steps"]))
    attn = [st for lay in layers.values() for st in lay["steps"] if st["kind"] == "attention"]
    runtime_convs = [st for lay in layers.values() for st in lay["steps"] if st["kind"] in RUNTIME_CONVS]
    e2e = next((st for lay in layers.values() for st in lay["steps"] if st["kind"] == "e2e"), None)
    outputs = {role: dict(off=off(t), h=graph.tensors[t].shape[0], w=graph.tensors[t].shape[1],
                          c=graph.tensors[t].shape[2], stride=v[t].stride) for role, t in graph.outputs.items()}
    attn_n = max((st["n"] for st in attn), default=0)
    attn_heads = max((st["heads"] for st in attn), default=0)
    attn_kd = max((st["key_dim"] for st in attn), default=0)
    anchors = sum(lv["h"] * lv["w"] for lv in e2e["levels"]) if e2e else 0
    return dict(layers=[layers[i] for i in sorted(layers)], ops=ops, runtime_convs=runtime_convs, outputs=outputs,
                storages=sorted(storages.values(), key=lambda st: (st["offset"], st["macro"])),
                blob=blob.bytes(), blob_floats=blob.floats, attention=attn, e2e=e2e,
                input_off=off(graph.input), rows_k=e2e["k"] if e2e else 0, row_len=e2e["row"] if e2e else 0,
                arena_bytes=plan.arena_bytes,
                attn_max_n=attn_n, attn_max_heads=attn_heads, attn_max_key_dim=attn_kd, anchors=anchors,
                scratch_bytes=scratch_bytes(attn_n, attn_heads, attn_kd, e2e, anchors,
                                            graph.tensors[graph.input].shape[1], letterbox_bands),
                # a backend with Winograd convolutions sets these (xnnpack.py): the largest cout and its slot
                wino_max_cout=0, wino_slot_bytes=0,
                # the context struct of a CPU backend: a pointer per operator and a double per layer, plus < 256
                # bytes of fields (the generated code _Static_asserts that it fits)
                context_bytes=-(-(8 * len(ops) + 8 * len(layers) + 256) // 64) * 64,
                max_cin=max((o["fields"]["cin"] for o in ops if o["kind"] in (prefix + "CONV", prefix + "DECONV")),
                            default=0),
                flops=sum(st["flops"] for lay in layers.values() for st in lay["steps"]))


def scratch_bytes(attn_n: int, attn_heads: int, attn_key_dim: int, e2e, anchors: int, input_w: int,
                  letterbox_bands: int = 1) -> int:
    """<NAME>_SCRATCH_BYTES: the largest of the runtime kernels' scratch, as the runtime's
    CARVE_ATTENTION_SCRATCH_FLOATS / CARVE_E2E_SCRATCH_BYTES / CARVE_LETTERBOX_SCRATCH_BYTES
    compute it (the generated code _Static_asserts that this is enough), rounded up to 64, + 64."""
    # attention: k transposed (key_dim rows) and 8 score rows per block of 64 query rows, per head, each row of
    # n rounded up to 32 floats (CARVE_ATTN_ROWS_PER_TASK, CARVE_ATTN_GROUP, CARVE_ATTN_KEY_BLOCK)
    need = attn_heads * (attn_key_dim + -(-attn_n // 64) * 8) * (-(-attn_n // 32) * 32) * 4
    if e2e:
        kk = min(e2e["k"], anchors)
        # letterbox: the column plan (3 int32 per column) + 2 rows of 3 int32 per column for each of the
        # CARVE_LETTERBOX_BANDS bands
        need = max(need, max(kk * e2e["nc"], anchors) * 8 + kk * 4, input_w * (3 + 6 * letterbox_bands) * 4)
    return -(-need // 64) * 64 + 64


def storage_macros(graph: Graph, plan: Plan) -> dict:
    """One named constant per planned storage: S_<TENSOR> = its offset in floats from the arena base."""
    out, used = {}, set()
    for name, st in sorted(plan.storages.items(), key=lambda kv: (kv[1].offset, kv[0])):
        macro = "S_" + c_ident(name).upper().strip("_")
        while "__" in macro:
            macro = macro.replace("__", "_")
        base, k = macro, 2
        while macro in used:
            macro, k = f"{base}_{k}", k + 1
        used.add(macro)
        h, w, c = graph.tensors[name].shape
        out[name] = dict(macro=macro, offset=st.offset // 4, shape=f"({h},{w},{c})", bytes=st.floats * 4,
                         first=st.first, last=st.last, tensor=name)
    return out


class WeightBlob:
    """All weights in one little-endian float32 blob, each tensor 64-byte aligned."""

    ALIGN_FLOATS = 16

    def __init__(self):
        self.parts: list = []
        self.floats = 0

    def add(self, a: np.ndarray) -> int:
        a = np.ascontiguousarray(a, dtype="<f4").reshape(-1)
        pad = (-self.floats) % self.ALIGN_FLOATS
        if pad:
            self.parts.append(np.zeros(pad, dtype="<f4"))
            self.floats += pad
        offset = self.floats
        self.parts.append(a)
        self.floats += a.size
        return offset

    def bytes(self) -> bytes:
        return np.concatenate(self.parts).tobytes() if self.parts else b""
