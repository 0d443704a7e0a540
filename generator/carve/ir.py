"""The graph IR: primitive ops on named NHWC tensors (batch 1).

Each op kind is declared once in ``OPS`` with its shape rule and its FLOP
count; backends lower op kinds, passes rewrite graphs. Tensors are
``(h, w, c)``; the e2e post-processing output is ``(k, row)`` stored as
``(1, k, row)``.

A Graph is built by a frontend (frontend/yolo26.py), rewritten by pure passes
(passes.py) and lowered by a backend (backends/*.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .errors import CarveError

Shape = tuple  # (h, w, c)


@dataclass(frozen=True)
class QParams:
    """An int8 tensor's affine quantization: real = scale * (q - zero_point) (docs/quantization.md)."""

    scale: float                # a float32 value, > 0
    zero_point: int             # [-128, 127]


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: Shape
    dtype: str = "f32"          # "f32", or "i8" in a quantized graph (quant/), then with quant set
    quant: QParams | None = None


@dataclass(frozen=True)
class Op:
    name: str                   # unique; the Ultralytics module path, e.g. 'model.2.m.0.cv1'
    kind: str                   # a key of OPS
    inputs: tuple               # tensor names
    outputs: tuple              # tensor names
    layer: int                  # Ultralytics layer index (model.<layer>)
    attrs: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # role -> weight name in Graph.weights
    source: str = ""            # human description, e.g. 'Conv 3x3/2 3->16 SiLU'

    def replace(self, **changes) -> "Op":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Layer:
    index: int
    type: str                   # Ultralytics module type, e.g. 'C3k2'
    output: str                 # tensor name of the layer's output
    sources: tuple              # 'from' layer indices


@dataclass(frozen=True)
class BnFold:
    """A convolution's parameters before passes.fold_bn folded its BatchNorm: the arrays as the checkpoint holds
    them (widened to float32, so exactly its values), the float32 eps the fold used, and the names of the folded
    weight and bias in Graph.weights. An f16 package stores these and folds at create (backends/f16.py)."""

    weight: np.ndarray          # (cout, cin/g, kh, kw)
    gamma: np.ndarray           # (cout,) each
    beta: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    bias: np.ndarray | None     # the conv's own bias, or None (Ultralytics' Conv has none)
    eps: np.float32
    weight_name: str            # the folded weight's name in Graph.weights
    bias_name: str              # the folded bias's
    sources: tuple              # the checkpoint keys, for messages


@dataclass(frozen=True)
class Graph:
    name: str
    input: str
    tensors: dict               # name -> Tensor
    ops: tuple                  # topologically ordered Ops
    weights: dict               # name -> np.ndarray (float32; int8 / int32 for the q* ops' params)
    layers: tuple               # Layer per Ultralytics layer
    outputs: dict               # role ('output0') -> tensor name
    meta: dict                  # task, nc, names, strides, imgsz, k, ...
    # folded weight name -> the BnFold it came from (passes.fold_bn): what an f16 package stores instead
    folds: dict = field(default_factory=dict)

    def replace(self, **changes) -> "Graph":
        return dataclasses.replace(self, **changes)

    def producer(self) -> dict:
        return {t: op for op in self.ops for t in op.outputs}

    def consumers(self) -> dict:
        out: dict = {name: [] for name in self.tensors}
        for op in self.ops:
            for t in op.inputs:
                out[t].append(op)
        return out


# ---------------------------------------------------------------------------
# Op kinds: shape inference and FLOPs, declared once.
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class OpKind:
    name: str
    infer: Callable      # (op, [input shapes]) -> [output shapes]
    flops: Callable      # (op, [input shapes], [output shapes]) -> int (multiply-adds count as 2)
    doc: str


def _conv_out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def _infer_conv(op, ins):
    h, w, c = ins[0]
    kh, kw = op.attrs["kernel"]
    s, p = op.attrs["stride"], op.attrs["pad"]
    if c != op.attrs["cin"]:
        raise CarveError(f"{op.name}: input has {c} channels, conv expects {op.attrs['cin']}")
    out = (_conv_out(h, kh, s, p), _conv_out(w, kw, s, p), op.attrs["cout"])
    if len(ins) > 1 and ins[1] != out:
        raise CarveError(f"{op.name}: residual shape {ins[1]} differs from output {out}")
    return [out]


