#!/usr/bin/env python3
"""Compare carve_q8_run (runtime/carve_q8.c) and every variant of carve_q8_run_pool this CPU runs
(runtime/carve_q8_pool.h: portable, avx512, avx512vbmi, avx2) with generator/carve/quant/arith.py, bit for bit.

Usage: q8_vs_arith.py [--exec "PREFIX ..."] [--expect NAME,...] [--expect-selected NAME] PATH/TO/q8_tool

Every kind on random int8 / float32 inputs with realistic quantization parameters, as the generator will make
them: weights through arith.quantize_weights, biases through arith.quantize_bias, the output ranges calibrated on
the case's own accumulators (arith.range_qparams, a little narrower than the data so that some values clamp),
multipliers from arith.quantize_multiplier / add_multipliers, SiLU tables from arith.silu_lut, zero points across
[-128, 127] (both ends included), weights packed by generator/carve/backends/q8_pack.py. Shapes: 1x1, 3x3
stride 1 / 2 with padding, 5x5 and 7x7 depthwise (windows wider than the image), kernels of 1x3 and 3x1, grouped
convs, depthwise with a channel multiplier (dense path), channel counts off every block size, packed inputs and
strided channel slices on both sides, unaligned int8 views and records at 4 bytes past a 16-byte boundary.
And layers of the trained demo model (assets/yolo26n-shapes.pt) on a real image's activations: the stem, 3x3
stride 2, 1x1, a 3x3 reading a channel slice, the head's depthwise convs, the image's quantization, SPPF's pool.

Each case sits in an arena of random bytes; the output view must equal arith's result exactly (int8, or the bits
of float32) and every other byte of the arena must be unchanged. Outputs must spread: a convolution or add whose
output has few distinct values, or mostly clamped ones, fails the run (it would prove nothing). A few refusals
(bad shift in the record's last channel, bad zero point, unknown kind) must return CARVE_ERR_INVALID_ARGUMENT
and leave the arena alone.

The variants are those `q8_tool --variants` lists (this build and CPU); each runs every case on no pool, after
carve_q8_run, and both results must be arith's. The variants run are printed, and the one a package would select;
a CPU with AVX-512 F, BW and VL (as /proc/cpuinfo says) must run the avx512 variant (and avx512vbmi with VBMI),
one with AVX2 and FMA the avx2 variant.

--exec runs the tool through a prefix (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu" for a cross-compiled one).
--expect: the variants the tool must run (in its order; default: expected_variants() of this machine, none checked
with --exec), --expect-selected: the one carve_q8_pool_select must pick.
"""

from __future__ import annotations

import argparse
import re
import shlex
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))
from carve.backends import q8_pack  # noqa: E402
from carve.quant import arith  # noqa: E402

FIELDS = ("kind", "kh", "kw", "stride", "pad", "groups", "cin", "cout", "h", "w", "in_stride", "in2_stride",
          "out_stride", "in_off", "in2_off", "out_off", "weight_off", "lut_off", "act", "in_zero", "in2_zero",
          "out_zero", "mul_a", "mul_b", "shift", "scale")
ACT_NONE, ACT_SILU = 0, 1  # carve_act (carve_rt.h)
OK, INVALID = 0, 1         # carve_status


def kinds() -> dict:
    """carve_q8_kind's values, read from runtime/carve_q8.h ({"CONV": 1, ...})."""
    text = (REPO / "runtime" / "carve_q8.h").read_text()
    body = re.search(r"typedef enum carve_q8_kind \{(.*?)\}", text, re.S).group(1)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"CARVE_Q8_(\w+) = (\d+)", body)}


KIND = kinds()


# ---- Arena ------------------------------------------------------------------------------------------------

class Arena:
    """Random bytes with views placed in them, each region separated by a gap (so a stray write shows)."""

    def __init__(self, rng):
        self.rng = rng
        self.buf = bytearray()

    def alloc(self, nbytes: int, align: int = 1, skew: int = 0) -> int:
        """A fresh region of nbytes after a random gap, at an offset = skew (mod align)."""
        off = len(self.buf) + int(self.rng.integers(3, 40))
        off += (skew - off) % align
        self.buf.extend(self.rng.integers(0, 256, off + nbytes - len(self.buf), dtype=np.uint8).tobytes())
        return off

    def view(self, data: np.ndarray, stride: int, align: int = 1, skew: int = 0) -> int:
        """Places (pixels, c) data as a view with pixel stride `stride` (elements); returns its byte offset."""
        pixels, c = data.shape
        item = data.dtype.itemsize
        off = self.alloc((pixels - 1) * stride * item + c * item, align, skew)
        for p in range(pixels):
            s = off + p * stride * item
            self.buf[s:s + c * item] = data[p].tobytes()
        return off

    def out(self, pixels: int, c: int, stride: int, item: int, align: int = 1, skew: int = 0) -> int:
        return self.alloc((pixels - 1) * stride * item + c * item, align, skew)


def read_view(buf: bytes, off: int, pixels: int, c: int, stride: int, dtype) -> np.ndarray:
    item = np.dtype(dtype).itemsize
    a = np.frombuffer(buf, dtype=np.uint8)
    idx = off + (np.arange(pixels)[:, None] * stride * item + np.arange(c * item)[None, :])
    return a[idx].copy().view(dtype).reshape(pixels, c)


def view_mask(n: int, off: int, pixels: int, c: int, stride: int, item: int) -> np.ndarray:
    m = np.zeros(n, bool)
    idx = off + (np.arange(pixels)[:, None] * stride * item + np.arange(c * item)[None, :])
    m[idx.ravel()] = True
    return m


