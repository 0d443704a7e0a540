"""--precision int8, the generator side up to the quantized graph (issue 19; docs/quantization.md), on the shipped
demo checkpoint at imgsz 64 (fast; no torch needed). The trained model at its own size, against the float graph's
detections, is test_quant_demo.py.

* the float executor agrees with the float64 reference interpreter (irsim.py) on every tensor;
* observers record every value int8 needs (the :pre of SiLU convs, the :conv before a fused residual), exactly;
* the histogram keeps every count as its range grows; the estimators stay inside the observed range;
* the network input's QParams hold every uint8 pixel / 255 exactly;
* the rewrite: validate passes, dtypes agree on every edge (quantize / dequantize at every float / int8 boundary),
  sharing ops share one QParams, graph outputs stay float32 under their names, int8 parameters are well formed;
* the simulator's accumulators are arith.conv_acc's, bit for bit;
* quant.json is byte-identical when regenerated from the same images;
* bad input: every --calib / --precision error names the file or flag, exits 1 and writes nothing; activations
  that overflow int8 ranges are an error naming the layer and tensor; cuda refuses int8 at once, portable and
  xnnpack refuse the quantized graph (not lowered yet) after quantization.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

import irsim  # noqa: E402
from carve import cli  # noqa: E402
from carve.compiler import float_graph, quantized_graph  # noqa: E402
from carve.errors import CarveError  # noqa: E402
from carve.ir import GraphBuilder, validate  # noqa: E402
from carve.quant import arith, calibrate, floatexec, images, qparams, rewrite, sensitivity, simulate  # noqa: E402

PT = REPO / "assets" / "yolo26n-shapes.pt"
SHAPES = REPO / "manifests" / "yolo26n-shapes.yaml"
IMGSZ = 64


def write_ppm(path: Path, rgb: np.ndarray) -> None:
    """A binary PPM (P6), one of stb_image's formats: no image library needed."""
    h, w, _ = rgb.shape
    path.write_bytes(f"P6\n{w} {h}\n255\n".encode() + np.ascontiguousarray(rgb, np.uint8).tobytes())


def smooth_image(rng, h: int, w: int) -> np.ndarray:
    """A random image with structure (gradients, blobs, noise), so activations are not flat."""
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.zeros((h, w, 3))
    for c in range(3):
        a, b, f = rng.uniform(-1, 1, 3)
        img[..., c] = 128 + 90 * np.sin(6 * f * xx + 5 * a * yy + b * 3)
    for _ in range(4):
        cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.3)
        img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 8, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    """The calibration preprocessor is built in a test-session folder, not in the user's cache."""
    root = tmp_path_factory.getbasetemp() / "carve-cache"
    monkeypatch.setenv("CARVE_CACHE_DIR", str(root))
    return root


@pytest.fixture(scope="module")
def calib_dir(tmp_path_factory):
    """32 calibration images (the minimum) of assorted sizes, as PPM."""
    d = tmp_path_factory.mktemp("calib")
    rng = np.random.default_rng(7)
    for i in range(images.MIN_IMAGES):
        h, w = [(48, 64), (64, 64), (80, 60), (40, 96)][i % 4]
        write_ppm(d / f"img_{i:03d}.ppm", smooth_image(rng, h, w))
    return d


@pytest.fixture(scope="module")
def graph():
    return float_graph(str(SHAPES), str(PT), IMGSZ)


@pytest.fixture(scope="module")
def inputs(graph):
    rng = np.random.default_rng(3)
    return [images.to_input(smooth_image(rng, IMGSZ, IMGSZ)) for _ in range(4)]


@pytest.fixture(scope="module")
def ranges(graph, inputs):
    stats = calibrate.calibrate(graph, inputs)
    return calibrate.ranges(graph, stats)


@pytest.fixture(scope="module")
def quant(graph, ranges):
    return rewrite.quantize(graph, ranges)


# ---- the float executor --------------------------------------------------------------------------------------

def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


def test_float_executor_matches_irsim(graph, inputs):
    got = floatexec.run(graph, inputs[0], postprocess=True)
    ref = irsim.run_graph(graph, inputs[0])
    spread = [float(np.std(ref[t])) for t in ref if t != "output0"]
    assert min(spread) > 1e-3, "flat activations prove nothing"
    for t, v in ref.items():
        if t == "output0":
            continue
        assert _rel(got[t], v) < 1e-4, t
    rows, ref_rows = got["output0"][0], ref["output0"][0]
    assert np.std(ref_rows[:, 4]) > 1e-3
    np.testing.assert_allclose(rows[:20, :5], ref_rows[:20, :5], rtol=1e-4, atol=1e-3)


