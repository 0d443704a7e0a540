// carve runtime: element-wise and tensor ops that XNNPACK does not provide.
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
// exp by SLEEF's expf_u10 algorithm like PyTorch's: bit-identical to torch's
// vectorised SiLU when built with FMA (FP_FAST_FMAF), within 1.8e-7 relative of
// the exact value either way. The loops vectorise (-O3).
void carve_epilogue(float* y, size_t y_stride, const float* residual, size_t r_stride,
                    size_t pixels, size_t channels, carve_act act, pthreadpool_t pool);

// ---- Upsample ---------------------------------------------------------------

// y[2i + a][2j + b][c] = x[i][j][c] for a, b in {0, 1}: nearest-neighbour 2x.
// x is (h, w, c), y is (2h, 2w, c); they must not overlap.
void carve_upsample_nearest2x(const float* x, size_t x_stride, size_t h, size_t w, size_t c,
                              float* y, size_t y_stride, pthreadpool_t pool);

// ---- Attention --------------------------------------------------------------

// Floats of scratch that carve_attention needs for n = H*W pixels and `heads`
// heads: 4 rows of n scores per (head, block of CARVE_ATTN_ROWS_PER_TASK rows),
// about heads * n^2 / 8 floats (40,000 for the 20x20, 2-head P5 attention at 640).
size_t carve_attention_scratch_floats(size_t n, size_t heads);

// The same as a constant expression, for buffers sized at compile time.
#define CARVE_ATTENTION_SCRATCH_FLOATS(n, heads)                                                  \
  ((size_t)(heads) * (((size_t)(n) + CARVE_ATTN_ROWS_PER_TASK - 1) / CARVE_ATTN_ROWS_PER_TASK) * \
   4u * (size_t)(n))

// Ultralytics Attention core (after the qkv conv, before pe and proj).
// qkv is (n, heads * (2*key_dim + head_dim)); head h owns the channels starting
// at h * (2*key_dim + head_dim), laid out [q(key_dim) | k(key_dim) | v(head_dim)].
//   attn[i][j]               = softmax_j(scale * sum_d q[i][d] k[j][d])
//   out[i][h*head_dim + e]   = sum_j attn[i][j] * v[j][e]
//   v_out[i][h*head_dim + e] = v[i][e]     (v gathered for the pe conv; may be NULL)
// Dot products, the softmax denominator and the weighted sums of v are
// accumulated in double; scores and exponentials are float, with the row
// maximum subtracted. (PyTorch computes (scale * q) . k in float; the results
// agree to float rounding, and these are closer to the exact values.)
// out and v_out must not overlap qkv. scratch holds
// carve_attention_scratch_floats(n, heads) floats.
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