class Case:
    def __init__(self, name: str, kind: str, arena: Arena, blob: bytes = b"", expect=None, out=None,
                 spread: bool = False, status: int = OK, **fields):
        self.name, self.kind, self.arena, self.blob = name, kind, bytes(arena.buf), blob
        self.expect, self.out, self.spread, self.status = expect, out, spread, status
        self.fields = dict.fromkeys(FIELDS, 0)
        self.fields.update(fields)
        self.fields["kind"] = KIND[kind] if kind in KIND else int(kind)

    def pack(self) -> bytes:
        vals = [self.fields[f] for f in FIELDS[:-1]]
        vals.append(struct.unpack("<I", struct.pack("<f", float(self.fields["scale"])))[0])
        out = struct.pack(f"<{len(vals)}q", *vals)
        out += struct.pack("<Q", len(self.blob)) + self.blob
        return out + struct.pack("<Q", len(self.arena)) + self.arena


def loguniform(rng, lo, hi):
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def calibrate(real: np.ndarray, narrow: float = 0.9, narrow_lo: bool = True):
    """(scale, zero point) of a range a little narrower than the data's (outliers clamp, as after calibration)."""
    lo, hi = float(real.min()), float(real.max())
    return arith.range_qparams(lo * narrow if narrow_lo else lo, hi * narrow)


def silu(v):
    return v / (1.0 + np.exp(-v))


# ---- Cases ----------------------------------------------------------------------------------------------------

STATS = {"in_zero": set(), "conv": [], "add": []}  # what the cases covered (printed)


class ConvParams:
    """One convolution's int8 parameters as the generator makes them, and arith's result (conv_params)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def conv_params(rng, name, h, w, cin, cout, kh, kw=None, stride=1, pad=0, groups=1, act=True, in_extra=0,
                in_zero=None, real_multiplier=None, neg128=False, trained=None) -> ConvParams:
    """A convolution with random weights and input, or a trained layer's (see conv_case): the input view
    (x_view, the wider tensor, and c0, the first channel read), the quantized weights, bias, multipliers, SiLU
    table and output quantization, and arith.qconv2d's result ``expect`` (oh, ow, cout)."""
    kw = kh if kw is None else kw
    cin_g = cin // groups
    if trained is None:
        in_scale = loguniform(rng, 2e-3, 5e-2)
        zx = int(rng.integers(-128, 128)) if in_zero is None else in_zero
        x_view = rng.integers(-128, 128, (h, w, cin + in_extra)).astype(np.int8)  # the wider tensor of the view
        c0 = int(rng.integers(0, in_extra + 1))
        w_f = rng.standard_normal((cout, cin_g, kh, kw)) * np.exp(rng.uniform(np.log(0.02), 0.0, (cout, 1, 1, 1)))
        b_f = rng.standard_normal(cout) * 0.5
        narrow = 0.9
    else:
        x_f = trained["x"]
        in_scale, zx = arith.range_qparams(float(x_f.min()), float(x_f.max()))
        x_view = arith.quantize(x_f, in_scale, zx)
        c0, w_f, b_f, narrow = trained["c0"], trained["w"], trained["b"], 1.0
    x_q = np.ascontiguousarray(x_view[:, :, c0:c0 + cin])
    w_q, w_scale = arith.quantize_weights(w_f)
    if neg128:  # outside arith's [-127, 127], but the kernels take any int8
        w_q.reshape(-1)[rng.integers(0, w_q.size, 8)] = -128
    bias_q = arith.quantize_bias(b_f, in_scale, w_scale)
    acc = arith.conv_acc(x_q, zx, w_q, bias_q, stride, pad, groups)
    real = acc * (np.float64(in_scale) * w_scale.astype(np.float64))
    pre_scale, pre_zero = calibrate(real, narrow)
    if real_multiplier is not None:  # one for all channels, or one per channel
        ratios = np.broadcast_to(np.asarray(real_multiplier, np.float64), (cout,))
    else:
        ratios = np.float64(in_scale) * w_scale.astype(np.float64) / np.float64(pre_scale)
    mul, shift = map(np.array, zip(*(arith.quantize_multiplier(float(r)) for r in ratios)))
    if real_multiplier is None:
        STATS["conv"].extend(ratios.tolist())
    STATS["in_zero"].add(zx)
    lut, y_scale, y_zero = None, pre_scale, pre_zero
    if act:
        y_real = silu(real)
        y_scale, y_zero = calibrate(y_real, narrow, narrow_lo=False)  # SiLU's minimum is no outlier
        lut = arith.silu_lut(pre_scale, pre_zero, y_scale, y_zero)
    expect = arith.qconv2d(x_q, zx, w_q, bias_q, mul, shift, pre_zero, stride, pad, groups, lut)
    if trained is not None and trained.get("y") is not None:
        err = np.abs(arith.dequantize(expect, y_scale, y_zero) - trained["y"]).max() / y_scale
        print(f"  {name}: arith's int8 result within {err:.2f} output steps of the float layer")
    return ConvParams(kh=kh, kw=kw, cin=cin, cout=cout, stride=stride, pad=pad, groups=groups, x_view=x_view, c0=c0,
                      x_q=x_q, zx=zx, in_scale=in_scale, w_q=w_q, w_scale=w_scale, bias_q=bias_q, mul=mul,
                      shift=shift, pre_scale=pre_scale, pre_zero=pre_zero, lut=lut, y_scale=y_scale, y_zero=y_zero,
                      expect=expect)


