"""A small hand-made int8 rewrite of a float graph, for tests of the int8 lowerings (tests only).

Not the quantization pass (generator/carve/quant/, --precision int8): a plain rewrite from
generator/carve/quant/arith.py's functions that puts every convolution of a float graph in int8, as an
island between a ``quantize`` and a ``dequantize``:

    x -> quantize -> qconv2d (SiLU table) -> dequantize -> y                      conv2d without residual
    x -> quantize -> qconv2d -> qadd <- quantize <- r; qadd -> dequantize -> y    conv2d with a residual r

Every other op stays float32 (so a layer's output is always the float32 of a ``dequantize``, whose input's
QParams say its int8 unit). One ``quantize`` per float tensor, shared by the convolutions that read it (a channel
slice of a split included). Ranges: the min / max of each tensor over calibration images (irsim, the numpy
interpreter of the IR), ``arith.range_qparams``; weights, biases, multipliers and tables as arith makes them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(REPO / "tests" / "generator"))

import irsim  # noqa: E402
from carve.ir import Op, QParams, Tensor  # noqa: E402
from carve.quant import arith  # noqa: E402


def calibrate(graph, images) -> dict:
    """{tensor: (lo, hi)} over the images (each (h, w, 3) float32 in [0, 1]), and {conv op: (lo, hi)} of the
    pre-activation of each SiLU convolution (irsim.conv2d without its activation)."""
    ranges: dict = {}

    def see(key, a):
        lo, hi = float(np.min(a)), float(np.max(a))
        old = ranges.get(key)
        ranges[key] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

    for image in images:
        env = irsim.run_graph(graph, image)
        for t, a in env.items():
            see(t, a)
        for op in graph.ops:
            if op.kind == "conv2d":
                a = op.attrs
                pre = irsim.conv2d(env[op.inputs[0]], graph.weights[op.params["weight"]],
                                   graph.weights[op.params["bias"]], a["stride"], a["pad"], a["groups"], "none")
                see(("pre", op.name), pre)
                if len(op.inputs) > 1:  # the conv's own output before the residual
                    see(("conv", op.name), env[op.outputs[0]] - env[op.inputs[1]])
    return ranges


def quantize_graph(graph, ranges: dict):
    """The graph with every conv2d in int8 (module docstring)."""
    tensors = dict(graph.tensors)
    weights = dict(graph.weights)
    ops: list = []
    quantized: dict = {}   # float tensor -> its int8 tensor

    def qp(key) -> QParams:
        scale, zp = arith.range_qparams(*ranges[key])
        return QParams(scale, zp)

    def new_tensor(name, like, q: QParams) -> str:
        assert name not in tensors, name
        tensors[name] = Tensor(name, graph.tensors[like].shape, "i8", q)
        return name

    def quantize(t, layer) -> str:
        if t not in quantized:
            q = qp(t)
            quantized[t] = new_tensor(f"{t}.q8", t, q)
            ops.append(Op(f"{t}#quantize", "quantize", (t,), (quantized[t],), layer, source="quantize"))
        return quantized[t]

    for op in graph.ops:
        if op.kind != "conv2d":
            ops.append(op)
            continue
        a = op.attrs
        x, y = op.inputs[0], op.outputs[0]
        residual = op.inputs[1] if len(op.inputs) > 1 else None
        xq = quantize(x, op.layer)
        x_scale = tensors[xq].quant.scale
        w_q, w_scale = arith.quantize_weights(graph.weights[op.params["weight"]])
        bias_q = arith.quantize_bias(graph.weights[op.params["bias"]], x_scale, w_scale)
        silu = a.get("act", "none") == "silu"
        out_q = qp(("conv", op.name) if residual else y)
        pre_q = qp(("pre", op.name)) if silu else out_q
        ratios = np.float64(x_scale) * w_scale.astype(np.float64) / np.float64(pre_q.scale)
        mul, shift = (np.array(v) for v in zip(*(arith.quantize_multiplier(float(r)) for r in ratios)))
        params = {}
        for role, arr in (("weight", w_q), ("bias", bias_q), ("mul", mul.astype(np.int32)),
                          ("shift", shift.astype(np.int32))):
            params[role] = f"{op.name}.q8.{role}"
            weights[params[role]] = arr
        if silu:
            params["lut"] = f"{op.name}.q8.lut"
            weights[params["lut"]] = arith.silu_lut(pre_q.scale, pre_q.zero_point, out_q.scale, out_q.zero_point)
        cq = new_tensor(f"{y}.{'conv' if residual else 'out'}.q8", y, out_q)
        ops.append(Op(f"{op.name}#q8", "qconv2d", (xq,), (cq,), op.layer,
                      dict(a, pre_scale=pre_q.scale, pre_zero=pre_q.zero_point), params,
                      source=f"int8 {op.source}"))
        if residual:
            rq = quantize(residual, op.layer)
            yq_q = qp(y)
            ma, mb, n = arith.add_multipliers(out_q.scale, tensors[rq].quant.scale, yq_q.scale)
            yq = new_tensor(f"{y}.out.q8", y, yq_q)
            ops.append(Op(f"{op.name}#q8add", "qadd", (cq, rq), (yq,), op.layer, dict(mul_a=ma, mul_b=mb, shift=n),
                          source="int8 residual add"))
            cq = yq
        ops.append(Op(f"{op.name}#dequantize", "dequantize", (cq,), (y,), op.layer, source="dequantize"))
    return graph.replace(tensors=tensors, ops=tuple(ops), weights=weights)


def layer_units(graph) -> dict:
    """{layer index: the int8 unit (scale) of its output} for the layers whose output is a dequantize's (or an int8
    tensor); the other layers are float32."""
    producer = graph.producer()
    out = {}
    for layer in graph.layers:
        t = graph.tensors[layer.output]
        if t.dtype == "i8":
            out[layer.index] = t.quant.scale
        else:
            op = producer.get(layer.output)
            if op is not None and op.kind == "dequantize":
                out[layer.index] = graph.tensors[op.inputs[0]].quant.scale
    return out


def simulate(graph, image) -> dict:
    """{tensor: value} of the quantized graph on image (h, w, 3): the int8 ops by arith.py (what the portable
    package computes bit for bit), the float ops by irsim (float64 inside, rounded to float32)."""
    env = {graph.input: np.ascontiguousarray(image, np.float32)}
    w = graph.weights
    for op in graph.ops:
        ins = [env[t] for t in op.inputs]
        qi = [graph.tensors[t].quant for t in op.inputs]
        qo = graph.tensors[op.outputs[0]].quant
        a, p = op.attrs, op.params
        if op.kind == "quantize":
            out = [arith.quantize(ins[0], qo.scale, qo.zero_point)]
        elif op.kind == "dequantize":
            out = [arith.dequantize(ins[0], qi[0].scale, qi[0].zero_point)]
        elif op.kind == "qconv2d":
            out = [arith.qconv2d(ins[0], qi[0].zero_point, w[p["weight"]], w[p["bias"]], w[p["mul"]], w[p["shift"]],
                                 a["pre_zero"], a["stride"], a["pad"], a["groups"], w.get(p.get("lut")))]
        elif op.kind == "qadd":
            out = [arith.qadd(ins[0], qi[0].zero_point, ins[1], qi[1].zero_point, a["mul_a"], a["mul_b"], a["shift"],
                              qo.zero_point)]
        else:  # float ops, and max pool / upsample / concat / slice on int8 (exact on integer values)
            out = irsim.eval_op(graph, op, ins)
        for t, y in zip(op.outputs, out):
            env[t] = y.astype(np.int8) if graph.tensors[t].dtype == "i8" else y
    return env
