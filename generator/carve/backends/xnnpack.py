"""The xnnpack backend: C11 + XNNPACK's operator API (Debian's libxnnpack-dev).

Convolutions, max pooling and channel copies are XNNPACK operators, created
and set up once at create on fixed arena addresses; SiLU / residual
epilogues, nearest upsampling, attention and the end-to-end post-processing
are carve runtime kernels on the same thread pool. So is the stem (``model.0``,
3x3 stride 2 on the 3-channel image): ``stem_conv`` picks the convolutions
that ``carve_conv3x3s2_small_cin`` runs with bias + SiLU in registers, where
XNNPACK's igemm, with a reduction of 27, runs at a fifth of the FMA peak and
needs a second pass for the SiLU; they get no XNNPACK operator (nor heap).
The 3x3 stride-1 convolutions with channels in multiples of 8 run as
``carve_conv3x3s1_winograd`` (``winograd_conv``): Winograd F(2x2, 3x3), 16
multiplications per 2x2 outputs and input channel where a direct convolution
does 36, with the bias, SiLU and residual applied before the store; their
weights are stored transformed, (16, cin, cout), and get no XNNPACK operator.
The depthwise 3x3 stride-1 convolutions (the heads' DWConvs, the PSA blocks'
positional conv) run as ``carve_dwconv3x3`` (``dw_conv``), bias + SiLU before
the store instead of XNNPACK's depthwise convolution + a SiLU pass; weights
(3, 3, c).
The lowering is ``lowering.lower``, shared with the other C backends;
``xnn_heap`` adds the size of the caller's XNNPACK heap for
``<name>_create_with``.
A quantized graph's int8 ops (--precision int8) run on carve's own int8
kernels on the pool, bit for bit the portable package's (``xnn_q8``): the dense
convolutions on carve_q8conv (AMX / AVX-512 VNNI), every other int8 op with
carve_q8_run_pool (``q8``; step class ``Q8PoolOp``); runtime_conv never applies
to them (it chooses among conv2d ops only), and no XNNPACK operator runs int8.
"""

from __future__ import annotations

import numpy as np

from . import lowering, q8conv_pack, xnn_heap
from .emit_c import runtime_define
from .lowering import CPU_LOWERINGS, CPU_RULES, CBackend, Layouts, concat_lowering, cpu_copy
from .q8 import Q8_RULES, with_q8
from .xnn_q8 import XNN_Q8_LOWERINGS
from .steps import Q8Conv, Q8PoolOp, WinogradConv, XnnOp

# What carve_conv3x3s2_small_cin accepts, read from the runtime (the generated code also _Static_asserts each call).
STEM_MAX_CIN = runtime_define("CARVE_STEM_MAX_CIN")
STEM_COUT_MULTIPLE = runtime_define("CARVE_STEM_COUT_MULTIPLE")


def stem_conv(attrs: dict) -> str | None:
    """The step kind "conv3x3s2" for a conv that carve_conv3x3s2_small_cin runs: groups 1, cin <= 4, 3x3,
    stride 2, pad 1, cout a multiple of 16, act SiLU or none (every YOLO26's model.0); None for the rest
    (XNNPACK operators)."""
    ok = (attrs["groups"] == 1 and 1 <= attrs["cin"] <= STEM_MAX_CIN and tuple(attrs["kernel"]) == (3, 3)
          and attrs["stride"] == 2 and attrs["pad"] == 1 and attrs["cout"] % STEM_COUT_MULTIPLE == 0
          and attrs.get("act", "none") in ("silu", "none"))
    return "conv3x3s2" if ok else None


# What carve_conv3x3s1_winograd accepts and its scratch, read from the runtime (the generated code _Static_asserts
# the channels of each call and the scratch against CARVE_WINOGRAD_SLOT_BYTES).
WINOGRAD_CHANNEL_MULTIPLE = runtime_define("CARVE_WINOGRAD_CHANNEL_MULTIPLE")
WINOGRAD_TILES = runtime_define("CARVE_WINOGRAD_TILES")
WINOGRAD_KC = runtime_define("CARVE_WINOGRAD_KC")


