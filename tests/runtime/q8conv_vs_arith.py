#!/usr/bin/env python3
"""Compare every variant of carve_q8conv (runtime/carve_q8conv*.c: AMX, AVX-512 VNNI, AVX-VNNI, AVX2, NEON, NEON
dot product, portable) with generator/carve/quant/arith.py's qconv2d, bit for bit, on 1, 2 and 5 threads.

Usage: q8conv_vs_arith.py [--quick] [--exec "PREFIX ..."] [--expect NAME,...] [--expect-selected NAME]
                          PATH/TO/q8conv_tool

The cases are q8_vs_arith.py's conv_case (realistic parameters: weights through arith.quantize_weights, biases
through quantize_bias, output ranges calibrated on the case's own accumulators so that some values clamp,
multipliers from quantize_multiplier, tables from silu_lut, zero points across [-128, 127] with both ends, random
bytes around every view), with the record packed by generator/carve/backends/q8conv_pack.py at a 64-byte offset,
the blob ending with it. Shapes: yolo26n's 1x1 (16 -> 32, 48 -> 64, 64 -> 64 at 80x80, 128 -> 256, 384 -> 256, the
head's 16 -> 4 and 64 -> 5), 3x3 stride 1 (16 -> 8, 8 -> 16, 32 -> 32, 128 -> 64, 64 -> 33) and stride 2 (16 -> 32,
64 -> 64, 128 -> 256), the stem (3 -> 16, stride 2), odd sizes, channel counts off 16 and 64, blocks of exactly 32
output pixels and fewer, 5x5 stride 3, 1x3, 3x1, 2x2 stride 2, a 3x3 on one pixel; packed inputs and strided
channel slices on both sides; multipliers off the usual range; weights of -128; the trained demo model's
groups-1 layers (assets/yolo26n-shapes.pt at 128x128 on a real image); the paths of AMX's implicit GEMM (output
widths on and off multiples of 16, strides 1 and 2, pads 0, 1 and 2, cin 2 .. 512 giving K chunks of 4 .. 64 bytes
by kernel row and by tap, cout 5 .. 64, K up to 4608); and accumulators at the edge of the
record's precondition (|bias| + 255 * sum|w| just below 2^31, inputs at both ends of int8). Refusals (bad header,
layout, alignment, shift, groups, zero point, act, kind) must return CARVE_ERR_INVALID_ARGUMENT and leave the
arena alone. The C macros' sizes must equal q8conv_pack's.

Each variant the CPU runs (q8conv_tool --variants: the AVX-512 ones also with the table looked up a byte at a time,
as on CPUs without VBMI; AMX also with A always packed, amx_packed, and with the implicit GEMM wherever the shapes
allow it, amx_implicit, not only where amx_plan estimates that it pays) runs every case on 1 thread with 1 slot, 2
threads with 2 slots and 5 threads with 7 slots: every run must give arith's bytes (so the runs are bit-identical
to each other).
--quick: one thread configuration (1 thread, 3 slots), for the sanitizer build.
--exec runs the tool through a prefix (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu" for a cross-compiled one:
q8_build.py q8conv-aarch64). --expect: the variants the tool must list (in its order), --expect-selected: the one
carve_q8conv_select must pick; a difference fails (so a variant that silently drops out of a build is seen).
"""

from __future__ import annotations

import argparse
import shlex
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import q8_vs_arith as qa  # noqa: E402
from carve.backends import q8conv_pack  # noqa: E402
from carve.quant import arith  # noqa: E402

THREADS = ((1, 1), (2, 2), (5, 7))  # (threads, slots)


def repack(case: qa.Case, rng) -> qa.Case:
    """The case with its blob replaced: random bytes, the SiLU table (if any), then the q8conv record at a multiple of
    64 bytes, ending the blob."""
    p = case.params
    blob = bytearray(rng.integers(0, 256, int(rng.integers(1, 40)), dtype=np.uint8).tobytes())
    lut_off = 0
    if p["lut"] is not None:
        lut_off = len(blob)
        blob += p["lut"].astype(np.int8).tobytes()
    blob += rng.integers(0, 256, (-len(blob)) % q8conv_pack.ALIGN, dtype=np.uint8).tobytes()
    weight_off = len(blob)
    blob += q8conv_pack.conv_record(p["w_q"], p["bias_q"], p["mul"], p["shift"])
    case.blob = bytes(blob)
    case.fields.update(weight_off=weight_off, lut_off=lut_off)
    return case


