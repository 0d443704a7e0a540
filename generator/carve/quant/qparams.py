"""QParams of the int8 tensors of a quantized graph: ranges, shared groups, scale and zero point.

* A tensor's range is the estimated range of the value it holds (calibrate.estimate of its observation key:
  ``range_key``); the output of a concat / slice / max pool / upsample, which is not observed, has the union of
  its inputs' ranges.
* Tensors that must share QParams (every input and output of an int8 concat, slice, max pool or upsample: the
  memory plan keeps concat free, and the others move int8 values unchanged) form groups (union-find); a group's
  range is the union of its members' ranges.
* QParams = arith.range_qparams(lo, hi), except the network input's int8 copy: its values are uint8 pixels / 255,
  and scale 1/255 with zero point -128 holds each of them exactly (``INPUT_QPARAMS``).
"""

from __future__ import annotations

import numpy as np

from ..ir import QParams
from . import arith
from .calibrate import SHARING

INPUT_QPARAMS = QParams(float(np.float32(1.0 / 255.0)), -128)


class UnionFind:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:              # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            lo, hi = sorted((ra, rb))              # deterministic: the smaller name is the root
            self.parent[hi] = lo

    def groups(self) -> dict:
        out: dict = {}
        for x in sorted(self.parent):
            out.setdefault(self.find(x), []).append(x)
        return out


def tensor_ranges(float_graph, ranges: dict) -> dict:
    """{tensor: (lo, hi)} for every tensor of the float graph that has one: observed, or (concat / slice / max pool
    / upsample outputs) the union of its inputs' ranges."""
    out = {}
    if float_graph.input in ranges:
        out[float_graph.input] = ranges[float_graph.input]
    for op in float_graph.ops:
        for t in op.outputs:
            if t in ranges:
                out[t] = ranges[t]
            elif op.kind in SHARING and all(i in out for i in op.inputs):
                out[t] = (min(out[i][0] for i in op.inputs), max(out[i][1] for i in op.inputs))
    return out


def sharing_groups(ops, dtype: dict) -> UnionFind:
    """Union-find of the int8 tensors that share QParams: inputs and outputs of every int8 sharing op."""
    uf = UnionFind()
    for op in ops:
        if op.kind in SHARING and dtype.get(op.outputs[0]) == "i8":
            for t in op.inputs + op.outputs:
                uf.union(op.outputs[0], t)
    return uf


def assign(i8_tensors: dict, uf: UnionFind, input_copy: str | None = None) -> dict:
    """{tensor: QParams} for every int8 tensor. ``i8_tensors``: {tensor: (lo, hi)}; tensors of one group get the
    union of their ranges; the group of ``input_copy`` (the network input's int8 copy) gets INPUT_QPARAMS when its
    range lies within [0, 1]."""
    for t in i8_tensors:
        uf.find(t)
    out = {}
    for root, members in uf.groups().items():
        rs = [i8_tensors[m] for m in members if m in i8_tensors]
        lo, hi = min(r[0] for r in rs), max(r[1] for r in rs)
        if input_copy in members and lo >= 0.0 and hi <= 1.0:
            qp = INPUT_QPARAMS
        else:
            scale, zp = arith.range_qparams(lo, hi)
            qp = QParams(scale, zp)
        for m in members:
            out[m] = qp
    return out
