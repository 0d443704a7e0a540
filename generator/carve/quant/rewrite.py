"""The quantization rewrite: a float graph (after passes.optimize) -> the quantized graph (a pure function).

Which ops run in int8 (``precisions``):

* ``conv2d`` and ``add``: int8 unless named in ``keep_float`` (the sensitivity pass's choice);
* ``concat``, ``slice``, ``maxpool2d``, ``upsample_nearest``: int8 when every reader of their output runs in
  int8 (they move values, so they follow their readers: a float reader gets float values, not values squeezed into
  a range its int8 neighbours share);
* everything else (attention, e2e_detect, nms_detect, deconv2d, global_avgpool, linear, softmax): float32, as no
  int8 kernel exists for it.

What the rewrite produces (``quantize``), for the op kinds and tensors of ir.py:

* an int8 ``conv2d`` becomes a ``qconv2d`` of the same name with int8 weights (per output channel, symmetric),
  an int32 bias, a fixed-point multiplier and shift per output channel and, with SiLU, the 256-entry table; a
  fused residual becomes a separate ``qadd`` named ``<conv>:add`` after it, the qconv2d writing ``<conv>:conv``;
* an int8 ``add`` becomes a ``qadd``; int8 concat / slice / maxpool2d / upsample_nearest keep their kind, on int8
  tensors;
* a ``quantize`` op (``<t>:quantize`` writing ``<t>:i8``) before the first int8 reader of each float tensor, a
  ``dequantize`` op (``<t>:dequantize`` writing ``<t>:f32``) before the first float reader of each int8 tensor; a
  graph output computed in int8 is written as ``<t>:i8`` and dequantized into its own name, so every graph output
  stays float32 under its name;
* every int8 tensor carries its QParams (qparams.py); tensor names of the float graph keep their meaning (a layer's
  output keeps its name, and is int8 when its producer is);
* the network input: when its one reader is ``images:quantize`` (the first convolution in int8) and ``images:i8``
  has the pinned QParams (scale 1/255, zero point -128), that op is dropped and ``images:i8`` is the quantized
  graph's input (``int8_input``): the package pre-processes straight to int8, with no float32 copy;
* the weights the float graph's int8 ops used are dropped (with their ``folds``): the parameters are
  ``<op>.weight:q8`` (int8), ``<op>.bias:q32``, ``<op>.mul``, ``<op>.shift`` (int32) and ``<op>.lut`` (int8).

Parameters that int8 / int32 cannot hold (arith.QuantRangeError) are a CarveError naming the op and tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CarveError
from ..ir import Op, QParams, Tensor, validate
from . import arith
from .calibrate import SHARING
from .floatexec import conv_key, pre_key
from .qparams import INPUT_QPARAMS, assign, sharing_groups, tensor_ranges

QUANTIZABLE = ("conv2d", "add")          # chosen op by op (sensitivity.py)
QUANT_KINDS = ("quantize", "dequantize", "qconv2d", "qadd")


@dataclass(frozen=True)
class Rewritten:
    """The quantized graph and, for reports, {op of the float graph: "i8" | "f32"}."""

    graph: object
    precisions: dict


def precisions(graph, keep_float=()) -> dict:
    """{op name: "i8" | "f32"} for every op of the float graph."""
    keep = set(keep_float)
    prec = {}
    for op in graph.ops:
        if op.kind in QUANTIZABLE:
            prec[op.name] = "f32" if op.name in keep else "i8"
        else:
            prec[op.name] = "f32"
    consumers = graph.consumers()
    outputs = set(graph.outputs.values())
    for op in reversed(graph.ops):          # readers first: a sharing op runs in int8 when all its readers do
        if op.kind in SHARING:
            readers = [c for t in op.outputs for c in consumers[t]]
            if readers and not any(t in outputs for t in op.outputs) and all(prec[c.name] == "i8" for c in readers):
                prec[op.name] = "i8"
    return prec


def _fail(op, tensor: str, exc: Exception):
    raise CarveError(f"{op.name} (layer {op.layer}, {op.source or op.kind}): activations overflow int8 ranges at "
                     f"tensor '{tensor}': {exc}",
                     hint="this layer cannot be quantized from these calibration images; use --precision fp32 "
                          "(nothing was written)") from None


def quantize(graph, ranges: dict, keep_float=()) -> Rewritten:
    """The quantized graph of ``graph`` (after passes.optimize) from the observed ranges ``ranges`` ({observation
    key: (lo, hi)}: calibrate.estimate of every key of calibrate.observed_keys), with the conv2d / add ops named in
    ``keep_float`` left in float32."""
    prec = precisions(graph, keep_float)
    t_range = tensor_ranges(graph, ranges)
    graph_outputs = set(graph.outputs.values())

    ops: list = []
    dtype: dict = {graph.input: "f32"}
    rng: dict = {}                       # int8 tensor -> (lo, hi)
    shape: dict = {t.name: t.shape for t in graph.tensors.values()}
    avail: dict = {graph.input: {"f32": graph.input}}   # float-graph tensor -> {dtype: name holding it}

    def need_range(t, key, op):
        """The range of observation key ``key`` (a tensor of the float graph: its own or its inputs' union)."""
        if key in ranges:
            return ranges[key]
        if key == t and t in t_range:
            return t_range[t]
        raise CarveError(f"internal: {op.name}: no calibration range for '{key}'")

    def new_tensor(name, shp, dt, key_range=None):
        shape[name] = shp
        dtype[name] = dt
        if dt == "i8":
            rng[name] = key_range

    def get(t, want, consumer):
        """The name holding float-graph tensor t as ``want``, inserting a quantize / dequantize before consumer."""
        have = avail[t]
        if want in have:
            return have[want]
        src = have["i8"] if want == "f32" else have["f32"]
        if want == "i8":
            name = f"{t}:i8"
            new_tensor(name, shape[t], "i8", need_range(t, t, consumer))
            ops.append(Op(f"{t}:quantize", "quantize", (src,), (name,), consumer.layer, source=f"quantize {t} to int8"))
        else:
            name = f"{t}:f32"
            new_tensor(name, shape[t], "f32")
            ops.append(Op(f"{t}:dequantize", "dequantize", (src,), (name,), consumer.layer,
                          source=f"dequantize {t} to float32"))
        have[want] = name
        return name

    def out_name(t, dt, op):
        """Where op writes float-graph tensor t in dtype dt (a graph output in int8: '<t>:i8', then dequantized)."""
        if dt == "i8" and t in graph_outputs:
            name = f"{t}:i8"
            avail[t] = {"i8": name}
            return name
        avail[t] = {dt: t}
        return t

    for op in graph.ops:
        p = prec[op.name]
        ins = [get(t, p, op) for t in op.inputs]
        if p == "f32":
            outs = [out_name(t, "f32", op) for t in op.outputs]
            for t in outs:
                new_tensor(t, shape[t], "f32")
            ops.append(op.replace(inputs=tuple(ins), outputs=tuple(outs)))
            continue
        if op.kind == "conv2d":
            t = op.outputs[0]
            if len(ins) > 1:
                conv_out = f"{op.name}:conv"
                new_tensor(conv_out, shape[t], "i8", need_range(t, conv_key(op), op))
                ops.append(Op(op.name, "qconv2d", (ins[0],), (conv_out,), op.layer, dict(op.attrs), dict(op.params),
                              f"int8 {op.source}"))
                y = out_name(t, "i8", op)
                new_tensor(y, shape[t], "i8", need_range(t, t, op))
                ops.append(Op(f"{op.name}:add", "qadd", (conv_out, ins[1]), (y,), op.layer,
                              source=f"int8 residual add of {op.name}"))
            else:
                y = out_name(t, "i8", op)
                new_tensor(y, shape[t], "i8", need_range(t, t, op))
                ops.append(Op(op.name, "qconv2d", (ins[0],), (y,), op.layer, dict(op.attrs), dict(op.params),
                              f"int8 {op.source}"))
        elif op.kind == "add":
            t = op.outputs[0]
            y = out_name(t, "i8", op)
            new_tensor(y, shape[t], "i8", need_range(t, t, op))
            ops.append(op.replace(kind="qadd", inputs=tuple(ins), outputs=(y,), source=f"int8 {op.source or 'add'}"))
        else:                                                   # concat, slice, maxpool2d, upsample_nearest
            outs = []
            for t in op.outputs:
                y = out_name(t, "i8", op)
                new_tensor(y, shape[t], "i8", t_range.get(t))
                outs.append(y)
            ops.append(op.replace(inputs=tuple(ins), outputs=tuple(outs)))
        for t in op.outputs:            # a graph output written in int8: dequantized into its name right away
            if t in graph_outputs:
                new_tensor(t, shape[t], "f32")
                ops.append(Op(f"{t}:dequantize", "dequantize", (avail[t]["i8"],), (t,), op.layer,
                              source=f"dequantize {t} to float32"))
                avail[t]["f32"] = t

    # QParams: shared groups, then one per tensor.
    uf = sharing_groups(ops, dtype)
    input_copy = avail[graph.input].get("i8")
    qp = assign({t: r for t, r in rng.items() if r is not None}, uf, input_copy)
    missing = [t for t in rng if t not in qp]
    if missing:
        raise CarveError(f"internal: int8 tensor(s) without a range: {', '.join(missing[:5])}")
    ops, net_input = int8_input(graph.input, ops, qp)
    if net_input != graph.input:
        del dtype[graph.input]

    weights = dict(graph.weights)
    final_ops = []
    for op in ops:
        if op.kind == "qconv2d":
            op = _qconv_params(graph, op, qp, ranges, weights)
        elif op.kind == "qadd":
            op = _qadd_params(op, qp)
        final_ops.append(op)

    used = {w for op in final_ops for w in op.params.values()}
    weights = {k: v for k, v in weights.items() if k in used}
    folds = {k: f for k, f in graph.folds.items() if k in used}
    tensors = {}
    for name, shp in shape.items():
        if name not in dtype:
            continue
        if dtype[name] == "i8":
            tensors[name] = Tensor(name, shp, "i8", qp[name])
        else:
            tensors[name] = Tensor(name, shp)
    meta = dict(graph.meta, precision="int8")
    q = graph.replace(input=net_input, tensors=tensors, ops=tuple(final_ops), weights=weights, folds=folds, meta=meta)
    validate(q)
    return Rewritten(q, prec)


def int8_input(net_input: str, ops: list, qp: dict) -> tuple:
    """(ops, input) with the network input taken straight as int8 when it can be: when the float input's one reader
    is its ``quantize`` op and the int8 copy has ``INPUT_QPARAMS`` (scale 1/255, zero point -128), that op is dropped
    and its output becomes the graph's input. The package's pre-processing then writes the int8 input directly
    (runtime/carve_pre.h, carve_letterbox_q8: a pixel v / 255 quantizes to v - 128 exactly), and a float32 tensor
    given to run_tensor is quantized on entry (simulate.run does the same); the arena holds no float32 input.
    Otherwise (a float reader of the input, or other QParams) nothing changes."""
    readers = [op for op in ops if net_input in op.inputs]
    if len(readers) != 1 or readers[0].kind != "quantize" or qp.get(readers[0].outputs[0]) != INPUT_QPARAMS:
        return ops, net_input
    return [op for op in ops if op is not readers[0]], readers[0].outputs[0]


def _qconv_params(graph, op, qp: dict, ranges: dict, weights: dict):
    """The int8 parameters of a qconv2d (op still holding the float conv's params)."""
    a = op.attrs
    x_qp, y_qp = qp[op.inputs[0]], qp[op.outputs[0]]
    w = np.asarray(graph.weights[op.params["weight"]], np.float32)
    b = (np.asarray(graph.weights[op.params["bias"]], np.float32) if "bias" in op.params
         else np.zeros(a["cout"], np.float32))
    if a["act"] == "silu":
        lo, hi = ranges[pre_key(op)]
        pre = QParams(*arith.range_qparams(lo, hi))
    else:
        pre = y_qp
    w_q, w_s = arith.quantize_weights(w)
    try:
        b_q = arith.quantize_bias(b, x_qp.scale, w_s)
    except arith.QuantRangeError as exc:
        _fail(op, op.params.get("bias", op.name), exc)
    mul = np.zeros(a["cout"], np.int32)
    shift = np.zeros(a["cout"], np.int32)
    for o in range(a["cout"]):
        r = float(x_qp.scale) * float(w_s[o]) / float(pre.scale)
        try:
            mul[o], shift[o] = arith.quantize_multiplier(r)
        except arith.QuantRangeError as exc:
            _fail(op, op.outputs[0], exc)
    params = {"weight": f"{op.name}.weight:q8", "bias": f"{op.name}.bias:q32", "mul": f"{op.name}.mul",
              "shift": f"{op.name}.shift"}
    weights[params["weight"]] = w_q
    weights[params["bias"]] = b_q
    weights[params["mul"]] = mul
    weights[params["shift"]] = shift
    if a["act"] == "silu":
        params["lut"] = f"{op.name}.lut"
        weights[params["lut"]] = arith.silu_lut(pre.scale, pre.zero_point, y_qp.scale, y_qp.zero_point)
    attrs = dict(a, pre_scale=pre.scale, pre_zero=pre.zero_point)
    return op.replace(params=params, attrs=attrs)


def _qadd_params(op, qp: dict):
    a, b, y = (qp[t] for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
    try:
        mul_a, mul_b, shift = arith.add_multipliers(a.scale, b.scale, y.scale)
    except arith.QuantRangeError as exc:
        _fail(op, op.outputs[0], exc)
    return op.replace(attrs=dict(mul_a=mul_a, mul_b=mul_b, shift=shift), params={})