SHAPES = [
    # (name, h, w, cin, cout, kh, kw, stride, pad)
    ("1x1 16->32", 20, 20, 16, 32, 1, 1, 1, 0),
    ("1x1 64->64 80x80", 80, 80, 64, 64, 1, 1, 1, 0),
    ("1x1 48->64", 13, 17, 48, 64, 1, 1, 1, 0),
    ("1x1 128->256", 12, 11, 128, 256, 1, 1, 1, 0),
    ("1x1 384->256", 7, 6, 384, 256, 1, 1, 1, 0),
    ("1x1 64->64 8x8 (two full blocks)", 8, 8, 64, 64, 1, 1, 1, 0),
    ("1x1 64->16 on 1 pixel", 1, 1, 64, 16, 1, 1, 1, 0),
    ("1x1 odd 13->7", 5, 6, 13, 7, 1, 1, 1, 0),
    ("1x1 200->9", 4, 5, 200, 9, 1, 1, 1, 0),
    ("1x1 16->4 (box head)", 9, 9, 16, 4, 1, 1, 1, 0),
    ("1x1 64->5 (class head)", 10, 7, 64, 5, 1, 1, 1, 0),
    ("1x1 96->48 stride 2", 9, 11, 96, 48, 1, 1, 2, 0),
    ("3x3 s1 p1 16->8", 17, 15, 16, 8, 3, 3, 1, 1),
    ("3x3 s1 p1 8->16", 16, 16, 8, 16, 3, 3, 1, 1),
    ("3x3 s1 p1 32->32", 11, 13, 32, 32, 3, 3, 1, 1),
    ("3x3 s1 p1 128->64", 9, 10, 128, 64, 3, 3, 1, 1),
    ("3x3 s1 p1 64->33", 6, 7, 64, 33, 3, 3, 1, 1),
    ("3x3 s2 p1 16->32", 21, 19, 16, 32, 3, 3, 2, 1),
    ("3x3 s2 p1 64->64", 16, 15, 64, 64, 3, 3, 2, 1),
    ("3x3 s2 p1 128->256", 8, 9, 128, 256, 3, 3, 2, 1),
    ("3x3 s2 p1 stem 3->16", 33, 31, 3, 16, 3, 3, 2, 1),
    ("3x3 s1 p0", 7, 8, 6, 5, 3, 3, 1, 0),
    ("5x5 s3 p2", 14, 13, 4, 6, 5, 5, 3, 2),
    ("1x3 p1", 5, 9, 6, 5, 1, 3, 1, 1),
    ("3x1 p1", 9, 5, 6, 5, 3, 1, 1, 1),
    ("2x2 s2 p0", 8, 9, 7, 3, 2, 2, 2, 0),
    ("3x3 p1 on 1x1", 1, 1, 9, 6, 3, 3, 1, 1),
    # AMX's implicit GEMM (tiles of 16 pixels of one output row read in place where all their taps are inside, the
    # others packed; K in chunks of a kernel row or a tap): widths off and on multiples of 16, stride 2, pad 0,
    # chunks of 4 .. 64 bytes, a kernel row of 2 x 2, the largest K of yolo26n (3x3 on 256 channels) and beyond
    ("3x3 s1 p1 4->16 (chunks 12 / 4)", 34, 40, 4, 16, 3, 3, 1, 1),
    ("3x3 s1 p1 8->8 (ow 48)", 20, 48, 8, 8, 3, 3, 1, 1),
    ("3x3 s1 p1 12->24 (ow 37)", 18, 37, 12, 24, 3, 3, 1, 1),
    ("3x3 s1 p1 16->16 (ow 32)", 33, 32, 16, 16, 3, 3, 1, 1),
    ("3x3 s1 p1 20->8 (chunks 60 / 20)", 17, 35, 20, 8, 3, 3, 1, 1),
    ("3x3 s1 p1 48->64 (ow 35)", 10, 35, 48, 64, 3, 3, 1, 1),
    ("3x3 s1 p1 64->24 (ow 16)", 9, 16, 64, 24, 3, 3, 1, 1),
    ("3x3 s1 p1 96->16 (chunk 48)", 9, 33, 96, 16, 3, 3, 1, 1),
    ("3x3 s1 p1 100->16 (chunk 20)", 6, 18, 100, 16, 3, 3, 1, 1),
    ("3x3 s1 p0 32->16 (ow 34)", 10, 36, 32, 16, 3, 3, 1, 0),
    ("3x3 s2 p1 8->16 (ow 32)", 40, 64, 8, 16, 3, 3, 2, 1),
    ("3x3 s2 p1 32->64 (ow 33)", 33, 66, 32, 64, 3, 3, 2, 1),
    ("3x3 s2 p1 128->8 (ow 17)", 6, 34, 128, 8, 3, 3, 2, 1),
    ("3x3 s1 p1 256->16 (K 2304)", 6, 18, 256, 16, 3, 3, 1, 1),
    ("3x3 s1 p1 512->24 (K 4608)", 3, 17, 512, 24, 3, 3, 1, 1),
    ("1x1 4->8 (chunk 4)", 9, 11, 4, 8, 1, 1, 1, 0),
    ("1x1 32->16 160 pixels", 10, 16, 32, 16, 1, 1, 1, 0),
    ("1x1 48->24", 11, 13, 48, 24, 1, 1, 1, 0),
    ("1x1 96->64", 9, 9, 96, 64, 1, 1, 1, 0),
    ("1x1 192->16", 7, 7, 192, 16, 1, 1, 1, 0),
    ("1x1 s2 32->16 (ow 20)", 20, 40, 32, 16, 1, 1, 2, 0),
    ("2x2 s2 p0 2->5 (chunk 4)", 8, 36, 2, 5, 2, 2, 2, 0),
    ("5x5 s1 p2 8->16 (chunk 40 / 8)", 9, 36, 8, 16, 5, 5, 1, 2),
    # small kernel rows (K <= 64, kernel rows of <= 16 bytes) packed by VPERMB, 4 pixels a time where they fit
    ("3x3 s2 p1 stem 3->16 (ow 35)", 18, 70, 3, 16, 3, 3, 2, 1),
    ("3x3 s1 p1 3->8 (4 pixels a load)", 17, 23, 3, 8, 3, 3, 1, 1),
    ("1x1 3->8", 7, 9, 3, 8, 1, 1, 1, 0),
    ("4x4 s2 p1 3->8 (kh 4)", 13, 21, 3, 8, 4, 4, 2, 1),
]


