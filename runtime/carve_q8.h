// carve runtime: the int8 kernels (issue 19), plain C11: every int8 op of a
// portable package (carve_q8_run), and all but the dense convolutions of an
// xnnpack one (carve_q8_run_pool).
//
// The integer arithmetic of generator/carve/quant/arith.py (docs/quantization.md,
// "Integer arithmetic"), bit for bit: an int8 tensor q holds scale * (q - zero
// point); convolutions accumulate in int32 and requantize with a per-channel
// fixed-point multiplier, (acc * m + 2^(n-1)) >> n in int64. There is no
// floating point in the convolution, add, pool, copy and upsample kernels; only
// CARVE_Q8_QUANTIZE and CARVE_Q8_DEQUANTIZE touch floats (one float32 division
// or multiply per element, as arith.quantize / arith.dequantize).
//
// Like carve_portable.h: every op is a constant descriptor whose shapes, strides
// and offsets are known at generation time; carve_q8_run() executes one on the
// calling thread, carve_q8_run_pool() on a thread pool, with the same bytes. No
// allocation, no global state. Tensors are
// NHWC with batch 1 and a pixel stride in elements (pixel p, channel c of a view
// is data[p * stride + c]), so a view can be a channel slice of a wider tensor;
// all offsets are in BYTES (weight blob and arena mix int8, int32 and float32).
// Outputs must not overlap inputs (carve's memory plan guarantees it).
//
// Requirements on the compiler: `>>` of a negative integer is an arithmetic
// (flooring) shift, as in GCC, Clang, MSVC and every compiler carve knows of;
// carve_q8.c checks it with a _Static_assert. The default floating-point
// rounding mode (CARVE_Q8_QUANTIZE rounds with nearbyintf, half to even), and
// no -ffast-math (NaN must stay NaN).
//
// ---- The CONV record in the blob (generator/carve/backends/q8_pack.py writes it) ----
//
// At blob + weight_off, aligned to CARVE_Q8_ALIGN bytes, little-endian (the byte
// order of every target carve generates for):
//
//   int32 bias[cout]     arith.quantize_bias: the accumulator's bias. The input
//                        zero point is NOT folded into it (see below).
//   int32 mul[cout]      requantization multipliers m (arith.quantize_multiplier)
//   int32 shift[cout]    right shifts n, each in [1, 62]
//   int8  weights        groups == cin == cout (depthwise):
//                          (kh, kw, c)                      [c, 1, kh, kw]
//                        otherwise (dense and grouped):
//                          (cout, kh, kw, cin / groups)     [cout, cin/groups, kh, kw]
//                          every output channel one contiguous row of
//                          kh * kw * cin/groups weights (output channel o
//                          belongs to group o / (cout / groups)); no padding.
//
// PyTorch's layout in brackets. The whole record is 12 * cout bytes of int32,
// then the int8 weights; CARVE_Q8_LAYOUT numbers this layout (q8_pack.py reads
// it from here, generated code _Static_asserts it).
//
// Why the zero point is not folded into the bias: the kernels widen each int8
// input to int16 and subtract the input zero point there (one int16 subtract
// per input element, shared by all the output channels that read it), so a
// padded tap is simply skipped: it contributes exactly 0, as arith's padding
// with the zero point does, with no correction at the borders. (Folding
// -zp * sum(w) into the bias would need the padded taps' weight sums added back
// per border pixel.) (x - zp) fits int16 ([-255, 255]); so does its product with
// a weight (|.| <= 32640).
//
// Precondition (the generator's to check; arith.conv_acc raises only for the
// data it is given): |bias[o]| + 255 * sum |w[o]| < 2^31 for every output channel
// o, so that no int32 accumulator, partial or final, can overflow.

#ifndef CARVE_Q8_H
#define CARVE_Q8_H

#include <stddef.h>
#include <stdint.h>

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// Number of the CONV record's layout (above).
#define CARVE_Q8_LAYOUT 1

// Alignment in bytes of a CONV record in the blob (its int32 arrays) and of the
// float32 views of QUANTIZE / DEQUANTIZE in the arena.
#define CARVE_Q8_ALIGN 4

// Entries of an activation table (int8 -> int8, indexed by q + 128).
#define CARVE_Q8_LUT_SIZE 256

// ---- Descriptors ------------------------------------------------------------