def conv_case(rng, name, h, w, cin, cout, kh, kw=None, stride=1, pad=0, groups=1, act=True, in_extra=0,
              out_extra=0, in_zero=None, real_multiplier=None, neg128=False, spread=True, tight=False,
              trained=None):
    """A CONV case with random weights and input, or a trained layer's.

    tight: the input view ends the arena and the record ends the blob (an over-read leaves the buffers that
    q8_tool mallocs: the AddressSanitizer build reports it). trained: dict(x=the float input tensor (h, w, C)
    the layer reads channels c0 .. c0 + cin of, c0, w=float weights (cout, cin/g, kh, kw), b=float bias, y=the
    float output or None): the input quantized with its tensor's own range (as calibration on this image), the
    conv reading it as a channel slice when C > cin; the printed error of the dequantized result against y."""
    kw = kh if kw is None else kw
    cp = conv_params(rng, name, h, w, cin, cout, kh, kw, stride, pad, groups, act, in_extra, in_zero,
                     real_multiplier, neg128, trained)
    x_view, c0, zx, w_q, bias_q, mul, shift = cp.x_view, cp.c0, cp.zx, cp.w_q, cp.bias_q, cp.mul, cp.shift
    pre_zero, lut, expect = cp.pre_zero, cp.lut, cp.expect
    oh, ow = expect.shape[:2]

    arena = Arena(rng)
    c_view = x_view.shape[2]
    in_stride, out_stride = c_view, cout + out_extra
    if tight:
        out_off = arena.out(oh * ow, cout, out_stride, 1, 1, int(rng.integers(0, 4)))
    in_off = arena.view(x_view.reshape(-1, c_view), in_stride, 1, int(rng.integers(0, 4)))
    if tight and c0 + cin < c_view:  # the view's last pixel then ends the arena
        arena.buf = arena.buf[:in_off + ((h * w - 1) * in_stride + c0 + cin)]
    in_off += c0
    if not tight:
        out_off = arena.out(oh * ow, cout, out_stride, 1, 1, int(rng.integers(0, 4)))
    blob = bytearray(rng.integers(0, 256, 20, dtype=np.uint8).tobytes())  # a record at 4 past a 16-byte line
    blob.extend(b"\0" * ((-len(blob) + 4) % 16))
    weight_off = len(blob)
    assert weight_off % q8_pack.ALIGN == 0
    blob += q8_pack.conv_record(w_q, bias_q, mul, shift, groups)
    lut_off = 0
    if lut is not None:
        blob += rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        lut_off = len(blob)
        blob += q8_pack.lut_bytes(lut)
    if not tight or lut is not None:
        blob += rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    out = (out_off, oh * ow, cout, out_stride, np.int8)
    case = Case(name, "CONV", arena, bytes(blob), expect.reshape(-1, cout), out,
                spread, kh=kh, kw=kw, stride=stride, pad=pad, groups=groups, cin=cin, cout=cout, h=h, w=w,
                in_stride=in_stride, out_stride=out_stride, in_off=in_off, out_off=out_off, weight_off=weight_off,
                lut_off=lut_off, act=ACT_SILU if act else ACT_NONE, in_zero=zx, out_zero=pre_zero)
    # the quantized layer, for tests that pack it in another layout (q8conv_vs_arith.py)
    case.params = dict(w_q=w_q, bias_q=bias_q, mul=mul, shift=shift, lut=lut)
    return case


