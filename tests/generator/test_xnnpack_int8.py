"""The xnnpack backend's lowering of a quantized graph (backends/xnn_q8.py; docs/backends/xnnpack.md, "int8").

On the trained demo model with every convolution and add in int8 (the quantization pass's rewrite,
quant/rewrite.py, on ranges calibrated by quant/calibrate.py on one bundled sample image: the pass's graph without
its 32-image minimum and sensitivity pass, so that this test takes seconds) at imgsz 64: each dense (groups 1)
qconv2d becomes one carve_q8conv step (Q8Conv: a CONV descriptor of the int8 table, its record in q8conv_pack's
layout, the SiLU table in the kernel); every other int8 op (depthwise qconv2d, qadd, quantize, dequantize, the int8
max pool, upsample and concat copies) one Q8PoolOp step (carve_q8_run_pool's variant, m->k.q8_pool, on the pool) whose descriptor is the
portable package's, field for field (the same kernels, hence the same bytes); no XNNPACK operator and no fp32
runtime convolution runs an int8 op; the portable backend keeps carve_q8_run (Q8Op) for all of them. What the
kernels compute is tests/runtime/q8_vs_arith.py's and q8_pool_vs_run.py's; the packages end to end are
tests/int8/xnn_vs_portable.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "generator")]

from carve.backends import portable, q8, q8_pack, q8conv_pack, xnnpack  # noqa: E402
from carve.backends.steps import Q8Conv, Q8Op, Q8PoolOp, RuntimeConv, XnnOp  # noqa: E402
from carve.checkpoint import read_checkpoint  # noqa: E402
from carve.compiler import compile_model, load_architecture  # noqa: E402
from carve.frontend.yolo26 import build_graph  # noqa: E402
from carve.manifest import load_manifest  # noqa: E402
from carve.passes import optimize  # noqa: E402
from carve.planner import plan_memory  # noqa: E402
from carve.quant import calibrate, rewrite  # noqa: E402

MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"
WEIGHTS = REPO / "assets" / "yolo26n-shapes.pt"
IMGSZ = 64
INT8_KINDS = ("qconv2d", "qadd", "quantize", "dequantize")
VIEW_KINDS = ("maxpool2d", "upsample_nearest", "concat")   # int8 when their output is


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


def blob_at(program, expr: str, nbytes: int) -> bytes:
    """nbytes of the blob at a descriptor's blob offset ("4 * W_...")."""
    refs = {r.macro: r for r in program["weight_refs"]}
    start = 4 * int(refs[expr.split("* ")[1]])
    return program["blob"][start:start + nbytes]


