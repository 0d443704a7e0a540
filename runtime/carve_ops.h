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
#define CARVE_ATTN_ROWS_PER_TASK 32
#endif

// Attention: query rows that share each load of k and v, and keys whose scores
// are accumulated side by side (vector lanes); both size the scratch.
#define CARVE_ATTN_GROUP 4
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
// (about heads * n * (key_dim + n / 8): 26,624 + 43,264 floats for the 20x20,
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
// the scores of CARVE_ATTN_GROUP query rows accumulate over the key dimension with
// CARVE_ATTN_KEY_BLOCK keys side by side (vector lanes), and the weighted sums run
// along v's contiguous channels. Work is split over `pool` in tasks of
// CARVE_ATTN_ROWS_PER_TASK query rows of one head; the result does not depend on
// the number of threads or the instruction set.
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
