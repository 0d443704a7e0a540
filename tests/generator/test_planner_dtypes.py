"""The memory plan of int8 tensors (issue 19): storages sized in bytes, offsets in bytes, dtypes never mixed in
one storage; and the weight blob's int8 / int32 tensors as raw little-endian bytes."""

import numpy as np
import pytest

from carve.backends.lowering import WeightBlob
from carve.errors import CarveError
from carve.ir import GraphBuilder, QParams
from carve.planner import plan_memory


def _graph(dtype_b="i8", dtype_c="i8"):
    """x (8,8,3) f32 -> quantize -> a (8,8,3) i8 -> maxpool -> b (8,8,3); concat(a, b) -> c (8,8,6)."""
    gb = GraphBuilder("t", (8, 8, 3))
    a = gb.add("quantize", "q", [gb.input], 0)[0]
    b = gb.add("maxpool2d", "mp", [a], 0, dict(kernel=3, stride=1, pad=1))[0]
    c = gb.add("concat", "cat", [a, b], 1)[0]
    d = gb.add("dequantize", "dq", [c], 1)[0]
    g = gb.build({"output0": d}, {})
    q = QParams(0.05, -3)
    dt = {a: "i8", b: dtype_b, c: dtype_c}
    tensors = {n: t.__class__(t.name, t.shape, dt[n], q) if n in dt else t for n, t in g.tensors.items()}
    return g.replace(tensors=tensors)


def test_int8_storages_are_sized_and_placed_in_bytes():
    g = _graph()
    plan = plan_memory(g)
    cat = plan.views["cat"].storage
    assert plan.storages[cat].floats == (8 * 8 * 6 + 3) // 4        # 384 bytes: 96 words, not 384 floats
    assert plan.storages["images"].floats == 8 * 8 * 3
    # b sits in the concat's storage, 3 channels in: 3 bytes, not 12
    assert plan.views["mp"].offset == 3
    assert plan.byte_offset("mp", 1) == plan.storages[cat].offset + 3
    for st in plan.storages.values():
        assert st.offset % 64 == 0


def test_mixed_dtypes_in_one_storage_is_an_internal_error():
    with pytest.raises(CarveError, match="dtypes"):
        plan_memory(_graph(dtype_b="f32"))


def test_weight_blob_stores_int_arrays_as_bytes():
    blob = WeightBlob()
    r0 = blob.add(np.array([1.5, -2.0], np.float32), "W_A")
    r1 = blob.add(np.array([-1, 2, 127, -128, 5], np.int8), "W_B")
    r2 = blob.add(np.array([-7, 1 << 30], np.int32), "B_B")
    raw = blob.bytes()
    assert np.frombuffer(raw, "<f4", 2, 4 * r0).tolist() == [1.5, -2.0]
    assert np.frombuffer(raw, np.int8, 5, 4 * r1).tolist() == [-1, 2, 127, -128, 5]
    assert np.frombuffer(raw, "<i4", 2, 4 * r2).tolist() == [-7, 1 << 30]
    assert r1 % 16 == 0 and r2 % 16 == 0 and r2 - r1 == 16     # 5 bytes padded to 2 words, then aligned
