"""generator/carve/backends/q8conv_pack.py: the record of runtime/carve_q8conv.h, element by element, its sizes and
its refusals.

(tests/runtime/q8conv_vs_arith.py runs the packed records through every C variant against arith.py, and checks
these sizes against the C macros.)"""

import numpy as np
import pytest

from carve.backends import q8conv_pack as qp
from carve.quant.arith import QuantRangeError


def _conv(cout, cin, kh, kw, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (cout, cin, kh, kw)).astype(np.int8)
    bias = rng.integers(-10_000, 10_000, cout).astype(np.int32)
    mul = rng.integers(2 ** 30, 2 ** 31, cout).astype(np.int64)
    shift = rng.integers(1, 63, cout).astype(np.int32)
    return w, bias, mul, shift


def test_constants_come_from_the_runtime():
    assert qp.LAYOUT == qp.PACKS_LAYOUT
    assert (qp.ALIGN, qp.HEADER_BYTES, qp.NR, qp.KB) == (64, 64, 16, 64)
    assert qp.MB % 32 == 0 and qp.SLOT_FIXED == 64 + 2 * qp.MB * 32 * 4


@pytest.mark.parametrize("cout,cin,kh,kw", [(19, 20, 3, 3), (16, 64, 1, 1), (5, 3, 3, 3), (33, 7, 1, 3)])
def test_record(cout, cin, kh, kw):
    w, bias, mul, shift = _conv(cout, cin, kh, kw)
    rec = qp.conv_record(w, bias, mul, shift)
    kp, coutp = qp.kp(kh, kw, cin), qp.coutp(cout)
    assert kp % 64 == 0 and kp >= kh * kw * cin > kp - 64 and coutp % 16 == 0 and coutp >= cout > coutp - 16
    assert len(rec) == qp.record_bytes(kh, kw, cin, cout) and len(rec) % qp.ALIGN == 0
    header = np.frombuffer(rec, "<u4", 16)
    assert list(header) == [qp.LAYOUT, kh, kw, cin, cout, kp, coutp] + [0] * 9
    arr = np.frombuffer(rec, "<i4", 4 * coutp, offset=qp.HEADER_BYTES).reshape(4, coutp)
    wsum = w.astype(np.int64).reshape(cout, -1).sum(axis=1)
    assert np.array_equal(arr[0, :cout], bias) and np.array_equal(arr[1, :cout], wsum)
    assert np.array_equal(arr[2, :cout], mul) and np.array_equal(arr[3, :cout], shift)
    assert not arr[:3, cout:].any() and (arr[3, cout:] == 1).all()  # padding channels: 0, 0, 0, shift 1
    panels = np.frombuffer(rec, np.int8, offset=qp.HEADER_BYTES + 16 * coutp)
    assert panels.size == coutp * kp
    seen = np.zeros(panels.size, bool)
    for o in range(cout):  # byte g * 64 + 4 j + i of panel q = B[4 g + i][16 q + j], k = (ky * kw + kx) * cin + ci
        q, j = divmod(o, 16)
        for ky in range(kh):
            for kx in range(kw):
                for ci in range(cin):
                    g, i = divmod((ky * kw + kx) * cin + ci, 4)
                    pos = q * kp * 16 + g * 64 + 4 * j + i
                    assert panels[pos] == w[o, ci, ky, kx]
                    seen[pos] = True
    assert not panels[~seen].any()  # k >= K and o >= cout: zeros


def test_sizes():
    assert qp.kp(3, 3, 3) == 64 and qp.kp(1, 1, 64) == 64 and qp.kp(1, 1, 65) == 128 and qp.kp(3, 3, 128) == 1152
    assert qp.coutp(4) == 16 and qp.coutp(16) == 16 and qp.coutp(17) == 32
    assert qp.slot_bytes(3, 3, 128) == qp.SLOT_FIXED + qp.MB * 1152
    assert qp.takes({"groups": 1}) and not qp.takes({"groups": 64})


def test_refusals():
    w, bias, mul, shift = _conv(4, 3, 3, 3)
    with pytest.raises(QuantRangeError, match="shift"):
        qp.conv_record(w, bias, mul, np.array([1, 2, 63, 4]))
    with pytest.raises(QuantRangeError, match="shift"):
        qp.conv_record(w, bias, mul, np.array([0, 2, 3, 4]))
    with pytest.raises(QuantRangeError, match="int8"):
        qp.conv_record(w.astype(np.int16), bias, mul, shift)
    with pytest.raises(QuantRangeError, match="4-D"):
        qp.conv_record(w[0], bias, mul, shift)
    with pytest.raises(QuantRangeError, match="bias"):
        qp.conv_record(w, bias[:3], mul, shift)
    with pytest.raises(QuantRangeError, match="int32"):
        qp.conv_record(w, bias, np.array([2 ** 31, 1, 1, 1]), shift)


def test_accumulator_bound():
    """|bias| + 255 * sum|w| < 2**31 (the kernel's exactness argument rests on it): the largest bias, then one more."""
    w = np.full((2, 64, 3, 3), -127, np.int8)
    room = 2 ** 31 - 1 - 255 * 127 * w[0].size
    mul, shift = np.full(2, 2 ** 30), np.full(2, 40)
    qp.conv_record(w, np.array([room, -room]), mul, shift)
    with pytest.raises(QuantRangeError, match="output channel 0"):
        qp.conv_record(w, np.array([room + 1, -room]), mul, shift)
