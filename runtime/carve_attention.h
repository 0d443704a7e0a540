// carve runtime: the core of Ultralytics' Attention block (softmax(q k^T) v per head).
//
// Every tensor is NHWC float32 with batch 1 and a row stride in floats
// (stride >= channels), see carve_rt.h. No function allocates; the work is split
// over `pool` (NULL: serial) with bit-identical results for any number of threads.

#ifndef CARVE_ATTENTION_H
#define CARVE_ATTENTION_H

#include "carve_isa.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CARVE_ATTN_ROWS_PER_TASK
#define CARVE_ATTN_ROWS_PER_TASK 64
#endif

// Attention: query rows whose scores a task holds at once (the rows that share
// each load of k and v: 8 in the AVX-512 kernel, 4 in the AVX2 and portable ones), and keys
// whose scores are accumulated side by side (vector lanes); both size the scratch.
#define CARVE_ATTN_GROUP 8
#define CARVE_ATTN_KEY_BLOCK 32

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
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers (qkv, out,
// scratch), empty sizes (n, heads, key_dim, head_dim), qkv_stride below
// heads * (2 * key_dim + head_dim), out_stride (or, with v_out, v_stride) below
// heads * head_dim.
carve_status carve_attention(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                     size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                     size_t v_stride, float* scratch, pthreadpool_t pool);


// carve_attention of one instruction set; carve_attention_select(isa) returns the best variant
// this build has for isa (never NULL; isa from carve_isa_detect()).
typedef carve_status (*carve_attention_fn)(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
    size_t head_dim, float scale, float* out, size_t out_stride, float* v_out, size_t v_stride, float* scratch,
    pthreadpool_t pool);
carve_attention_fn carve_attention_select(carve_isa isa);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_ATTENTION_H
