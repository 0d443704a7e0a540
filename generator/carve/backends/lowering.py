"""Lowering shared by the C backends: graph + memory plan -> the program dict the templates render.

Every C backend runs the same IR on the same memory plan; what differs is how a
compute op (conv, deconv, max pool, add, global average pool, fully connected,
softmax, channel copy) is executed and how its weights are laid out. ``lower``
walks the graph once, calls the backend's lowering function of each op
(``CBackend.lowerings``), which use the backend's ``Layouts`` for the weight
layouts and its ``prefix`` for the descriptor kinds (``CARVE_XNN_CONV``,
``CARVE_PT_CONV``, ...). The result holds:

* ``ops``: one descriptor per compute op, in run order: ``kind`` (prefix +
  CONV / DECONV / MAXPOOL / COPY / ADD / GAP / FC / SOFTMAX), ``name`` and
  ``fields`` (shapes, pixel strides, weight offsets and arena offsets in floats,
  the latter as C expressions over the storage constants);
* ``layers``: per Ultralytics layer, the C function name and its steps (``op``
  as step objects (``steps.py``: a descriptor op with an optional SiLU / residual
  ``Epilogue``, ``View``, ``Upsample``, ``Attention``, ``E2E``, and ``StemConv`` /
  ``WinogradConv`` / ``DwConv``: a convolution the backend runs as a runtime kernel
  rather than a descriptor, see ``CBackend.runtime_conv``), each with FLOPs and a
  shape comment. ``CPU_LOWERINGS`` maps each IR op kind to the function that
  returns its steps; a backend replaces entries (``CBackend.lowerings``) or step
  classes (``CBackend.step_classes``);
* ``blob``: the weights (little-endian float32, each tensor 64-byte aligned) and
  ``weight_refs``: the named offset (``W_*`` / ``B_*``) of each tensor in it;
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
from .emit_c import CPackage, c_ident, runtime_define
from .steps import (CPU_STEP_CLASSES, E2E, NMS, RUNTIME_CONVS, Attention, Epilogue, Level, RuntimeConv, Slice,
                    WeightRef, selected_kernels)

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


def nms_rule(op, graph):
    task = op.attrs.get("task", "detect")
    return None if task in E2E_TASKS else f"one-to-many post-processing (NMS) for task '{task}'"


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
    "nms_detect": nms_rule,
    "add": always,  # on contiguous tensors; lower() checks the plan
    "deconv2d": deconv_rule,
    "global_avgpool": always,
    "linear": always,
    "softmax": always,
}


# ---- Weight layouts ----------------------------------------------------------

@dataclass(frozen=True)
class Layouts:
    """How a backend stores each weight tensor in the blob, from PyTorch's layout:
    conv (out, in/groups, kh, kw), deconv (in, out, kh, kw), linear (out, in)."""

    conv: Callable[[np.ndarray, dict], np.ndarray]
    deconv: Callable[[np.ndarray, dict], np.ndarray]
    linear: Callable[[np.ndarray, dict], np.ndarray]


# ---- Program -----------------------------------------------------------------


class Lowering:
    """The state of one lowering: the weight blob, the descriptor table, the storage constants, and the helpers
    the per-op functions share. ``backend`` supplies the hooks (``prefix``, ``layouts``, ``runtime_conv``,
    ``runtime_conv_layout``, ``conv_slices``, ``step_classes``)."""

    def __init__(self, graph: Graph, plan: Plan, backend, runtime_conv=None):
        self.graph, self.plan, self.backend = graph, plan, backend
        self.runtime_conv = runtime_conv or backend.runtime_conv
        self.blob = WeightBlob()
        self.ops: list = []   # compute op descriptors, in run order (CPU backends: k_ops)
        self.tables: dict = {}  # a backend's own descriptor tables (cuda: "convs"), added to the program
        self.views = plan.views
        self.copies = set(plan.copies)
        self.storages = storage_macros(graph, plan)
        self.classes = dict(CPU_STEP_CLASSES, **getattr(backend, "step_classes", {}))

    def off(self, t, extra: int = 0) -> str:
        """The arena offset of a tensor as a C expression: its storage's constant + channel offset."""
        macro = self.storages[self.views[t].storage]["macro"]
        k = self.views[t].offset + extra
        return f"{macro} + {k}" if k else macro

    def byte_off(self, t, extra: int = 0) -> str:
        """The arena offset of a tensor in bytes as a C expression (int8 tensors: their channel offset counts
        bytes; the storage constants count 4-byte words)."""
        macro = self.storages[self.views[t].storage]["macro"]
        k = (self.views[t].offset + extra) * (1 if self.graph.tensors[t].dtype == "i8" else 4)
        return f"4 * {macro} + {k}" if k else f"4 * {macro}"

    def stride(self, t) -> int:
        return self.views[t].stride

    def shape(self, t):
        return self.graph.tensors[t].shape

    def contiguous(self, t) -> bool:
        return self.views[t].offset == 0 and self.views[t].stride == self.graph.tensors[t].shape[2]

    def head(self, op) -> dict:
        """The fields every step of this op has: name, source, FLOPs, a shape comment."""
        def shp(t):
            h, w, c = self.graph.tensors[t].shape
            return f"({h},{w},{c})"
        return dict(name=op.name, source=op.source, flops=op_flops(self.graph, op),
                    shapes=" + ".join(shp(t) for t in op.inputs) + " -> " + " , ".join(shp(t) for t in op.outputs))

    def weight(self, op, param: str, layout: Callable | None = None, part: str = "", rows: tuple | None = None,
               transform: str | None = None) -> WeightRef:
        """Appends the op's weight tensor ``op.params[param]`` to the blob in its layout: rows ``(c0, c1)`` of its
        first axis (a slice of the output channels; None: all), then ``layout(array)`` (None: as is). Its offset,
        named W_<op> (weights) or B_<op> (biases), with ``part`` for a slice. ``transform`` says what the layout
        does besides moving values ("winograd": G g G^T); f16 packages rebuild it at create (backends/f16.py)."""
        name = op.params[param]
        source = WeightSource(tensor=name, rows=rows, layout=layout, transform=transform)
        return self.blob.add(source.apply(self.graph.weights[name]),
                             ("W_" if param == "weight" else "B_") + op.name + part, name, source)

    def desc(self, kind: str, name: str, **fields) -> int:
        """Appends a descriptor of the backend's table (kind without the prefix): its index."""
        self.ops.append(dict(kind=self.backend.prefix + kind, name=name, fields=fields))
        return len(self.ops) - 1

    def cls(self, role: str):
        """The step class the backend uses for this role (CPU_STEP_CLASSES, CBackend.step_classes)."""
        return self.classes[role]

    def epilogue(self, op, residual=None, act: str | None = None) -> Epilogue | None:
        """SiLU and / or a residual after a convolution's output, or None when there is neither; ``act``
        replaces the op's activation (a kernel that applied it already: "none")."""
        act = op.attrs.get("act", "none") if act is None else act
        if act != "silu" and residual is None:
            return None
        y = op.outputs[0]
        oh, ow, oc = self.shape(y)
        return Epilogue(y_off=self.off(y), y_stride=self.stride(y), r_off=self.off(residual) if residual else None,
                        r_stride=self.stride(residual) if residual else 0, pixels=oh * ow, channels=oc,
                        act=ACT[act])