def conv_cases(rng) -> list:
    cases = []
    for i, (name, h, w, cin, cout, kh, kw, s, p) in enumerate(SHAPES):
        for act in (True, False):
            for strided in (False, True):
                extra = dict(in_extra=int(rng.integers(1, 9)), out_extra=int(rng.integers(1, 9))) if strided else {}
                zx = (-128, 127, None, None)[(2 * i + act + strided) % 4]
                label = f"conv {name}{' silu' if act else ''}{' strided' if strided else ''} zx={zx}"
                cases.append(qa.conv_case(rng, label, h, w, cin, cout, kh, kw, s, p, 1, act, in_zero=zx,
                                          tight=not act, **extra))
    for r in (0.9, 3.0, 2.0 ** 20):  # large multipliers: small shifts, much clamping
        cases.append(qa.conv_case(rng, f"conv 3x3 real multiplier {r}", 6, 7, 5, 6, 3, 3, 1, 1, 1, False,
                                  real_multiplier=r, spread=False))
    cases.append(qa.conv_case(rng, "conv 3x3 real multiplier 1e-12 (m = 0)", 6, 7, 5, 6, 3, 3, 1, 1, 1, False,
                              real_multiplier=1e-12, spread=False))
    # the kernels requantize in int32 when every channel's shift is >= 33 (real multipliers below 1/4), else in
    # int64: per-channel multipliers just below 1/4 (shift 33: the int32 path at its edge), across 1/4 (shifts 32
    # and 33 in one conv: the int64 path), and tiny ones (shift 62, m 2^30 .. 2^31: the int32 path's largest t)
    for name, lo, hi in (("shift 33", 0.126, 0.2499), ("shifts 32 and 33", 0.2, 0.3), ("shift 62", 2.4e-10, 4.6e-10)):
        ratios = np.exp(rng.uniform(np.log(lo), np.log(hi), 24))
        cases.append(qa.conv_case(rng, f"conv 3x3 per-channel multipliers, {name}", 6, 7, 9, 24, 3, 3, 1, 1, 1, True,
                                  real_multiplier=ratios, spread=False))
    cases.append(qa.conv_case(rng, "conv weights -128", 7, 6, 12, 10, 3, 3, 1, 1, 1, False, neg128=True))
    cases.append(qa.conv_case(rng, "conv 1x1 weights -128 zx 127", 5, 7, 64, 20, 1, 1, 1, 0, 1, True, in_zero=127,
                              neg128=True))
    return [repack(c, rng) for c in cases]


