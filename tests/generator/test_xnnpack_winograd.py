"""The xnnpack backend runs the 3x3 stride-1 convolutions whose channels are multiples of 8 as the runtime's
carve_conv3x3s1_winograd (Winograd F(2x2, 3x3)), not as XNNPACK operators + SiLU / residual epilogues.

The choice is the backend's lowering (``XnnpackBackend.runtime_conv``): the IR is the same for every backend,
the portable and cuda backends keep their own convolutions. The steps have no descriptor (so
<NAME>_XNN_HEAP_BYTES does not count them), take their residual into the kernel (no epilogue step), and their
weights are stored transformed, (16, cin, cout) = G g G^T; the scratch holds one Winograd slot. The shipped demo
model at imgsz 64: no torch needed. tests/runtime/test_winograd.c checks the kernel itself; the oracle tests
check the packages against Ultralytics.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.backends import get_backend  # noqa: E402
from carve.backends.xnnpack import (LAYOUTS, runtime_conv_layout, winograd_conv,  # noqa: E402
                                   winograd_slot_bytes)
from carve.ir import op_flops  # noqa: E402

CONV = dict(kernel=(3, 3), stride=1, pad=1, groups=1, cin=32, cout=16, act="silu")


@pytest.fixture(scope="module")
def built(shapes_built):
    return shapes_built


def wino_steps(p):
    return [s for lay in p["layers"] for s in lay["steps"] if s["kind"] == "conv3x3s1_wino"]


def test_the_rule():
    assert winograd_conv(CONV) == "conv3x3s1_wino"
    assert winograd_conv(dict(CONV, act="none", cin=16, cout=1024)) == "conv3x3s1_wino"
    # multiples of 8 (CARVE_WINOGRAD_CHANNEL_MULTIPLE): yolo26n's model.2.m.0.cv1 (16 -> 8) and cv2 (8 -> 16)
    for good in (dict(cin=16, cout=8), dict(cin=8, cout=16), dict(cin=8, cout=8), dict(cin=24, cout=40)):
        assert winograd_conv(dict(CONV, **good)) == "conv3x3s1_wino", good
    for bad in (dict(cin=12), dict(cout=12), dict(cin=4), dict(cout=4), dict(cin=20, cout=24), dict(cout=1),
                dict(stride=2), dict(pad=0),
                dict(kernel=(1, 1), pad=0), dict(kernel=(5, 5), pad=2), dict(groups=32, cout=32),
                dict(act="relu")):
        assert winograd_conv(dict(CONV, **bad)) is None, bad


def test_the_layout():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 32, 3, 3)).astype(np.float32)   # PyTorch (out, in, kh, kw)
    u = runtime_conv_layout(winograd_conv(CONV), w)
    assert u.shape == (16, 32, 16) and u.dtype == np.float32
    G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    for o, i in ((0, 0), (5, 31), (15, 7)):
        want = G @ w[o, i].astype(np.float64) @ G.T                   # (a, b): position 4 * a + b
        np.testing.assert_allclose(u[:, i, o], want.reshape(16), rtol=1e-6, atol=1e-7)


def test_the_layout_is_einsums(built):
    """winograd_weights sums in an explicit order (so that runtime/carve_weights.c can rebuild an f16 package's
    Winograd weights bit for bit); on the demo model's convolutions it gives exactly the floats of the einsum it
    replaced (the f32 packages' weights did not change), signed zeros included, and +0 for a zero."""
    graph, _, _ = built
    convs = [o for o in graph.ops if o.kind == "conv2d" and winograd_conv(o.attrs)]
    assert convs
    for op in convs:
        w = graph.weights[op.params["weight"]]
        want = np.einsum("ak,oikl,bl->abio", np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
                         w.astype(np.float64), np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]))
        want = want.reshape(16, w.shape[1], w.shape[0]).astype(np.float32)
        np.testing.assert_array_equal(runtime_conv_layout("conv3x3s1_wino", w).view(np.uint32), want.view(np.uint32))
    w = np.zeros((8, 8, 3, 3), dtype=np.float32)
    w[0, 0, 0, 0] = -0.0
    assert not np.signbit(runtime_conv_layout("conv3x3s1_wino", w)).any()


def test_descriptors_keep_xnnpack_layout():
    """A descriptor's weights are XNNPACK's OHWI whatever its attrs: a slice of a convolution that the rule
    refuses (cout 85, sliced into 48 + 37 channels) has a slice that the rule would take (256 -> 48), and once got
    the Winograd layout (the pose heads' keypoint convolutions were wrong until this test)."""
    assert get_backend("xnnpack").layouts is LAYOUTS
    w = np.arange(48 * 256 * 9, dtype=np.float32).reshape(48, 256, 3, 3)
    attrs = dict(CONV, cin=256, cout=48)
    assert winograd_conv(attrs)
    np.testing.assert_array_equal(LAYOUTS.conv(w, attrs), np.transpose(w, (0, 2, 3, 1)))


