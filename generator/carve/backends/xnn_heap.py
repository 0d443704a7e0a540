"""<NAME>_XNN_HEAP_BYTES: an upper bound of what XNNPACK allocates when a package creates its operators.

``<name>_create_with`` creates every XNNPACK operator inside a heap scope (runtime/carve_xnn.c), so all
that XNNPACK allocates then comes from the caller's ``xnn_heap`` buffer; this module sizes that buffer
from the op descriptors, at generation time.

The arithmetic follows the XNNPACK snapshot the xnnpack backend is written against (Debian 12's
libxnnpack-dev, git 2022-02-16): ``src/operators/convolution-nhwc.c``, ``deconvolution-nhwc.c``,
``max-pooling-nhwc.c``, ``global-average-pooling-nwc.c``, ``fully-connected-nc.c`` (what create and
setup allocate) and ``src/init.c`` (the f32 micro-kernel tiles per CPU). Per operator:

* the operator struct (``sizeof(struct xnn_operator)``: 2112 bytes on x86-64; on aarch64 the
  micro-kernel pointers are per core type (XNN_MAX_UARCH_TYPES), so a larger bound there);
* convolution, by the micro-kernel XNNPACK picks:

  - ``vmulcaddc`` (1x1 depthwise, stride 1, no padding): ``(4 + 4) * round_up(groups, ct)``;
  - ``dwconv`` (depthwise, a unipass kernel of exactly kh*kw taps exists): packed
    ``(kh*kw*4 + 4) * round_up(groups, channel_tile)``; zero buffer ``16 + round_up(groups, ct) * 4``
    when padded; indirection ``8 * out_h * (kh*kw + (out_w - 1) * stride * kh)`` pointers' bytes;
  - ``gemm`` (1x1, stride 1, no padding): packed ``groups * (k_stride*4 + 4) * round_up(cout/g, nr)``;
  - ``igemm`` (everything else, depthwise kernels without a dwconv kernel too): packed
    ``groups * (kh*kw*k_stride*4 + 4) * round_up(cout/g, nr)``; zero buffer ``16 + k_stride*4`` when
    padded; indirection ``8 * kh*kw * round_up(out_h*out_w, mr)``;

  with ``k_stride = round_up(cin/g, kr*sr)``;
* deconvolution (carve lowers kernel = stride, no padding): ``subconv2d`` with stride > 1, packed
  ``round_up(cout, nr) * (kh*kw*k_stride*4 + 4 * stride^2)``, one 72-byte subconvolution record per
  sub-kernel, zero buffer ``k_stride*4 + 16``, and no indirection (the GEMM path of kernel = stride);
* max pooling: indirection ``8 * ((mr - 1) + out_h * (k*k + (out_w - 1) * min(stride, k) * k))``;
* global average pooling: zero buffer ``cin*4 + 16``;
* fully connected: packed ``(round_up(cin, kr*sr)*4 + 4) * round_up(cout, nr)``;
* channel copy, add, softmax: the struct only;

and per allocation, the heap's own cost: a 16-byte size header plus up to (alignment - 1) bytes of
padding (XNNPACK asks for 64-byte alignment on x86-64, 16 on aarch64). The bound is the largest total
over the CPU profiles below (each a set of tiles XNNPACK's init.c picks on some CPU), rounded up to 64;
the generated header also has the largest x86-64 total, used when it is compiled for x86-64.
The firmware test (tests/firmware/xnn_heap.py) checks it against what XNNPACK takes on the test machine.
"""

from __future__ import annotations

from dataclasses import dataclass

POINTER = 8             # sizeof(void*) on x86-64 and aarch64
EXTRA_BYTES = 16        # XNN_EXTRA_BYTES: zero buffers' tail
HEAP_HEADER = 16        # runtime/carve_xnn.c: the size stored before each block
MAX_ALIGNMENT = 64      # XNN_ALLOCATION_ALIGNMENT on x86-64 (16 on arm)
ALLOC_SLACK = HEAP_HEADER + MAX_ALIGNMENT - 1
SUBCONV_RECORD = 72     # sizeof(struct subconvolution_params) (measured: 288 bytes for 4 sub-kernels)
VMULCADDC_TILE = 16     # channel tile bound of the f32 vmulcaddc kernels (c4 / c8 in init.c)


@dataclass(frozen=True)
class Profile:
    """The f32 tiles XNNPACK 2022-02's init.c picks on one kind of CPU."""
    name: str
    mr: int                 # gemm / igemm rows
    nr: int                 # gemm / igemm output channels
    kr: int                 # log2_kr and log2_sr as multipliers
    sr: int
    dwconv: dict            # unipass dwconv: taps (primary_tile) -> channel_tile
    maxpool_mr: int
    operator_bytes: int     # bound of sizeof(struct xnn_operator)


X86_OPERATOR = 2112         # sizeof(struct xnn_operator), x86-64 (XNN_MAX_UARCH_TYPES 1), measured
ARM_OPERATOR = 4096         # aarch64: per-core-type kernel pointers in the struct; a generous bound