def conv_cases(rng):
    # (name, h, w, cin, cout, kh, kw, stride, pad, groups)
    shapes = [
        ("1x1", 7, 9, 16, 24, 1, 1, 1, 0, 1),
        ("1x1 odd channels", 5, 6, 13, 7, 1, 1, 1, 0, 1),
        ("1x1 long", 4, 5, 200, 9, 1, 1, 1, 0, 1),
        ("3x3 s1 p1", 9, 11, 8, 12, 3, 3, 1, 1, 1),
        ("3x3 s2 p1", 10, 13, 5, 6, 3, 3, 2, 1, 1),
        ("3x3 s2 p1 stem", 16, 15, 3, 16, 3, 3, 2, 1, 1),
        ("3x3 s1 p0", 7, 8, 6, 5, 3, 3, 1, 0, 1),
        ("3x3 s1 p1 wide", 6, 7, 64, 33, 3, 3, 1, 1, 1),
        ("2x2 s2 p0", 8, 9, 7, 3, 2, 2, 2, 0, 1),
        ("1x3 p1", 5, 9, 6, 5, 1, 3, 1, 1, 1),
        ("3x1 p1", 9, 5, 6, 5, 3, 1, 1, 1, 1),
        ("5x5 s3 p2", 14, 13, 4, 6, 5, 5, 3, 2, 1),
        ("3x3 p1 on 1x1", 1, 1, 9, 6, 3, 3, 1, 1, 1),
        ("grouped 3x3 g2", 6, 7, 8, 6, 3, 3, 1, 1, 2),
        ("grouped 1x1 g4", 5, 5, 16, 12, 1, 1, 1, 0, 4),
        ("grouped 3x3 s2 g3", 9, 8, 9, 15, 3, 3, 2, 1, 3),
        ("depthwise x2 multiplier (dense path)", 6, 5, 4, 8, 3, 3, 1, 1, 4),
        ("depthwise 3x3 s1 p1", 9, 7, 40, 40, 3, 3, 1, 1, 40),
        ("depthwise 3x3 s2 p1", 10, 9, 32, 32, 3, 3, 2, 1, 32),
        ("depthwise 3x3 s1 p1 c70", 5, 6, 70, 70, 3, 3, 1, 1, 70),
        ("depthwise 5x5 s1 p2", 7, 8, 33, 33, 5, 5, 1, 2, 33),
        ("depthwise 7x7 s1 p3", 8, 9, 20, 20, 7, 7, 1, 3, 20),
        ("depthwise 7x7 s1 p3 on 2x3", 2, 3, 12, 12, 7, 7, 1, 3, 12),
        ("depthwise 3x3 c1", 6, 6, 1, 1, 3, 3, 1, 1, 1),
    ]
    cases = []
    for i, (name, h, w, cin, cout, kh, kw, s, p, g) in enumerate(shapes):
        for act in (True, False):
            for strided in (False, True):
                extra = dict(in_extra=int(rng.integers(1, 9)), out_extra=int(rng.integers(1, 9))) if strided else {}
                zx = (-128, 127, None, None)[(2 * i + act + strided) % 4]
                label = f"conv {name}{' silu' if act else ''}{' strided' if strided else ''} zx={zx}"
                cases.append(conv_case(rng, label, h, w, cin, cout, kh, kw, s, p, g, act, in_zero=zx,
                                       tight=not act, **extra))
    # multipliers off the usual range: large (small shifts, much clamping), tiny (m = 0, n = 62: all zp)
    for r in (0.9, 3.0, 2.0 ** 20):
        cases.append(conv_case(rng, f"conv 3x3 real multiplier {r}", 6, 7, 5, 6, 3, 3, 1, 1, 1, False,
                               real_multiplier=r, spread=False))
    cases.append(conv_case(rng, "conv 3x3 real multiplier 1e-12 (m = 0)", 6, 7, 5, 6, 3, 3, 1, 1, 1, False,
                           real_multiplier=1e-12, spread=False))
    cases.append(conv_case(rng, "conv weights -128", 7, 6, 12, 10, 3, 3, 1, 1, 1, False, neg128=True))
    cases.append(conv_case(rng, "depthwise weights -128", 7, 6, 12, 12, 3, 3, 1, 1, 12, False, in_zero=127,
                           neg128=True))
    # depthwise: the requantization's int64 form (shifts below 33) and int32 form (all 33 or more) in one block of
    # 32 channels and across blocks; m = 0; kernels of 1, 2 x 2 (an even number of taps), 3x3 without padding,
    # 3x3 stride 2 without padding, and 9x9 (81 taps: more than the AVX-512 loops take, carve_q8.c's loops run)
    for r in (0.9, 3.0, 2.0 ** 20, 1e-12):
        cases.append(conv_case(rng, f"depthwise 3x3 real multiplier {r}", 6, 7, 37, 37, 3, 3, 1, 1, 37, r < 1,
                               real_multiplier=r, spread=False))
    mixed = np.where(np.arange(45) % 5 == 0, 0.7, 3e-3)
    cases.append(conv_case(rng, "depthwise 3x3 per-channel multipliers, shifts below and above 33 in a block", 7, 8,
                           45, 45, 3, 3, 1, 1, 45, True, real_multiplier=mixed, spread=False))
    for name, h, w, c, k, s, p_ in [("1x1", 5, 6, 35, 1, 1, 0), ("2x2 s2 p0", 8, 9, 33, 2, 2, 0),
                                    ("3x3 s1 p0", 7, 9, 64, 3, 1, 0), ("3x3 s2 p0", 9, 8, 31, 3, 2, 0),
                                    ("9x9 s1 p4 (portable loops)", 10, 11, 17, 9, 1, 4)]:
        cases.append(conv_case(rng, f"depthwise {name} c{c}", h, w, c, c, k, k, s, p_, c, True,
                               in_extra=int(rng.integers(0, 5)), out_extra=int(rng.integers(0, 5))))
    return cases


TRAINED_PT = REPO / "assets" / "yolo26n-shapes.pt"   # docs/demo-model.md
TRAINED_IMAGE = REPO / "assets" / "shapes-3.png"
TRAINED_LAYERS = ("model.0", "model.1", "model.2.cv1", "model.2.m.0.cv1", "model.5", "model.8.cv1",
                  "model.23.one2one_cv3.0.0.0", "model.23.one2one_cv3.2.0.0", "model.10.m.0.attn.pe")


def trained_env():
    """The trained demo model (yolo26n-shapes, BN folded by the generator) on a real image at 128x128
    (tests/generator/irsim.py, the numpy interpreter of the IR): (ops by name, every tensor's value, the image),
    or None (with a message) without the checkpoint."""
    if not TRAINED_PT.exists():
        print(f"  trained layers: skipped ({TRAINED_PT.relative_to(REPO)} not found: tools/train_demo.py)")
        return None
    sys.path.insert(0, str(REPO / "tests" / "generator"))
    import irsim
    from PIL import Image
    from carve.checkpoint import read_checkpoint
    from carve.compiler import load_architecture
    from carve.frontend.yolo26 import build_graph
    from carve.manifest import load_manifest
    from carve.passes import optimize

    manifest = load_manifest(REPO / "manifests" / "yolo26n-shapes.yaml")
    graph = optimize(build_graph(manifest, load_architecture(manifest), read_checkpoint(str(TRAINED_PT)), 128))
    image = np.asarray(Image.open(TRAINED_IMAGE).convert("RGB").resize((128, 128)), np.float32) / 255
    env = irsim.run_graph(graph, image)
    return {op.name: op for op in graph.ops}, env, image, graph


