"""The xnnpack backend's lowering of a quantized graph (backends/xnn_q8.py; docs/backends/xnnpack.md, "int8").

On the trained demo model with every convolution and add in int8 (the quantization pass's rewrite,
quant/rewrite.py, on ranges calibrated by quant/calibrate.py on one bundled sample image: the pass's graph without
its 32-image minimum and sensitivity pass, so that this test takes seconds) at imgsz 64: each dense (groups 1) qconv2d becomes one carve_q8conv step (Q8Conv: a CONV
descriptor of the int8 table, its record in q8conv_pack's layout, the SiLU table in the kernel), each depthwise one
one XNNPACK QCONV descriptor (XNNPACK's weight layout, int32 bias, float32 scales m * 2^-n) and, with SiLU, a Q8Lut
step; never one of the fp32 runtime convolutions
(stem, Winograd, depthwise); qadd on dense tensors a QADD, dequantize a DEQUANTIZE; quantize a carve_q8 op; a
layer whose scale XNNPACK refuses (>= 256), an add on a strided view and one whose ratios XNNPACK cannot take
fall back to carve_q8, saying why; int8 max pool, upsample and concat copies are carve_q8's; the portable backend
keeps carve_q8 for all of them. What the descriptors compute is tests/runtime/xq8_vs_arith.py's
and tests/int8/xnn_vs_portable.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "generator")]

from carve.backends import portable, q8conv_pack, xnn_heap, xnn_q8, xnnpack  # noqa: E402
from carve.backends.steps import Q8Conv, Q8Lut, Q8Op, RuntimeConv, XnnOp  # noqa: E402
from carve.checkpoint import read_checkpoint  # noqa: E402
from carve.compiler import compile_model, load_architecture  # noqa: E402
from carve.frontend.yolo26 import build_graph  # noqa: E402
from carve.manifest import load_manifest  # noqa: E402
from carve.passes import optimize  # noqa: E402
from carve.planner import plan_memory  # noqa: E402
from carve.quant import arith, calibrate, rewrite  # noqa: E402

MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"
WEIGHTS = REPO / "assets" / "yolo26n-shapes.pt"
IMGSZ = 64


@pytest.fixture(scope="module")
def graphs():
    from PIL import Image
    manifest = load_manifest(MANIFEST)
    fg = optimize(build_graph(manifest, load_architecture(manifest), read_checkpoint(str(WEIGHTS)), IMGSZ))
    image = np.asarray(Image.open(REPO / "assets" / "shapes-3.png").convert("RGB").resize((IMGSZ, IMGSZ)),
                       np.float32) / 255
    ranges = calibrate.ranges(fg, calibrate.calibrate(fg, [image]))
    return fg, rewrite.quantize(fg, ranges).graph


def lower(backend, graph):
    return backend.lower(graph, plan_memory(graph))


def steps_by_op(program) -> dict:
    out: dict = {}
    for lay in program["layers"]:
        for st in lay["steps"]:
            out.setdefault(st.name, []).append(st)
    return out


def test_qconv2d_runs_on_xnnpack(graphs):
    _, qg = graphs
    program = lower(xnnpack.BACKEND, qg)
    descs = {o["name"]: o for o in program["ops"]}
    steps = steps_by_op(program)
    refs = {r.macro: r for r in program["weight_refs"]}
    qconvs = [op for op in qg.ops if op.kind == "qconv2d"]
    dense = [op for op in qconvs if op.attrs["groups"] == 1]
    assert len(dense) > 50 and len(qconvs) > len(dense)
    for op in dense:
        (st,) = steps[op.name]
        assert isinstance(st, Q8Conv), f"{op.name}: {type(st).__name__}, not carve_q8conv"
        f = program["q8_ops"][st.index]["fields"]
        assert program["q8_ops"][st.index]["kind"] == "CARVE_Q8_CONV" and f["groups"] == 1
        assert (f["in_zero"], f["out_zero"]) == (qg.tensors[op.inputs[0]].quant.zero_point, op.attrs["pre_zero"])
        assert f["act"] == ("CARVE_ACT_SILU" if op.attrs["act"] == "silu" else "CARVE_ACT_NONE")
        w = qg.weights
        record = q8conv_pack.conv_record(w[op.params["weight"]], w[op.params["bias"]], w[op.params["mul"]],
                                         w[op.params["shift"]])
        wref = refs[f["weight_off"].split("* ")[1]]
        assert int(wref) * 4 % 64 == 0, "a carve_q8conv record is 64-byte aligned"
        assert program["blob"][4 * int(wref):4 * int(wref) + len(record)] == record
    # one task slot holds the largest carve_q8conv's scratch
    assert program["wino_slot_bytes"] == max(q8conv_pack.slot_bytes(*op.attrs["kernel"], op.attrs["cin"])
                                             for op in dense)
    for op in qconvs:
        if op.attrs["groups"] == 1:
            continue
        d = descs[op.name]
        assert d["kind"] == "CARVE_XNN_QCONV"
        f = d["fields"]
        assert (f["in_zero"], f["out_zero"]) == (qg.tensors[op.inputs[0]].quant.zero_point, op.attrs["pre_zero"])
        kinds = [type(s) for s in steps[op.name]]
        assert not any(issubclass(k, RuntimeConv) for k in kinds), "an fp32 runtime convolution for a qconv2d"
        assert kinds == ([XnnOp, Q8Lut] if op.attrs["act"] == "silu" else [XnnOp])
        # the blob holds XNNPACK's layout: (cout, kh, kw, cin/g) int8, int32 bias, float32 m * 2^-n
        w = qg.weights
        blob = program["blob"]
        wref = refs[f["weight_off"].split("* ")[1]]
        got = np.frombuffer(blob, np.int8, w[op.params["weight"]].size, 4 * int(wref))
        assert np.array_equal(got, np.transpose(w[op.params["weight"]], (0, 2, 3, 1)).reshape(-1))
        sref = refs[f["scale_off"].split("* ")[1]]
        scales = np.frombuffer(blob, "<f4", op.attrs["cout"], 4 * int(sref))
        m, n = w[op.params["mul"]], w[op.params["shift"]]
        assert np.array_equal(scales, (m.astype(np.float64) * 2.0 ** -n.astype(np.float64)).astype(np.float32))
    kinds = {o["kind"] for o in program["ops"]}
    assert {"CARVE_XNN_QADD", "CARVE_XNN_DEQUANTIZE"} <= kinds
    assert not program["runtime_convs"], "the int8 graph has no float conv left for the runtime kernels"
    # quantize, int8 max pool / upsample / concat copies and adds on strided views stay carve_q8's (saying why);
    # the int8 table's CONVs are the carve_q8conv steps' descriptors; dequantize is always XNNPACK's
    q8_kinds = {o["kind"] for o in program["q8_ops"]}
    assert {"CARVE_Q8_QUANTIZE", "CARVE_Q8_CONV", "CARVE_Q8_MAXPOOL", "CARVE_Q8_UPSAMPLE2X"} <= q8_kinds
    assert q8_kinds <= {"CARVE_Q8_QUANTIZE", "CARVE_Q8_CONV", "CARVE_Q8_MAXPOOL", "CARVE_Q8_UPSAMPLE2X",
                        "CARVE_Q8_COPY", "CARVE_Q8_ADD"}
    assert sum(o["kind"] == "CARVE_Q8_CONV" for o in program["q8_ops"]) == len(dense)
    for op in qg.ops:
        if op.kind == "qadd":
            (st,) = steps[op.name]
            assert isinstance(st, XnnOp) or "a strided view" in st.what, f"{op.name}: {st}"
        if op.kind == "dequantize":
            assert descs[op.name]["kind"] == "CARVE_XNN_DEQUANTIZE"
    # xnn_heap counts the int8 operators
    assert program["xnn_heap_bytes"] >= xnn_heap.heap_bytes(program["ops"])["bytes"] > 0


def test_fallbacks_to_carve_q8(graphs):
    _, qg = graphs
    conv = next(op for op in qg.ops if op.kind == "qconv2d" and op.attrs["groups"] > 1)   # XNNPACK's (depthwise)
    m, n = arith.quantize_multiplier(300.0)   # XNNPACK's qc8 refuses scales >= 256
    weights = dict(qg.weights)
    weights[conv.params["mul"]] = np.full(conv.attrs["cout"], m, np.int32)
    weights[conv.params["shift"]] = np.full(conv.attrs["cout"], n, np.int32)
    before = steps_by_op(lower(xnnpack.BACKEND, qg))
    add = next(op for op in qg.ops if op.kind == "qadd" and isinstance(before[op.name][0], XnnOp))  # on dense tensors
    far = add.replace(attrs=dict(add.attrs, mul_a=1 << 30, mul_b=1 << 30, shift=50))  # ratios 2^-20
    g = qg.replace(weights=weights, ops=tuple(far if op is add else op for op in qg.ops))
    program = lower(xnnpack.BACKEND, g)
    steps = steps_by_op(program)
    (st,) = steps[conv.name]
    assert isinstance(st, Q8Op) and "XNNPACK's qc8 takes < 256" in st.what
    assert program["q8_ops"][st.index]["kind"] == "CARVE_Q8_CONV"
    (st,) = steps[add.name]
    assert isinstance(st, Q8Op) and "[2^-10, 2^8)" in st.what
    assert xnn_q8.xnn_fits(weights[conv.params["mul"]], weights[conv.params["shift"]])


def test_portable_keeps_carve_q8(graphs):
    _, qg = graphs
    program = lower(portable.BACKEND, qg)
    names = {o["name"] for o in program["q8_ops"]}
    int8 = [op.name for op in qg.ops if op.kind in ("qconv2d", "qadd", "quantize", "dequantize")]
    assert int8 and all(n in names for n in int8)
    kinds = {o["kind"] for o in program["q8_ops"]}
    assert {"CARVE_Q8_CONV", "CARVE_Q8_ADD", "CARVE_Q8_QUANTIZE", "CARVE_Q8_DEQUANTIZE"} <= kinds


def test_scales():
    # m = 0 (arith: every output the zero point): the smallest normal float, which XNNPACK takes
    assert xnn_q8.qc8_scales([0], [62])[0] == np.finfo(np.float32).tiny
    m, n = arith.quantize_multiplier(0.0123)
    assert xnn_q8.qc8_scales([m], [n])[0] == np.float32(m * 2.0 ** -n)
    assert xnn_q8.xnn_fits([m], [n]) is None
    assert xnn_q8.qadd_fits(*arith.add_multipliers(0.1, 0.05, 0.12))
    assert not xnn_q8.qadd_fits(*arith.add_multipliers(0.1, 0.00005, 0.12))


def test_package_generates(graphs):
    """The whole xnnpack package renders from the quantized graph: the SiLU steps call carve_q8_lut, the runtime
    carries carve_q8_lut.c and carve_q8.c."""
    _, qg = graphs
    files = compile_model(str(MANIFEST), "xnnpack", str(WEIGHTS), IMGSZ, graph_hook=lambda g: qg).files
    src = files["yolo26n_shapes.c"].decode()
    assert "CARVE_XNN_QCONV" in src and "carve_q8_lut(" in src and "carve_q8_run(" in src
    assert "m->k.q8conv(" in src and "m->k.q8conv = carve_q8conv_select(isa);" in src
    assert "runtime/carve_q8_lut.c" in files and "runtime/carve_q8.c" in files and "runtime/carve_q8conv.c" in files
