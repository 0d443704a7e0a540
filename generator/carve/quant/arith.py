"""The integer arithmetic of carve's int8 ops, as executable numpy (docs/quantization.md#integer-arithmetic).

This module is the specification: the C kernels (runtime/carve_q8.c and the xnnpack backend's int8 steps) are
tested against these functions, and the generator's simulator of a quantized graph runs them. Every function is
exact integer arithmetic (int64, or float64 holding integers below 2**53, which BLAS multiplies exactly), except
``quantize`` / ``dequantize`` / ``silu_lut`` / ``quantize_multiplier``, whose float steps are spelled out.

Conventions:

* an int8 tensor q holds real = scale * (q - zero_point), scale a float32 > 0, zero_point in [-128, 127];
* weights are int8 per output channel, symmetric (zero point 0, values in [-127, 127]);
* a real multiplier r > 0 is the pair (m, n): m an int32 in [2**30, 2**31), n a right shift in [1, 62], with
  r ~= m * 2**-n; ``requantize(acc, m, n) = (acc * m + 2**(n-1)) >> n`` in int64 (an arithmetic shift: rounding
  half up).
"""

from __future__ import annotations

import math

import numpy as np

QMIN, QMAX = -128, 127
WMAX = 127                      # weights use [-127, 127]: symmetric, no -128
MAX_SHIFT = 62


class QuantRangeError(ValueError):
    """A real multiplier or bias that int8 / int32 cannot represent (the generator turns it into a CarveError)."""


def quantize_multiplier(r: float) -> tuple:
    """(m, n) with m in [2**30, 2**31) and n in [1, 62] such that m * 2**-n is the nearest to r (r > 0, float64).

    r below 2**-32 gives (0, 62): the product rounds to 0 for any int32 accumulator. r >= 2**30 raises
    QuantRangeError."""
    if not (r > 0.0) or not math.isfinite(r):
        raise QuantRangeError(f"real multiplier {r!r} is not a positive finite number")
    f, e = math.frexp(r)                      # r = f * 2**e, f in [0.5, 1)
    m = int(round(f * (1 << 31)))             # in [2**30, 2**31]
    if m == 1 << 31:
        m, e = 1 << 30, e + 1
    n = 31 - e
    if n > MAX_SHIFT:
        return 0, MAX_SHIFT
    if n < 1:
        raise QuantRangeError(f"real multiplier {r!r} is too large for int8 requantization (>= 2**30)")
    return m, n


def requantize(acc, m, n):
    """(acc * m + 2**(n-1)) >> n in int64, element-wise; m and n broadcast (per output channel: the last axis)."""
    acc = np.asarray(acc, np.int64)
    m = np.asarray(m, np.int64)
    n = np.asarray(n, np.int64)
    return (acc * m + (np.int64(1) << (n - 1))) >> n


def clamp8(v):
    return np.clip(v, QMIN, QMAX).astype(np.int8)


def quantize(x, scale: float, zero_point: int):
    """f32 -> i8: v = x / scale in float32 (NaN -> 0, then clamped to [-512, 512]); q = clamp(rint(v) + zp).

    rint rounds half to even (C: nearbyintf / lrintf in the default rounding mode)."""
    v = np.asarray(x, np.float32) / np.float32(scale)
    v = np.nan_to_num(v, nan=0.0, posinf=512.0, neginf=-512.0)
    v = np.clip(v, np.float32(-512), np.float32(512))
    return clamp8(np.rint(v).astype(np.int64) + zero_point)


def dequantize(q, scale: float, zero_point: int):
    """i8 -> f32: (float)(q - zp) * scale, one float32 multiply."""
    return (np.asarray(q, np.int64) - zero_point).astype(np.float32) * np.float32(scale)


def quantize_weights(w):
    """Per-output-channel symmetric int8 of w (cout, ...): (w_q int8, scale float32 (cout,)).

    scale[c] = max|w[c]| / 127 (float64, then float32; 1 for an all-zero channel), w_q = clamp(rint(w / scale))
    with the division in float64."""
    w = np.asarray(w, np.float32)
    amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float64)
    scale = np.where(amax > 0, amax / WMAX, 1.0).astype(np.float32)
    shape = (-1,) + (1,) * (w.ndim - 1)
    q = np.rint(w.astype(np.float64) / scale.astype(np.float64).reshape(shape))
    return np.clip(q, -WMAX, WMAX).astype(np.int8), scale


def quantize_bias(b, in_scale: float, w_scale):
    """int32 bias: rint(b / (in_scale * w_scale[c])) in float64; QuantRangeError if it leaves int32."""
    q = np.rint(np.asarray(b, np.float64) / (np.float64(in_scale) * np.asarray(w_scale, np.float64)))
    if np.any(np.abs(q) >= 2.0 ** 31):
        raise QuantRangeError("bias does not fit int32 at this input scale")
    return q.astype(np.int32)