PROFILES = (
    Profile("x86-64 AVX-512", 7, 16, 1, 1, {4: 16, 9: 16, 25: 16}, 9, X86_OPERATOR),
    Profile("x86-64 FMA3", 5, 16, 1, 1, {4: 16, 9: 16, 25: 8}, 9, X86_OPERATOR),
    Profile("x86-64 FMA3 (Zen)", 4, 16, 1, 4, {4: 16, 9: 16, 25: 8}, 9, X86_OPERATOR),
    Profile("x86-64 AVX", 5, 16, 1, 1, {4: 16, 9: 16, 25: 8}, 9, X86_OPERATOR),
    Profile("x86-64 SSE", 4, 8, 1, 1, {4: 8, 9: 8, 25: 8}, 9, X86_OPERATOR),
    Profile("aarch64 NEON 6x8", 6, 8, 1, 1, {4: 8, 9: 8, 25: 4}, 9, ARM_OPERATOR),
    Profile("aarch64 NEON 4x8", 4, 8, 1, 1, {4: 8, 9: 8, 25: 4}, 9, ARM_OPERATOR),
    Profile("aarch64 NEON 6x8s4", 6, 8, 1, 4, {4: 8, 9: 8, 25: 4}, 9, ARM_OPERATOR),
)


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def _out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def op_allocations(kind: str, f: dict, pr: Profile) -> list:
    """The sizes of the blocks XNNPACK allocates for one descriptor (kind without prefix) on profile pr."""
    blocks = [pr.operator_bytes]
    if kind == "CONV":
        k, s, pad, g = f["kh"], f["stride"], f["pad"], f["groups"]
        gic, goc = f["cin"] // g, f["cout"] // g
        oh, ow = _out(f["h"], k, s, pad), _out(f["w"], k, s, pad)
        taps = k * k
        if gic == 1 and goc == 1 and taps == 1 and s == 1 and not pad:
            blocks.append(8 * _up(g, VMULCADDC_TILE))
        elif gic == 1 and goc == 1 and taps in pr.dwconv:
            c_stride = _up(g, pr.dwconv[taps])
            blocks.append((taps * 4 + 4) * c_stride)
            if pad:
                blocks.append(EXTRA_BYTES + c_stride * 4)
            blocks.append(POINTER * oh * (taps + (ow - 1) * s * k))
        else:
            k_stride = _up(gic, pr.kr * pr.sr)
            blocks.append(g * (taps * k_stride * 4 + 4) * _up(goc, pr.nr))
            if not (taps == 1 and s == 1 and not pad):      # igemm: zero buffer when padded, indirection
                if pad:
                    blocks.append(EXTRA_BYTES + k_stride * 4)
                blocks.append(POINTER * taps * _up(oh * ow, pr.mr))
    elif kind == "DECONV":
        k, s = f["kh"], f["stride"]
        k_stride = _up(f["cin"], pr.kr * pr.sr)
        n_stride = _up(f["cout"], pr.nr)
        if s > 1:                                          # subconv2d; kernel = stride, no padding: GEMM path
            blocks += [SUBCONV_RECORD * s * s, n_stride * (k * k * k_stride * 4 + 4 * s * s),
                       k_stride * 4 + EXTRA_BYTES]
        else:                                              # 1x1, stride 1: igemm
            blocks += [n_stride * (k * k * k_stride * 4 + 4), k_stride * 4 + EXTRA_BYTES,
                       POINTER * k * k * _up(f["h"] * f["w"], pr.mr)]
    elif kind == "MAXPOOL":
        k, s, pad = f["kh"], f["stride"], f["pad"]
        oh, ow = _out(f["h"], k, s, pad), _out(f["w"], k, s, pad)
        blocks.append(POINTER * ((pr.maxpool_mr - 1) + oh * (k * k + (ow - 1) * min(s, k) * k)))
    elif kind == "GAP":
        blocks.append(f["cin"] * 4 + EXTRA_BYTES)
    elif kind == "FC":
        blocks.append((_up(f["cin"], pr.kr * pr.sr) * 4 + 4) * _up(f["cout"], pr.nr))
    elif kind not in ("COPY", "ADD", "SOFTMAX"):
        raise AssertionError(f"xnn_heap: no allocation rule for descriptor kind {kind}")
    return blocks


def heap_bytes(ops: list, prefix: str = "CARVE_XNN_") -> dict:
    """The bounds for a lowered program's op descriptors: ``bytes`` (any CPU: the largest profile's total),
    ``x86_64`` (the largest x86-64 profile's, the generated header's value on x86-64), ``profile`` (the
    largest) and ``per_profile``."""
    totals = {}
    for pr in PROFILES:
        total = 0
        for o in ops:
            total += sum(b + ALLOC_SLACK for b in op_allocations(o["kind"][len(prefix):], o["fields"], pr))
        totals[pr.name] = _up(total, 64)
    worst = max(totals, key=lambda n: totals[n])
    x86 = max(v for n, v in totals.items() if n.startswith("x86-64"))
    return dict(bytes=totals[worst], x86_64=x86, profile=worst, per_profile=totals)