def trained_convs(ops: dict, env: dict, graph, names=TRAINED_LAYERS) -> list:
    """(name, op, trained) of the named conv layers: trained as conv_params takes it (the layer's input tensor, the
    channel its slice starts at, float weights and bias, the float output unless a residual follows)."""
    out = []
    for name in names:
        op = ops[name]
        src = op.inputs[0]
        parent, c0 = src, 0
        m = re.fullmatch(r"(.+)\[(\d+):(\d+)\]", src)
        if m:  # a channel slice: the conv reads its parent tensor through a strided view
            parent, c0 = m.group(1), int(m.group(2))
        w_f, b_f = graph.weights[op.params["weight"]], graph.weights[op.params["bias"]]
        residual = len(op.inputs) > 1  # y = act(conv) + r: the int8 graph adds r with a separate qadd
        out.append((name, op, dict(x=env[parent], c0=c0, w=w_f, b=b_f, y=None if residual else env[op.outputs[0]])))
    return out


def trained_cases(rng) -> list:
    """Layers of the trained demo model on the activations of a real image (trained_env): the stem, 3x3 stride 2,
    1x1, a 3x3 reading a channel slice, the head's depthwise 3x3 and the attention's positional depthwise conv,
    plus the image's QUANTIZE and the SPPF max pool on a real int8 tensor. [] without the checkpoint."""
    found = trained_env()
    if found is None:
        return []
    ops, env, image, graph = found
    cases = []
    for name, op, trained in trained_convs(ops, env, graph):
        a = op.attrs
        h, w_, _ = trained["x"].shape
        kh, kw = a["kernel"]
        cases.append(conv_case(rng, f"trained {name} ({op.source})", h, w_, a["cin"], a["cout"], kh, kw,
                               a["stride"], a["pad"], a["groups"], a["act"] == "silu", trained=trained))
    # the image through QUANTIZE (the graph's input scale: [0, 1] -> 1/255, zero point -128)
    scale, zp = arith.range_qparams(0.0, 1.0)
    cases.append(quantize_case(rng, f"trained: the image, scale {scale:.4g} zp {zp}", image.reshape(-1, 3), scale, zp))
    # SPPF's first max pool on the real int8 of its input
    pool = ops["model.9.m#0"]
    x_f = env[pool.inputs[0]]
    x_q = arith.quantize(x_f, *arith.range_qparams(float(x_f.min()), float(x_f.max())))
    k, s, p = pool.attrs["kernel"], pool.attrs["stride"], pool.attrs["pad"]
    cases.append(pool_case(rng, "trained model.9.m#0 (SPPF)", *x_q.shape, k, s, p, False, data=x_q))
    return cases


def add_case(rng, name, h, w, c, ratio=None, strides=(0, 0, 0), spread=True, mults=None):
    """An ADD case; mults: (mul_a, mul_b, shift) given, for the requantization's edges (else from the scales)."""
    a_scale = loguniform(rng, 1e-3, 1e-1)
    b_scale = a_scale * (loguniform(rng, 0.2, 5.0) if ratio is None else ratio)
    za, zb = (int(v) for v in rng.integers(-128, 128, 2))
    a = rng.integers(-128, 128, (h * w, c)).astype(np.int8)
    b = rng.integers(-128, 128, (h * w, c)).astype(np.int8)
    real = a_scale * (a.astype(np.float64) - za) + b_scale * (b.astype(np.float64) - zb)
    out_scale, zy = calibrate(real)
    ma, mb, n = arith.add_multipliers(a_scale, b_scale, out_scale) if mults is None else mults
    if mults is None:
        STATS["add"].extend([a_scale / out_scale, b_scale / out_scale])
    expect = arith.qadd(a, za, b, zb, ma, mb, n, zy)
    arena = Arena(rng)
    sa, sb, sy = (c + e for e in strides)
    a_off, b_off = arena.view(a, sa, 1, 1), arena.view(b, sb, 1, 3)
    y_off = arena.out(h * w, c, sy, 1)
    return Case(f"add {name}", "ADD", arena, b"", expect, (y_off, h * w, c, sy, np.int8), spread, h=h, w=w, cin=c,
                in_stride=sa, in2_stride=sb, out_stride=sy, in_off=a_off, in2_off=b_off, out_off=y_off, in_zero=za,
                in2_zero=zb, out_zero=zy, mul_a=ma, mul_b=mb, shift=n)


def pool_case(rng, name, h, w, c, k, s, p, negative, extra=(0, 0), data=None):
    lo, hi = (-128, -100) if negative else (-128, 128)
    x = rng.integers(lo, hi, (h, w, c)).astype(np.int8) if data is None else data
    expect = arith.maxpool(x, k, s, p)
    oh, ow = expect.shape[:2]
    arena = Arena(rng)
    si, so = c + extra[0], c + extra[1]
    x_off = arena.view(x.reshape(-1, c), si, 1, 2)
    y_off = arena.out(oh * ow, c, so, 1)
    return Case(f"maxpool {name}", "MAXPOOL", arena, b"", expect.reshape(-1, c), (y_off, oh * ow, c, so, np.int8),
                False, kh=k, kw=k, stride=s, pad=p, h=h, w=w, cin=c, in_stride=si, out_stride=so, in_off=x_off,
                out_off=y_off)


