// carve runtime: the int8 dense convolution as a GEMM on AMX, AVX-512 VNNI,
// AVX-VNNI, AVX2, aarch64 NEON (with or without the dot product) or portable C
// (issue 19), bit for bit arith.qconv2d (generator/carve/quant/arith.py).
//
// What it runs: a CARVE_Q8_CONV of carve_q8.h with groups 1 (1x1, 3x3 stride 1 /
// 2, the stem's 3x3 stride 2 on 3 channels, any kh, kw, stride, pad), the same
// descriptor (carve_q8_desc: shapes, pixel strides, arena and blob offsets, zero
// points, act + lut_off), but weights in this family's record (below) instead of
// carve_q8's. Depthwise and grouped convolutions stay with carve_q8_run.
//
// The convolution as a GEMM: output pixel p (row-major over oh x ow) is row p of
// the matrix A (M = oh * ow rows, K = kh * kw * cin columns: the im2col row of
// p, tap (ky, kx) then input channel, taps outside the image holding the input
// zero point zx), the weights are B (K x cout), and
//
//   acc[p][o] = bias[o] + sum_k B[k][o] * (A[p][k] - zx)
//             = sum_k B[k][o] * (A[p][k] + s) + (bias[o] - (zx + s) * wsum[o])
//
// with wsum[o] = sum_k B[k][o] (all taps) and any shift s: s = 0 for AMX's signed
// x signed TDPBSSD, AVX2's VPMADDWD (of sign-extended int16), NEON's SDOT and
// SMULL + SADALP (signed bytes) and the portable loops; s = 128 for VNNI's
// unsigned x signed VPDPBUSD (zmm, or ymm with AVX-VNNI; A + 128 is A's bytes
// with the top bit flipped). A padded tap holds zx,
// so it contributes B * (zx - zx) = 0 exactly, as arith's padding does. Then
// arith's requantization, clamp(zy + ((acc * m + 2^(n-1)) >> n)) in int64, and
// y = lut[pre + 128] when act is SiLU. No floating point anywhere.
//
// Exactness: integer sums are exact in any order, and neither the partial nor the
// final sums can leave int32, given the record's precondition (q8_pack's
// check_accumulators) |bias[o]| + 255 * sum_k |B[k][o]| < 2^31: with |A + s| <=
// 255 every partial sum of products is at most 255 * sum |B| in magnitude; |(zx +
// s) * wsum| <= 255 * sum |B| (zx + s is in [0, 255]); the constant bias - (zx +
// s) * wsum and the final acc are within |bias| + 255 * sum |B|. (VPDPBUSD and
// TDPBSSD add with wrap-around, not saturation, so even an overflowing partial
// sum would end at the right value; the bound makes that moot; VPMADDWD's pairs of
// int8 products stay below 2^15, far from its one saturating case; NEON's SMULL
// gives single int8 products in int16, at most 2^14, which SADALP adds in pairs
// into int32 at once: no int16 sum of two products, which (-128)^2 twice would
// overflow.) So every
// variant, thread count and split gives arith's bytes.
//
// ---- The record in the blob (generator/carve/backends/q8conv_pack.py writes it) ----
//
// At blob + weight_off, aligned to CARVE_Q8CONV_ALIGN (64) bytes, little-endian;
// kp = CARVE_Q8CONV_KP(kh, kw, cin) (K rounded up to CARVE_Q8CONV_KB = 64),
// coutp = CARVE_Q8CONV_COUTP(cout) (cout rounded up to CARVE_Q8CONV_NR = 16):
//
//   uint32 header[16]    CARVE_Q8CONV_LAYOUT, kh, kw, cin, cout, kp, coutp, then 9
//                        zeros (64 bytes): checked against the descriptor
//   int32 bias[coutp]    arith.quantize_bias (the input zero point not folded in)
//   int32 wsum[coutp]    sum of the channel's kh * kw * cin weights
//   int32 mul[coutp]     requantization multipliers m
//   int32 shift[coutp]   right shifts n, in [1, 62]
//   int8  weights        coutp / 16 panels of 16 output channels; panel q holds
//                        channels 16q .. 16q + 15 as kp / 4 groups of 64 bytes:
//                        byte (g * 64 + j * 4 + i) of panel q is B[4g + i][16q + j]
//                        = the weight (o = 16q + j, ci, ky, kx) of PyTorch's
//                        (cout, cin, kh, kw) with 4g + i = (ky * kw + kx) * cin + ci;
//                        zero for k >= K and o >= cout
//
// Channels o >= cout have bias, wsum and mul 0 and shift 1. A panel is AMX's B
// operand (16 rows of 64 bytes, "VNNI layout": 4 consecutive k of one output
// channel in each dword) for every block of 64 k, VPDPBUSD's (one 64-byte
// vector per group of 4 k; two 32-byte halves of 8 channels on ymm) and SDOT's
// (a 16-byte quarter of a group is 4 channels x 4 k, dotted with a lane of 4
// bytes of A), so all the variants share it. CARVE_Q8CONV_LAYOUT
// numbers this layout; q8conv_pack.py reads it from here and refuses to pack when
// it writes another, and generated code _Static_asserts it.
//
// ---- Variants ----
//
//   amx         x86-64 with AMX-INT8 and AVX-512 (F, BW, VL, VNNI), and the OS's permission
//               for the tile data (Linux >= 5.16: arch_prctl(ARCH_REQ_XCOMP_PERM),
//               asked by carve_q8conv_select, once per process): TDPBSSD on 2 x 2
//               tiles of 16 x 16 int32 (32 pixels x 32 channels); the requantization
//               in AVX-512, overlapping the next tiles' TDPBSSDs (a task's blocks are
//               one software pipeline). A comes two ways. Implicit GEMM (where the
//               K runs allow it and at least a quarter of the 16-pixel tiles of A
//               are "direct"): K in chunks of up to 64 bytes that divide a kernel
//               row's bytes (packed input: x_stride == cin) or a tap's (cin), a
//               multiple of 4 (not the stem's 3-channel rows); a tile of 16 output
//               pixels of one output row whose taps are all inside the image is
//               read in place from the input (TILELOADD's row stride stride *
//               x_stride; B: the panel's rows of the chunk's k, the tile
//               configuration set per conv); so is a tile with at most 2 edge
//               pixels (taps in the left or right padding, at most 4 panels)
//               whose rows stay inside the input, the edge pixels' sums then
//               recomputed from their packed rows (VPDPBUSD); any other tile
//               (rows of padding, across two rows, past the end) packed as im2col
//               rows and read by the same chunks, so padded taps still hold zx. Otherwise every block is
//               packed (im2col) and read in 64-byte K blocks.
//   avx512vnni  x86-64 with AVX-512 F, BW, VL and VNNI: VPDPBUSD on 8 pixels x 32
//               channels in 16 zmm accumulators, over the im2col block (its bytes
//               flipped to unsigned).
//   avxvnni     x86-64 with AVX2 + FMA and AVX-VNNI (VEX-encoded VPDPBUSD on ymm:
//               Intel since Alder Lake / Sapphire Rapids), for CPUs without AVX-512
//               VNNI: 4 pixels x 16 channels in 8 ymm accumulators over the im2col
//               block (bytes flipped).
//   avx2        x86-64 with AVX2 + FMA (carve_isa's AVX2 level) otherwise: the
//               block's bytes and each group's 32 weight bytes of 8 channels
//               sign-extended to int16 (VPMOVSXBW), VPMADDWD + VPADDD on 4 pixels x
//               8 channels (two partial sums a channel, added by VPHADDD at the end;
//               not VPMADDUBSW, which saturates). Both AVX2 variants requantize in
//               int32 on ymm where every shift is >= 33, else per value in C.
//   neondot     aarch64 with the ARMv8.2 dot product (SDOT; Linux: getauxval's
//               HWCAP_ASIMDDP: Cortex-A76 and later, Neoverse N1 and later, so a
//               Raspberry Pi 5, Graviton 2+, Jetson Orin), where the compiler has it
//               (GCC >= 10, or a build for such a target: carve_q8conv_isa.h):
//               SDOT by lane on 4 pixels x 16 channels in 16 int32x4 accumulators,
//               A packed unflipped (memset + memcpy). The requantization in int64
//               lanes (SMULL, SSHL by -n) for every shift, the saturating
//               narrowings as the clamp; the table by TBL / TBX after each block.
//   neon        aarch64 otherwise (ARMv8.0: Cortex-A53 / A55 / A72, Raspberry Pi 3 /
//               4): SMULL / SMULL2 of int8 into int16 and SADALP into int32 on 2
//               pixels x 16 channels (two partial sums a channel, ADDP at the end);
//               the rest as neondot. Speed of both not measured (only qemu here).
//   portable    C11 everywhere else (and as the reference of the others): a
//               correctness fallback (about 11 GOP/s on a Sapphire Rapids core), not
//               a fast path.
// Where the CPU has AVX-512 VBMI: small kernel rows (a packed input, K <= 64, at
// most 4 kernel rows of at most 16 bytes: the stem) are packed by VPERMB / VPERMT2B
// (4 pixels from one load per kernel row), not a zx fill and a copy per kernel row;
// the SiLU table is looked up with VPERMI2B, over a block's outputs as one run of
// bytes after its last panels when the output is packed (out_stride == cout), else
// per pixel and panel; without VBMI a byte at a time. Work is split into blocks of
// CARVE_Q8CONV_MB output pixels, the blocks into `slots` tasks over the pool. The
// scratch slot (below) is unchanged by the implicit GEMM: it packs at most the
// block's A, as before.

