"""The int8 ops of a quantized graph (--precision int8) on the xnnpack backend.

What runs where (docs/backends/xnnpack.md, "int8 packages"):

* ``qconv2d``: XNNPACK's per-channel int8 convolution (``CARVE_XNN_QCONV``, ``xnn_create_convolution2d_nhwc_qc8``),
  created at create and run on carve's thread pool, to the pre-activation (qconv2d's ``pre_zero``); a SiLU is then
  its int8 table applied in place on the pool (``Q8Lut``, runtime/carve_q8_lut.c). XNNPACK requantizes in float32:
  ``lrintf((float)acc * r[o])`` with ``r[o] = float32(m[o] * 2^-n[o])`` here (``qc8_scales``), within one unit of
  arith's integer requantization (tests/runtime/xq8_vs_arith.py). A layer whose scale XNNPACK refuses (r >= 256)
  runs as carve_q8's CONV instead, on one thread (``xnn_fits``);
* ``qadd``: XNNPACK's int8 add (``CARVE_XNN_QADD``) when its three tensors are contiguous and both ratios are in
  XNNPACK's [2^-10, 2^8); else carve_q8's ADD (one thread);
* ``dequantize``: XNNPACK's int8 -> float32 convert (``CARVE_XNN_DEQUANTIZE``), bit for bit arith.dequantize;
* ``quantize``, and the int8 forms of max pool, upsample and the concat copies: carve_q8 (backends/q8.py), one
  thread. (XNNPACK's float32 -> int8 convert multiplies by 1 / scale where arith divides, and maps NaN to 127:
  not used.)

Weights: XNNPACK's layout, int8 (cout, kh, kw, cin / groups), int32 bias and float32 scales per output channel;
XNNPACK packs its own copy at create. Offsets of the int8 descriptors are bytes (runtime/carve_xnn.h).
"""

from __future__ import annotations

import numpy as np

from . import q8, q8_pack, q8conv_pack
from .lowering import Lowering
from .steps import Q8Conv, Q8Lut

# XNNPACK 2022-02 (src/operators/convolution-nhwc.c, xnn_create_convolution2d_nhwc_qc8): each requantization scale
# input_scale * kernel_scale[o] / output_scale (float32) must be normal and below 256.
QC8_MAX_SCALE = 256.0
FLT_MIN = float(np.finfo(np.float32).tiny)   # the smallest normal float32
# binary-elementwise-nd.c, xnn_create_add_nd_qs8: each input-to-output scale ratio in [2^-10, 2^8).
QADD_MIN_RATIO, QADD_MAX_RATIO = 2.0 ** -10, 2.0 ** 8


def qc8_weights(w_q: np.ndarray) -> np.ndarray:
    """qconv2d's weights (cout, cin/g, kh, kw) int8 -> XNNPACK's (cout, kh, kw, cin/g)."""
    return np.ascontiguousarray(np.transpose(np.asarray(w_q, np.int8), (0, 2, 3, 1)))


def qc8_scales(mul, shift) -> np.ndarray:
    """XNNPACK's kernel scales (input and output scale 1): r[o] = m[o] * 2^-n[o] rounded to float32 (exact in float64
    first); m = 0 (arith's multiplier below 2^-32: every output is the zero point) becomes the smallest normal float,
    which rounds every int32 accumulator to 0 as well."""
    r = np.asarray(mul, np.float64) * np.exp2(-np.asarray(shift, np.float64))
    return np.where(r > 0, r, FLT_MIN).astype(np.float32)


def xnn_fits(mul, shift) -> str | None:
    """None when XNNPACK takes these requantization scales, else why not."""
    r = qc8_scales(mul, shift)
    if np.any(r >= QC8_MAX_SCALE):
        return f"a requantization scale of {float(r.max()):.4g} (XNNPACK's qc8 takes < {QC8_MAX_SCALE:g})"
    return None


def qadd_scales(mul_a: int, mul_b: int, shift: int) -> tuple:
    """(a's scale, b's scale, the output's) for XNNPACK's add: arith's ratios m * 2^-n as float32 over 1."""
    return (float(np.float32(mul_a * 2.0 ** -shift)), float(np.float32(mul_b * 2.0 ** -shift)), 1.0)


def qadd_fits(mul_a: int, mul_b: int, shift: int) -> bool:
    a, b, _ = qadd_scales(mul_a, mul_b, shift)
    return all(QADD_MIN_RATIO <= v < QADD_MAX_RATIO for v in (a, b))


def lower_q8conv(lw: Lowering, op) -> list:
    """A dense qconv2d on carve's own int8 convolution (carve_q8conv: AMX / AVX-512 VNNI / portable, chosen at
    create; the SiLU table applied before the store), bit for bit arith.qconv2d."""
    a, g, p = op.attrs, lw.graph.weights, op.params
    record = q8conv_pack.conv_record(g[p["weight"]], g[p["bias"]], g[p["mul"]], g[p["shift"]])
    index = q8.table_entry(lw, "CONV", op.name, **q8.conv_fields(lw, op, record))
    return [Q8Conv(**lw.head(op), index=index, kh=a["kernel"][0], kw=a["kernel"][1], cin=a["cin"])]