def _flops_conv(op, ins, outs):
    kh, kw = op.attrs["kernel"]
    h, w, c = outs[0]
    return 2 * h * w * c * kh * kw * op.attrs["cin"] // op.attrs["groups"]


def _infer_deconv(op, ins):
    h, w, c = ins[0]
    k, s = op.attrs["kernel"][0], op.attrs["stride"]
    return [((h - 1) * s + k, (w - 1) * s + k, op.attrs["cout"])]


def _flops_deconv(op, ins, outs):
    kh, kw = op.attrs["kernel"]
    h, w, c = ins[0]
    return 2 * h * w * c * op.attrs["cout"] * kh * kw


def _infer_global_pool(op, ins):
    return [(1, 1, ins[0][2])]


def _infer_linear(op, ins):
    if ins[0] != (1, 1, op.attrs["cin"]):
        raise CarveError(f"{op.name}: linear expects (1,1,{op.attrs['cin']}), got {ins[0]}")
    return [(1, 1, op.attrs["cout"])]


def _flops_linear(op, ins, outs):
    return 2 * op.attrs["cin"] * op.attrs["cout"]


def _infer_same(op, ins):
    return [ins[0]]


def _infer_pool(op, ins):
    h, w, c = ins[0]
    k, s, p = op.attrs["kernel"], op.attrs["stride"], op.attrs["pad"]
    return [(_conv_out(h, k, s, p), _conv_out(w, k, s, p), c)]


def _infer_upsample(op, ins):
    h, w, c = ins[0]
    f = op.attrs["scale"]
    return [(h * f, w * f, c)]


def _infer_concat(op, ins):
    h, w = ins[0][:2]
    for s in ins:
        if s[:2] != (h, w):
            raise CarveError(f"{op.name}: concat of tensors with different sizes {ins}")
    return [(h, w, sum(s[2] for s in ins))]


def _infer_slice(op, ins):
    h, w, c = ins[0]
    start, count = op.attrs["start"], op.attrs["count"]
    if start + count > c:
        raise CarveError(f"{op.name}: slice [{start}:{start + count}] of {c} channels")
    return [(h, w, count)]


def _infer_add(op, ins):
    if ins[0] != ins[1]:
        raise CarveError(f"{op.name}: add of different shapes {ins}")
    return [ins[0]]


def _infer_attention(op, ins):
    h, w, c = ins[0]
    a = op.attrs
    if c != a["heads"] * (2 * a["key_dim"] + a["head_dim"]):
        raise CarveError(f"{op.name}: qkv has {c} channels, expected heads*(2*key_dim+head_dim)")
    dim = a["heads"] * a["head_dim"]
    return [(h, w, dim), (h, w, dim)]


def _flops_attention(op, ins, outs):
    h, w, _ = ins[0]
    n = h * w
    a = op.attrs
    return 2 * a["heads"] * n * n * (a["key_dim"] + a["head_dim"])


def _infer_e2e(op, ins):
    a = op.attrs
    anchors = sum(ins[i][0] * ins[i][1] for i in range(0, len(ins), a["inputs_per_level"]))
    k = min(a["k"], anchors)
    return [(1, k, 6 + a["extra_channels"])]


def _infer_qconv(op, ins):
    if len(ins) != 1:
        raise CarveError(f"{op.name}: qconv2d takes one input (a residual is a separate qadd)")
    return _infer_conv(op, ins)


def _flops_zero(op, ins, outs):
    return 0


def _flops_elementwise(op, ins, outs):
    h, w, c = outs[0]
    return h * w * c


