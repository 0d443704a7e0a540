"""The xnnpack backend: C11 + XNNPACK's operator API (Debian's libxnnpack-dev).

Convolutions, max pooling and channel copies are XNNPACK operators, created
and set up once at create on fixed arena addresses; SiLU / residual
epilogues, nearest upsampling, attention and the end-to-end post-processing
are carve runtime kernels on the same thread pool.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, op_flops
from ..planner import Plan
from . import Backend
from .emit_c import CPackage, c_ident


def _conv_rule(op, graph):
    if op.attrs["kernel"][0] != op.attrs["kernel"][1]:
        return "non-square conv kernels are not lowered"
    return None


def _upsample_rule(op, graph):
    return None if op.attrs["scale"] == 2 else f"nearest upsample x{op.attrs['scale']} (only x2 is lowered)"


def _e2e_rule(op, graph):
    if op.attrs["extra_channels"]:
        return f"end-to-end rows with {op.attrs['extra_channels']} extra channels (seg/pose/obb) are not lowered yet"
    return None


def _add_rule(op, graph):
    return "a residual add that could not be fused into a conv epilogue"


class XnnpackBackend(Backend):
    name = "xnnpack"
    description = "CPU: C11 + XNNPACK operators + pthreadpool"
    lowerable = {
        "conv2d": _conv_rule,
        "maxpool2d": lambda op, g: None,
        "upsample_nearest": _upsample_rule,
        "concat": lambda op, g: None,
        "slice": lambda op, g: None,
        "attention": lambda op, g: None,
        "e2e_detect": _e2e_rule,
        "add": _add_rule,
    }
    runtime_files = ("carve_rt.h", "carve_rt.c", "carve_ops.h", "carve_ops.c", "carve_pre.h", "carve_pre.c",
                     "carve_post.h", "carve_post.c", "carve_xnn.h", "carve_xnn.c", "carve_io.h", "carve_io.c")

    def lower(self, graph: Graph, plan: Plan) -> dict:
        """The program the templates render: weight blob, operator tables and per-layer steps."""
        blob = WeightBlob()
        convs, pools, copies = [], [], []
        layers = {layer.index: dict(index=layer.index, type=layer.type,
                                    fn=f"layer_{layer.index:02d}_{c_ident(layer.type.replace('nn.', '')).lower()}",
                                    output=layer.output, steps=[]) for layer in graph.layers}
        copy_set = set(plan.copies)
        v = plan.views
        storages = storage_macros(graph, plan)

        def off(t):
            """The arena offset of a tensor as a C expression: its storage's constant + channel offset."""
            macro = storages[v[t].storage]["macro"]
            return f"{macro} + {v[t].offset}" if v[t].offset else macro

        def shape(t):
            h, w, c = graph.tensors[t].shape
            return f"({h},{w},{c})"

        for op in graph.ops:
            steps = layers[op.layer]["steps"]
            flops = op_flops(graph, op)
            head = dict(name=op.name, source=op.source, flops=flops,
                        shapes=" + ".join(shape(t) for t in op.inputs) + " -> " + " , ".join(shape(t) for t in op.outputs))
            if op.kind == "conv2d":
                x, y = op.inputs[0], op.outputs[0]
                w = graph.weights[op.params["weight"]]
                b = graph.weights[op.params["bias"]]
                k = op.attrs["kernel"][0]
                h_in, w_in, _ = graph.tensors[x].shape
                convs.append(dict(name=op.name, kh=k, kw=k, stride=op.attrs["stride"], pad=op.attrs["pad"],
                                  groups=op.attrs["groups"], cin=op.attrs["cin"], cout=op.attrs["cout"],
                                  h=h_in, w=w_in, in_stride=v[x].stride, out_stride=v[y].stride,
                                  weight_off=blob.add(np.transpose(w, (0, 2, 3, 1))), bias_off=blob.add(b),
                                  in_off=off(x), out_off=off(y)))
                epi = None
                residual = op.inputs[1] if len(op.inputs) > 1 else None
                if op.attrs["act"] == "silu" or residual:
                    oh, ow, oc = graph.tensors[y].shape
                    epi = dict(y_off=off(y), y_stride=v[y].stride, r_off=off(residual) if residual else None,
                               r_stride=v[residual].stride if residual else 0, pixels=oh * ow, channels=oc,
                               act="CARVE_ACT_SILU" if op.attrs["act"] == "silu" else "CARVE_ACT_NONE")
                steps.append(dict(head, kind="xnn_conv", index=len(convs) - 1, epilogue=epi))
            elif op.kind == "maxpool2d":
                x, y = op.inputs[0], op.outputs[0]
                h, w, c = graph.tensors[x].shape
                pools.append(dict(name=op.name, k=op.attrs["kernel"], stride=op.attrs["stride"], pad=op.attrs["pad"],
                                  h=h, w=w, channels=c, in_stride=v[x].stride, out_stride=v[y].stride,
                                  in_off=off(x), out_off=off(y)))
                steps.append(dict(head, kind="xnn_maxpool", index=len(pools) - 1))
            elif op.kind == "concat":
                slot = 0
                for t in op.inputs:
                    c = graph.tensors[t].shape[2]
                    if (op.name, t) in copy_set:
                        h, w, _ = graph.tensors[t].shape
                        copies.append(dict(name=f"{op.name} <- {t}", pixels=h * w, channels=c,
                                           in_stride=v[t].stride, out_stride=v[op.outputs[0]].stride,
                                           in_off=off(t), out_off=off(op.outputs[0]) + slot))
                        steps.append(dict(head, kind="xnn_copy", index=len(copies) - 1, what=t))
                    slot += c
                if not any((op.name, t) in copy_set for t in op.inputs):
                    steps.append(dict(head, kind="view", what="concat: inputs were written in place"))
            elif op.kind == "slice":
                steps.append(dict(head, kind="view", what="split: a strided view, no copy"))
            elif op.kind == "upsample_nearest":
                x, y = op.inputs[0], op.outputs[0]
                h, w, c = graph.tensors[x].shape
                steps.append(dict(head, kind="upsample", x_off=off(x), x_stride=v[x].stride, h=h, w=w, c=c,
                                  y_off=off(y), y_stride=v[y].stride))
            elif op.kind == "attention":
                x = op.inputs[0]
                o, vv = op.outputs
                h, w, _ = graph.tensors[x].shape
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
                    h, w, _ = graph.tensors[box].shape
                    levels.append(dict(box_off=off(box), box_stride=v[box].stride, cls_off=off(cls),
                                       cls_stride=v[cls].stride, h=h, w=w, stride=a["strides"][li // per]))
                y = op.outputs[0]
                _, k, row = graph.tensors[y].shape
                steps.append(dict(head, kind="e2e", levels=levels, nc=a["nc"], k=k, row=row,
                                  extra=a["extra_channels"], rows_off=off(y)))
            else:  # pragma: no cover - check() refuses these first
                raise AssertionError(op.kind)

        rows = graph.outputs["output0"]
        for lay in layers.values():
            t = lay["output"]
            h, w, c = graph.tensors[t].shape
            lay.update(out_off=off(t), out_h=h, out_w=w, out_c=c, out_stride=v[t].stride,
                       is_rows=(t == rows), flops=sum(s["flops"] for s in lay["steps"]))
        attn = [s for lay in layers.values() for s in lay["steps"] if s["kind"] == "attention"]
        e2e = [s for lay in layers.values() for s in lay["steps"] if s["kind"] == "e2e"][0]
        return dict(layers=[layers[i] for i in sorted(layers)], convs=convs, storages=sorted(
                        storages.values(), key=lambda st: (st["offset"], st["macro"])), pools=pools, copies=copies,
                    blob=blob.bytes(), blob_floats=blob.floats, attention=attn, e2e=e2e,
                    input_off=off(graph.input), rows_off=off(rows), rows_k=e2e["k"], row_len=e2e["row"],
                    arena_bytes=plan.arena_bytes,
                    attn_max_n=max((s["n"] for s in attn), default=0),
                    attn_max_heads=max((s["heads"] for s in attn), default=0),
                    anchors=sum(lv["h"] * lv["w"] for lv in e2e["levels"]),
                    flops=sum(s["flops"] for lay in layers.values() for s in lay["steps"]))

    def emit(self, graph: Graph, plan: Plan, options) -> dict:
        program = self.lower(graph, plan)
        return CPackage(self, graph, plan, program, options).files()


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


BACKEND = XnnpackBackend()