def winograd_conv(attrs: dict) -> str | None:
    """The step kind "conv3x3s1_wino" for a conv that carve_conv3x3s1_winograd runs: groups 1, 3x3, stride 1,
    pad 1, cin and cout multiples of 8, act SiLU or none (the bottlenecks' and the heads' 3x3 convolutions,
    yolo26n's 8-channel ones in model.2 included); None for the rest. bench/winograd_vs_xnnpack.c: 1.25x
    (16 -> 16 channels) to 2.35x XNNPACK's convolution + SiLU pass on one thread (160x160 16 -> 8: 1.66x,
    8 -> 16 + residual: 1.15x), and closer to a float64 reference than XNNPACK."""
    ok = (attrs["groups"] == 1 and tuple(attrs["kernel"]) == (3, 3) and attrs["stride"] == 1 and attrs["pad"] == 1
          and attrs["cin"] % WINOGRAD_CHANNEL_MULTIPLE == 0 and attrs["cout"] % WINOGRAD_CHANNEL_MULTIPLE == 0
          and attrs.get("act", "none") in ("silu", "none"))
    return "conv3x3s1_wino" if ok else None


def winograd_slot_bytes(cout: int) -> int:
    """CARVE_WINOGRAD_SLOT_BYTES(cout): one task's scratch, U (16 planes of TILES x KC floats) and M (16 planes
    of TILES x cout floats), each plane padded by 16 floats, rounded up to 64 bytes."""
    floats = 16 * (WINOGRAD_TILES * WINOGRAD_KC + 16) + 16 * (WINOGRAD_TILES * cout + 16)
    return -(-floats * 4 // 64) * 64


def dw_conv(attrs: dict) -> str | None:
    """The step kind "dwconv3x3" for a conv that carve_dwconv3x3 runs: depthwise (groups = cin = cout), 3x3,
    stride 1, pad 1, act SiLU or none, any channel count (yolo26n's head DWConvs, one2one_cv3.*.*.0, and the
    PSA blocks' attn.pe); None for the rest. bench/dwconv_vs_xnnpack.c: 1.05x to 1.5x XNNPACK's depthwise
    convolution + SiLU pass on yolo26n's shapes (the SiLU itself, compute-bound, is most of the time)."""
    ok = (attrs["groups"] == attrs["cin"] == attrs["cout"] and attrs["cin"] >= 1
          and tuple(attrs["kernel"]) == (3, 3) and attrs["stride"] == 1 and attrs["pad"] == 1
          and attrs.get("act", "none") in ("silu", "none"))
    return "dwconv3x3" if ok else None


def exact_runtime_conv(attrs: dict) -> str | None:
    """The runtime kernels that compute the convolution of the stored weights themselves (stem_conv, then
    dw_conv): runtime_conv without Winograd (``lower(..., winograd=False)``); None for an XNNPACK operator."""
    return stem_conv(attrs) or dw_conv(attrs)


def runtime_conv(attrs: dict) -> str | None:
    """The runtime kernel a conv runs as (stem_conv, dw_conv, then winograd_conv), or None for an XNNPACK
    operator."""
    return exact_runtime_conv(attrs) or winograd_conv(attrs)


def _winograd_rows(x: np.ndarray, axis: int) -> np.ndarray:
    """Winograd F(2x2, 3x3)'s G applied along ``axis`` (3 -> 4), G = [[1, 0, 0], [1/2, 1/2, 1/2],
    [1/2, -1/2, 1/2], [0, 0, 1]], in this order of float64 operations: g0, (g0 + g1 + g2) * 0.5,
    (g0 - g1 + g2) * 0.5, g2."""
    g0, g1, g2 = (np.take(x, j, axis=axis) for j in range(3))
    return np.stack([g0, (g0 + g1 + g2) * 0.5, (g0 - g1 + g2) * 0.5, g2], axis=axis)


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """PyTorch (cout, cin, 3, 3) -> (16, cin, cout): G g G^T per (cout, cin) in float64 (_winograd_rows over the
    kernel's rows, then over the columns: each sum in that order, so that runtime/carve_weights.c, which rebuilds
    an f16 package's Winograd weights at create, computes the same bits), + 0.0 (a zero is +0), rounded to
    float32, position p = 4 * a + b of the 4x4 result. (The einsum this replaced gave the same floats on every
    checkpoint tried, trained and random, 6 models: its accumulation from +0 also turned -0 into +0.)"""
    u = _winograd_rows(_winograd_rows(w.astype(np.float64), 2), 3) + 0.0   # (cout, cin, 4, 4)
    return np.ascontiguousarray(np.transpose(u, (2, 3, 1, 0)).reshape(16, w.shape[1], w.shape[0])).astype(np.float32)


# Convolutions whose weights exceed this are run as several XNNPACK operators over slices of the output channels.
# XNNPACK 2022's convolution sweeps all output channels for each block of 7 output pixels, so weights larger than
# the L2 cache are read again from L3 / memory for every block; slices of at most this size stay in L2 (2 MiB per
# core on the development machine, 1 MiB or more on current x86-64 and Arm server cores). Measured with
# XNNPACK alone on one thread (docs/performance.md): 40x40x256 -> 512, 3x3 stride 2 (4.7 MB of weights),
# 17.3 ms whole, 10.4 ms as 8 slices of 0.59 MB.
SLICE_WEIGHT_BYTES = 640 * 1024
# Slices hold a multiple of this many output channels (XNNPACK packs output channels in groups of 16 on
# AVX-512 and 8 on NEON: a slice that is a multiple of both packs no padding).
SLICE_CHANNELS = 16


def conv_slices(attrs: dict) -> list | None:
    """The output-channel ranges [(c0, c1), ...] a convolution runs as, one XNNPACK operator each, so that each
    slice's weights (float32, SLICE_WEIGHT_BYTES at most where the channel granularity allows) stay in L2; None
    (one operator) for weights that fit and grouped convolutions. (The lowering asks only for the convolutions
    that XNNPACK runs: not runtime_conv's.)"""
    if attrs["groups"] != 1:
        return None
    cout = attrs["cout"]
    kh, kw = attrs["kernel"]
    per_channel = attrs["cin"] * kh * kw * 4
    want = -(-(per_channel * cout) // SLICE_WEIGHT_BYTES)
    if want <= 1:
        return None
    width = -(-cout // want)
    width = max(SLICE_CHANNELS, -(-width // SLICE_CHANNELS) * SLICE_CHANNELS)
    if width >= cout:
        return None
    return [(c0, min(c0 + width, cout)) for c0 in range(0, cout, width)]


def runtime_conv_layout(kind: str, w: np.ndarray) -> np.ndarray:
    """PyTorch (out, in, kh, kw) -> the weights of a runtime_conv step of this kind: (kh, kw, in, out) for
    carve_conv3x3s2_small_cin, winograd_weights' (16, in, out) for carve_conv3x3s1_winograd, (kh, kw, c) for
    carve_dwconv3x3 (from (c, 1, 3, 3)). (Descriptors, which XNNPACK runs, keep LAYOUTS whatever their attrs: a
    slice of a convolution may look like a runtime kernel's.)"""
    if kind == "conv3x3s1_wino":
        return winograd_weights(w)
    if kind == "dwconv3x3":
        return np.ascontiguousarray(np.transpose(w[:, 0], (1, 2, 0)))
    if kind == "conv3x3s2":
        return np.transpose(w, (2, 3, 1, 0))
    raise AssertionError(f"no layout for runtime conv kind {kind!r}")  # pragma: no cover - a backend's bug


# XNNPACK wants conv and deconv weights as (out, kh, kw, in / groups): PyTorch has conv (out, in/g, kh, kw),
# deconv (in, out, kh, kw); fully connected as PyTorch's (out, in). The cuda backend shares these; the runtime
# kernels' convolutions take runtime_conv_layout's instead.
LAYOUTS = Layouts(conv=lambda w, a: np.transpose(w, (0, 2, 3, 1)),
                  deconv=lambda w, a: np.transpose(w, (1, 2, 3, 0)),
                  linear=lambda w, a: w)


class XnnpackBackend(CBackend):
    name = "xnnpack"
    description = "CPU: C11 + XNNPACK operators + carve's thread pool"
    lowerable = dict(CPU_RULES, **Q8_RULES)       # and the int8 ops of --precision int8 (xnn_q8.py, q8.py)
    lowerings = with_q8(CPU_LOWERINGS, concat_lowering, cpu_copy, XNN_Q8_LOWERINGS)
    lowers_int8 = True   # Backend.lowers_int8 of the quantization pass (branch quant): quantized graphs are lowered
    prefix = "CARVE_XNN_"
    layouts = LAYOUTS
    runtime_conv = staticmethod(runtime_conv)
    runtime_conv_layout = staticmethod(runtime_conv_layout)
    runtime_conv_transforms = {"conv3x3s1_wino": "winograd"}
    conv_slices = staticmethod(conv_slices)
    step_classes = {"op": XnnOp, "q8": Q8PoolOp}   # int8 ops: carve_q8_run_pool
    # the fixed C: XNNPACK's init, heap and operators' lifecycle (carve_xnn.h); the model's (carve_model.h)
    families = ("xnn", "model")
    threaded = True       # carve_letterbox runs in CARVE_LETTERBOX_BANDS bands on the thread pool
    template_vars = dict(pool="m->pool", desc_type="carve_xnn_desc", ops_what="XNNPACK operators",
                         op_prefix=prefix, multithreaded=True, has_xnn_heap=True)
    cc_libs = ("XNNPACK", "pthread")   # the README's plain cc command links these (carve_pool.c: the pthreadpool_*)

    def lower(self, graph, plan, winograd: bool = True) -> dict:
        program = lowering.lower(graph, plan, self, runtime_conv if winograd else exact_runtime_conv)
        # Winograd convolutions take CARVE_WINOGRAD_SLOT_BYTES(cout) of the scratch per task: one slot in
        # <NAME>_SCRATCH_BYTES (create_with runs on one thread); create allocates one per thread.
        wino = [st.cout for st in program["runtime_convs"] if isinstance(st, WinogradConv)]
        program["wino_max_cout"] = max(wino, default=0)
        # Task scratch slots (create allocates CARVE_POOL_SLOTS_PER_THREAD per thread): the Winograd convolutions'
        # and carve_q8conv's, each slot the largest of them; slot_exprs are the runtime's macros the generated code
        # checks it against.
        slots = [(winograd_slot_bytes(max(wino)), f"CARVE_WINOGRAD_SLOT_BYTES({max(wino)})")] if wino else []
        q8c = [st for lay in program["layers"] for st in lay["steps"] if isinstance(st, Q8Conv)]
        if q8c:
            big = max(q8c, key=lambda st: q8conv_pack.slot_bytes(st.kh, st.kw, st.cin))
            slots.append((q8conv_pack.slot_bytes(big.kh, big.kw, big.cin),
                          f"CARVE_Q8CONV_SLOT_BYTES({big.kh}, {big.kw}, {big.cin})"))
        program["wino_slot_bytes"] = max((b for b, _ in slots), default=0)
        program["slot_exprs"] = [e for _, e in slots]
        program["scratch_bytes"] = max(program["scratch_bytes"], program["wino_slot_bytes"])
        heap = xnn_heap.heap_bytes(program["ops"], self.prefix)
        program["xnn_heap_bytes"] = heap["bytes"]
        program["xnn_heap_bytes_x86_64"] = heap["x86_64"]
        program["xnn_heap_profile"] = heap["profile"]
        program["context_bytes"] += 64  # the context's carve_xnn_heap
        return program


BACKEND = XnnpackBackend()