OPS = {
    k.name: k for k in (
        OpKind("conv2d", _infer_conv, _flops_conv,
               "2-D convolution (+ folded BN bias), optional SiLU, optional residual add: y = act(W*x + b) + r"),
        OpKind("deconv2d", _infer_deconv, _flops_deconv, "transposed 2-D convolution with bias"),
        OpKind("global_avgpool", _infer_global_pool, _flops_elementwise, "mean over all pixels, per channel"),
        OpKind("linear", _infer_linear, _flops_linear, "fully connected layer y = W x + b on a (1,1,C) tensor"),
        OpKind("softmax", _infer_same, _flops_elementwise, "softmax over channels"),
        OpKind("maxpool2d", _infer_pool, _flops_elementwise, "max pooling, -inf padding"),
        OpKind("upsample_nearest", _infer_upsample, _flops_zero, "integer nearest-neighbour upsampling"),
        OpKind("concat", _infer_concat, _flops_zero, "channel concatenation"),
        OpKind("slice", _infer_slice, _flops_zero, "channel slice (split)"),
        OpKind("add", _infer_add, _flops_elementwise, "element-wise sum"),
        OpKind("attention", _infer_attention, _flops_attention,
               "multi-head attention core: softmax(scale q^T k) applied to v; also returns v"),
        OpKind("e2e_detect", _infer_e2e, _flops_zero,
               "YOLO26 end-to-end post-processing: decode, top-k anchors, top-k anchors x classes, gather"),
        OpKind("nms_detect", _infer_e2e, _flops_zero,
               "YOLO26 one-to-many post-processing: decode, confidence filter, non-maximum suppression, gather"),
        # int8 (docs/quantization.md#integer-arithmetic); maxpool2d, upsample_nearest, concat and slice also run on
        # i8 tensors, whose inputs and outputs then share one QParams.
        OpKind("quantize", _infer_same, _flops_elementwise, "f32 -> i8: q = clamp(rint(x / scale) + zero_point)"),
        OpKind("dequantize", _infer_same, _flops_elementwise, "i8 -> f32: x = (q - zero_point) * scale"),
        OpKind("qconv2d", _infer_qconv, _flops_conv,
               "int8 convolution: int32 accumulation, per-channel requantization, optional SiLU lookup table"),
        OpKind("qadd", _infer_add, _flops_elementwise, "int8 element-wise sum, both inputs requantized"),
    )
}


def op_flops(graph: Graph, op: Op) -> int:
    kind = OPS[op.kind]
    ins = [graph.tensors[t].shape for t in op.inputs]
    outs = [graph.tensors[t].shape for t in op.outputs]
    return kind.flops(op, ins, outs)


class GraphBuilder:
    """Appends ops in order, inferring output shapes as it goes."""

    def __init__(self, name: str, input_shape: Shape):
        self.name = name
        self.tensors: dict = {}
        self.ops: list = []
        self.weights: dict = {}
        self.layers: list = []
        self.input = self.tensor("images", input_shape)

    def tensor(self, name: str, shape: Shape) -> str:
        if name in self.tensors:
            raise CarveError(f"internal: tensor '{name}' defined twice")
        self.tensors[name] = Tensor(name, tuple(int(x) for x in shape))
        return name

    def shape(self, name: str) -> Shape:
        return self.tensors[name].shape

    def add(self, kind: str, name: str, inputs, layer: int, attrs=None, params=None, source="",
            outputs=None) -> list:
        op = Op(name=name, kind=kind, inputs=tuple(inputs), outputs=(), layer=layer,
                attrs=dict(attrs or {}), params=dict(params or {}), source=source)
        shapes = OPS[kind].infer(op, [self.shape(t) for t in inputs])
        names = outputs or ([name] if len(shapes) == 1 else [f"{name}:{i}" for i in range(len(shapes))])
        outs = [self.tensor(n, s) for n, s in zip(names, shapes)]
        self.ops.append(op.replace(outputs=tuple(outs)))
        return outs

    def build(self, outputs: dict, meta: dict) -> Graph:
        return Graph(name=self.name, input=self.input, tensors=dict(self.tensors), ops=tuple(self.ops),
                     weights=dict(self.weights), layers=tuple(self.layers), outputs=dict(outputs), meta=dict(meta))


def validate(graph: Graph) -> None:
    """Check SSA form, topological order and that every weight referenced exists."""
    defined = {graph.input}
    for op in graph.ops:
        if op.kind not in OPS:
            raise CarveError(f"{op.name}: unknown op kind '{op.kind}'")
        for t in op.inputs:
            if t not in defined:
                raise CarveError(f"{op.name}: input '{t}' used before it is defined")
        for t in op.outputs:
            if t in defined:
                raise CarveError(f"{op.name}: output '{t}' defined twice")
            defined.add(t)
        for role, w in op.params.items():
            if w not in graph.weights:
                raise CarveError(f"{op.name}: {role} weight '{w}' missing")
    for role, t in graph.outputs.items():
        if t not in defined:
            raise CarveError(f"graph output {role} '{t}' is never produced")


def weight_f32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))
