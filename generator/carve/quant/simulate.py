"""A simulator of a quantized graph: int8 ops through arith.py (the specification of the C kernels), float ops
through the float executor. What the tests and the sensitivity pass use to see what an int8 package computes.

``run(qgraph, image)`` returns {tensor: array} (int8 arrays for i8 tensors). ``qconv2d`` computes its int32
accumulators with a float matrix product of im2col patches (``conv_acc``): the products and sums are integers
below 2**53 (float64), or below 2**24 where max|x| * sum|w| bounds them there (float32, twice as fast), so the
result is arith.conv_acc's exactly (tests/generator/test_quant.py checks it), only faster;
requantization, clamping and the lookup table are arith's own functions.
"""

from __future__ import annotations

import numpy as np

from ..errors import CarveError
from . import arith, floatexec


def conv_acc(x_q, in_zero: int, w_q, bias_q, stride: int, pad: int, groups: int):
    """arith.conv_acc, computed with BLAS (exact: integer values below 2**53, or below 2**24 in float32)."""
    w = np.asarray(w_q)
    cout, cg, kh, kw = w.shape
    x = np.asarray(x_q, np.int32) - in_zero      # padding holds in_zero, i.e. 0 here
    # every partial sum of a column is at most max|x| * sum|w|: below 2**24, float32 holds all of them exactly
    bound = int(np.abs(x).max()) * int(np.abs(w.reshape(cout, -1).astype(np.int64)).sum(1).max())
    ft = np.float32 if bound < 2 ** 24 else np.float64
    x, w = x.astype(ft), w.astype(ft)
    h, wd, c = x.shape
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    xp = floatexec.pad_hw(x, pad)
    if groups == c == cout:
        acc = np.zeros((oh, ow, cout), ft)
        for i, j, v in floatexec.taps(xp, kh, kw, stride, oh, ow):
            acc += v * w[:, 0, i, j]
    else:
        cols = np.empty((oh, ow, kh, kw, c), ft)
        for i, j, v in floatexec.taps(xp, kh, kw, stride, oh, ow):
            cols[:, :, i, j, :] = v
        cols = cols.reshape(oh * ow, kh, kw, groups, cg)
        og = cout // groups
        acc = np.empty((oh * ow, cout), ft)
        for g in range(groups):
            a = cols[:, :, :, g, :].reshape(oh * ow, kh * kw * cg)
            acc[:, g * og:(g + 1) * og] = a @ w[g * og:(g + 1) * og].transpose(2, 3, 1, 0).reshape(kh * kw * cg, og)
        acc = acc.reshape(oh, ow, cout)
    acc = acc.astype(np.float64) + np.asarray(bias_q, np.float64)
    if np.any(np.abs(acc) >= 2.0 ** 31):
        raise arith.QuantRangeError("int32 accumulator overflow")
    return acc.astype(np.int64)


def qconv2d(graph, op, x_q, in_zero: int):
    """A qconv2d op on its int8 input, as arith.qconv2d with the accumulators of conv_acc."""
    a, w = op.attrs, graph.weights
    p = op.params
    acc = conv_acc(x_q, in_zero, w[p["weight"]], w[p["bias"]], a["stride"], a["pad"], a["groups"])
    pre = arith.clamp8(a["pre_zero"] + arith.requantize(acc, w[p["mul"]], w[p["shift"]]))
    if "lut" not in p:
        return pre
    return np.asarray(w[p["lut"]], np.int8)[pre.astype(np.int64) + 128]


def eval_op(graph, op, ins, conf: float = 0.25) -> list:
    """The outputs of one op of a quantized graph."""
    k, a = op.kind, op.attrs
    tq = graph.tensors
    if k == "quantize":
        q = tq[op.outputs[0]].quant
        return [arith.quantize(ins[0], q.scale, q.zero_point)]
    if k == "dequantize":
        q = tq[op.inputs[0]].quant
        return [arith.dequantize(ins[0], q.scale, q.zero_point)]
    if k == "qconv2d":
        try:
            return [qconv2d(graph, op, ins[0], tq[op.inputs[0]].quant.zero_point)]
        except arith.QuantRangeError as exc:
            raise CarveError(f"{op.name}: {exc}") from None
    if k == "qadd":
        qa, qb, qy = (tq[t].quant for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        return [arith.qadd(ins[0], qa.zero_point, ins[1], qb.zero_point, a["mul_a"], a["mul_b"], a["shift"],
                           qy.zero_point)]
    if tq[op.outputs[0]].dtype == "i8":
        if k == "maxpool2d":
            return [arith.maxpool(ins[0], a["kernel"], a["stride"], a["pad"])]
        if k == "upsample_nearest":
            return [floatexec.upsample_nearest(ins[0], a["scale"])]
        if k == "concat":
            return [np.concatenate(ins, axis=2)]
        if k == "slice":
            return [np.ascontiguousarray(ins[0][:, :, a["start"]:a["start"] + a["count"]])]
        raise CarveError(f"{op.name}: no int8 simulation of '{k}'")
    return floatexec.eval_op(graph, op, ins, None, conf)


def run(qgraph, image, postprocess: bool = False, conf: float = 0.25, keep: bool = True) -> dict:
    """Run the quantized graph on ``image`` (h, w, 3) float32 (quantized first when the graph's input is int8);
    {tensor: array}. Post-processing ops run only with ``postprocess`` (detect)."""
    x = np.ascontiguousarray(image, np.float32)
    q = qgraph.tensors[qgraph.input].quant
    # an int8 input (rewrite.int8_input): the float image quantized on entry, as the package's run_tensor does
    # (its pre-processing writes the same bytes straight from the pixels: runtime/carve_pre.h)
    env = {qgraph.input: arith.quantize(x, q.scale, q.zero_point) if q is not None else x}
    for op in qgraph.ops:
        if op.kind in floatexec.POSTPROCESS and not postprocess:
            continue
        for t, y in zip(op.outputs, eval_op(qgraph, op, [env[t] for t in op.inputs], conf)):
            env[t] = y
    return env