def test_xnnpack_lowers_3x3_stride1_convs(built):
    graph, programs, _ = built
    p = programs["xnnpack"]
    steps = wino_steps(p)
    want = [o for o in graph.ops if o.kind == "conv2d" and winograd_conv(o.attrs)]
    assert steps and [s["name"] for s in steps] == [o.name for o in want]
    names = {o["name"].split(" [out ")[0] for o in p["ops"]}
    blob = np.frombuffer(p["blob"], dtype="<f4")
    fused = 0
    for s, op in zip(steps, want):
        assert s["name"] not in names                      # no XNNPACK operator
        assert s["function"] == "carve_conv3x3s1_winograd" and s["epilogue"] is None
        assert s["flops"] == op_flops(graph, op) > 0       # FLOPs of the direct convolution
        assert (s["cin"], s["cout"]) == (op.attrs["cin"], op.attrs["cout"])
        if len(op.inputs) > 1:                             # the bottleneck's residual, added by the kernel
            assert s["residual"] is not None
            fused += 1
        else:
            assert s["residual"] is None
        w = graph.weights[op.params["weight"]]
        got = blob[s["weight_off"]:s["weight_off"] + 16 * w.shape[1] * w.shape[0]]
        np.testing.assert_array_equal(got, runtime_conv_layout("conv3x3s1_wino", w).reshape(-1))
        b = graph.weights[op.params["bias"]]
        np.testing.assert_array_equal(blob[s["bias_off"]:s["bias_off"] + b.size], b)
    assert fused > 0
    # model.2's bottleneck (16 -> 8, then 8 -> 16 + the residual) is among them since the kernel takes multiples
    # of 8
    eight = [s for s in steps if s["cin"] % 16 or s["cout"] % 16]
    assert any(s["cin"] == 16 and s["cout"] == 8 for s in eight), [(s["cin"], s["cout"]) for s in steps]
    assert any(s["cin"] == 8 and s["cout"] == 16 and s["residual"] is not None for s in eight)
    # every other 3x3 stride-1 conv with groups 1 is one that the rule refuses
    for o in graph.ops:
        if o.kind == "conv2d" and o.attrs["kernel"] == (3, 3) and o.attrs["stride"] == 1 and o.attrs["groups"] == 1:
            assert (o.name in [s["name"] for s in steps]) == bool(winograd_conv(o.attrs))


def test_scratch_holds_a_slot(built):
    _, programs, files = built
    p = programs["xnnpack"]
    cout = max(s["cout"] for s in wino_steps(p))
    assert p["wino_max_cout"] == cout and p["wino_slot_bytes"] == winograd_slot_bytes(cout)
    assert p["scratch_bytes"] >= p["wino_slot_bytes"] and p["wino_slot_bytes"] % 64 == 0
    c = files["xnnpack"]["yolo26n_shapes.c"].decode()
    assert f"CARVE_WINOGRAD_SLOT_BYTES({cout})" in c and "m->scratch_slots" in c
    assert c.count("m->k.conv3x3s1_winograd(") == len(wino_steps(p))
    assert c.count("m->k.conv3x3s1_winograd = carve_conv3x3s1_winograd_select(isa);") == 1


def test_other_backends_keep_their_convs(built):
    graph, programs, files = built
    for be in ("portable", "cuda"):
        p = programs[be]
        assert wino_steps(p) == [] and p["wino_slot_bytes"] == 0
    assert "carve_conv3x3s1_winograd" not in files["portable"]["yolo26n_shapes.c"].decode()
    # cuda's blob keeps OHWI weights for these convs
    p = programs["cuda"]
    op = next(o for o in graph.ops if o.kind == "conv2d" and winograd_conv(o.attrs))
    d = next(s for lay in p["layers"] for s in lay["steps"] if s.name == op.name)
    assert d.kind == "conv" and d.function == "carve_cu_conv2d"
    blob = np.frombuffer(p["blob"], dtype="<f4")
    want = np.transpose(graph.weights[op.params["weight"]], (0, 2, 3, 1)).reshape(-1)
    np.testing.assert_array_equal(blob[d.w_off:d.w_off + want.size], want)


def test_f16_packages_keep_winograd(built):
    """--weights-dtype f16 stores the Winograd convolutions' (cout, cin, 3, 3) halves and their BatchNorms, and
    rebuilds the transformed weights at create (backends/f16.py, carve_weights_expand): an f16 package runs the same
    kernels as the f32 one, on the same weights (tests/firmware/f16.py: bit-identical outputs). lower(...,
    winograd=False) still gives XNNPACK operators and no Winograd slot."""
    graph, _, _ = built
    from carve.planner import plan_memory
    be = get_backend("xnnpack")
    p = be.lower(graph, plan_memory(graph), winograd=False)
    assert wino_steps(p) == [] and p["wino_slot_bytes"] == 0
    kinds = [s["kind"] for s in p["runtime_convs"]]
    assert kinds.count("conv3x3s2") == 1 and set(kinds) == {"conv3x3s2", "dwconv3x3"}
    files = be.emit(graph, plan_memory(graph), dict(weights_dtype="f16"))
    c = next(v for k, v in files.items() if k.endswith(".c") and "demo" not in k).decode()
    wino = len(wino_steps(be.lower(graph, plan_memory(graph))))
    assert wino > 0 and c.count("m->k.conv3x3s1_winograd(") == wino
    assert c.count("CARVE_WEIGHTS_BN | CARVE_WEIGHTS_WINOGRAD,") == wino