def test_float_executor_conv_variants():
    """Grouped (not depthwise), depthwise, strided, padded convs, pooling and upsampling against irsim."""
    rng = np.random.default_rng(1)
    gb = GraphBuilder("t", (9, 11, 8))
    ws = {}

    def conv(name, x, cin, cout, k, s, p, g, act):
        ws[f"{name}.w"] = rng.normal(0, 0.3, (cout, cin // g, k, k)).astype(np.float32)
        ws[f"{name}.b"] = rng.normal(0, 0.1, cout).astype(np.float32)
        return gb.add("conv2d", name, [x], 0, dict(kernel=(k, k), stride=s, pad=p, groups=g, cin=cin, cout=cout,
                                                    act=act), {"weight": f"{name}.w", "bias": f"{name}.b"})[0]
    a = conv("g2", gb.input, 8, 12, 3, 2, 1, 2, "silu")
    b = conv("dw", a, 12, 12, 3, 1, 1, 12, "none")
    c = gb.add("maxpool2d", "mp", [b], 0, dict(kernel=3, stride=1, pad=1))[0]
    d = gb.add("upsample_nearest", "up", [c], 0, dict(scale=2))[0]
    e = conv("pw", d, 12, 6, 1, 1, 0, 1, "silu")
    gb.weights.update(ws)
    g = gb.build({"output0": e}, {})
    x = rng.normal(0, 1, (9, 11, 8)).astype(np.float32)
    got, ref = floatexec.run(g, x), irsim.run_graph(g, x)
    for t in ref:
        assert _rel(got[t], ref[t]) < 1e-5, t


# ---- observers, histograms, estimators -------------------------------------------------------------------------

def test_observers_record_what_int8_needs(graph, inputs):
    keys = calibrate.observed_keys(graph)
    for op in graph.ops:
        if op.kind == "conv2d":
            assert (floatexec.pre_key(op) in keys) == (op.attrs["act"] == "silu"), op.name
            assert (floatexec.conv_key(op) in keys) == (len(op.inputs) > 1), op.name
            assert op.outputs[0] in keys
        if op.kind in calibrate.SHARING:
            assert op.outputs[0] not in keys, op.name
    stats = calibrate.calibrate(graph, inputs[:2])
    assert set(stats) == keys
    op = next(o for o in graph.ops if o.kind == "conv2d" and len(o.inputs) > 1 and o.attrs["act"] == "silu")
    pre_lo, pre_hi, conv_lo, conv_hi, out_lo, out_hi = np.inf, -np.inf, np.inf, -np.inf, np.inf, -np.inf
    for x in inputs[:2]:
        env = floatexec.run(graph, x)
        w, b = graph.weights[op.params["weight"]], graph.weights[op.params["bias"]]
        pre = floatexec.conv_linear(env[op.inputs[0]], w, b, op.attrs["stride"], op.attrs["pad"], op.attrs["groups"])
        pre_lo, pre_hi = min(pre_lo, pre.min()), max(pre_hi, pre.max())
        conv = floatexec.silu(pre)
        conv_lo, conv_hi = min(conv_lo, conv.min()), max(conv_hi, conv.max())
        out_lo, out_hi = min(out_lo, env[op.outputs[0]].min()), max(out_hi, env[op.outputs[0]].max())
    assert (stats[floatexec.pre_key(op)].lo, stats[floatexec.pre_key(op)].hi) == (pre_lo, pre_hi)
    assert (stats[floatexec.conv_key(op)].lo, stats[floatexec.conv_key(op)].hi) == (conv_lo, conv_hi)
    assert (stats[op.outputs[0]].lo, stats[op.outputs[0]].hi) == (out_lo, out_hi)


def test_histogram_grows_and_estimators_stay_inside():
    rng = np.random.default_rng(0)
    s = calibrate.Stats()
    chunks = [rng.normal(0, 0.1, 100000), rng.normal(3, 1, 100000), rng.normal(-40, 1, 10), np.array([500.0])]
    for c in chunks:
        s.add(c.astype(np.float32))
    assert s.hist.sum() == s.count == sum(c.size for c in chunks)
    assert s.h_lo <= s.lo and s.h_lo + calibrate.BINS * s.width > s.hi
    assert (s.lo, s.hi) == (float(np.float32(min(c.min() for c in chunks))), float(np.float32(500.0)))
    assert calibrate.estimate(s, "minmax") == (s.lo, s.hi)
    for est in ("percentile", "mse"):
        lo, hi = calibrate.estimate(s, est)
        assert s.lo <= lo <= 0.0 <= hi <= s.hi, est
        assert hi < 500.0, f"{est} keeps the single outlier"
    bad = calibrate.Stats()
    bad.add(np.array([1.0, np.inf], np.float32))
    assert not bad.finite()


def test_network_outputs_use_minmax(graph, inputs):
    stats = calibrate.calibrate(graph, inputs[:2])
    r = calibrate.ranges(graph, stats, "percentile")
    outs = calibrate.network_outputs(graph)
    assert len(outs) == 6 and all("one2one" in t for t in outs)
    for t in outs:
        assert r[t] == (stats[t].lo, stats[t].hi)


def test_input_qparams_hold_every_pixel_exactly():
    v = np.arange(256, dtype=np.uint8)
    q = arith.quantize(images.to_input(v), qparams.INPUT_QPARAMS.scale, qparams.INPUT_QPARAMS.zero_point)
    assert np.array_equal(q.astype(np.int64), v.astype(np.int64) - 128)


# ---- the rewrite ------------------------------------------------------------------------------------------------

READS_I8 = ("qconv2d", "qadd", "dequantize")


def _check_invariants(g):
    validate(g)
    t = g.tensors
    for name, ten in t.items():
        assert (ten.dtype == "i8") == (ten.quant is not None), name
        if ten.quant is not None:
            assert ten.quant.scale > 0 and -128 <= ten.quant.zero_point <= 127
    for op in g.ops:
        ins = [t[x].dtype for x in op.inputs]
        outs = [t[x].dtype for x in op.outputs]
        if op.kind in READS_I8:
            assert set(ins) == {"i8"}, op.name
            assert outs == (["f32"] if op.kind == "dequantize" else ["i8"]), op.name
        elif op.kind == "quantize":
            assert ins == ["f32"] and outs == ["i8"], op.name
        elif op.kind in calibrate.SHARING:
            assert len(set(ins + outs)) == 1, f"{op.name}: mixed dtypes {ins} -> {outs}"
            if outs[0] == "i8":
                qs = {t[x].quant for x in op.inputs + op.outputs}
                assert len(qs) == 1, f"{op.name}: inputs and outputs must share QParams, got {qs}"
        else:
            assert set(ins + outs) == {"f32"}, f"{op.name} ({op.kind}): float op on {ins} -> {outs}"
        if op.kind in ("conv2d", "qconv2d"):
            assert op.kind == "qconv2d" or "bn_gamma" not in op.params
    for role, name in g.outputs.items():
        assert t[name].dtype == "f32", role


def test_rewrite_invariants(graph, quant):
    q = quant.graph
    _check_invariants(q)
    kinds = [op.kind for op in q.ops]
    assert "conv2d" not in kinds and "add" not in kinds
    assert kinds.count("qconv2d") == sum(op.kind == "conv2d" for op in graph.ops)
    fused = [op for op in graph.ops if op.kind == "conv2d" and len(op.inputs) > 1]
    assert kinds.count("qadd") == len(fused) > 0
    names = {op.name: op for op in q.ops}
    for op in fused:
        add = names[f"{op.name}:add"]
        assert add.inputs[0] == f"{op.name}:conv" and add.outputs == op.outputs
    assert q.outputs == graph.outputs
    # the network input is taken straight as int8 (rewrite.int8_input): no quantize op, no float32 input tensor
    assert "images:quantize" not in names and "images" not in q.tensors
    assert q.input == "images:i8" and q.tensors["images:i8"].quant == qparams.INPUT_QPARAMS
    assert names["model.0"].inputs == ("images:i8",)
    for op in graph.ops:       # attention and the e2e head stay float, fed through dequantize ops
        if op.kind in ("attention", "e2e_detect"):
            assert names[op.name].kind == op.kind
            assert all(q.tensors[x].dtype == "f32" for x in names[op.name].inputs)
    assert not any(w.dtype == np.float32 for w in q.weights.values()), "float weights of int8 ops left behind"


def test_rewrite_keep_float_inserts_boundaries(graph, ranges):
    keep = ("model.2.cv2", "model.4.m.0.cv2")       # a plain conv and one with a fused residual
    q = rewrite.quantize(graph, ranges, keep).graph
    _check_invariants(q)
    names = {op.name: op for op in q.ops}
    for k in keep:
        assert names[k].kind == "conv2d"
        assert names[k].inputs[0].endswith(":f32") or q.tensors[names[k].inputs[0]].dtype == "f32"
    assert len(names["model.4.m.0.cv2"].inputs) == 2, "a float conv keeps its fused residual"
    assert q.tensors["model.2.cv2"].dtype == "f32"
    assert names["model.2.cv2:quantize"].kind == "quantize"     # its int8 reader gets a quantized copy


def test_rewrite_int8_input_only_with_one_int8_reader(graph, ranges, inputs):
    """The input's quantize op is folded only when the first convolution runs in int8: kept in float32, the input
    stays float32 and nothing is quantized at it. The simulator quantizes a float image on entry: a tensor of pixels
    v / 255 becomes v - 128, which is what the package's pre-processing writes (runtime/carve_pre.h)."""
    q = rewrite.quantize(graph, ranges, ("model.0",)).graph
    _check_invariants(q)
    assert q.input == "images" and q.tensors["images"].dtype == "f32"
    assert not any(op.kind == "quantize" and op.inputs == ("images",) for op in q.ops)
    full = rewrite.quantize(graph, ranges).graph
    env = simulate.run(full, inputs[0])
    pixels = np.rint(inputs[0] * 255.0).astype(np.int64)
    assert np.array_equal(images.to_input(pixels.astype(np.uint8)), inputs[0])   # the inputs are pixels / 255
    assert np.array_equal(env["images:i8"].astype(np.int64), pixels - 128)
    assert len(np.unique(env["images:i8"])) > 64                                  # a spread, not a flat image
    # the folded graph computes what the unfolded one did: every int8 tensor the same bytes
    ref = dict(simulate.run(full.replace(input="images", tensors={**full.tensors, "images": graph.tensors["images"]},
                                         ops=(_input_quantize(),) + full.ops), inputs[0]))
    for t, v in env.items():
        assert np.array_equal(v, ref[t]), t


def _input_quantize():
    from carve.ir import Op
    return Op("images:quantize", "quantize", ("images",), ("images:i8",), 0, source="quantize images to int8")


def test_rewrite_plain_add_and_int8_graph_output():
    """An add that no conv absorbed becomes a qadd; a graph output computed in int8 is dequantized into its own
    name; the simulated graph follows the float one."""
    rng = np.random.default_rng(2)
    gb = GraphBuilder("t", (8, 8, 3))

    def conv(name, x, cin, cout, act="silu"):
        gb.weights[f"{name}.w"] = rng.normal(0, 0.5, (cout, cin, 3, 3)).astype(np.float32)
        gb.weights[f"{name}.b"] = rng.normal(0, 0.1, cout).astype(np.float32)
        return gb.add("conv2d", name, [x], 0, dict(kernel=(3, 3), stride=1, pad=1, groups=1, cin=cin, cout=cout,
                                                    act=act), {"weight": f"{name}.w", "bias": f"{name}.b"})[0]
    a = conv("a", gb.input, 3, 8)
    b = conv("b", a, 8, 8)
    s = gb.add("add", "sum", [a, b], 0)[0]
    y = conv("y", s, 8, 4, act="none")
    g = gb.build({"output0": y}, {})
    xs = [images.to_input(smooth_image(rng, 8, 8)) for _ in range(4)]
    q = rewrite.quantize(g, calibrate.ranges(g, calibrate.calibrate(g, xs))).graph
    _check_invariants(q)
    ops = {op.name: op for op in q.ops}
    assert ops["sum"].kind == "qadd" and set(ops["sum"].attrs) == {"mul_a", "mul_b", "shift"}
    assert ops["y"].outputs == (f"{y}:i8",) and ops[f"{y}:dequantize"].outputs == (y,)
    assert q.outputs == {"output0": y} and q.tensors[y].dtype == "f32"
    got, ref = simulate.run(q, xs[0])[y], floatexec.run(g, xs[0])[y]
    assert np.std(ref) > 0.1 and _rel(got, ref) < 0.1
    errors = sensitivity.measure(g, q, xs, 2)
    assert set(errors) == {"a", "b", "sum", "y"}
    assert all(20.0 < e.local_db < 80.0 and 15.0 < e.output_db < 80.0 for e in errors.values()), errors


def test_no_c_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CarveError) as e:
        images.preprocessor(tmp_path / "cache")
    assert "no C compiler found (tried cc, gcc, clang)" in str(e.value) and "--precision fp32" in str(e.value)


def test_qconv_params_well_formed(quant):
    q = quant.graph
    for op in q.ops:
        if op.kind != "qconv2d":
            continue
        a, w = op.attrs, q.weights
        cout = a["cout"]
        assert w[op.params["weight"]].dtype == np.int8
        assert w[op.params["weight"]].shape == (cout, a["cin"] // a["groups"]) + tuple(a["kernel"])
        assert int(np.abs(w[op.params["weight"]].astype(np.int64)).max()) <= 127
        for role in ("bias", "mul", "shift"):
            assert w[op.params[role]].dtype == np.int32 and w[op.params[role]].shape == (cout,), (op.name, role)
        mul, shift = w[op.params["mul"]].astype(np.int64), w[op.params["shift"]]
        assert np.all((mul == 0) | ((mul >= 2 ** 30) & (mul < 2 ** 31))) and np.all((shift >= 1) & (shift <= 62))
        assert ("lut" in op.params) == (a["act"] == "silu"), op.name
        if a["act"] == "silu":
            assert w[op.params["lut"]].dtype == np.int8 and w[op.params["lut"]].shape == (256,)
        else:
            yq = q.tensors[op.outputs[0]].quant
            assert (a["pre_scale"], a["pre_zero"]) == (yq.scale, yq.zero_point)
    for op in q.ops:
        if op.kind == "qadd":
            assert set(op.attrs) == {"mul_a", "mul_b", "shift"}


# ---- the simulator --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [(7, 9, 6, 10, 3, 1, 1, 1), (8, 8, 6, 6, 3, 2, 1, 6), (6, 10, 8, 4, 3, 2, 1, 2),
                                 (5, 5, 3, 7, 1, 1, 0, 1), (12, 7, 4, 4, 5, 1, 2, 4)])