def copy_case(rng, kind, h, w, c, extra):
    x = rng.integers(-128, 128, (h * w, c)).astype(np.int8)
    if kind == "COPY":
        expect, oh, ow = x, h, w
    else:
        expect = np.repeat(np.repeat(x.reshape(h, w, c), 2, 0), 2, 1).reshape(-1, c)
        oh, ow = 2 * h, 2 * w
    arena = Arena(rng)
    si, so = c + extra[0], c + extra[1]
    x_off = arena.view(x, si, 1, 1)
    y_off = arena.out(oh * ow, c, so, 1, 1, 3)
    return Case(f"{kind.lower()} {h}x{w}x{c} strides +{extra}", kind, arena, b"", expect,
                (y_off, oh * ow, c, so, np.int8), False, h=h, w=w, cin=c, in_stride=si, out_stride=so, in_off=x_off,
                out_off=y_off)


def quantize_case(rng, name, x, scale, zp, extra=(0, 0)):
    pixels, c = x.shape
    expect = arith.quantize(x, scale, zp)
    arena = Arena(rng)
    si, so = c + extra[0], c + extra[1]
    x_off = arena.view(x.astype(np.float32), si, 4)
    y_off = arena.out(pixels, c, so, 1, 1, 1)
    return Case(f"quantize {name}", "QUANTIZE", arena, b"", expect, (y_off, pixels, c, so, np.int8), False, h=1,
                w=pixels, cin=c, in_stride=si, out_stride=so, in_off=x_off, out_off=y_off, out_zero=zp, scale=scale)


