"""The record of runtime/carve_q8conv.h (the int8 dense convolution on AMX / AVX-512 VNNI / AVX-VNNI / AVX2 /
portable C): what a ``carve_q8conv_fn`` reads at ``carve_q8_desc.weight_off``, and the sizes the lowering needs.

A record, at a blob offset aligned to ``ALIGN`` (64) bytes, little-endian (kp: K = kh * kw * cin rounded up to
``KB``; coutp: cout rounded up to ``NR``)::

    uint32 header[16]   LAYOUT, kh, kw, cin, cout, kp, coutp, 9 zeros
    int32 bias[coutp], int32 wsum[coutp], int32 mul[coutp], int32 shift[coutp]
    int8 panels         coutp / 16 panels; byte g * 64 + 4 j + i of panel q = B[4 g + i][16 q + j]

from arith's (cout, cin, kh, kw) int8 weights (groups 1), with B[k][o] the weight of output channel o at
k = (ky * kw + kx) * cin + ci (carve_q8's row order), zero for k >= K or o >= cout; wsum[o] = sum_k B[k][o]; the
padding channels have bias, wsum and mul 0 and shift 1. The input zero point is not folded in: the kernel
subtracts (zx + s) * wsum[o] itself (carve_q8conv.h says why that is exact).

The constants are read from runtime/carve_q8conv.h (``runtime_define``); ``check_layout`` fails when the header's
``CARVE_Q8CONV_LAYOUT`` is not the ``PACKS_LAYOUT`` written here. Pure functions of numpy arrays; errors are
``arith.QuantRangeError`` (the generator turns them into CarveError).

How a generated layer calls it (for the lowering): the conv's carve_q8_desc as for carve_q8_run (kind
CARVE_Q8_CONV, groups 1) with weight_off the offset of ``conv_record(...)`` (a multiple of ALIGN), and

    TRY(m->k.q8conv(&k_q8_ops[i], blob, arena, m->scratch, m->scratch_slots, pool));

where m->k.q8conv = carve_q8conv_select(isa) (kernel "q8conv", family file carve_q8conv.h) and each scratch slot
holds at least ``slot_bytes(kh, kw, cin)`` of the package's largest such conv (and 64-byte aligned slots).
"""

from __future__ import annotations

import numpy as np

from ..quant.arith import MAX_SHIFT, QuantRangeError
from .emit_c import runtime_define
from .q8_pack import _int32, check_accumulators

PACKS_LAYOUT = 1                                         # the CARVE_Q8CONV_LAYOUT this module writes
LAYOUT = runtime_define("CARVE_Q8CONV_LAYOUT")           # the runtime's
ALIGN = runtime_define("CARVE_Q8CONV_ALIGN")             # alignment of a record in the blob (and of the scratch)
HEADER_BYTES = runtime_define("CARVE_Q8CONV_HEADER_BYTES")
NR = runtime_define("CARVE_Q8CONV_NR")                   # output channels per panel
KB = runtime_define("CARVE_Q8CONV_KB")                   # K is padded to a multiple of this
MB = runtime_define("CARVE_Q8CONV_MB")                   # output pixels per block
SLOT_FIXED = runtime_define("CARVE_Q8CONV_SLOT_FIXED")   # a scratch slot's part that does not depend on the conv


def check_layout() -> None:
    """Raises AssertionError (a carve bug) when runtime/carve_q8conv.h's layout is not the one this module writes."""
    if LAYOUT != PACKS_LAYOUT:
        raise AssertionError(f"runtime/carve_q8conv.h has CARVE_Q8CONV_LAYOUT {LAYOUT}, generator/carve/backends/"
                             f"q8conv_pack.py writes layout {PACKS_LAYOUT}: update one to match the other")


def takes(attrs: dict) -> bool:
    """Whether carve_q8conv runs this qconv2d: groups 1 (1x1, 3x3 stride 1 / 2, the stem; any kernel, stride and
    padding). Depthwise and grouped convolutions stay with carve_q8_run."""
    return attrs["groups"] == 1


def kp(kh: int, kw: int, cin: int) -> int:
    """CARVE_Q8CONV_KP: K = kh * kw * cin rounded up to KB."""
    return -(-kh * kw * cin // KB) * KB


def coutp(cout: int) -> int:
    """CARVE_Q8CONV_COUTP: cout rounded up to NR."""
    return -(-cout // NR) * NR


def record_bytes(kh: int, kw: int, cin: int, cout: int) -> int:
    """CARVE_Q8CONV_RECORD_BYTES: header, 4 int32 arrays of coutp, the panels."""
    return HEADER_BYTES + 16 * coutp(cout) + coutp(cout) * kp(kh, kw, cin)


def slot_bytes(kh: int, kw: int, cin: int) -> int:
    """CARVE_Q8CONV_SLOT_BYTES: one task's scratch (tile configuration, a block's int32 results, a block of A)."""
    return SLOT_FIXED + MB * kp(kh, kw, cin)


def panels(w_q: np.ndarray) -> np.ndarray:
    """arith's (cout, cin, kh, kw) int8 -> the record's panels, (coutp / NR, kp / 4, NR, 4) int8 contiguous."""
    cout, cin, kh, kw = w_q.shape
    b = np.zeros((coutp(cout), kp(kh, kw, cin)), np.int8)           # B transposed: (o, k)
    b[:cout, :kh * kw * cin] = np.transpose(w_q, (0, 2, 3, 1)).reshape(cout, -1)
    return np.ascontiguousarray(b.reshape(-1, NR, b.shape[1] // 4, 4).transpose(0, 2, 1, 3))


def conv_record(w_q, bias_q, mul, shift) -> bytes:
    """The record's bytes (module docstring) of a groups-1 qconv2d; its blob offset must be a multiple of ALIGN."""
    check_layout()
    w_q = np.asarray(w_q)
    if w_q.dtype != np.int8 or w_q.ndim != 4:
        raise QuantRangeError(f"conv weights must be 4-D int8 (cout, cin, kh, kw), got {w_q.dtype} {w_q.shape}")
    cout, cin, kh, kw = (int(v) for v in w_q.shape)
    bias, m, n = _int32("bias", bias_q, cout), _int32("mul", mul, cout), _int32("shift", shift, cout)
    if np.any(n < 1) or np.any(n > MAX_SHIFT):
        raise QuantRangeError(f"conv shift outside [1, {MAX_SHIFT}]")
    check_accumulators(w_q, bias)  # also bounds |wsum| and every partial sum (carve_q8conv.h, "exactness")
    pad = coutp(cout) - cout

    def arr(a, fill):
        return np.concatenate([a, np.full(pad, fill, "<i4")]).astype("<i4").tobytes()

    wsum = np.asarray(w_q, np.int64).reshape(cout, -1).sum(axis=1).astype("<i4")
    header = np.zeros(HEADER_BYTES // 4, "<u4")
    header[:7] = (LAYOUT, kh, kw, cin, cout, kp(kh, kw, cin), coutp(cout))
    out = header.tobytes() + arr(bias, 0) + arr(wsum, 0) + arr(m, 0) + arr(n, 1) + panels(w_q).tobytes()
    assert len(out) == record_bytes(kh, kw, cin, cout)
    return out