ACT = {"silu": "CARVE_ACT_SILU", "none": "CARVE_ACT_NONE"}


def c_float(v: float) -> str:
    """A value as a C float literal that reads back as the same float32."""
    return f"{float(np.float32(v))!r}f"


# ---- Per-op lowerings (op kind -> steps) of the CPU backends ----------------------------------------------


def lower_conv(lw: Lowering, op) -> list:
    """conv2d / deconv2d: a runtime kernel the backend chose (runtime_conv), else one descriptor (or one per
    output-channel slice, conv_slices) with an epilogue for SiLU / the residual."""
    be = lw.backend
    x, y = op.inputs[0], op.outputs[0]
    h, w, _ = lw.shape(x)
    residual = op.inputs[1] if len(op.inputs) > 1 else None
    kind = lw.runtime_conv(op.attrs) if op.kind == "conv2d" and lw.runtime_conv is not None else None
    if kind:
        cls = RUNTIME_CONVS[kind]
        fused = dict(r_off=lw.off(residual), r_stride=lw.stride(residual)) if residual and cls.fuses_residual else None
        # a kernel without a fused residual applies the activation; the residual is added after it
        epi = lw.epilogue(op, residual, act="none") if residual and not cls.fuses_residual else None
        return [cls(**lw.head(op), x_off=lw.off(x), x_stride=lw.stride(x), h=h, w=w, cin=op.attrs["cin"],
                    cout=op.attrs["cout"],
                    weight_off=lw.weight(op, "weight", lambda a: be.runtime_conv_layout(kind, a),
                                         transform=be.runtime_conv_transforms.get(kind)),
                    bias_off=lw.weight(op, "bias"), y_off=lw.off(y),
                    y_stride=lw.stride(y), act=ACT[op.attrs["act"]], residual=fused, epilogue=epi)]
    k = op.attrs["kernel"][0]
    cout = op.attrs["cout"]
    parts = (be.conv_slices(op.attrs) if be.conv_slices is not None and op.kind == "conv2d" else None) or [(0, cout)]
    if parts != [(0, cout)] and (op.attrs["groups"] != 1 or parts[0][0] != 0 or parts[-1][1] != cout
                                 or any(a[1] != b[0] or a[0] >= a[1] for a, b in zip(parts, parts[1:]))):
        raise AssertionError(f"{op.name}: conv_slices gave {parts}")  # pragma: no cover - a backend's bug
    sliced = len(parts) > 1
    indices = []
    for c0, c1 in parts:
        attrs = dict(op.attrs, cout=c1 - c0)
        if op.kind == "conv2d":
            layout, rows = (lambda a, attrs=attrs: be.layouts.conv(a, attrs)), (c0, c1)
        else:
            layout, rows = (lambda a, attrs=attrs: be.layouts.deconv(a, attrs)), None
        part = f"_OUT{c0}" if sliced else ""
        indices.append(lw.desc("CONV" if op.kind == "conv2d" else "DECONV",
                               f"{op.name} [out {c0}:{c1}]" if sliced else op.name,
                               kh=k, kw=k, stride=op.attrs["stride"], pad=op.attrs["pad"],
                               groups=op.attrs["groups"], cin=op.attrs["cin"], cout=c1 - c0, h=h, w=w,
                               in_stride=lw.stride(x), out_stride=lw.stride(y),
                               weight_off=lw.weight(op, "weight", layout, part, rows),
                               bias_off=lw.weight(op, "bias", None, part, (c0, c1)),
                               in_off=lw.off(x), out_off=lw.off(y, c0)))
    return [lw.cls("op")(**lw.head(op), index=indices[0], epilogue=lw.epilogue(op, residual),
                         slices=[Slice(index=j, c0=c0, c1=c1) for j, (c0, c1) in zip(indices, parts)]
                         if sliced else None)]