#ifndef CARVE_Q8CONV_H
#define CARVE_Q8CONV_H

#include <stddef.h>
#include <stdint.h>

#include "carve_isa.h"
#include "carve_q8.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// Number of the record's layout (above).
#define CARVE_Q8CONV_LAYOUT 1
// Alignment of a record in the blob and of the scratch, in bytes.
#define CARVE_Q8CONV_ALIGN 64
// Bytes of the record's header (uint32[16]).
#define CARVE_Q8CONV_HEADER_BYTES 64
// Output channels per weight panel, and the multiple K is padded to (one AMX tile of A: 64 bytes a row).
#define CARVE_Q8CONV_NR 16
#define CARVE_Q8CONV_KB 64
// Output pixels per block (a multiple of 32: two AMX tiles of 16 rows, four VNNI row blocks of 8).
#define CARVE_Q8CONV_MB 32

// K rounded up to CARVE_Q8CONV_KB, and cout to CARVE_Q8CONV_NR.
#define CARVE_Q8CONV_KP(kh, kw, cin) \
  (((size_t)(kh) * (size_t)(kw) * (size_t)(cin) + CARVE_Q8CONV_KB - 1) / CARVE_Q8CONV_KB * CARVE_Q8CONV_KB)
#define CARVE_Q8CONV_COUTP(cout) (((size_t)(cout) + CARVE_Q8CONV_NR - 1) / CARVE_Q8CONV_NR * CARVE_Q8CONV_NR)
// Bytes of a record: header, 4 int32 arrays of coutp, coutp * kp weights.
#define CARVE_Q8CONV_RECORD_BYTES(kh, kw, cin, cout)                          \
  (CARVE_Q8CONV_HEADER_BYTES + 16 * CARVE_Q8CONV_COUTP(cout) +                \
   CARVE_Q8CONV_COUTP(cout) * CARVE_Q8CONV_KP(kh, kw, cin))