def test_int8_routing(graphs):
    _, qg = graphs
    program = lower(xnnpack.BACKEND, qg)
    ported = lower(portable.BACKEND, qg)
    steps = steps_by_op(program)
    refs = {r.macro: int(r) for r in program["weight_refs"]}
    table = program["q8_ops"]
    qconvs = [op for op in qg.ops if op.kind == "qconv2d"]
    dense = [op for op in qconvs if op.attrs["groups"] == 1]
    assert len(dense) > 50 and len(qconvs) > len(dense)
    for op in dense:
        (st,) = steps[op.name]
        assert isinstance(st, Q8Conv), f"{op.name}: {type(st).__name__}, not carve_q8conv"
        f = table[st.index]["fields"]
        assert table[st.index]["kind"] == "CARVE_Q8_CONV" and f["groups"] == 1
        assert (f["in_zero"], f["out_zero"]) == (qg.tensors[op.inputs[0]].quant.zero_point, op.attrs["pre_zero"])
        assert f["act"] == ("CARVE_ACT_SILU" if op.attrs["act"] == "silu" else "CARVE_ACT_NONE")
        w = qg.weights
        record = q8conv_pack.conv_record(w[op.params["weight"]], w[op.params["bias"]], w[op.params["mul"]],
                                         w[op.params["shift"]])
        assert blob_at(program, f["weight_off"], len(record)) == record
        assert refs[f["weight_off"].split("* ")[1]] * 4 % 64 == 0, "a carve_q8conv record is 64-byte aligned"
    # one task slot holds the largest carve_q8conv's scratch
    assert program["wino_slot_bytes"] == max(q8conv_pack.slot_bytes(*op.attrs["kernel"], op.attrs["cin"])
                                             for op in dense)
    # the int8 table is the portable package's, descriptor for descriptor (the dense CONVs' records differ: the
    # blob holds carve_q8conv's layout here, q8_pack's there)
    assert program["q8_ops"] == ported["q8_ops"]
    # every other int8 op, and the int8 max pools, upsamples and concat copies: carve_q8_run_pool
    views = [op for op in qg.ops if op.kind in VIEW_KINDS and qg.tensors[op.outputs[0]].dtype == "i8"]
    assert {op.kind for op in views} >= {"maxpool2d", "upsample_nearest"}
    others = [op for op in qg.ops if op.kind in INT8_KINDS and op not in dense]
    assert {op.kind for op in others} == set(INT8_KINDS)
    for op in others + views:
        kinds = [type(s) for s in steps[op.name] if s.computes]
        assert set(kinds) <= {Q8PoolOp} and (kinds or op.kind == "concat"), f"{op.name}: {kinds}"
        if op.kind == "qconv2d":   # depthwise: q8_pack's record, as the portable package's
            (st,) = steps[op.name]
            w = qg.weights
            record = q8_pack.conv_record(w[op.params["weight"]], w[op.params["bias"]], w[op.params["mul"]],
                                         w[op.params["shift"]], op.attrs["groups"])
            assert blob_at(program, table[st.index]["fields"]["weight_off"], len(record)) == record
    # no XNNPACK operator, no fp32 runtime convolution and no single-threaded carve_q8 step runs an int8 op
    int8_ops = {op.name for op in qg.ops if op.kind in INT8_KINDS} | {op.name for op in views}
    for name in int8_ops:
        assert not any(isinstance(s, (XnnOp, RuntimeConv)) or type(s) is Q8Op for s in steps[name]), name
    assert not {o["name"].split(" <- ")[0] for o in program["ops"]} & int8_ops
    assert not program["runtime_convs"], "the int8 graph has no float conv left for the runtime kernels"


def int8_views_graph():
    """x (8,8,3) f32 -> quantize -> a, int8 -> max pool -> b; concat(a, b, b) (b twice: copies) -> upsample ->
    dequantize: the int8 forms of max pool, upsample and concat copies, in a graph small enough to read (b twice:
    the planner copies it)."""
    from carve.ir import GraphBuilder, Layer, QParams
    gb = GraphBuilder("t", (8, 8, 3))
    a = gb.add("quantize", "q", [gb.input], 0)[0]
    b = gb.add("maxpool2d", "mp", [a], 0, dict(kernel=3, stride=1, pad=1))[0]
    gb.layers.append(Layer(0, "SPPF", b, (-1,)))
    c = gb.add("concat", "cat", [a, b, b], 1)[0]
    u = gb.add("upsample_nearest", "up", [c], 1, dict(scale=2))[0]
    d = gb.add("dequantize", "dq", [u], 1)[0]
    gb.layers.append(Layer(1, "Concat", d, (0,)))
    g = gb.build({"output0": d}, {"task": "detect"})
    i8 = {a, b, c, u}
    q = QParams(0.05, -3)
    return g.replace(tensors={n: t.__class__(t.name, t.shape, "i8", q) if n in i8 else t
                              for n, t in g.tensors.items()})


def test_int8_views_pool():
    g = int8_views_graph()
    program, ported = lower(xnnpack.BACKEND, g), lower(portable.BACKEND, g)
    mine = [(type(s), s.name) for lay in program["layers"] for s in lay["steps"]]
    theirs = [(type(s), s.name) for lay in ported["layers"] for s in lay["steps"]]
    assert [n for _, n in mine] == ["q", "mp", "cat", "cat", "up", "dq"] == [n for _, n in theirs]
    assert {t for t, _ in mine} == {Q8PoolOp} and {t for t, _ in theirs} == {Q8Op}
    assert [o["kind"] for o in program["q8_ops"]] == ["CARVE_Q8_" + k for k in
                                                        ("QUANTIZE", "MAXPOOL", "COPY", "COPY", "UPSAMPLE2X",
                                                         "DEQUANTIZE")]
    assert program["q8_ops"] == ported["q8_ops"] and not program["ops"]