def edge_case(rng, name, h, w, cin, cout, k, stride, pad, zx, xval):
    """Accumulators at the edge of the precondition: weights of magnitude 127 (every other channel with all one
    sign), the input at one end of int8 and zx at the other (x - zx = +-255), the bias chosen so that
    |bias| + 255 * sum|w| = 2^31 - 1 - c, and the multiplier mapping the accumulator range onto int8."""
    sign = rng.choice(np.array([-1, 1], np.int64), (cout, 1, 1, 1))
    w_q = (sign * 127 * np.where(rng.random((cout, cin, k, k)) < 0.9, 1, -1)).astype(np.int8)
    w_q[::2] = (127 * sign[::2]).astype(np.int8)
    sumabs = np.abs(w_q.astype(np.int64)).reshape(cout, -1).sum(axis=1)
    margin = rng.integers(0, 1000, cout)
    bias_q = ((2 ** 31 - 1 - 255 * sumabs - margin) * rng.choice([-1, 1], cout)).astype(np.int32)
    x_q = np.full((h, w, cin), xval, np.int8)
    x_q[rng.random((h, w, cin)) < 0.2] = zx  # some taps at zero
    mul, shift = map(np.array, zip(*(arith.quantize_multiplier(126.0 / 2 ** 31) for _ in range(cout))))
    pre_zero = 0
    expect = arith.qconv2d(x_q, zx, w_q, bias_q, mul, shift, pre_zero, stride, pad, 1, None)
    oh, ow = expect.shape[:2]
    arena = qa.Arena(rng)
    in_off = arena.view(x_q.reshape(-1, cin), cin, 1, 1)
    out_off = arena.out(oh * ow, cout, cout, 1)
    case = qa.Case(name, "CONV", arena, b"", expect.reshape(-1, cout), (out_off, oh * ow, cout, cout, np.int8),
                   False, kh=k, kw=k, stride=stride, pad=pad, groups=1, cin=cin, cout=cout, h=h, w=w, in_stride=cin,
                   out_stride=cout, in_off=in_off, out_off=out_off, act=qa.ACT_NONE, in_zero=zx, out_zero=pre_zero)
    case.params = dict(w_q=w_q, bias_q=bias_q, mul=mul, shift=shift, lut=None)
    acc = arith.conv_acc(x_q, zx, w_q, bias_q, stride, pad, 1)
    qa.STATS.setdefault("edge", []).append(float(np.abs(acc).max()) / 2 ** 31)
    return repack(case, rng)