def test_simulator_accumulators_are_arith(cfg):
    h, w, cin, cout, k, s, p, g = cfg
    rng = np.random.default_rng(sum(cfg))
    x = rng.integers(-128, 128, (h, w, cin)).astype(np.int8)
    wq = rng.integers(-127, 128, (cout, cin // g, k, k)).astype(np.int8)
    b = rng.integers(-2 ** 20, 2 ** 20, cout).astype(np.int32)
    zp = int(rng.integers(-128, 128))
    assert np.array_equal(simulate.conv_acc(x, zp, wq, b, s, p, g), arith.conv_acc(x, zp, wq, b, s, p, g))


def test_simulator_accumulators_above_float32_are_exact():
    """Sums past 2**24, where float32 loses integers: 3x3 over 128 channels, 120 of them saturated (255 x 127 per
    tap, 35M in all) and 8 adding 1 each, which a float32 sum past 2**24 drops; the simulator's float32 shortcut
    must not take them (forced, it misses every one of these accumulators)."""
    x = np.full((6, 6, 128), 127, np.int8)
    x[:, :, 120:] = -127                      # 1 after the zero point
    wq = np.full((8, 128, 3, 3), 127, np.int8)
    wq[:, 120:] = 1
    wq[:, 119] = (np.arange(8) - 4)[:, None, None]
    b = np.arange(8, dtype=np.int32) * 3
    acc = arith.conv_acc(x, -128, wq, b, 1, 1, 1)
    assert np.abs(acc).max() > 2 ** 25 and np.any(acc % 2 == 1)
    assert np.array_equal(simulate.conv_acc(x, -128, wq, b, 1, 1, 1), acc)


def test_simulator_qconv_is_arith_on_real_layers(quant, inputs):
    q = quant.graph
    env = simulate.run(q, inputs[0])
    checked = 0
    for op in q.ops:
        if op.kind != "qconv2d" or checked >= 6:
            continue
        a, w, p = op.attrs, q.weights, op.params
        x = env[op.inputs[0]]
        ref = arith.qconv2d(x, q.tensors[op.inputs[0]].quant.zero_point, w[p["weight"]], w[p["bias"]], w[p["mul"]],
                            w[p["shift"]], a["pre_zero"], a["stride"], a["pad"], a["groups"], w.get(p.get("lut")))
        assert np.array_equal(env[op.outputs[0]], ref), op.name
        assert np.std(ref.astype(np.float64)) > 1.0, "flat int8 outputs prove nothing"
        checked += 1
    assert checked == 6


def test_simulator_follows_float(graph, quant, inputs):
    """On this random-input, low-resolution model only the tensors' agreement is meaningful; the detections are
    compared on the trained model at its size (test_quant_demo.py)."""
    f = floatexec.run(graph, inputs[1])
    s = simulate.run(quant.graph, inputs[1])
    for t in calibrate.network_outputs(graph):
        qt = quant.graph.tensors[t]
        y = arith.dequantize(s[t], qt.quant.scale, qt.quant.zero_point) if qt.dtype == "i8" else s[t]
        assert _rel(y, f[t]) < 0.25, t


# ---- quant.json -----------------------------------------------------------------------------------------------

def test_sensitivity_box_error_is_relative_to_the_box(graph, inputs):
    """The box criterion: each edge's error over the box's size (width for left / right), at the scored anchors."""
    outs = sensitivity.Outputs(graph)
    assert outs.names == ("box", "score")
    env = floatexec.run(graph, inputs[0])
    sel, vals = outs.reference(graph, env)
    t = outs.head.inputs[0]                         # level 0's box distances (h, w, 4): left, top, right, bottom
    b = np.array(env[t], copy=True)
    flat = b.reshape(-1, 4)
    r = flat[sel[0]].astype(np.float64)
    assert len(r) >= 1
    flat[sel[0], 0] += np.float32(0.25)             # every scored box of level 0: left edge a quarter cell off
    moved = dict(env)
    moved[t] = b
    res = outs.compare((sel, vals), graph, moved)
    w = np.maximum(r[:, 0] + r[:, 2], sensitivity.MIN_BOX_CELLS)
    d = flat[sel[0], 0].astype(np.float64) - r[:, 0]
    assert res["box"][0] == sum(len(s) for s in sel)
    assert res["box"][1] == pytest.approx(float(np.sum((d / w) ** 2) / 4), rel=1e-12)
    assert res["score"][1] == 0.0 and res["score"][0] > 0.0


def test_sensitivity_select_moves_the_costliest_first(graph, ranges, inputs, quant):
    errors = sensitivity.measure(graph, quant.graph, inputs, 2)
    measured = sensitivity.measure_graph(graph, quant.graph, inputs, 2)
    box = -10.0 * np.log10(measured["box"])
    met = sensitivity.select(graph, ranges, inputs, errors, {"box": box - 1.0, "score": -1e9}, 2)
    assert met.keep == () and met.met and len(met.rounds) == 1 and met.float_flops == 0
    assert dict(met.rounds[0].criteria)["box"] == pytest.approx(box)
    sel = sensitivity.select(graph, ranges, inputs, errors, {"box": box + 3.0, "score": -1e9}, 2)
    costliest = max(errors, key=lambda n: (dict(errors[n].ratios)["box"], n))
    assert costliest in sel.rounds[1].added
    assert sel.keep == tuple(sorted(n for r in sel.rounds for n in r.added))
    assert 0 < sel.float_flops <= sensitivity.FLOAT_BUDGET * sel.total_flops
    last = dict(sel.rounds[-1].criteria)["box"]
    assert sel.met == (last >= box + 3.0) and (sel.met or sel.stop in ("budget", "rounds"))


def test_quant_json_byte_identical_on_regeneration(calib_dir, tmp_path):
    a = quantized_graph(str(SHAPES), str(PT), str(calib_dir), IMGSZ)
    copy = tmp_path / "copy"           # the same images in another folder: the same bytes (no paths inside)
    copy.mkdir()
    for p in sorted(calib_dir.iterdir()):
        (copy / p.name).write_bytes(p.read_bytes())
    b = quantized_graph(str(SHAPES), str(PT), str(copy), IMGSZ)
    assert a.json == b.json
    rep = json.loads(a.json)
    assert rep["calibration"]["count"] == images.MIN_IMAGES
    assert [i["name"] for i in rep["calibration"]["images"]] == sorted(p.name for p in calib_dir.iterdir())
    assert rep["calibration"]["estimator"] == calibrate.DEFAULT_ESTIMATOR
    i8 = {n for n, t in a.graph.tensors.items() if t.dtype == "i8"}
    assert set(rep["tensors"]) == i8
    for n in i8:
        assert rep["tensors"][n]["scale"] == a.graph.tensors[n].quant.scale
    ops = {r["name"]: r for r in rep["ops"]}
    assert set(ops) == {op.name for op in a.float_graph.ops}
    finite = 0
    for op in a.float_graph.ops:
        if op.kind in ("conv2d", "add"):
            row = ops[op.name]
            assert row["sqnr_db"] is not None and set(row["output_sqnr"]) == {"box", "score"}
            # None: no error at the scored anchors (e.g. a head branch of a level where nothing was detected)
            assert row["output_sqnr_db"] == min((v for v in row["output_sqnr"].values() if v is not None),
                                                default=None)
            finite += row["output_sqnr_db"] is not None
    assert finite >= 0.5 * sum(op.kind in ("conv2d", "add") for op in a.float_graph.ops)
    sens = rep["sensitivity"]
    assert sens["rounds"][0]["added"] == [] and set(sens["thresholds_db"]) == {"box", "score"}
    kept = sorted(n for r in sens["rounds"] for n in r["added"])
    assert kept == sorted(r["name"] for r in rep["ops"] if r["kind"] in ("conv2d", "add")
                          and r["precision"] == "float32")
    assert sens["met"] == all(v is None or v >= sens["thresholds_db"][c]
                              for c, v in sens["rounds"][-1]["output_sqnr"].items())
    assert ops["model.23.e2e"]["precision"] == "float32"
    assert len(a.summary["float_ops"]) >= 3       # two attentions and the e2e head at least
    lines = cli.quant_summary_lines(a.summary)    # what `carve generate` prints for an int8 package
    assert lines[0].startswith(f"int8: {a.summary['int8_ops']} of {a.summary['quantizable_ops']} conv/add ops")
    assert any(ln.startswith("  float32 model.23.e2e (e2e_detect): no int8 kernel") for ln in lines)


# ---- bad input ------------------------------------------------------------------------------------------------

def _error(capsys, *argv) -> str:
    rc = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("carve: error: ")]
    assert len(lines) == 1, err
    return err[err.index("carve: error: "):]


def _gen(out, *extra):
    return ["generate", SHAPES, "--checkpoint", PT, "--backend", "portable", "--imgsz", IMGSZ, "--out", out, *extra]


def test_cli_precision_flags(capsys, tmp_path, calib_dir):
    out = tmp_path / "pkg"
    msg = _error(capsys, *_gen(out, "--precision", "int8"))
    assert "--precision int8 needs --calib DIR" in msg
    msg = _error(capsys, *_gen(out, "--calib", calib_dir))
    assert "--calib" in msg and "--precision int8" in msg
    msg = _error(capsys, "generate", SHAPES, SHAPES, "--checkpoint", PT, "--checkpoint", PT, "--backend", "portable",
                 "--precision", "int8", "--calib", calib_dir, "--out", out)
    assert "one model per package" in msg
    assert not out.exists()


def test_cli_cuda_refuses_int8_at_once(capsys, tmp_path):
    out = tmp_path / "pkg"
    msg = _error(capsys, "generate", SHAPES, "--checkpoint", PT, "--backend", "cuda", "--precision", "int8",
                 "--calib", tmp_path / "no-such-folder", "--out", out)
    assert "the cuda backend computes in float32 only" in msg
    assert not out.exists()


def test_cli_bad_calibration_folders(capsys, tmp_path):
    out = tmp_path / "pkg"
    missing = tmp_path / "missing"
    msg = _error(capsys, *_gen(out, "--precision", "int8", "--calib", missing))
    assert f"{missing}: --calib: no such folder" in msg
    a_file = tmp_path / "file.ppm"
    write_ppm(a_file, np.zeros((4, 4, 3), np.uint8))
    assert "not a folder" in _error(capsys, *_gen(out, "--precision", "int8", "--calib", a_file))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".hidden").write_text("x")
    assert f"{empty}: --calib: the folder holds no files" in _error(
        capsys, *_gen(out, "--precision", "int8", "--calib", empty))
    few = tmp_path / "few"
    few.mkdir()
    rng = np.random.default_rng(0)
    for i in range(5):
        write_ppm(few / f"{i}.ppm", smooth_image(rng, 32, 32))
    msg = _error(capsys, *_gen(out, "--precision", "int8", "--calib", few))
    assert f"{few}: --calib: 5 image(s), at least {images.MIN_IMAGES}" in msg
    assert not out.exists()


