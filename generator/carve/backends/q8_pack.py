"""The int8 portable kernels' blob layout (runtime/carve_q8.h): what ``carve_q8_run`` reads for a CARVE_Q8_CONV.

A CONV record, at a blob offset aligned to ``ALIGN`` bytes, little-endian:

    int32 bias[cout], int32 mul[cout], int32 shift[cout], then the int8 weights:
      depthwise (groups == cin == cout): (kh, kw, c)
      otherwise:                         (cout, kh, kw, cin / groups), one contiguous row per output channel

from arith's (cout, cin/groups, kh, kw) int8 weights, int32 bias and (mul, shift) per output channel. The input
zero point is not folded into the bias (carve_q8.h says why), so the record does not depend on it.

The layout is defined in runtime/carve_q8.h; this module reads its constants from there (``runtime_define``) and
writes layout number ``PACKS_LAYOUT``: ``check_layout`` fails when the header's ``CARVE_Q8_LAYOUT`` differs
(a C-side change this module has not followed), and generated code ``_Static_assert``s the same number.
Pure functions of numpy arrays; errors are ``arith.QuantRangeError`` (the generator turns them into CarveError).
"""

from __future__ import annotations

import numpy as np

from ..quant.arith import MAX_SHIFT, QuantRangeError
from .emit_c import runtime_define

PACKS_LAYOUT = 1                            # the CARVE_Q8_LAYOUT this module writes
LAYOUT = runtime_define("CARVE_Q8_LAYOUT")  # the runtime's
ALIGN = runtime_define("CARVE_Q8_ALIGN")    # alignment of a record in the blob, bytes
LUT_SIZE = runtime_define("CARVE_Q8_LUT_SIZE")

ACC_LIMIT = 2 ** 31                         # |bias| + 255 * sum|w| must stay below it (int32 accumulators)


def check_layout() -> None:
    """Raises AssertionError (a carve bug) when runtime/carve_q8.h's layout is not the one this module writes."""
    if LAYOUT != PACKS_LAYOUT:
        raise AssertionError(f"runtime/carve_q8.h has CARVE_Q8_LAYOUT {LAYOUT}, generator/carve/backends/q8_pack.py "
                             f"writes layout {PACKS_LAYOUT}: update one to match the other")


def is_depthwise(cout: int, cin_g: int, groups: int) -> bool:
    """carve_q8.c runs a conv as depthwise when groups == cin == cout (one input and one output channel per group)."""
    return cin_g == 1 and groups == cout


def conv_weights(w_q: np.ndarray, groups: int) -> np.ndarray:
    """arith's (cout, cin/groups, kh, kw) int8 -> the record's weights: (kh, kw, c) depthwise, else (cout, kh, kw,
    cin/groups); contiguous int8."""
    w_q = np.asarray(w_q)
    if w_q.dtype != np.int8 or w_q.ndim != 4:
        raise QuantRangeError(f"conv weights must be 4-D int8, got {w_q.dtype} {w_q.shape}")
    cout, cin_g, kh, kw = w_q.shape
    if groups < 1 or cout % groups:
        raise QuantRangeError(f"{groups} groups do not divide {cout} output channels")
    if is_depthwise(cout, cin_g, groups):
        return np.ascontiguousarray(np.transpose(w_q[:, 0], (1, 2, 0)))
    return np.ascontiguousarray(np.transpose(w_q, (0, 2, 3, 1)))


def _int32(name: str, a, cout: int) -> np.ndarray:
    a = np.asarray(a)
    if a.shape != (cout,) or not np.issubdtype(a.dtype, np.integer):
        raise QuantRangeError(f"conv {name} must be ({cout},) integers, got {a.dtype} {a.shape}")
    if np.any(a < -2 ** 31) or np.any(a >= 2 ** 31):
        raise QuantRangeError(f"conv {name} leaves int32")
    return a.astype("<i4")


def check_accumulators(w_q: np.ndarray, bias_q) -> None:
    """The kernels' precondition (carve_q8.h): |bias[o]| + 255 * sum|w[o]| < 2**31 for every output channel, so that
    no int32 accumulator overflows for any input (arith.conv_acc checks only the data it is given)."""
    w = np.abs(np.asarray(w_q, np.int64)).reshape(len(w_q), -1).sum(axis=1)
    worst = np.abs(np.asarray(bias_q, np.int64)) + 255 * w
    bad = np.flatnonzero(worst >= ACC_LIMIT)
    if bad.size:
        o = int(bad[0])
        raise QuantRangeError(f"output channel {o}: |bias| + 255 * sum|w| = {int(worst[o])} can overflow the int32 "
                              f"accumulator ({bad.size} channel(s))")


def conv_record(w_q, bias_q, mul, shift, groups: int) -> bytes:
    """The CONV record's bytes (module docstring); carve_q8_desc.weight_off must be a multiple of ALIGN."""
    check_layout()
    weights = conv_weights(w_q, groups)
    cout = int(np.asarray(w_q).shape[0])
    bias, m, n = _int32("bias", bias_q, cout), _int32("mul", mul, cout), _int32("shift", shift, cout)
    if np.any(n < 1) or np.any(n > MAX_SHIFT):
        raise QuantRangeError(f"conv shift outside [1, {MAX_SHIFT}]")
    check_accumulators(w_q, bias)
    return bias.tobytes() + m.tobytes() + n.tobytes() + weights.tobytes()


def conv_record_bytes(cout: int, cin_g: int, kh: int, kw: int) -> int:
    """Size of a CONV record: 12 bytes per output channel, then the weights."""
    return 12 * cout + cout * cin_g * kh * kw


def lut_bytes(lut) -> bytes:
    """An activation table (arith.silu_lut: int8 for q = -128..127) as the LUT_SIZE bytes at carve_q8_desc.lut_off."""
    lut = np.asarray(lut)
    if lut.shape != (LUT_SIZE,) or lut.dtype != np.int8:
        raise QuantRangeError(f"activation table must be ({LUT_SIZE},) int8, got {lut.dtype} {lut.shape}")
    return lut.tobytes()