def lower_qconv(lw: Lowering, op) -> list:
    """Dense: carve_q8conv (lower_q8conv). Depthwise and grouped: CARVE_XNN_QCONV (+ the SiLU table in place), or
    carve_q8's CONV where XNNPACK refuses the scales."""
    a, g, p = op.attrs, lw.graph.weights, op.params
    if q8conv_pack.takes(a):
        return lower_q8conv(lw, op)
    w_q, bias_q, mul, shift = g[p["weight"]], g[p["bias"]], g[p["mul"]], g[p["shift"]]
    why = xnn_fits(mul, shift)
    if why:
        return q8.lower_qconv(lw, op, what=f"carve_q8 on one thread: {why}")
    q8_pack.check_accumulators(w_q, bias_q)
    x, y = op.inputs[0], op.outputs[0]
    h, w, _ = lw.shape(x)
    kh, kw = a["kernel"]
    wref = lw.blob.add(qc8_weights(w_q), "W_" + op.name, p["weight"])
    bref = lw.blob.add(np.asarray(bias_q, np.int32), "B_" + op.name, p["bias"])
    sref = lw.blob.add(qc8_scales(mul, shift), "W_" + op.name + "_SCALE", p["mul"])
    index = lw.desc("QCONV", op.name, kh=kh, kw=kw, stride=a["stride"], pad=a["pad"], groups=a["groups"],
                    cin=a["cin"], cout=a["cout"], h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y),
                    weight_off=q8.blob_bytes(wref), bias_off=q8.blob_bytes(bref), in_off=q8.byte_off(lw, x),
                    out_off=q8.byte_off(lw, y), scale_off=q8.blob_bytes(sref), in_zero=q8.zero(lw, x),
                    out_zero=int(a["pre_zero"]))
    steps = [lw.cls("op")(**lw.head(op), index=index)]
    if a.get("act", "none") == "silu":
        oh, ow, oc = lw.shape(y)
        lut = lw.blob.add(np.asarray(g[p["lut"]], np.int8), "W_" + op.name + "_LUT", p["lut"])
        steps.append(Q8Lut(**lw.head(op), y_off=q8.byte_off(lw, y), y_stride=lw.stride(y), pixels=oh * ow,
                           channels=oc, lut_off=q8.blob_bytes(lut)))
    return steps


def lower_qadd(lw: Lowering, op) -> list:
    """CARVE_XNN_QADD on contiguous tensors with ratios XNNPACK takes, else carve_q8's ADD."""
    a = op.attrs
    ma, mb, n = int(a["mul_a"]), int(a["mul_b"]), int(a["shift"])
    views = (*op.inputs, op.outputs[0])
    if not all(lw.contiguous(t) for t in views):
        return q8.lower_qadd(lw, op, what="carve_q8 on one thread: a strided view (XNNPACK's add takes dense tensors)")
    if not qadd_fits(ma, mb, n):
        return q8.lower_qadd(lw, op, what="carve_q8 on one thread: a scale ratio outside XNNPACK's [2^-10, 2^8)")
    xa, xb = op.inputs
    y = op.outputs[0]
    h, w, c = lw.shape(y)
    sa, sb, so = qadd_scales(ma, mb, n)
    index = lw.desc("QADD", op.name, cin=c, h=h, w=w, in_stride=c, out_stride=c, in_off=q8.byte_off(lw, xa),
                    in2_off=q8.byte_off(lw, xb), out_off=q8.byte_off(lw, y), in_zero=q8.zero(lw, xa),
                    in2_zero=q8.zero(lw, xb), out_zero=q8.zero(lw, y), in_scale=q8.float_literal(sa),
                    in2_scale=q8.float_literal(sb), out_scale=q8.float_literal(so))
    return [lw.cls("op")(**lw.head(op), index=index)]


def lower_dequantize(lw: Lowering, op) -> list:
    """CARVE_XNN_DEQUANTIZE: XNNPACK's int8 -> float32 convert, strided views on both sides."""
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    index = lw.desc("DEQUANTIZE", op.name, cin=c, h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y),
                    in_off=q8.byte_off(lw, x), out_off=q8.byte_off(lw, y), in_zero=q8.zero(lw, x),
                    in_scale=q8.scale(lw, x))
    return [lw.cls("op")(**lw.head(op), index=index)]


# The xnnpack backend's own lowerings of the int8 op kinds (q8.with_q8 takes them over Q8_LOWERINGS).
XNN_Q8_LOWERINGS = {"qconv2d": lower_qconv, "qadd": lower_qadd, "dequantize": lower_dequantize}