def quantize_cases(rng):
    cases = []
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e-45, -1e-45], np.float32)
    for zp in (-128, -1, 0, 37, 127):
        scale = np.float32(loguniform(rng, 1e-3, 1.0))
        v = np.concatenate([rng.standard_normal(500) * 80, rng.uniform(-700, 700, 300),
                            np.arange(-520, 521) + 0.5,              # exact halves of v (ties to even) ...
                            np.arange(-130, 131) - 0.5])
        x = np.concatenate([(v * scale).astype(np.float32), specials])
        x = x[: len(x) // 7 * 7].reshape(-1, 7)
        cases.append(quantize_case(rng, f"scale {scale:.4g} zp {zp}", x, float(scale), zp, (int(zp) % 3, 2)))
        # ... which stay exact when the scale is a power of two: x / scale = n + 0.5 exactly
        p2 = np.float32(2.0 ** int(rng.integers(-10, 3)))
        halves = ((np.arange(-600, 601) + 0.5) * p2).astype(np.float32)
        cases.append(quantize_case(rng, f"halves scale {p2} zp {zp}", halves.reshape(-1, 1), float(p2), zp))
    # near the ties, x / scale within 2^-24 .. 2^-8 of a half-integer on both sides (carve_q8_pool_avx512.c's quantize
    # multiplies by 1 / scale unless within 2^-12 of one), with scales whose reciprocal is inexact, and scales
    # whose reciprocal is not a normal float (the division throughout)
    k = np.arange(-540, 541) + 0.5
    eps = np.concatenate([2.0 ** -np.arange(8, 25), -(2.0 ** -np.arange(8, 25))])
    for scale in (float(np.float32(loguniform(rng, 1e-3, 1.0))), float(np.float32(1 / 255)), 3e-2, 0.7):
        v = (k[:, None] + eps[None, :]).ravel()
        x = (v * scale).astype(np.float32)
        cases.append(quantize_case(rng, f"near ties scale {scale:.4g}", x[: len(x) // 5 * 5].reshape(-1, 5), scale,
                                   int(rng.integers(-128, 128))))
    for scale in (1e-39, 3e-38, 1e37, 1e-30):
        x = np.concatenate([rng.standard_normal(200) * 300 * scale, (np.arange(-40, 41) + 0.5) * scale,
                            np.array([np.nan, np.inf, -np.inf, 0.0, 1e-45, 3e38, -3e38])]).astype(np.float32)
        cases.append(quantize_case(rng, f"scale {scale:g} (reciprocal at or past the float range)",
                                   x.reshape(-1, 1), float(np.float32(scale)), 5))
    return cases


def dequantize_case(rng, scale, zp, extra):
    q = np.arange(-128, 128, dtype=np.int8)
    q = np.concatenate([q, rng.integers(-128, 128, 256).astype(np.int8)]).reshape(-1, 8)
    expect = arith.dequantize(q, scale, zp)
    arena = Arena(rng)
    si, so = 8 + extra[0], 8 + extra[1]
    x_off = arena.view(q, si, 1, 1)
    y_off = arena.out(q.shape[0], 8, so, 4, 4)
    return Case(f"dequantize scale {scale:.4g} zp {zp}", "DEQUANTIZE", arena, b"", expect,
                (y_off, q.shape[0], 8, so, np.float32), False, h=q.shape[0], w=1, cin=8, in_stride=si,
                out_stride=so, in_off=x_off, out_off=y_off, in_zero=zp, scale=scale)


def refusal_cases(rng):
    cases = []
    good = conv_case(rng, "refusal base", 5, 5, 4, 4, 3, 3, 1, 1, 1, False)
    rec = bytearray(good.blob)
    off = good.fields["weight_off"] + 8 * 4 + 3 * 4  # shift of the last of 4 output channels
    rec[off:off + 4] = struct.pack("<i", 63)
    bad = Case("refused: shift 63 in the last channel", "CONV", Arena(rng), bytes(rec), status=INVALID)
    bad.arena, bad.fields = good.arena, dict(good.fields)
    cases.append(bad)
    zp = Case("refused: zero point 128", "CONV", Arena(rng), good.blob, status=INVALID)
    zp.arena, zp.fields = good.arena, dict(good.fields, out_zero=128)
    cases.append(zp)
    unknown = Case("refused: unknown kind", "CONV", Arena(rng), good.blob, status=INVALID)
    unknown.arena, unknown.fields = good.arena, dict(good.fields, kind=99)
    cases.append(unknown)
    return cases


def all_cases(rng):
    cases = conv_cases(rng)
    adds = [("4x5x16", 4, 5, 16, None, (0, 0, 0)), ("3x7x13 strided", 3, 7, 13, None, (3, 5, 2)),
            ("b dominates", 5, 5, 24, 300.0, (0, 1, 0)), ("a dominates", 5, 5, 24, 1 / 300.0, (0, 0, 4)),
            ("equal scales", 6, 6, 8, 1.0, (0, 0, 0)), ("1x1x1", 1, 1, 1, None, (0, 0, 0))]
    for name, h, w, c, ratio, strides in adds:
        cases.append(add_case(rng, name, h, w, c, ratio, strides, spread=h * w * c > 1))
    # the requantization's edges (carve_q8.c: the int32 form for shifts 17..47 and multipliers below 2^31 - 2^15,
    # else int64): on both sides of each bound, multipliers at 2^31 - 1, 0 and the int16 split's edges; and exact
    # ties (the sum a multiple of 2^(n-1)), which must round up: ratios 1/2 and 1/2, 3/4 and 1/4, on both forms
    m_top, m_edge = (1 << 31) - 1, (1 << 31) - (1 << 15)
    for ma, mb, n in ((1 << 30, 1 << 30, 31), (3 << 28, 1 << 28, 30), (3 << 12, 1 << 12, 14),
                      (3 << 26, 1 << 26, 28),
                      (m_top, 1 << 30, 31), (m_edge, m_edge - 1, 31), (m_edge - 1, 3 << 29, 32),
                      ((1 << 30) + (1 << 15), (1 << 30) - (1 << 15) - 1, 17), ((1 << 30) + 12345, 1 << 29, 16),
                      (1 << 30, 1 << 30, 47), ((1 << 31) - 40000, 1 << 30, 48), (1 << 30, 0, 40), (0, 1 << 30, 30),
                      (1 << 30, 1 << 30, 9), (m_top, m_top, 62), (1 << 30, 1 << 29, 1)):
        cases.append(add_case(rng, f"multipliers {ma}, {mb}, shift {n}", 5, 7, 9, strides=(0, 2, 1), spread=False,
                              mults=(ma, mb, n)))
    for name, h, w, c, k, s, p in [("5/1/2 (SPPF)", 8, 9, 12, 5, 1, 2), ("3/2/1", 9, 10, 7, 3, 2, 1),
                                   ("2/2/0", 8, 7, 5, 2, 2, 0), ("3/1/1 on 1x2", 1, 2, 3, 3, 1, 1)]:
        for negative in (True, False):
            cases.append(pool_case(rng, f"{name}{' all negative' if negative else ''}", h, w, c, k, s, p, negative,
                                   (int(negative) * 3, 2)))
    cases.append(pool_case(rng, "3/1/1 130 channels (blocks of 64 and a tail)", 5, 6, 130, 3, 1, 1, False, (7, 1)))
    for kind in ("COPY", "UPSAMPLE2X"):
        cases.append(copy_case(rng, kind, 4, 5, 11, (0, 0)))
        cases.append(copy_case(rng, kind, 3, 2, 7, (5, 9)))
    cases += quantize_cases(rng)
    for zp, extra in ((-128, (0, 0)), (0, (3, 1)), (127, (1, 2)), (-7, (0, 5))):
        cases.append(dequantize_case(rng, loguniform(rng, 1e-4, 10.0), zp, extra))
    return cases + trained_cases(rng) + refusal_cases(rng)


# ---- Run and compare --------------------------------------------------------------------------------------

def tool_variants(prefix: list, tool: str) -> tuple:
    """(the carve_q8_run_pool variants the tool runs on this CPU, the one carve_q8_pool_select picks)."""
    lines = subprocess.run(prefix + [tool, "--variants"], check=True, capture_output=True, text=True).stdout.split()
    return [v for v in lines if v != "selected"][:-1], lines[-1]


def cpu_flags() -> set:
    """The x86 CPU flags of /proc/cpuinfo (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    m = re.search(r"^flags\s*:(.*)$", text, re.M)
    return set(m.group(1).split()) if m else set()


def add_variant_args(ap) -> None:
    """--exec, --expect and --expect-selected (q8_vs_arith.py and q8_pool_vs_run.py)."""
    ap.add_argument("--exec", default="", help="prefix to run the tool with (e.g. qemu-aarch64 -L ...)")
    ap.add_argument("--expect", default="", help="comma-separated variants the tool must run, in order")
    ap.add_argument("--expect-selected", default="", help="the variant carve_q8_pool_select must pick")


def check_variants(args, variants: list, selected: str) -> int:
    """Failures: the variants run against --expect (or, without --exec, expected_variants()), the selected one
    against --expect-selected."""
    failed = 0
    want = args.expect.split(",") if args.expect else (None if args.exec else expected_variants())
    if want is not None and variants != want:
        print(f"FAIL this CPU should run the variants {want}, the tool runs {variants}")
        failed += 1
    if args.expect_selected and selected != args.expect_selected:
        print(f"FAIL carve_q8_pool_select should pick {args.expect_selected}, it picks {selected}")
        failed += 1
    return failed


def expected_variants() -> list:
    """The variants a tool built for this machine must run: portable; avx512 where the CPU has AVX-512 F, BW, VL;
    avx512vbmi with VBMI too; avx2 where it has AVX2 and FMA (x86-64 only: a cross-compiled tool under qemu runs
    portable only)."""
    flags = cpu_flags()
    out = ["portable"]
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        out.append("avx512")
        if "avx512vbmi" in flags:
            out.append("avx512vbmi")
    if {"avx2", "fma"} <= flags:
        out.append("avx2")
    return out


def run_tool(prefix: list, tool: str, cases: list, variant: str | None = None, threads: tuple = ()) -> list:
    """[(status, arena) of carve_q8_run, then of the variant's run on each of `threads`] per case."""
    runs = 1 + len(threads)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "cases.bin"), Path(tmp, "results.bin")
        src.write_bytes(b"Q8C1" + struct.pack("<II", q8_pack.PACKS_LAYOUT, len(cases)) +
                        b"".join(c.pack() for c in cases))
        pick = ["--variant", variant] if variant is not None else []
        subprocess.run(prefix + [tool, *pick, str(src), str(dst), *map(str, threads)], check=True)
        data = dst.read_bytes()
    out, pos = [], 0
    for c in cases:
        results = []
        for _ in range(runs):
            status = struct.unpack_from("<i", data, pos)[0]
            pos += 4
            results.append((status, data[pos:pos + len(c.arena)]))
            pos += len(c.arena)
        out.append(results)
    assert pos == len(data), "q8_tool wrote more than expected"
    return out


def check(case: Case, status: int, arena: bytes) -> list:
    """Problems with one result ([] if none)."""
    if status != case.status:
        return [f"status {status}, expected {case.status}"]
    before = np.frombuffer(case.arena, np.uint8)
    after = np.frombuffer(arena, np.uint8)
    if case.out is None:
        return [] if np.array_equal(before, after) else ["the arena was written"]
    off, pixels, c, stride, dtype = case.out
    item = np.dtype(dtype).itemsize
    mask = view_mask(len(before), off, pixels, c, stride, item)
    problems = []
    if not np.array_equal(before[~mask], after[~mask]):
        problems.append(f"{int(np.sum(before[~mask] != after[~mask]))} bytes outside the output view written")
    got = read_view(arena, off, pixels, c, stride, dtype)
    want = np.asarray(case.expect, dtype).reshape(pixels, c)
    same = got.view(np.uint8 if item == 1 else np.uint32) == want.view(np.uint8 if item == 1 else np.uint32)
    if not same.all():
        p, ch = np.argwhere(~same)[0]
        problems.append(f"{int((~same).sum())} of {same.size} values differ, first at pixel {p} channel {ch}: "
                        f"{got[p, ch]} vs arith {want[p, ch]}")
    if case.spread:
        distinct = len(np.unique(want))
        # SiLU's outputs below about -0.28 do not exist: its table's -128 is the floor of the range, not a clamp
        ends = (127,) if case.fields["act"] == ACT_SILU else (-128, 127)
        clamped = float(np.mean(np.isin(want, ends)))
        if distinct < min(24, want.size // 4) or clamped > 0.5:
            problems.append(f"flat reference output: {distinct} distinct values, {clamped:.0%} clamped")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tool")
    add_variant_args(ap)
    args = ap.parse_args()
    rng = np.random.default_rng(19)
    cases = all_cases(rng)
    prefix = shlex.split(args.exec)
    variants, selected = tool_variants(prefix, args.tool)
    print(f"  carve_q8_run_pool variants run: {', '.join(variants)} (a package on this CPU selects {selected})")
    failed = check_variants(args, variants, selected)
    results = [[] for _ in cases]
    for v in variants:
        for i, r in enumerate(run_tool(prefix, args.tool, cases, v, (0,))):
            results[i].append((v, r))
    by_kind = {}
    values = {"CONV": [], "ADD": []}
    for case, runs in zip(cases, results):
        problems = []
        for v, ((status, arena), (p_status, p_arena)) in runs:
            if v == variants[0]:  # carve_q8_run's result is the same in every run of the tool
                problems += check(case, status, arena)
            problems += [f"carve_q8_run_pool variant {v}: {p}" for p in check(case, p_status, p_arena)]
        by_kind[case.kind] = by_kind.get(case.kind, 0) + 1
        if case.out is not None and case.kind in values and case.spread:
            values[case.kind].append(np.asarray(case.expect).ravel())
        if problems:
            failed += 1
            print(f"FAIL {case.name}: " + "; ".join(problems))
    for kind, vals in values.items():
        v = np.concatenate(vals)
        hit = [end for end in (-128, 127) if np.any(v == end)]
        print(f"  {kind}: {v.size} checked outputs, {len(np.unique(v))} distinct values, "
              f"{np.mean((v == -128) | (v == 127)):.1%} clamped (ends reached: {hit})")
        if len(hit) < 2:
            print(f"FAIL {kind}: the outputs never reach both ends of int8: clamping is not exercised")
            failed += 1
    mc, ma = np.array(STATS["conv"]), np.array(STATS["add"])
    print(f"  calibrated real multipliers: conv {mc.min():.3g} .. {mc.max():.3g}, add {ma.min():.3g} .. "
          f"{ma.max():.3g}; "
          f"conv input zero points {min(STATS['in_zero'])} .. {max(STATS['in_zero'])}")
    print(f"  cases per kind {dict(sorted(by_kind.items()))}")
    if failed:
        print(f"q8_vs_arith: {failed} of {len(cases)} cases FAILED")
        return 1
    print(f"q8_vs_arith: ok ({len(cases)} cases, bit-exact: carve_q8_run and the variants {', '.join(variants)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