def test_cli_unreadable_files_are_listed(capsys, tmp_path, calib_dir):
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in sorted(calib_dir.iterdir()):
        (bad / p.name).write_bytes(p.read_bytes())
    (bad / "labels.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + b"\x00" * 6      # a PNG cut short
    (bad / "truncated.png").write_bytes(png)
    out = tmp_path / "pkg"
    msg = _error(capsys, *_gen(out, "--precision", "int8", "--calib", bad))
    assert "2 of 34 file(s) are not images carve can read" in msg
    assert f"{bad / 'labels.txt'}: unsupported format" in msg
    assert f"{bad / 'truncated.png'}: " in msg
    assert not out.exists()


def test_cli_a_backend_without_int8_refuses_the_quantized_graph(capsys, tmp_path, calib_dir, monkeypatch):
    """A backend whose lowers_int8 is False refuses the quantized graph in check, before writing anything."""
    from carve.backends import portable
    monkeypatch.setattr(portable.BACKEND, "lowers_int8", False)
    out = tmp_path / "pkg"
    msg = _error(capsys, *_gen(out, "--precision", "int8", "--calib", calib_dir))
    assert "int8 is not lowered by backend 'portable' yet" in msg and "qconv2d" in msg
    assert not out.exists()


def test_cli_portable_writes_an_int8_package(capsys, tmp_path, calib_dir):
    """portable lowers the quantized graph: the package has the int8 kernels, the int8 table and quant.json."""
    out = tmp_path / "pkg"
    assert cli.main([str(a) for a in _gen(out, "--precision", "int8", "--calib", calib_dir)]) == 0, \
        capsys.readouterr().err
    src = (out / "yolo26n_shapes.c").read_text()
    assert "k_q8_ops[" in src and "carve_q8_run(" in src and (out / "runtime" / "carve_q8.c").exists()
    assert json.loads((out / "quant.json").read_text())["calibration"]["count"] == images.MIN_IMAGES


def _hook(op_name, change):
    def hook(g):
        op = next(o for o in g.ops if o.name == op_name)
        w = dict(g.weights)
        change(op, w)
        return g.replace(weights=w)
    return hook


def test_activations_overflowing_float_are_an_error(calib_dir):
    def huge(op, w):
        w[op.params["weight"]] = w[op.params["weight"]] * np.float32(1e38)
    with pytest.raises(CarveError) as e:
        quantized_graph(str(SHAPES), str(PT), str(calib_dir), IMGSZ, graph_hook=_hook("model.1", huge))
    msg = str(e.value)
    assert "activations overflow int8 ranges" in msg and "model." in msg and "layer" in msg


def test_parameters_that_leave_int32_are_an_error(calib_dir):
    def dead_channel(op, w):      # a channel with ~zero weights and a real bias: its int32 bias overflows
        wt = w[op.params["weight"]].copy()
        wt[0] = np.float32(1e-30)
        w[op.params["weight"]] = wt
        b = w[op.params["bias"]].copy()
        b[0] = np.float32(3.0)
        w[op.params["bias"]] = b
    with pytest.raises(CarveError) as e:
        quantized_graph(str(SHAPES), str(PT), str(calib_dir), IMGSZ, graph_hook=_hook("model.3", dead_channel))
    msg = str(e.value)
    assert msg.startswith("model.3 (layer 3") and "activations overflow int8 ranges" in msg
    assert "model.3.bias:folded" in msg and "int32" in msg


def test_preprocessor_reads_what_the_demo_reads(tmp_path):
    """Grayscale and 16-bit images are read (as the demo reads them: 8-bit RGB), the letterbox is Ultralytics'
    LetterBox (cv2.resize INTER_LINEAR, border 114) and the classify path its classify_transforms, bit for bit."""
    cv2 = pytest.importorskip("cv2")
    augment = pytest.importorskip("ultralytics.data.augment")
    rng = np.random.default_rng(5)
    files, sources = [], []
    for i, (h, w) in enumerate([(50, 70), (64, 64), (90, 40)]):
        rgb = smooth_image(rng, h, w)
        p = tmp_path / f"c{i}.png"
        cv2.imwrite(str(p), rgb[..., ::-1])
        files.append(p)
        sources.append(rgb)
    gray = smooth_image(rng, 30, 45)[..., 0]
    cv2.imwrite(str(tmp_path / "gray.png"), gray)
    files.append(tmp_path / "gray.png")
    sources.append(np.repeat(gray[..., None], 3, axis=2))
    deep = smooth_image(rng, 33, 20)
    cv2.imwrite(str(tmp_path / "deep16.png"), (deep[..., ::-1].astype(np.uint16) * 257))   # stb keeps the high byte
    files.append(tmp_path / "deep16.png")
    sources.append(deep)
    for (p, px, why), rgb in zip(images.preprocess(files, "letterbox", (64, 96)), sources):
        assert px is not None, f"{p}: {why}"
        ref = augment.LetterBox(new_shape=(64, 96), auto=False)(image=np.ascontiguousarray(rgb[..., ::-1]))
        assert np.array_equal(px, ref[..., ::-1]), p.name
    pytest.importorskip("torchvision")
    from PIL import Image
    tf = augment.classify_transforms(48)
    for (p, px, why), rgb in zip(images.preprocess(files, "classify", (48, 48)), sources):
        assert px is not None, f"{p}: {why}"
        ref = tf(Image.fromarray(rgb)).numpy().transpose(1, 2, 0)
        assert np.array_equal(images.to_input(px), ref.astype(np.float32)), p.name
