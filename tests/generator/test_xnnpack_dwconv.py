"""The xnnpack backend runs the depthwise 3x3 stride-1 convolutions (the heads' DWConvs, one2one_cv3.*.*.0 /
cv3.*.*.0, and the PSA blocks' attn.pe) as the runtime's carve_dwconv3x3, bias + SiLU in registers, not as
an XNNPACK depthwise operator + SiLU epilogue.

The choice is the backend's lowering (``XnnpackBackend.runtime_conv``, ``dw_conv``); portable and cuda keep
their own convolutions. The steps have no descriptor; their FLOPs still count. Their weights are in the
kernel's (kh, kw, c) layout. f16 packages keep them (as every runtime kernel). The shipped demo
model at imgsz 64: no torch needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.backends import get_backend  # noqa: E402
from carve.backends.steps import RUNTIME_CONVS  # noqa: E402
from carve.backends.xnnpack import dw_conv, runtime_conv, runtime_conv_layout  # noqa: E402
from carve.ir import op_flops  # noqa: E402

DW = dict(kernel=(3, 3), stride=1, pad=1, groups=80, cin=80, cout=80, act="silu")


@pytest.fixture(scope="module")
def built(shapes_built):
    return shapes_built


def dw_steps(p):
    return [s for lay in p["layers"] for s in lay["steps"] if s["kind"] == "dwconv3x3"]


def test_the_rule():
    assert RUNTIME_CONVS["dwconv3x3"].function == "carve_dwconv3x3"
    assert dw_conv(DW) == "dwconv3x3" and runtime_conv(DW) == "dwconv3x3"
    for good in (dict(act="none", groups=128, cin=128, cout=128), dict(groups=1, cin=1, cout=1),
                 dict(groups=129, cin=129, cout=129), dict(groups=3, cin=3, cout=3)):
        assert dw_conv(dict(DW, **good)) == "dwconv3x3", good
    for bad in (dict(groups=1), dict(groups=40), dict(cout=160), dict(stride=2), dict(pad=0),
                dict(kernel=(5, 5), pad=2), dict(kernel=(1, 1), pad=0), dict(act="relu")):
        assert dw_conv(dict(DW, **bad)) is None, bad


def test_the_layout():
    w = np.arange(24 * 9, dtype=np.float32).reshape(24, 1, 3, 3)   # PyTorch (c, 1, kh, kw)
    k = runtime_conv_layout("dwconv3x3", w)
    assert k.shape == (3, 3, 24) and k.flags.c_contiguous
    assert k[2, 1, 5] == w[5, 0, 2, 1] and k[0, 2, 23] == w[23, 0, 0, 2]


def test_xnnpack_lowers_the_depthwise_convs(built):
    graph, programs, _ = built
    p = programs["xnnpack"]
    steps = dw_steps(p)
    dws = [o for o in graph.ops if o.kind == "conv2d" and o.attrs["groups"] > 1]
    assert dws and {s["name"] for s in steps} == {o.name for o in dws if dw_conv(o.attrs)}
    assert any(".attn.pe" in s["name"] for s in steps) and any("cv3" in s["name"] for s in steps)
    blob = np.frombuffer(p["blob"], dtype="<f4")
    for s in steps:
        op = next(o for o in graph.ops if o.name == s["name"])
        c = op.attrs["cout"]
        assert s["cin"] == s["cout"] == c and s["function"] == "carve_dwconv3x3"
        assert s["act"] == ("CARVE_ACT_SILU" if op.attrs["act"] == "silu" else "CARVE_ACT_NONE")
        assert s["residual"] is None   # not in the kernel: a residual (attn.pe's "+ attn") is an epilogue pass
        if len(op.inputs) > 1:
            e = s["epilogue"]
            assert e["act"] == "CARVE_ACT_NONE" and e["r_stride"] > 0 and e["y_off"] == s["y_off"]
        else:
            assert s["epilogue"] is None
        assert all(o["name"].split(" [out ")[0] != s["name"] for o in p["ops"])   # no descriptor
        w = graph.weights[op.params["weight"]]
        got = blob[s["weight_off"]:s["weight_off"] + w.size].reshape(3, 3, c)
        assert np.array_equal(got, np.transpose(w[:, 0], (1, 2, 0)))
        b = graph.weights[op.params["bias"]]
        assert np.array_equal(blob[s["bias_off"]:s["bias_off"] + b.size], b)
        assert s["flops"] == op_flops(graph, op) > 0
    assert p["flops"] == sum(op_flops(graph, o) for o in graph.ops)


def test_generated_code_pins_the_contract(built):
    """The call the template emits: carve_dwconv3x3's signature (x, x_stride, h, w, c, weights, bias, y, y_stride,
    act, pool) through the variant chosen once at create (m->k.dwconv3x3 = carve_dwconv3x3_select(isa)), behind a
    _Static_assert that the conv is depthwise; an epilogue pass after it only for a residual."""
    _, programs, files = built
    c = files["xnnpack"]["yolo26n_shapes.c"].decode()
    steps = dw_steps(programs["xnnpack"])
    assert c.count("m->k.dwconv3x3(") == len(steps) > 0
    assert c.count("m->k.dwconv3x3 = carve_dwconv3x3_select(isa);") == 1
    for s in steps:
        call = (f"  _Static_assert({s['cin']} == {s['cout']}, \"carve_dwconv3x3 takes this conv\");\n"
                f"  TRY(m->k.dwconv3x3(A(m, {s['x_off']}), {s['x_stride']}, {s['h']}, {s['w']}, {s['cout']}, "
                f"m->weights + {s['weight_off']}, m->weights + {s['bias_off']},\n"
                f"                      A(m, {s['y_off']}), {s['y_stride']}, {s['act']}, m->pool));")
        at = c.index(f"// {s['name']}: {s['source']}  {s['shapes']}\n{call}")
        nxt = c[at:].split("\n")[4]
        assert ("m->k.epilogue(" in nxt and "CARVE_ACT_NONE" in nxt) == (s["epilogue"] is not None), nxt
    assert "carve_dwconv3x3" in files["xnnpack"]["README.md"].decode()
    for be in ("portable",):
        assert "carve_dwconv3x3" not in files[be]["yolo26n_shapes.c"].decode()


def test_portable_and_cuda_keep_their_convs(built):
    _, programs, _ = built
    assert dw_steps(programs["portable"]) == [] and dw_steps(programs["cuda"]) == []


def test_f16_packages_keep_the_kernel(built):
    graph, _, _ = built
    from carve.planner import plan_memory
    be = get_backend("xnnpack")
    p = be.lower(graph, plan_memory(graph), winograd=False)
    assert len(dw_steps(p)) == len(dw_steps(be.lower(graph, plan_memory(graph)))) > 0
    files = be.emit(graph, plan_memory(graph), dict(weights_dtype="f16"))
    c = next(v for k, v in files.items() if k.endswith(".c") and "demo" not in k).decode()
    assert "m->k.dwconv3x3(" in c
