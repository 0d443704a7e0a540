"""The xnnpack backend runs the stem conv (model.0: 3x3, stride 2, pad 1, cin 3) as the runtime's
carve_conv3x3s2_small_cin, not as an XNNPACK operator + SiLU epilogue.

The choice is the backend's lowering (``XnnpackBackend.runtime_conv``): the IR is the same for every
backend, the portable and cuda backends keep their own convolutions. The step has no descriptor, so
<NAME>_XNN_HEAP_BYTES does not count it; its FLOPs still count in the layer's. Its weights are in the
kernel's (kh, kw, cin, cout) layout. The shipped demo model at imgsz 64: no torch needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.backends import xnn_heap  # noqa: E402
from carve.backends.xnnpack import LAYOUTS, runtime_conv_layout, stem_conv  # noqa: E402
from carve.ir import op_flops  # noqa: E402

STEM = dict(kernel=(3, 3), stride=2, pad=1, groups=1, cin=3, cout=16, act="silu")


@pytest.fixture(scope="module")
def built(shapes_built):
    return shapes_built


def test_the_rule():
    assert stem_conv(STEM) == "conv3x3s2"
    assert stem_conv(dict(STEM, act="none", cin=1, cout=96)) == "conv3x3s2"
    assert stem_conv(dict(STEM, cin=4, cout=32)) == "conv3x3s2"
    for bad in (dict(cin=5), dict(cin=16), dict(cout=24), dict(cout=8), dict(stride=1), dict(pad=0),
                dict(kernel=(1, 1)), dict(kernel=(5, 5), pad=2), dict(groups=3, cout=48), dict(act="relu")):
        assert stem_conv(dict(STEM, **bad)) is None, bad


def test_the_layout():
    w = np.arange(16 * 3 * 3 * 3, dtype=np.float32).reshape(16, 3, 3, 3)   # PyTorch (out, in, kh, kw)
    k = runtime_conv_layout(stem_conv(STEM), w)
    assert k.shape == (3, 3, 3, 16) and k[2, 1, 0, 5] == w[5, 0, 2, 1]       # (kh, kw, in, out)
    x = LAYOUTS.conv(w, STEM)                                                # a descriptor's, whatever the attrs
    assert x.shape == (16, 3, 3, 3) and x[5, 2, 1, 0] == w[5, 0, 2, 1]       # XNNPACK's (out, kh, kw, in)


def test_xnnpack_lowers_model0_to_the_kernel(built):
    graph, programs, _ = built
    p = programs["xnnpack"]
    steps = p["layers"][0]["steps"]
    assert [s["kind"] for s in steps] == ["conv3x3s2"]
    s = steps[0]
    op = next(o for o in graph.ops if o.name == s["name"])
    assert (s["cin"], s["cout"], s["h"], s["w"], s["act"]) == (3, op.attrs["cout"], 64, 64, "CARVE_ACT_SILU")
    assert s["epilogue"] is None and s["cout"] % 16 == 0
    # no descriptor for it; every other conv is still an XNNPACK operator
    assert all(o["name"] != s["name"] for o in p["ops"])
    assert p["runtime_convs"][0] == s and [r["kind"] for r in p["runtime_convs"]].count("conv3x3s2") == 1
    n_convs = sum(1 for o in graph.ops if o.kind == "conv2d")
    # (a conv split into output-channel slices has one descriptor per slice, named "<op> [out c0:c1]"; the
    # Winograd convolutions, test_xnnpack_winograd.py, are runtime kernels too)
    convs = {o["name"].split(" [out ")[0] for o in p["ops"] if o["kind"] == "CARVE_XNN_CONV"}
    assert len(convs) == n_convs - len(p["runtime_convs"])
    # its weights, in the kernel's layout, at the step's offsets
    blob = np.frombuffer(p["blob"], dtype="<f4")
    w = graph.weights[op.params["weight"]]
    got = blob[s["weight_off"]:s["weight_off"] + w.size].reshape(3, 3, 3, s["cout"])
    assert np.array_equal(got, np.transpose(w, (2, 3, 1, 0)))
    b = graph.weights[op.params["bias"]]
    assert np.array_equal(blob[s["bias_off"]:s["bias_off"] + b.size], b)
    # FLOPs still counted, for the layer and the network
    assert s["flops"] == op_flops(graph, op) > 0
    assert p["layers"][0]["flops"] == s["flops"]
    assert p["flops"] == sum(op_flops(graph, o) for o in graph.ops)


def test_heap_bound_does_not_count_the_stem(built):
    graph, programs, _ = built
    p = programs["xnnpack"]
    s = p["layers"][0]["steps"][0]
    as_op = dict(kind="CARVE_XNN_CONV", name=s["name"],
                 fields=dict(kh=3, kw=3, stride=2, pad=1, groups=1, cin=3, cout=s["cout"], h=s["h"], w=s["w"]))
    without = xnn_heap.heap_bytes(p["ops"])
    with_stem = xnn_heap.heap_bytes([as_op] + p["ops"])
    assert p["xnn_heap_bytes"] == without["bytes"] < with_stem["bytes"]


def test_portable_keeps_its_conv(built):
    _, programs, files = built
    p = programs["portable"]
    assert p["runtime_convs"] == [] and p["layers"][0]["steps"][0]["kind"] == "op"
    assert "carve_conv3x3s2_small_cin" not in files["portable"]["yolo26n_shapes.c"].decode()


def test_generated_code_and_readme(built):
    _, programs, files = built
    c = files["xnnpack"]["yolo26n_shapes.c"].decode()
    s = programs["xnnpack"]["layers"][0]["steps"][0]
    assert c.count("m->k.conv3x3s2_small_cin(") == 1  # the variant chosen once at create:
    assert c.count("m->k.conv3x3s2_small_cin = carve_conv3x3s2_small_cin_select(isa);") == 1
    assert f"// {s['name']}: {s['source']}  {s['shapes']}\n  _Static_assert(" in c
    readme = files["xnnpack"]["README.md"].decode()
    assert "carve_conv3x3s2_small_cin" in readme
    assert "carve_conv3x3s2_small_cin" not in files["portable"]["README.md"].decode()


def test_cuda_keeps_ohwi_for_the_stem(built):
    """The stem kernel is the xnnpack backend's: the cuda backend, which shares the OHWI blob layout
    (xnnpack.LAYOUTS), runs model.0 as its own convolution with OHWI weights."""
    graph, programs, _ = built
    p = programs["cuda"]
    assert p["runtime_convs"] == []
    op = next(o for o in graph.ops if o.kind == "conv2d")
    d = next(s for lay in p["layers"] for s in lay["steps"] if s.name == op.name)
    assert d.kind == "conv" and d.function == "carve_cu_conv2d"
    blob = np.frombuffer(p["blob"], dtype="<f4")
    want = np.transpose(graph.weights[op.params["weight"]], (0, 2, 3, 1)).reshape(-1)
    np.testing.assert_array_equal(blob[d.w_off:d.w_off + want.size], want)
