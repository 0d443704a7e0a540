// carve runtime: element-wise and tensor ops that XNNPACK does not provide, and
// the stem convolution, which it runs slowly (3 input channels).
//
// Every tensor is NHWC float32 with batch 1 and a row stride in floats
// (stride >= channels), see carve_rt.h. No function allocates; the heavier ones
// split their work over `pool` (NULL: serial) and give bit-identical results for
// any number of threads.

#ifndef CARVE_OPS_H
#define CARVE_OPS_H

#include "carve_rt.h"

#ifndef CARVE_ATTN_ROWS_PER_TASK
#define CARVE_ATTN_ROWS_PER_TASK 64
#endif

// Attention: query rows whose scores a task holds at once (the rows that share
// each load of k and v: 8 in the AVX-512 kernel, 4 in the AVX2 and portable ones), and keys
// whose scores are accumulated side by side (vector lanes); both size the scratch.
#define CARVE_ATTN_GROUP 8
#define CARVE_ATTN_KEY_BLOCK 32

#ifdef __cplusplus
extern "C" {
#endif

// ---- Epilogue ---------------------------------------------------------------

typedef enum carve_act {
  CARVE_ACT_NONE = 0,
  CARVE_ACT_SILU = 1,  // x / (1 + exp(-x))
} carve_act;

// y = act(y) + residual, in place over (pixels, channels) of y.
// residual may be NULL (no addition) and may not alias y.
// SiLU is x / (1 + exp(-x)) in float, as PyTorch's CPU kernel evaluates it, with
// exp by SLEEF's expf_u10 algorithm like PyTorch's, within 1.8e-7 relative of the
// exact value. On x86-64 CPUs with AVX-512 or AVX2 + FMA it runs as intrinsics
// with FMA (as torch's vectorised SiLU does; bit-equal to it on AVX-512, within
// 4 ulp of the portable loop); elsewhere the portable loop vectorises (-O3).
void carve_epilogue(float* y, size_t y_stride, const float* residual, size_t r_stride,
                    size_t pixels, size_t channels, carve_act act, pthreadpool_t pool);

// ---- Stem convolution ---------------------------------------------------------

// What carve_conv3x3s2_small_cin accepts: cin in 1..4, cout a multiple of 16.
#define CARVE_STEM_MAX_CIN 4
#define CARVE_STEM_COUT_MULTIPLE 16

// y = act(conv(x, weights) + bias): a 3x3 convolution, stride 2, padding 1, groups
// 1, of a few input channels (the network's first layer, on the image) with the
// bias and activation applied in registers (no second pass over y).
// x is (h, w, cin) with pixel stride x_stride >= cin; y is (oh, ow, cout),
// oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1, pixel stride y_stride >= cout (the
// floats past cout of each pixel are not written); weights are (3, 3, cin, cout)
// (ky, kx, ci, co), bias (cout). Each output is bias + the sum over the taps inside
// the image in (ky, kx, ci) order, one multiply-add each (FMA on AVX-512 / AVX2 +
// FMA intrinsics, picked at run time like the SiLU kernels; elsewhere portable
// C), then SiLU as carve_epilogue computes it. Rows are split over `pool`; the
// result does not depend on the number of threads. x and y must not overlap.
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers, empty sizes,
// cin or cout out of range, strides below the channels or an unknown act.
carve_status carve_conv3x3s2_small_cin(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                       const float* weights, const float* bias, size_t cout, float* y,
                                       size_t y_stride, carve_act act, pthreadpool_t pool);

// ---- Depthwise convolution ------------------------------------------------------

// y = act(dwconv3x3(x) + bias): a 3x3 depthwise convolution (groups = channels,
// one filter per channel), stride 1, padding 1, with the bias and activation
// applied in registers (no second pass over y). x is (h, w, c) with pixel stride
// x_stride >= c (the floats past c are not read); y is (h, w, c) with pixel stride
// y_stride >= c (the floats past c of each pixel are not written); weights are
// (3, 3, c): weights[(ky * 3 + kx) * c + ch] = the convolution's weight
// (ch, 0, ky, kx); bias (c). Any c >= 1. Each output is bias + its taps inside
// the image in (ky, kx) order, one multiply-add each (FMA on AVX-512 / AVX2 + FMA
// intrinsics, picked at run time like the SiLU kernels, channels in blocks of 16
// or 8 with a masked tail; elsewhere portable C), then SiLU as carve_epilogue
// computes it (act CARVE_ACT_SILU; CARVE_ACT_NONE: none). Rows are split over
// `pool`; the result does not depend on the number of threads. x and y must not
// overlap. CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers, empty
// sizes, strides below c or an unknown act.
carve_status carve_dwconv3x3(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
                             const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool);

// ---- Winograd convolution ------------------------------------------------------

// What carve_conv3x3s1_winograd accepts: cin and cout multiples of this (8: the
// kernels work in blocks of 16 or 32 channels and finish an odd multiple of 8 with
// one 8-channel block, so yolo26n's 16 -> 8 and 8 -> 16 convolutions qualify).
#define CARVE_WINOGRAD_CHANNEL_MULTIPLE 8
// 2x2 output tiles per group (a task's unit of work) and input channels per block.
#define CARVE_WINOGRAD_TILES 12
#define CARVE_WINOGRAD_KC 128
// Bytes of one scratch slot for cout output channels: U (16 planes of TILES * KC floats) and M (16 planes of
// TILES * cout floats), each plane padded by 16 floats, rounded up to 64 bytes.
#define CARVE_WINOGRAD_SLOT_BYTES(cout) \
  ((((size_t)16 * (CARVE_WINOGRAD_TILES * CARVE_WINOGRAD_KC + 16) + \
     (size_t)16 * (CARVE_WINOGRAD_TILES * (size_t)(cout) + 16)) * sizeof(float) + 63) / 64 * 64)

// y = act(conv3x3(x) + bias) + residual: a 3x3 convolution, stride 1, padding 1,
// groups 1, by Winograd F(2x2, 3x3), with the bias, activation and residual
// applied in registers (no second pass over y).
// x is (h, w, cin) with pixel stride x_stride >= cin (the floats past cin are not
// read); y is (h, w, cout) with pixel stride y_stride >= cout (the floats past
// cout of each pixel are not written); residual is (h, w, cout) with pixel stride
// r_stride >= cout, or NULL (no addition, r_stride ignored), and may not alias y.
// weights are (16, cin, cout): for each (ci, co) the 4x4 matrix G g G^T of the
// 3x3 kernel g (g[ky][kx] = the convolution's weight (co, ci, ky, kx)), with
// G = {{1, 0, 0}, {1/2, 1/2, 1/2}, {1/2, -1/2, 1/2}, {0, 0, 1}}; its element
// (a, b) is at weights[((4 * a + b) * cin + ci) * cout + co] (computed once, in
// double, rounded to float). bias is (cout). cin and cout are multiples of
// CARVE_WINOGRAD_CHANNEL_MULTIPLE (8); h and w any (odd sizes give partial tiles).
// The output is cut into 2x2 tiles, numbered row by row, in groups of
// CARVE_WINOGRAD_TILES; each group is transformed (B^T d B), multiplied by the
// weights over blocks of CARVE_WINOGRAD_KC input channels (16 GEMMs) and
// transformed back (A^T m A), + bias, then SiLU as carve_epilogue computes it
// (act CARVE_ACT_SILU; CARVE_ACT_NONE: none), then + residual. On AVX-512 and
// AVX2 + FMA the GEMMs are FMA intrinsics, picked at run time like the SiLU
// kernels (channels past the last multiple of 16: an 8-channel GEMM in 256-bit
// registers, masked AVX-512 transforms); on aarch64 NEON (checked under qemu
// only, speed not measured);
// elsewhere portable C: the paths agree to float rounding. About as
// accurate as a direct convolution (about 1e-6 absolute on unit-scale data).
// scratch is `slots` slots of CARVE_WINOGRAD_SLOT_BYTES(cout) bytes, 64-byte
// aligned, contents ignored; the groups are split into `slots` tasks over `pool`
// (task s: groups [s * G / slots, (s + 1) * G / slots) in slot s, G the number of
// groups), and the result does not depend on slots or the number of threads.
// x and y must not overlap. CARVE_ERR_INVALID_ARGUMENT (nothing written) for
// NULL pointers (x, weights, bias, y, scratch), empty sizes, cin or cout not
// multiples of 8, strides below the channels, slots == 0, a scratch not 64-byte
// aligned or an unknown act.
carve_status carve_conv3x3s1_winograd(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                      const float* weights, const float* bias, size_t cout, float* y,
                                      size_t y_stride, const float* residual, size_t r_stride, carve_act act,
                                      void* scratch, size_t slots, pthreadpool_t pool);

// ---- Upsample ---------------------------------------------------------------

// y[2i + a][2j + b][c] = x[i][j][c] for a, b in {0, 1}: nearest-neighbour 2x.
// x is (h, w, c), y is (2h, 2w, c); they must not overlap.
void carve_upsample_nearest2x(const float* x, size_t x_stride, size_t h, size_t w, size_t c,
                              float* y, size_t y_stride, pthreadpool_t pool);

// ---- Attention --------------------------------------------------------------

// Floats of scratch that carve_attention needs for n = H*W pixels, `heads` heads
// and key_dim: k of every head transposed, heads * key_dim * n_pad floats, and
// CARVE_ATTN_GROUP rows of n_pad scores per (head, block of
// CARVE_ATTN_ROWS_PER_TASK rows), n_pad = n rounded up to CARVE_ATTN_KEY_BLOCK
// (about heads * n * (key_dim + n / 8): 26,624 + 46,592 floats for the 20x20,
// 2-head, key_dim 32 P5 attention at 640).
size_t carve_attention_scratch_floats(size_t n, size_t heads, size_t key_dim);

// The same as a constant expression, for buffers sized at compile time.
#define CARVE_ATTENTION_SCRATCH_FLOATS(n, heads, key_dim)                                     \
  ((size_t)(heads) *                                                                          \
   ((size_t)(key_dim) +                                                                       \
    (((size_t)(n) + CARVE_ATTN_ROWS_PER_TASK - 1) / CARVE_ATTN_ROWS_PER_TASK) * CARVE_ATTN_GROUP) * \
   (((size_t)(n) + CARVE_ATTN_KEY_BLOCK - 1) / CARVE_ATTN_KEY_BLOCK * CARVE_ATTN_KEY_BLOCK))

// Ultralytics Attention core (after the qkv conv, before pe and proj).
// qkv is (n, heads * (2*key_dim + head_dim)); head h owns the channels starting
// at h * (2*key_dim + head_dim), laid out [q(key_dim) | k(key_dim) | v(head_dim)].
//   attn[i][j]               = softmax_j(scale * sum_d q[i][d] k[j][d])
//   out[i][h*head_dim + e]   = sum_j attn[i][j] * v[j][e]
//   v_out[i][h*head_dim + e] = v[i][e]     (v gathered for the pe conv; may be NULL)
// Everything is float, as in PyTorch: the dot products (sum_d q k) * scale, the
// softmax with the row maximum subtracted (exp as in carve_epilogue), its sum, and
// the weighted sums of v, divided by the softmax sum at the end; the results agree
// with PyTorch's to float rounding. k is transposed per head into scratch, so that
// the scores of a group of query rows (8 on AVX-512, else 4) accumulate over the
// key dimension with keys side by side (vector lanes), and the weighted sums run
// along v's contiguous channels. Work is split over `pool` in tasks of
// CARVE_ATTN_ROWS_PER_TASK query rows of one head; the result does not depend on
// the number of threads. On x86-64 CPUs with AVX-512 an intrinsics kernel with
// FMA runs, whose last bits can differ from the portable kernel's (as SiLU's do).
// out and v_out must not overlap qkv. scratch holds
// carve_attention_scratch_floats(n, heads, key_dim) floats.
void carve_attention(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                     size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                     size_t v_stride, float* scratch, pthreadpool_t pool);

// ---- Layout -----------------------------------------------------------------

// y[(p * y_stride) + ch] = x[ch * h * w + p]: NCHW (batch 1, dense) to strided NHWC.
void carve_nchw_to_nhwc(const float* x, size_t c, size_t h, size_t w, float* y, size_t y_stride);

// y[ch * h * w + p] = x[p * x_stride + ch]: strided NHWC to dense NCHW (batch 1).
void carve_nhwc_to_nchw(const float* x, size_t x_stride, size_t h, size_t w, size_t c, float* y);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_OPS_H