def edge_cases(rng) -> list:
    return [edge_case(rng, "edge: 3x3 cin 96, x 127, zx -128", 5, 6, 96, 24, 3, 1, 1, -128, 127),
            edge_case(rng, "edge: 3x3 cin 96, x -128, zx 127", 5, 6, 96, 24, 3, 1, 1, 127, -128),
            edge_case(rng, "edge: 1x1 cin 640, x 127, zx -128", 4, 9, 640, 40, 1, 1, 0, -128, 127),
            edge_case(rng, "edge: 3x3 s2 cin 64, x -128, zx 127", 7, 7, 64, 17, 3, 2, 1, 127, -128)]


def trained_cases(rng) -> list:
    """q8_vs_arith's trained demo-model layers that carve_q8conv runs (groups 1)."""
    cases = [c for c in qa.trained_cases(rng) if c.kind == "CONV" and c.fields["groups"] == 1]
    return [repack(c, rng) for c in cases]


def refusal_cases(rng) -> list:
    good = conv_cases_one(rng)
    rec = good.fields["weight_off"]
    coutp = q8conv_pack.coutp(good.fields["cout"])

    def bad(name, blob=None, **fields):
        c = qa.Case(f"refused: {name}", "CONV", qa.Arena(rng), good.blob if blob is None else blob,
                    status=qa.INVALID)
        c.arena, c.fields = good.arena, dict(good.fields, **fields)
        return c

    def patched(off, value, fmt="<i"):
        b = bytearray(good.blob)
        b[rec + off:rec + off + 4] = struct.pack(fmt, value)
        return bytes(b)

    head = q8conv_pack.HEADER_BYTES
    shift_last = head + 12 * coutp + 4 * (coutp - 1)  # the shift of the last (padding) channel
    return [good,
            bad("layout 2 in the header", patched(0, 2, "<I")),
            bad("cin 7 in the header", patched(12, 7, "<I")),
            bad("kp off in the header", patched(20, 64 * 99, "<I")),
            bad("shift 63 in the last padding channel", patched(shift_last, 63)),
            bad("shift 0 in channel 0", patched(head + 12 * coutp, 0)),
            bad("record 4 bytes off 64", b"\0" * 4 + good.blob, weight_off=rec + 4),
            bad("groups 2", groups=2),
            bad("kind ADD", kind=qa.KIND["ADD"]),
            bad("zero point 128", in_zero=128),
            bad("zero point -129", out_zero=-129),
            bad("act 7", act=7),
            bad("in_stride < cin", in_stride=good.fields["cin"] - 1),
            bad("kernel larger than the padded input", h=1, pad=0)]


def conv_cases_one(rng) -> qa.Case:
    return repack(qa.conv_case(rng, "refusal base: 3x3 20 -> 20", 5, 5, 20, 20, 3, 3, 1, 1, 1, True), rng)


# ---- Run and compare ----------------------------------------------------------------------------------------

def run_tool(tool, variant: str, threads: int, slots: int, cases: list) -> list:
    """[(status, arena)] per case of the variant's run; tool: the tool's path, or [prefix ..., path] (--exec);
    None when the tool fails."""
    tool = [str(tool)] if isinstance(tool, (str, Path)) else tool
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "cases.bin"), Path(tmp, "results.bin")
        src.write_bytes(b"Q8V1" + struct.pack("<II", q8conv_pack.PACKS_LAYOUT, len(cases)) +
                        b"".join(c.pack() for c in cases))
        r = subprocess.run([*tool, variant, str(threads), str(slots), str(src), str(dst)])
        if r.returncode != 0:  # e.g. a fault on a guard page (q8conv_tool.c): a read or write out of bounds
            return None
        data = dst.read_bytes()
    out, pos = [], 0
    for c in cases:
        status = struct.unpack_from("<i", data, pos)[0]
        pos += 4
        out.append((status, data[pos:pos + len(c.arena)]))
        pos += len(c.arena)
    assert pos == len(data), "q8conv_tool wrote more than expected"
    return out