def test_portable_keeps_carve_q8(graphs):
    _, qg = graphs
    program = lower(portable.BACKEND, qg)
    names = {o["name"] for o in program["q8_ops"]}
    int8 = [op.name for op in qg.ops if op.kind in ("qconv2d", "qadd", "quantize", "dequantize")]
    assert int8 and all(n in names for n in int8)
    kinds = {o["kind"] for o in program["q8_ops"]}
    assert {"CARVE_Q8_CONV", "CARVE_Q8_ADD", "CARVE_Q8_QUANTIZE", "CARVE_Q8_DEQUANTIZE"} <= kinds


def test_package_generates(graphs):
    """The whole xnnpack package renders from the quantized graph: the int8 steps call carve_q8_run_pool's
    variant chosen at create (m->k.q8_pool, runtime/carve_q8_pool.h) and carve_q8conv, none carve_q8_run (one
    thread); the runtime carries carve_q8.c, carve_q8_pool.c and carve_q8conv.c with their instruction-set files."""
    _, qg = graphs
    files = compile_model(str(MANIFEST), "xnnpack", str(WEIGHTS), IMGSZ, graph_hook=lambda g: qg).files
    src = files["yolo26n_shapes.c"].decode()
    assert "m->k.q8_pool(&k_q8_ops[" in src and "carve_q8_run(" not in src and "carve_q8_run_pool(" not in src
    assert "m->k.q8_pool = carve_q8_pool_select(isa);" in src
    assert "m->k.q8conv(" in src and "m->k.q8conv = carve_q8conv_select(isa);" in src
    assert all(f"runtime/{f}" in files for f in ("carve_q8.c", "carve_q8_pool.c", "carve_q8_isa.h", "carve_q8conv.c"))
    assert all(f"runtime/carve_q8conv{s}.c" in files for s in ("_avx512", "_avx2", "_neon"))
    assert all(f"runtime/carve_q8_pool{s}" in files
               for s in ("_avx512.c", "_avx2.c", "_neon.c", "_avx512.h", "_avx2.h", "_neon.h", "_impl.h"))


def test_int8_input_has_no_float32_copy(graphs):
    """The network input is int8 (rewrite.int8_input): both backends' programs say so (k_model.input_q8), no op
    quantizes it, and the memory plan holds it as 3 bytes per pixel with no float32 storage of it; the same graph
    with the input's quantize op put back plans a float32 input beside its int8 copy, a larger arena."""
    from carve.backends.lowering import input_q8
    from carve.ir import Op
    fg, qg = graphs
    assert qg.input == "images:i8" and "images" not in qg.tensors
    assert input_q8(qg)
    plan = plan_memory(qg)
    words = -(-IMGSZ * IMGSZ * 3 // 4)
    assert plan.storages["images:i8"].floats == words and plan.storages["images:i8"].first == -1
    assert not any(qg.tensors[s].dtype == "f32" and qg.tensors[s].shape == (IMGSZ, IMGSZ, 3) for s in plan.storages)
    for be in (portable.BACKEND, xnnpack.BACKEND):
        program = lower(be, qg)
        assert program["input_q8"] is True and program["input_off"].startswith("S_IMAGES_I8")
        assert not any(st.name == "images:quantize" for lay in program["layers"] for st in lay["steps"])
        assert not any(o["name"] == "images:quantize" for o in program.get("q8_ops", []))
    unfolded = qg.replace(input="images", tensors={**qg.tensors, "images": fg.tensors["images"]},
                          ops=(Op("images:quantize", "quantize", ("images",), ("images:i8",), 0),) + qg.ops)
    assert not input_q8(unfolded)
    before = plan_memory(unfolded)
    assert before.storages["images"].floats == IMGSZ * IMGSZ * 3
    assert plan.arena_bytes < before.arena_bytes, (plan.arena_bytes, before.arena_bytes)
    print(f"arena at {IMGSZ}: {before.arena_bytes} bytes with the float32 input, {plan.arena_bytes} without")