typedef enum carve_q8_kind {
  CARVE_Q8_CONV = 1,        // arith.qconv2d: any kh, kw, stride, pad, groups; optional activation table
  CARVE_Q8_ADD = 2,         // arith.qadd of two int8 views
  CARVE_Q8_MAXPOOL = 3,     // arith.maxpool: kh x kh window, stride, padding never wins
  CARVE_Q8_COPY = 4,        // y[p, 0:cin] = x[p, 0:cin] for h * w pixels (strided channel copy)
  CARVE_Q8_UPSAMPLE2X = 5,  // nearest neighbour x2: y[2i + a][2j + b] = x[i][j]
  CARVE_Q8_QUANTIZE = 6,    // arith.quantize: float32 view -> int8 view
  CARVE_Q8_DEQUANTIZE = 7,  // arith.dequantize: int8 view -> float32 view
} carve_q8_kind;

// One op. Fields a kind does not use are 0 (the table below says which it uses).
//
//   kind         shapes (input h x w)            views (offsets, strides)      quantization
//   CONV         kh kw stride pad groups cin cout in, out                         in_zero, out_zero (arith's pre_zero),
//                                                weight_off (the record)      act + lut_off
//   ADD          h w cin                         in (a), in2 (b), out         in_zero, in2_zero, out_zero,
//                                                                             mul_a, mul_b, shift
//                                                                             (arith.add_multipliers)
//   MAXPOOL      kh (= kw) stride pad h w cin    in, out                      -
//   COPY         h w cin                         in, out                      -
//   UPSAMPLE2X   h w cin (output 2h x 2w)        in, out                      -
//   QUANTIZE     h w cin                         in (float32), out            scale, out_zero
//   DEQUANTIZE   h w cin                         in, out (float32)            scale, in_zero
//
// Output sizes: (h + 2 pad - kh) / stride + 1 (and the same for w with kw) for
// CONV and MAXPOOL; h x w for the others but UPSAMPLE2X. Zero points are in
// [-128, 127]; act is CARVE_ACT_NONE (y = the requantized value) or
// CARVE_ACT_SILU (y = lut[pre + 128], the int8[256] table of arith.silu_lut at
// blob + lut_off; any int8 -> int8 table works the same way).
typedef struct carve_q8_desc {
  int kind;                                  // carve_q8_kind
  uint32_t kh, kw, stride, pad, groups;
  uint32_t cin, cout;                        // channels (cout: CONV only)
  uint32_t h, w;                             // input size
  size_t in_stride, in2_stride, out_stride;  // pixel strides of the views, in elements
  size_t in_off, in2_off, out_off;           // bytes into the arena
  size_t weight_off;                         // bytes into the blob: CONV's record
  size_t lut_off;                            // bytes into the blob: CONV's table (act CARVE_ACT_SILU)
  int act;                                   // carve_act (CONV)
  int32_t in_zero, in2_zero, out_zero;       // zero points of in, in2, out
  int32_t mul_a, mul_b, shift;               // ADD: y = out_zero + ((a' mul_a + b' mul_b + 2^(shift-1)) >> shift)
  float scale;                               // QUANTIZE: the output's scale; DEQUANTIZE: the input's
} carve_q8_desc;

// ---- Run ----------------------------------------------------------------------

// Runs one op on `arena` (the activations) with the weights in `blob` (may be
// NULL for every kind but CONV). CARVE_ERR_INVALID_ARGUMENT, with nothing
// written, for: a NULL d or arena; a NULL blob for CONV; an unknown kind or act;
// a zero size, stride or groups, groups not dividing cin and cout, a kernel
// larger than the padded input, a MAXPOOL pad above kh / 2 (PyTorch's rule: every
// window then has an in-image tap), a pixel stride smaller than the view's channels;
// a zero point outside [-128, 127]; a shift outside [1, 62] (ADD, and every
// output channel of a CONV); a CONV record or a float32 view not aligned to
// CARVE_Q8_ALIGN; a QUANTIZE / DEQUANTIZE scale that is not a positive finite
// float. Offsets and sizes against the arena's and blob's lengths are the
// generator's, and not checked again here.
carve_status carve_q8_run(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena);

// carve_q8_run on `pool` (NULL, or a build with CARVE_RT_NO_THREADS: on the
// calling thread): the op's work is split into tiles of output rows (CONV,
// MAXPOOL), input rows (UPSAMPLE2X) or pixels (the others), each output byte
// written by one tile with carve_q8_run's arithmetic, so the bytes are
// carve_q8_run's whatever the number of threads. The same argument checks
// (CARVE_ERR_INVALID_ARGUMENT, nothing written); no allocation. Needs
// carve_rt.c (carve_parallelize_1d_tile), and carve_pool.c without
// CARVE_RT_NO_THREADS.
carve_status carve_q8_run_pool(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_H