// Bytes of one scratch slot: a fixed part (the AMX tile configuration, 64 bytes, and two buffers of a block's
// int32 sums, CARVE_Q8CONV_MB x 32 each) and the block of A (CARVE_Q8CONV_MB rows of kp bytes). Every size is a
// multiple of 64, so slots laid end to end stay 64-byte aligned.
#define CARVE_Q8CONV_SLOT_FIXED (64 + 2 * CARVE_Q8CONV_MB * 32 * 4)
#define CARVE_Q8CONV_SLOT_BYTES(kh, kw, cin) \
  ((size_t)CARVE_Q8CONV_SLOT_FIXED + (size_t)CARVE_Q8CONV_MB * CARVE_Q8CONV_KP(kh, kw, cin))

// ---- Run ----------------------------------------------------------------------

// Runs the CARVE_Q8_CONV `d` (groups 1) with the record at blob + d->weight_off and, for act CARVE_ACT_SILU, the
// int8[256] table at blob + d->lut_off: reads the int8 view at arena + d->in_off, writes the int8 view at
// arena + d->out_off (only its cout channels of each pixel), exactly arith.qconv2d. Fields used: kind, kh, kw,
// stride, pad, groups, cin, cout, h, w, in_stride, out_stride, in_off, out_off, weight_off, lut_off, act,
// in_zero, out_zero (arith's pre_zero). scratch is `slots` slots of CARVE_Q8CONV_SLOT_BYTES(kh, kw, cin) bytes,
// CARVE_Q8CONV_ALIGN-aligned, contents ignored; the blocks of CARVE_Q8CONV_MB output pixels are split into
// `slots` tasks over `pool` (NULL: serial; task s takes blocks [s * B / slots, (s + 1) * B / slots)), and the
// result does not depend on slots or threads. The output must not overlap the input. CARVE_ERR_INVALID_ARGUMENT,
// with nothing written, for: NULL d, blob, arena or scratch; slots 0; a scratch or record not aligned to
// CARVE_Q8CONV_ALIGN; kind not CARVE_Q8_CONV or groups not 1; zero sizes or stride; a kernel larger than the
// padded input; pixel strides below the channels; zero points outside [-128, 127]; an act other than
// CARVE_ACT_NONE / CARVE_ACT_SILU; a record whose header is not (CARVE_Q8CONV_LAYOUT, kh, kw, cin, cout, kp,
// coutp) or with a shift outside [1, 62]. Offsets against the arena's and blob's lengths, and the scratch's size,
// are the generator's, not checked again here.
typedef carve_status (*carve_q8conv_fn)(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                        size_t slots, pthreadpool_t pool);

// The best variant for this CPU given isa (from carve_isa_detect()): for CARVE_ISA_AVX512 the AMX variant where
// the CPU has AMX-INT8 and the OS grants the tile data (this asks for it, for the whole process: call it once, at
// create), else the AVX-512 VNNI one where the CPU has VNNI, else as for CARVE_ISA_AVX2; for CARVE_ISA_AVX2 the
// AVX-VNNI one where the CPU (and the compiler) has AVX-VNNI, else the AVX2 one where the CPU has AVX2 + FMA,
// else the portable one; for CARVE_ISA_NEON (aarch64 builds) the neondot one where the CPU (and the compiler) has
// the dot product, else the neon one; the portable one for any other isa. Never NULL.
carve_q8conv_fn carve_q8conv_select(carve_isa isa);

// "amx", "avx512vnni", "avxvnni", "avx2", "neondot", "neon", "portable" for the variants carve_q8conv_select
// returns; "unknown" otherwise.
const char* carve_q8conv_name(carve_q8conv_fn fn);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8CONV_H