def silu_lut(in_scale: float, in_zero: int, out_scale: float, out_zero: int):
    """The int8 -> int8 table of SiLU: lut[i] for q = i - 128 is clamp(rint(silu(in_scale * (q - in_zero)) /
    out_scale) + out_zero), all in float64."""
    q = np.arange(QMIN, QMAX + 1, dtype=np.float64)
    v = np.float64(in_scale) * (q - in_zero)
    silu = v / (1.0 + np.exp(-v))
    return clamp8(np.rint(silu / np.float64(out_scale)).astype(np.int64) + out_zero)


def _im2col(x, kh, kw, stride, pad, fill):
    """(oh, ow, kh, kw, c) patches of x (h, w, c), padding positions set to ``fill``."""
    h, w, c = x.shape
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kw) // stride + 1
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)), constant_values=fill)
    cols = np.empty((oh, ow, kh, kw, c), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j, :] = xp[i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
    return cols


def conv_acc(x_q, in_zero: int, w_q, bias_q, stride: int, pad: int, groups: int):
    """int32 accumulators of an int8 convolution, (oh, ow, cout) int64:

        acc[p, o] = bias_q[o] + sum_k w_q[o, k] * (x_q[k] - in_zero)

    x_q (h, w, cin) int8, w_q (cout, cin/groups, kh, kw) int8; padding positions hold in_zero (contribute 0).
    Computed as float64 products of integers (exact: every partial sum stays below 2**53)."""
    cout, cg, kh, kw = w_q.shape
    x = np.asarray(x_q, np.float64) - in_zero
    cols = _im2col(x, kh, kw, stride, pad, 0.0)
    oh, ow = cols.shape[:2]
    cols = cols.reshape(oh, ow, kh, kw, groups, cg)
    wg = np.asarray(w_q, np.float64).reshape(groups, cout // groups, cg, kh, kw)
    acc = np.einsum("hwijgc,gocij->hwgo", cols, wg, optimize=True).reshape(oh, ow, cout)
    acc = acc + np.asarray(bias_q, np.float64)
    if np.any(np.abs(acc) >= 2.0 ** 31):
        raise QuantRangeError("int32 accumulator overflow")
    return acc.astype(np.int64)


def qconv2d(x_q, in_zero: int, w_q, bias_q, mul, shift, pre_zero: int, stride: int, pad: int, groups: int,
            lut=None):
    """int8 convolution: pre = clamp(pre_zero + requantize(acc, mul[o], shift[o])); y = lut[pre + 128] when a
    table is given (SiLU), else pre. mul, shift: (cout,) int32 (quantize_multiplier of in_scale * w_scale[o] /
    pre_scale)."""
    acc = conv_acc(x_q, in_zero, w_q, bias_q, stride, pad, groups)
    pre = clamp8(pre_zero + requantize(acc, mul, shift))
    if lut is None:
        return pre
    return np.asarray(lut, np.int8)[pre.astype(np.int64) + 128]


def add_multipliers(a_scale: float, b_scale: float, out_scale: float) -> tuple:
    """(mul_a, mul_b, shift) of qadd: n = 30 - floor(log2(max ratio)), capped to [1, 62]; mul = min(rint(ratio *
    2**n), 2**31 - 1), both ratios in float64."""
    ra = np.float64(a_scale) / np.float64(out_scale)
    rb = np.float64(b_scale) / np.float64(out_scale)
    top = max(ra, rb)
    if not (top > 0) or not math.isfinite(top):
        raise QuantRangeError(f"add scales {a_scale}, {b_scale} -> {out_scale} are not positive finite numbers")
    n = 30 - math.floor(math.log2(top))
    if n < 1:
        raise QuantRangeError(f"add input scale ratio {top!r} too large for int8 requantization")
    n = min(n, MAX_SHIFT)
    lim = (1 << 31) - 1
    return min(int(round(ra * 2.0 ** n)), lim), min(int(round(rb * 2.0 ** n)), lim), n


def qadd(a_q, a_zero: int, b_q, b_zero: int, mul_a: int, mul_b: int, shift: int, out_zero: int):
    """y = clamp(out_zero + (((a - a_zero) * mul_a + (b - b_zero) * mul_b + 2**(shift-1)) >> shift)), int64."""
    a = np.asarray(a_q, np.int64) - a_zero
    b = np.asarray(b_q, np.int64) - b_zero
    s = (a * mul_a + b * mul_b + (np.int64(1) << (shift - 1))) >> shift
    return clamp8(out_zero + s)


def maxpool(x_q, k: int, stride: int, pad: int):
    """int8 max pool; padding never wins (as -inf). Input and output share their QParams."""
    h, w, c = x_q.shape
    cols = _im2col(np.asarray(x_q, np.int16), k, k, stride, pad, np.int16(-32768))
    return cols.max(axis=(2, 3)).astype(np.int8)


def range_qparams(lo: float, hi: float) -> tuple:
    """(scale, zero_point) of the asymmetric int8 range that holds [min(lo, 0), max(hi, 0)]: scale = (hi - lo) /
    255 as float32 (1/255 for an empty range), zero_point = clamp(rint(-128 - lo / scale))."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0 / 255.0)
    zp = int(np.clip(np.rint(QMIN - lo / np.float64(scale)), QMIN, QMAX))
    return float(scale), zp