def _one_desc(lw: Lowering, op, kind: str, **fields) -> list:
    return [lw.cls("op")(**lw.head(op), index=lw.desc(kind, op.name, **fields))]


def lower_maxpool(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    a = op.attrs
    return _one_desc(lw, op, "MAXPOOL", kh=a["kernel"], kw=a["kernel"], stride=a["stride"], pad=a["pad"], cin=c,
                     h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y), in_off=lw.off(x), out_off=lw.off(y))


def check_add(lw: Lowering, op) -> None:
    if not all(lw.contiguous(t) for t in (*op.inputs, op.outputs[0])):
        raise CarveError(f"{op.name}: backend '{lw.backend.name}' lowers an unfused add only on contiguous tensors",
                         hint="no files were written")


def lower_add(lw: Lowering, op) -> list:
    check_add(lw, op)
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    return _one_desc(lw, op, "ADD", cin=c, h=h, w=w, in_stride=c, out_stride=c, in_off=lw.off(x),
                     in2_off=lw.off(op.inputs[1]), out_off=lw.off(y))


def lower_gap(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    return _one_desc(lw, op, "GAP", cin=c, h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y),
                     in_off=lw.off(x), out_off=lw.off(y))


def lower_linear(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    return _one_desc(lw, op, "FC", cin=op.attrs["cin"], cout=op.attrs["cout"], h=1, w=1, in_stride=lw.stride(x),
                     out_stride=lw.stride(y),
                     weight_off=lw.weight(op, "weight", lambda a: lw.backend.layouts.linear(a, op.attrs)),
                     bias_off=lw.weight(op, "bias"),
                     in_off=lw.off(x), out_off=lw.off(y))


def lower_softmax(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    c = lw.shape(x)[2]
    return _one_desc(lw, op, "SOFTMAX", cin=c, h=1, w=1, in_stride=lw.stride(x), out_stride=lw.stride(y),
                     in_off=lw.off(x), out_off=lw.off(y))


def cpu_copy(lw: Lowering, op, t, slot: int):
    """A concat input the planner could not write in place: a COPY descriptor into its channel slot."""
    th, tw, ct = lw.shape(t)
    y = op.outputs[0]
    i = lw.desc("COPY", f"{op.name} <- {t}", cin=ct, h=th, w=tw, in_stride=lw.stride(t), out_stride=lw.stride(y),
                in_off=lw.off(t), out_off=lw.off(y, slot))
    return lw.cls("op")(**lw.head(op), index=i, what=f"copy {t} into its slot")


def concat_lowering(copy):
    """concat: a ``copy(lw, op, tensor, channel slot)`` step per input the plan copies, else a view."""
    def lower_concat(lw: Lowering, op) -> list:
        steps, slot = [], 0
        for t in op.inputs:
            if (op.name, t) in lw.copies:
                steps.append(copy(lw, op, t, slot))
            slot += lw.shape(t)[2]
        return steps or [lw.cls("view")(**lw.head(op), what="concat: inputs were written in place")]
    return lower_concat


def lower_slice(lw: Lowering, op) -> list:
    return [lw.cls("view")(**lw.head(op), what="split: a strided view, no copy")]


def lower_upsample(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    return [lw.cls("upsample")(**lw.head(op), x_off=lw.off(x), x_stride=lw.stride(x), h=h, w=w, c=c, y_off=lw.off(y),
                               y_stride=lw.stride(y))]


def lower_attention(lw: Lowering, op) -> list:
    x = op.inputs[0]
    o, vv = op.outputs
    h, w, _ = lw.shape(x)
    a = op.attrs
    return [lw.cls("attention")(**lw.head(op), qkv_off=lw.off(x), qkv_stride=lw.stride(x), n=h * w, heads=a["heads"],
                                key_dim=a["key_dim"], head_dim=a["head_dim"], scale=float(np.float32(a["scale"])),
                                o_off=lw.off(o), o_stride=lw.stride(o), v_off=lw.off(vv), v_stride=lw.stride(vv))]


def head_levels(lw: Lowering, op) -> list:
    """The per-level views (box, class, extra) of an e2e_detect / nms_detect op."""
    a = op.attrs
    per = a["inputs_per_level"]
    levels = []
    for li in range(0, len(op.inputs), per):
        box, cls = op.inputs[li], op.inputs[li + 1]
        ex = op.inputs[li + 2] if per > 2 else None
        lh, lw_, _ = lw.shape(box)
        levels.append(Level(box_off=lw.off(box), box_stride=lw.stride(box), cls_off=lw.off(cls),
                            cls_stride=lw.stride(cls), extra_off=lw.off(ex) if ex else None,
                            extra_stride=lw.stride(ex) if ex else 0, h=lh, w=lw_, stride=a["strides"][li // per]))
    return levels


def lower_e2e(lw: Lowering, op) -> list:
    a = op.attrs
    y = op.outputs[0]
    _, k, row = lw.shape(y)
    return [lw.cls("e2e")(**lw.head(op), levels=head_levels(lw, op), nc=a["nc"], k=k, row=row,
                          extra=a["extra_channels"], task=E2E_TASKS[a.get("task", "detect")], rows_off=lw.off(y))]


def lower_nms(lw: Lowering, op) -> list:
    a = op.attrs
    y = op.outputs[0]
    _, k, row = lw.shape(y)
    return [lw.cls("nms")(**lw.head(op), levels=head_levels(lw, op), nc=a["nc"], k=k, row=row,
                          extra=a["extra_channels"], task=E2E_TASKS[a.get("task", "detect")], rows_off=lw.off(y),
                          iou=float(a["iou"]), agnostic=bool(a["agnostic"]))]


# The CPU backends' lowerings: IR op kind -> function(lowering, op) returning the op's steps.
CPU_LOWERINGS = {
    "conv2d": lower_conv,
    "deconv2d": lower_conv,
    "maxpool2d": lower_maxpool,
    "add": lower_add,
    "global_avgpool": lower_gap,
    "linear": lower_linear,
    "softmax": lower_softmax,
    "concat": concat_lowering(cpu_copy),
    "slice": lower_slice,
    "upsample_nearest": lower_upsample,
    "attention": lower_attention,
    "e2e_detect": lower_e2e,
    "nms_detect": lower_nms,
}


def lower(graph: Graph, plan: Plan, backend, runtime_conv: Callable[[dict], str | None] | None = None) -> dict:
    """The program the templates render (see the module docstring): ``backend.lowerings`` maps each IR op kind to
    the function that returns its steps; ``runtime_conv`` replaces the backend's."""
    lw = Lowering(graph, plan, backend, runtime_conv)
    layers = {layer.index: dict(index=layer.index, type=layer.type,
                                fn=f"layer_{layer.index:02d}_{c_ident(layer.type.replace('nn.', '')).lower()}",
                                output=layer.output, steps=[]) for layer in graph.layers}
    for op in graph.ops:
        fn = backend.lowerings.get(op.kind)
        if fn is None:  # pragma: no cover - check() refuses these first
            raise AssertionError(f"{op.name}: no lowering for {op.kind}")
        layers[op.layer]["steps"].extend(fn(lw, op))

    off, v = lw.off, plan.views
    out0 = graph.outputs["output0"]
    dequant = 0   # the largest int8 layer output: the layer callback gets it dequantized
    for lay in layers.values():
        t = lay["output"]
        lh, lw_, lc = graph.tensors[t].shape
        q = graph.tensors[t].quant if graph.tensors[t].dtype == "i8" else None
        if q is not None:  # an int8 output: its offset in bytes, and its scale and zero point
            dequant = max(dequant, lh * lw_ * lc)
            lay.update(out_off=lw.byte_off(t), out_q8=dict(scale=c_float(q.scale), zero=int(q.zero_point)))
        else:
            lay.update(out_off=off(t), out_q8=None)
        lay.update(out_h=lh, out_w=lw_, out_c=lc, out_stride=v[t].stride,
                   is_rows=(t == out0 and graph.meta["task"] != "classify"),
                   flops=sum(st.flops for st in lay["steps"]))
    steps = [st for lay in layers.values() for st in lay["steps"]]
    attn = [st for st in steps if isinstance(st, Attention)]
    runtime_convs = [st for st in steps if isinstance(st, RuntimeConv)]
    e2e = next((st for st in steps if isinstance(st, E2E)), None)
    nms = next((st for st in steps if isinstance(st, NMS)), None)
    rows = e2e or nms  # the head's rows step
    outputs = {role: dict(off=off(t), h=graph.tensors[t].shape[0], w=graph.tensors[t].shape[1],
                          c=graph.tensors[t].shape[2], stride=v[t].stride) for role, t in graph.outputs.items()}
    attn_n = max((st.n for st in attn), default=0)
    attn_heads = max((st.heads for st in attn), default=0)
    attn_kd = max((st.key_dim for st in attn), default=0)
    anchors = sum(lv.h * lv.w for lv in rows.levels) if rows else 0
    prefix = backend.prefix
    kernels = selected_kernels(layers.values())
    return dict(layers=[layers[i] for i in sorted(layers)], ops=lw.ops, runtime_convs=runtime_convs, outputs=outputs,
                kernels=kernels,
                storages=sorted(lw.storages.values(), key=lambda st: (st["offset"], st["macro"])),
                weight_refs=lw.blob.refs, weight_sources=lw.blob.sources, blob=lw.blob.bytes(),
                blob_floats=lw.blob.floats, attention=attn, e2e=e2e, nms=nms,
                input_off=off(graph.input), input_q8=input_q8(graph),
                rows_k=rows.k if rows else 0, row_len=rows.row if rows else 0,
                arena_bytes=plan.arena_bytes, layer_dequant_floats=dequant,
                attn_max_n=attn_n, attn_max_heads=attn_heads, attn_max_key_dim=attn_kd, anchors=anchors,
                scratch_bytes=scratch_bytes(attn_n, attn_heads, attn_kd, e2e, anchors,
                                            graph.tensors[graph.input].shape[1], backend.letterbox_bands, nms),
                # a backend with Winograd convolutions sets these (xnnpack.py): the largest cout and its slot
                wino_max_cout=0, wino_slot_bytes=0, slot_exprs=[],
                # the context struct of a CPU backend: a pointer per operator, a double per layer and a pointer per
                # selected kernel, plus < 256 bytes of fields (the generated code _Static_asserts that it fits)
                context_bytes=-(-(8 * (len(lw.ops) + len(layers) + len(kernels)) + 256) // 64) * 64,
                max_cin=max((o["fields"]["cin"] for o in lw.ops if o["kind"] in (prefix + "CONV", prefix + "DECONV")),
                            default=0),
                flops=sum(st.flops for st in steps), **lw.tables)

def input_q8(graph: Graph) -> bool:
    """Whether the network input is int8 (quant/rewrite.py's int8_input): the runtime then pre-processes straight to
    int8 at carve_pre.h's CARVE_PRE_Q8_SCALE / CARVE_PRE_Q8_ZERO, which must be the input's QParams."""
    t = graph.tensors[graph.input]
    if t.dtype != "i8":
        return False
    from ..quant.qparams import INPUT_QPARAMS
    if t.quant != INPUT_QPARAMS:
        raise CarveError(f"internal: the int8 network input '{graph.input}' has QParams {t.quant}, not the "
                         f"pre-processing's {INPUT_QPARAMS}")
    return True


# ---- C backends ----------------------------------------------------------------

class CBackend(Backend):
    """A backend whose package is C rendered by ``emit_c.CPackage`` from ``lower()``'s program.

    Subclasses set ``name``, ``description``, ``lowerable``, ``template_vars``, ``prefix`` (of the
    descriptor kinds), ``layouts``, ``step_classes`` (the class of each role: "op" at least) and
    ``families`` (the runtime families its fixed C needs besides every package's, ``FIXED_FAMILIES``)."""

    prefix = ""
    layouts: Layouts
    # IR op kind -> function(Lowering, op) returning the op's steps
    lowerings: dict = CPU_LOWERINGS
    # role -> step class, over steps.CPU_STEP_CLASSES ("op": the class of a descriptor step)
    step_classes: dict = {}
    families: tuple = ()
    # runtime_conv(attrs) -> a step kind (steps.RUNTIME_CONVS) for a conv2d this backend runs as a carve runtime
    # kernel instead of a descriptor of its own, or None; runtime_conv_layout gives its weights' layout.
    # None: every conv is a descriptor.
    runtime_conv: Callable[[dict], str | None] | None = None
    # runtime_conv_layout(kind, w) -> the weights of a runtime_conv step of that kind, from PyTorch's (out, in,
    # kh, kw); Layouts.conv stays the descriptors' (a slice of a conv may match a runtime kernel's rule).
    runtime_conv_layout: Callable[[str, np.ndarray], np.ndarray] | None = None
    # runtime_conv kind -> what its runtime_conv_layout does besides moving values ("winograd": G g G^T), for the
    # kinds whose layout computes new values; backends/f16.py rebuilds each transform at create.
    runtime_conv_transforms: dict = {}
    # conv_slices(attrs) -> [(c0, c1), ...]: the output-channel ranges a conv2d descriptor is split into, each
    # its own descriptor writing channels c0..c1 of the same output (one weight slice each, taken from PyTorch's
    # layout before Layouts.conv), or None for one descriptor. None: no conv is split.
    conv_slices: Callable[[dict], list | None] | None = None
    # Whether the package's runtime runs on a thread pool: without, it is compiled with CARVE_RT_NO_THREADS.
    threaded = False

    @property
    def runtime_macros(self) -> tuple:
        """The macros the package's runtime is compiled with (its runtime files and constants depend on them)."""
        return () if self.threaded else ("CARVE_RT_NO_THREADS",)

    @property
    def letterbox_bands(self) -> int:
        """CARVE_LETTERBOX_BANDS of runtime/carve_pre.h as this backend's runtime is built; each band takes 2 rows
        of 3 int32 per input column of the scratch."""
        return runtime_define("CARVE_LETTERBOX_BANDS", defined=self.runtime_macros)

    def runtime_families(self, graph: Graph, options: dict) -> tuple:
        """The runtime families a package's fixed parts need (its steps add theirs): FIXED_FAMILIES, the backend's
        own, the weights loader for --weights-format file and f16 weights, masks for segmentation (and, where the
        backend's lifecycle is runtime/carve_model.c, carve_model's masks)."""
        fams = list(FIXED_FAMILIES) + list(self.families)
        if options.get("weights_format") == "file" or options.get("weights_dtype") == "f16":
            fams.append("weights")
        if "output1" in graph.outputs:
            fams.append("mask")
            if "model" in fams:
                fams.append("model_mask")
        return tuple(fams)

    def lower(self, graph: Graph, plan: Plan) -> dict:
        """The program the templates render: weight blob, op descriptor table and per-layer steps."""
        return lower(graph, plan, self)

    def emit(self, graph: Graph, plan: Plan, options) -> dict:
        return CPackage(self, graph, plan, self.lower(graph, plan), options).files()


# What the fixed C of every package calls: the context glue (carve_rt), the letterbox / classify pre-processing and
# box mapping (pre), the rows' and probabilities' collection (post), NCHW -> NHWC of run_tensor and the demo's dump
# (layout), the demo's file I/O (io).
FIXED_FAMILIES = ("rt", "pre", "post", "layout", "io")


def scratch_bytes(attn_n: int, attn_heads: int, attn_key_dim: int, e2e, anchors: int, input_w: int,
                  letterbox_bands: int = 1, nms=None) -> int:
    """<NAME>_SCRATCH_BYTES: the largest of the runtime kernels' scratch, as the runtime's
    CARVE_ATTENTION_SCRATCH_FLOATS / CARVE_E2E_SCRATCH_BYTES (or CARVE_NMS_SCRATCH_BYTES) /
    CARVE_LETTERBOX_SCRATCH_BYTES compute it (the generated code _Static_asserts that this is enough), rounded up
    to 64, + 64."""
    # attention: k transposed (key_dim rows) and 8 score rows per block of 64 query rows, per head, each row of
    # n rounded up to 32 floats (CARVE_ATTN_ROWS_PER_TASK, CARVE_ATTN_GROUP, CARVE_ATTN_KEY_BLOCK)
    need = attn_heads * (attn_key_dim + -(-attn_n // 64) * 8) * (-(-attn_n // 32) * 32) * 4
    if e2e:
        kk = min(e2e["k"], anchors)
        # letterbox: the column plan (3 int32 per column) + 2 rows of 3 int32 per column for each of the
        # CARVE_LETTERBOX_BANDS bands
        need = max(need, max(kk * e2e["nc"], anchors) * 8 + kk * 4, input_w * (3 + 6 * letterbox_bands) * 4)
    if nms:
        # a 64-bit key and five floats per anchor; the letterbox as above
        need = max(need, anchors * runtime_define("CARVE_NMS_BYTES_PER_ANCHOR"), input_w * (3 + 6 * letterbox_bands) * 4)
    return -(-need // 64) * 64 + 64


def unique_macro(name: str, used: set) -> str:
    """NAME as a C macro: upper case, non-identifier characters to '_', no '__', made unique in ``used``."""
    macro = c_ident(name).upper().strip("_")
    while "__" in macro:
        macro = macro.replace("__", "_")
    base, k = macro, 2
    while macro in used:
        macro, k = f"{base}_{k}", k + 1
    used.add(macro)
    return macro


def storage_macros(graph: Graph, plan: Plan) -> dict:
    """One named constant per planned storage: S_<TENSOR> = its offset in floats from the arena base."""
    out, used = {}, set()
    for name, st in sorted(plan.storages.items(), key=lambda kv: (kv[1].offset, kv[0])):
        macro = unique_macro("S_" + name, used)
        h, w, c = graph.tensors[name].shape
        out[name] = dict(macro=macro, offset=st.offset // 4, shape=f"({h},{w},{c})", bytes=st.floats * 4,
                         first=st.first, last=st.last, tensor=name)
    return out


@dataclass(frozen=True)
class WeightSource:
    """Where a blob tensor comes from: graph weight ``tensor``, rows ``(c0, c1)`` of its first axis (None: all),
    then ``layout`` (None: as is), which ``transform`` names when it computes new values ("winograd")."""

    tensor: str
    rows: tuple | None = None
    layout: Callable | None = None
    transform: str | None = None

    def rows_of(self, a: np.ndarray) -> np.ndarray:
        return a if self.rows is None else a[self.rows[0]:self.rows[1]]

    def apply(self, a: np.ndarray) -> np.ndarray:
        """The blob tensor from the whole graph weight ``a`` (or any array of its shape)."""
        a = self.rows_of(a)
        return a if self.layout is None else self.layout(a)


class WeightBlob:
    """All weights in one little-endian float32 blob, each tensor 64-byte aligned; ``add`` names each tensor's
    offset with a C constant (``W_MODEL_2_CV1_CONV``), listed in ``refs`` in blob order, with the
    ``WeightSource`` of each in ``sources``."""

    ALIGN_FLOATS = 16

    def __init__(self):
        self.parts: list = []
        self.floats = 0
        self.refs: list = []
        self.sources: list = []
        self._used: set = set()

    def add(self, a: np.ndarray, name: str = "W", tensor: str = "", source: WeightSource | None = None) -> WeightRef:
        """Appends a tensor: float arrays as little-endian float32; int8 / uint8 / int32 arrays (an int8 package's weights,
        biases, multipliers, tables) as their little-endian bytes, zero-padded to whole 4-byte words (their offset
        in bytes is 4 * the constant)."""
        shape = "(" + ",".join(str(d) for d in np.shape(a)) + ")"
        a = np.asarray(a)
        if a.dtype in (np.int8, np.uint8, np.int32):
            raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
            a = np.frombuffer(raw + bytes(-len(raw) % 4), dtype="<f4")
        else:
            a = np.ascontiguousarray(a, dtype="<f4")
        a = a.reshape(-1)
        pad = (-self.floats) % self.ALIGN_FLOATS
        if pad:
            self.parts.append(np.zeros(pad, dtype="<f4"))
            self.floats += pad
        ref = WeightRef(self.floats, unique_macro(name, self._used), tensor, shape)
        self.refs.append(ref)
        self.sources.append(source or WeightSource(tensor))
        self.parts.append(a)
        self.floats += a.size
        return ref

    def bytes(self) -> bytes:
        return np.concatenate(self.parts).tobytes() if self.parts else b""
