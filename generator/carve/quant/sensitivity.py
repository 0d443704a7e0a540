"""The sensitivity pass: how much int8 hurts each convolution and add, and which stay in float32.

Each conv2d / add is quantized alone, on ``SENSITIVITY_IMAGES`` calibration images: its float input(s) (from the
float executor) are quantized with the QParams they have in the all-int8 graph, the op runs as the quantized graph
would run it (qconv2d with its int8 weights, int32 bias, multipliers and table, then the qadd of a fused residual),
and its output is dequantized. Two errors, both as SQNR = 10 log10(sum(y**2) / sum((y - y_int8)**2)) in dB over
those images:

* ``local_db``: at the op's own output, the layer's quantization error;
* ``output_db``: at the network's outputs (calibrate.network_outputs: the head tensors that post-processing reads),
  the rest of the network running in float: how much this op alone in int8 costs the result; the worst output
  tensor counts.

Ops whose ``output_db`` is below ``THRESHOLD_DB`` stay in float32 (``choose``). The threshold was chosen on the demo
model by the end-to-end agreement of the simulated int8 graph with the float graph on held-out images
(docs/quantization.md#sensitivity-pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import arith, floatexec, simulate
from .calibrate import network_outputs
from .rewrite import QUANTIZABLE

SENSITIVITY_IMAGES = 8
THRESHOLD_DB = 35.0


@dataclass(frozen=True)
class OpError:
    local_db: float         # SQNR at the op's output
    output_db: float        # SQNR at the network's worst output, this op alone in int8


def sqnr_db(signal: float, noise: float) -> float:
    if noise <= 0.0:
        return math.inf
    if signal <= 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def isolated(qgraph, op, env) -> np.ndarray:
    """The dequantized int8 output of float-graph op ``op`` run alone, as ``qgraph`` runs it, on the float env."""
    qt = qgraph.tensors
    by_name = {o.name: o for o in qgraph.ops}
    qop = by_name[op.name]
    if op.kind == "conv2d":
        xq = qt[qop.inputs[0]].quant
        x = arith.quantize(env[op.inputs[0]], xq.scale, xq.zero_point)
        y = simulate.qconv2d(qgraph, qop, x, xq.zero_point)
        out = qop.outputs[0]
        if len(op.inputs) > 1:
            add = by_name[f"{op.name}:add"]
            rq = qt[add.inputs[1]].quant
            r = arith.quantize(env[op.inputs[1]], rq.scale, rq.zero_point)
            y = simulate.eval_op(qgraph, add, [y, r])[0]
            out = add.outputs[0]
    else:                                                     # add
        ins = []
        for t, qname in zip(op.inputs, qop.inputs):
            q = qt[qname].quant
            ins.append(arith.quantize(env[t], q.scale, q.zero_point))
        y = simulate.eval_op(qgraph, qop, ins)[0]
        out = qop.outputs[0]
    q = qt[out].quant
    return arith.dequantize(y, q.scale, q.zero_point)


def _downstream(float_graph, start: int, env: dict, changed: str, y) -> dict:
    """The float env after op ``start`` wrote ``y`` instead of env[changed]: the ops that depend on it rerun."""
    e = dict(env)
    e[changed] = y
    dirty = {changed}
    for op in float_graph.ops[start + 1:]:
        if op.kind in floatexec.POSTPROCESS or not any(t in dirty for t in op.inputs):
            continue
        for t, v in zip(op.outputs, floatexec.eval_op(float_graph, op, [e[t] for t in op.inputs])):
            e[t] = v
            dirty.add(t)
    return e


def measure(float_graph, qgraph, images, count: int = SENSITIVITY_IMAGES, progress=None) -> dict:
    """{op name: OpError} of every conv2d / add of ``float_graph``, from the all-int8 ``qgraph`` (rewrite.quantize
    with nothing kept in float), on ``count`` images spread evenly over ``images``."""
    index = {op.name: i for i, op in enumerate(float_graph.ops)}
    ops = [op for op in float_graph.ops if op.kind in QUANTIZABLE]
    outs = network_outputs(float_graph)
    local = {op.name: [0.0, 0.0] for op in ops}
    output = {op.name: {t: [0.0, 0.0] for t in outs} for op in ops}
    n = len(images)
    picks = sorted({int(i * n / min(count, n)) for i in range(min(count, n))})
    for k, i in enumerate(picks):
        x = images.input(i) if hasattr(images, "input") else np.asarray(images[i], np.float32)
        env = floatexec.run(float_graph, x)
        for op in ops:
            ref = np.asarray(env[op.outputs[0]], np.float64)
            y = isolated(qgraph, op, env)
            d = y.astype(np.float64) - ref
            local[op.name][0] += float(np.sum(ref * ref))
            local[op.name][1] += float(np.sum(d * d))
            e = _downstream(float_graph, index[op.name], env, op.outputs[0], y)
            for t in outs:
                r = np.asarray(env[t], np.float64)
                dt = np.asarray(e[t], np.float64) - r
                output[op.name][t][0] += float(np.sum(r * r))
                output[op.name][t][1] += float(np.sum(dt * dt))
        if progress:
            progress(f"sensitivity: {k + 1}/{len(picks)} images")
    return {op.name: OpError(sqnr_db(*local[op.name]), min(sqnr_db(*v) for v in output[op.name].values()))
            for op in ops}


def choose(errors: dict, threshold_db: float = THRESHOLD_DB) -> tuple:
    """The ops that stay in float32: output SQNR below the threshold, sorted by name."""
    return tuple(sorted(name for name, e in errors.items() if e.output_db < threshold_db))