def check_sizes(tool: list) -> int:
    """The C macros (CARVE_Q8CONV_KP, _COUTP, _RECORD_BYTES, _SLOT_BYTES) against q8conv_pack's functions."""
    failed = 0
    for kh, kw, cin, cout in ((1, 1, 16, 32), (3, 3, 3, 16), (3, 3, 128, 256), (1, 1, 200, 9), (5, 5, 4, 6),
                              (1, 1, 64, 64), (3, 3, 256, 16)):
        got = tuple(int(v) for v in subprocess.run([*tool, "--sizes", str(kh), str(kw), str(cin), str(cout)],
                                                   check=True, capture_output=True, text=True).stdout.split())
        want = (q8conv_pack.kp(kh, kw, cin), q8conv_pack.coutp(cout), q8conv_pack.record_bytes(kh, kw, cin, cout),
                q8conv_pack.slot_bytes(kh, kw, cin))
        if got != want:
            print(f"FAIL sizes {kh}x{kw} {cin}->{cout}: C {got}, q8conv_pack {want}")
            failed += 1
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tool")
    ap.add_argument("--quick", action="store_true", help="one thread configuration (1 thread, 3 slots)")
    ap.add_argument("--exec", default="", help="prefix to run the tool with (e.g. qemu-aarch64 -L ...)")
    ap.add_argument("--expect", default="", help="comma-separated variants the tool must list, in order")
    ap.add_argument("--expect-selected", default="", help="the variant carve_q8conv_select must pick")
    args = ap.parse_args()
    tool = [*shlex.split(args.exec), args.tool]
    lines = subprocess.run([*tool, "--variants"], check=True, capture_output=True, text=True).stdout.split("\n")
    variants = [v for v in lines if v and not v.startswith("selected ")]
    selected = next(v.split()[1] for v in lines if v.startswith("selected "))
    print(f"  variants on this CPU: {', '.join(variants)}; carve_q8conv_select picks {selected}")
    failed = check_sizes(tool)
    if args.expect and variants != args.expect.split(","):
        print(f"FAIL the tool should run the variants {args.expect.split(',')}, it runs {variants}")
        failed += 1
    if args.expect_selected and selected != args.expect_selected:
        print(f"FAIL carve_q8conv_select should pick {args.expect_selected}, it picks {selected}")
        failed += 1
    rng = np.random.default_rng(1908)
    cases = conv_cases(rng) + edge_cases(rng) + trained_cases(rng) + refusal_cases(rng)
    configs = ((1, 3),) if args.quick else THREADS
    values = []
    for case in cases:
        if case.out is not None and case.spread:
            values.append(np.asarray(case.expect).ravel())
    for variant in variants:
        for threads, slots in configs:
            results = run_tool(tool, variant, threads, slots, cases)
            if results is None:
                print(f"FAIL {variant} t{threads} s{slots}: q8conv_tool failed (a negative code is a signal: a "
                      "fault on a guard page is an access past a buffer's end; an abort in the AddressSanitizer "
                      "build, CARVE_Q8CONV_CHECK_READS, an AMX tile read outside the input)")
                failed += 1
                continue
            bad = 0
            for case, (status, arena) in zip(cases, results):
                problems = qa.check(case, status, arena)
                if problems:
                    bad += 1
                    print(f"FAIL {variant} t{threads} s{slots} {case.name}: " + "; ".join(problems))
            failed += bad
            print(f"  {variant:18s} {threads} thread(s), {slots} slot(s): "
                  f"{'ok' if not bad else f'{bad} FAILED'} ({len(cases)} cases)")
    v = np.concatenate(values)
    hit = [end for end in (-128, 127) if np.any(v == end)]
    print(f"  {v.size} checked outputs in the spread cases, {len(np.unique(v))} distinct values, "
          f"{np.mean((v == -128) | (v == 127)):.1%} clamped (ends reached: {hit}); edge cases' largest "
          f"|acc| / 2^31: {max(qa.STATS['edge']):.6f}")
    if len(hit) < 2:
        print("FAIL: the outputs never reach both ends of int8: clamping is not exercised")
        failed += 1
    if len(variants) == 1:
        print("  (no SIMD variant on this CPU: only the portable variant was checked)")
    if failed:
        print(f"q8conv_vs_arith: {failed} FAILED")
        return 1
    print(f"q8conv_vs_arith: ok ({len(cases)} cases x {len(variants)} variants x {len(configs)} thread "
          "configurations, bit-exact)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
