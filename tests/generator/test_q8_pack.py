"""generator/carve/backends/q8_pack.py: the CONV record of runtime/carve_q8.h, element by element, and its refusals.

(tests/runtime/q8_vs_arith.py runs the packed records through the C kernels against arith.py.)"""

import numpy as np
import pytest

from carve.backends import q8_pack
from carve.quant.arith import QuantRangeError


def _record(cout, cin_g, kh, kw, groups, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (cout, cin_g, kh, kw)).astype(np.int8)
    bias = rng.integers(-10_000, 10_000, cout).astype(np.int32)
    mul = rng.integers(2 ** 30, 2 ** 31, cout).astype(np.int64)
    shift = rng.integers(1, 63, cout).astype(np.int32)
    return w, bias, mul, shift, q8_pack.conv_record(w, bias, mul, shift, groups)


def test_layout_constants_come_from_the_runtime():
    assert q8_pack.LAYOUT == q8_pack.PACKS_LAYOUT
    assert q8_pack.ALIGN == 4 and q8_pack.LUT_SIZE == 256


@pytest.mark.parametrize("cout,cin_g,kh,kw,groups",
                         [(6, 5, 3, 3, 1), (8, 2, 3, 1, 2), (4, 1, 3, 3, 2), (3, 7, 1, 1, 1)])
def test_dense_record(cout, cin_g, kh, kw, groups):
    w, bias, mul, shift, rec = _record(cout, cin_g, kh, kw, groups)
    assert len(rec) == q8_pack.conv_record_bytes(cout, cin_g, kh, kw)
    head = np.frombuffer(rec, "<i4", 3 * cout)
    assert np.array_equal(head[:cout], bias) and np.array_equal(head[cout:2 * cout], mul)
    assert np.array_equal(head[2 * cout:], shift)
    body = np.frombuffer(rec, np.int8, offset=12 * cout)
    for o in range(cout):              # (cout, kh, kw, cin/g): one row per output channel
        for ky in range(kh):
            for kx in range(kw):
                for i in range(cin_g):
                    assert body[((o * kh + ky) * kw + kx) * cin_g + i] == w[o, i, ky, kx]


def test_depthwise_record():
    c, kh, kw = 5, 3, 3
    w, *_, rec = _record(c, 1, kh, kw, c)
    body = np.frombuffer(rec, np.int8, offset=12 * c)
    for ky in range(kh):               # (kh, kw, c)
        for kx in range(kw):
            for ch in range(c):
                assert body[(ky * kw + kx) * c + ch] == w[ch, 0, ky, kx]


def test_refusals():
    w, bias, mul, shift, _ = _record(4, 3, 3, 3, 1)
    with pytest.raises(QuantRangeError, match="shift"):
        q8_pack.conv_record(w, bias, mul, np.array([1, 2, 63, 4]), 1)
    with pytest.raises(QuantRangeError, match="shift"):
        q8_pack.conv_record(w, bias, mul, np.array([0, 2, 3, 4]), 1)
    with pytest.raises(QuantRangeError, match="int8"):
        q8_pack.conv_record(w.astype(np.int16), bias, mul, shift, 1)
    with pytest.raises(QuantRangeError, match="groups"):
        q8_pack.conv_record(w, bias, mul, shift, 3)
    with pytest.raises(QuantRangeError, match="bias"):
        q8_pack.conv_record(w, bias[:3], mul, shift, 1)
    with pytest.raises(QuantRangeError, match="int32"):
        q8_pack.conv_record(w, bias, np.array([2 ** 31, 1, 1, 1]), shift, 1)
    with pytest.raises(QuantRangeError, match="activation table"):
        q8_pack.lut_bytes(np.zeros(255, np.int8))
    assert q8_pack.lut_bytes(np.arange(-128, 128, dtype=np.int8)) == bytes(range(128, 256)) + bytes(range(128))


def test_accumulator_bound():
    """|bias| + 255 * sum|w| must stay below 2**31: the largest bias that fits, then one more."""
    w = np.full((2, 64, 3, 3), 127, np.int8)
    room = 2 ** 31 - 1 - 255 * 127 * w[0].size
    mul, shift = np.full(2, 2 ** 30), np.full(2, 40)
    q8_pack.conv_record(w, np.array([room, -room]), mul, shift, 1)
    with pytest.raises(QuantRangeError, match="output channel 1"):
        q8_pack.conv_record(w, np.array([room, -room - 1]), mul, shift, 1)
