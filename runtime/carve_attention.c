// carve runtime: the Attention core, carve_attention (see carve_attention.h).
//
// The instruction-set variants sit side by side in this file: the portable kernel (4 query rows at a time,
// compiled in target_clones), AVX-512 (8 rows) and AVX2 + FMA (4 rows) intrinsics; one driver checks the
// arguments, transposes k and runs the variant's task function over the (head, rows) tasks.

#include "carve_attention.h"
#include "carve_attention_isa.h"
#include "carve_simd.h"

// Attention: query rows that share one pass over k and v (CARVE_ATTN_GROUP, in
// carve_attention.h), and v channels whose weighted sums are accumulated at a time.
#define CARVE_ATTN_V_CHUNK 32
// Keys whose weighted v products are summed before joining the running sums.
#define CARVE_ATTN_SUM_BLOCK 64

// ---- Portable
//
// Scratch, in floats (n_pad = n rounded up to CARVE_ATTN_KEY_BLOCK):
//   [heads][key_dim][n_pad]                      k of every head transposed, zero past n;
//   [heads * blocks][CARVE_ATTN_GROUP][n_pad]    one task's scores, then softmax numerators.

typedef struct attention_ctx {
  const float* qkv;  // (n, heads * (2*key_dim + head_dim)), row stride qkv_stride
  size_t qkv_stride;
  size_t n, n_pad, key_dim, head_dim, blocks;
  float scale;
  float* out;        // (n, heads * head_dim), row stride out_stride
  size_t out_stride;
  float* v_out;      // (n, heads * head_dim), row stride v_stride, or NULL
  size_t v_stride;
  const float* k_t;  // (heads, key_dim, n_pad): k transposed
  float* scores;     // (heads * blocks, CARVE_ATTN_GROUP, n_pad)
} attention_ctx;

// The portable kernels take ATTN_ROWS query rows at a time (using the first
// ATTN_ROWS of a task's CARVE_ATTN_GROUP rows of scores, which the AVX-512 kernel
// fills): 4 rows x 32 keys or channels of accumulators.
#define ATTN_ROWS 4
_Static_assert(ATTN_ROWS == 4 && ATTN_ROWS <= CARVE_ATTN_GROUP,
               "attention_scores and attention_weighted_sum are written for 4 rows");

// Scores of ATTN_ROWS query rows against every key, in float as PyTorch
// computes (q^T k) * scale:
//   p[g][j] = (sum_d q_g[d] k_t[d][j]) * scale,   j < n_pad.
// Keys go CARVE_ATTN_KEY_BLOCK at a time: for each d the block's k_t[d][j0..] is
// one contiguous vector, multiplied by each row's q_g[d] (a broadcast) and added
// to that row's accumulators, which stay in registers over the whole sum.
static inline void attention_scores(const float* const q[ATTN_ROWS], const float* k_t,
                                    size_t n_pad, size_t kd, float scale,
                                    float* const p[ATTN_ROWS]) {
  for (size_t j0 = 0; j0 < n_pad; j0 += CARVE_ATTN_KEY_BLOCK) {
    float acc0[CARVE_ATTN_KEY_BLOCK] = {0.0f}, acc1[CARVE_ATTN_KEY_BLOCK] = {0.0f};
    float acc2[CARVE_ATTN_KEY_BLOCK] = {0.0f}, acc3[CARVE_ATTN_KEY_BLOCK] = {0.0f};
    for (size_t d = 0; d < kd; d++) {
      const float* k = k_t + d * n_pad + j0;
      const float q0 = q[0][d], q1 = q[1][d], q2 = q[2][d], q3 = q[3][d];
      for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
        acc0[jj] += q0 * k[jj];
        acc1[jj] += q1 * k[jj];
        acc2[jj] += q2 * k[jj];
        acc3[jj] += q3 * k[jj];
      }
    }
    for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
      p[0][j0 + jj] = acc0[jj] * scale;
      p[1][j0 + jj] = acc1[jj] * scale;
      p[2][j0 + jj] = acc2[jj] * scale;
      p[3][j0 + jj] = acc3[jj] * scale;
    }
  }
}

// Softmax numerators in place, p[j] = exp(p[j] - max_j p[j]) for j < n; returns
// 1 / sum_j p[j]. A NaN score makes the whole row NaN, as in PyTorch. The maximum
// and the sum are kept in CARVE_ATTN_KEY_BLOCK lanes (j mod the block), combined
// in a fixed order at the end, so that the loops vectorise and the result does
// not depend on the instruction set.
static inline float attention_softmax(float* p, size_t n) {
  float lane[CARVE_ATTN_KEY_BLOCK];
  for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
    lane[jj] = -INFINITY;
  }
  size_t j = 0;
  for (; j + CARVE_ATTN_KEY_BLOCK <= n; j += CARVE_ATTN_KEY_BLOCK) {
    for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
      lane[jj] = p[j + jj] > lane[jj] ? p[j + jj] : lane[jj];
    }
  }
  for (size_t jj = 0; j + jj < n; jj++) {
    lane[jj] = p[j + jj] > lane[jj] ? p[j + jj] : lane[jj];
  }
  float max_s = -INFINITY;
  for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
    max_s = lane[jj] > max_s ? lane[jj] : max_s;
  }
  for (j = 0; j < n; j++) {
    p[j] = exp_u10(p[j] - max_s);
  }
  for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
    lane[jj] = 0.0f;
  }
  for (j = 0; j + CARVE_ATTN_KEY_BLOCK <= n; j += CARVE_ATTN_KEY_BLOCK) {
    for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
      lane[jj] += p[j + jj];
    }
  }
  for (size_t jj = 0; j + jj < n; jj++) {
    lane[jj] += p[j + jj];
  }
  float sum = 0.0f;
  for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
    sum += lane[jj];
  }
  return 1.0f / sum;
}

// out_g[e] = inv_sum[g] * sum_j p[g][j] v[j][e] for e < ne (ne <= CARVE_ATTN_V_CHUNK)
// of ATTN_ROWS rows: for each key j, v's row chunk (contiguous channels)
// times each row's weight p[g][j] (a broadcast), accumulated in registers. The
// products of CARVE_ATTN_SUM_BLOCK keys are summed on their own and then added to
// the running sums (a two-level sum: its rounding error grows with n / block +
// block rather than with n). Only the first `rows` outputs are stored (a short
// group repeats its last row).
static inline void attention_weighted_sum(const float* const p[ATTN_ROWS],
                                          const float inv_sum[ATTN_ROWS], const float* v,
                                          size_t v_stride, size_t n, size_t ne,
                                          float* const o[ATTN_ROWS], size_t rows) {
  float sum0[CARVE_ATTN_V_CHUNK] = {0.0f}, sum1[CARVE_ATTN_V_CHUNK] = {0.0f};
  float sum2[CARVE_ATTN_V_CHUNK] = {0.0f}, sum3[CARVE_ATTN_V_CHUNK] = {0.0f};
  for (size_t j0 = 0; j0 < n; j0 += CARVE_ATTN_SUM_BLOCK) {
    const size_t j1 = min_size(n, j0 + CARVE_ATTN_SUM_BLOCK);
    float acc0[CARVE_ATTN_V_CHUNK] = {0.0f}, acc1[CARVE_ATTN_V_CHUNK] = {0.0f};
    float acc2[CARVE_ATTN_V_CHUNK] = {0.0f}, acc3[CARVE_ATTN_V_CHUNK] = {0.0f};
    for (size_t j = j0; j < j1; j++) {
      const float* vj = v + j * v_stride;
      const float p0 = p[0][j], p1 = p[1][j], p2 = p[2][j], p3 = p[3][j];
      for (size_t e = 0; e < ne; e++) {
        acc0[e] += p0 * vj[e];
        acc1[e] += p1 * vj[e];
        acc2[e] += p2 * vj[e];
        acc3[e] += p3 * vj[e];
      }
    }
    for (size_t e = 0; e < ne; e++) {
      sum0[e] += acc0[e];
      sum1[e] += acc1[e];
      sum2[e] += acc2[e];
      sum3[e] += acc3[e];
    }
  }
  const float* sum[ATTN_ROWS] = {sum0, sum1, sum2, sum3};
  for (size_t g = 0; g < rows; g++) {
    for (size_t e = 0; e < ne; e++) {
      o[g][e] = sum[g][e] * inv_sum[g];
    }
  }
}

// Task t = head * blocks + b: query rows [b*R, b*R + R) of one head, R =
// CARVE_ATTN_ROWS_PER_TASK, taken ATTN_ROWS at a time so that each k and
// v vector loaded serves four queries:
//   out[i][e] = sum_j p[i][j] v[j][e] / sum_j p[i][j].
// A short last group repeats its last row; the copies are computed, not stored.
CARVE_SIMD_CLONES static void attention_task(void* context, size_t start, size_t count) {
  const attention_ctx* ctx = context;
  const size_t n = ctx->n, n_pad = ctx->n_pad, kd = ctx->key_dim, hd = ctx->head_dim;
  const size_t stride = ctx->qkv_stride;
  for (size_t t = start; t < start + count; t++) {
    const size_t head = t / ctx->blocks;
    const size_t row0 = (t % ctx->blocks) * CARVE_ATTN_ROWS_PER_TASK;
    const size_t row1 = min_size(n, row0 + CARVE_ATTN_ROWS_PER_TASK);
    const float* q_base = ctx->qkv + head * (2 * kd + hd);  // q of pixel 0
    const float* v_base = q_base + 2 * kd;
    const float* k_t = ctx->k_t + head * kd * n_pad;
    float* task_scores = ctx->scores + t * CARVE_ATTN_GROUP * n_pad;

    for (size_t i0 = row0; i0 < row1; i0 += ATTN_ROWS) {
      const size_t rows = min_size(ATTN_ROWS, row1 - i0);
      const float* q[ATTN_ROWS];
      float* p[ATTN_ROWS];  // (n_pad) scores, then softmax numerators, of row i0 + g
      float inv_sum[ATTN_ROWS];
      float* o[ATTN_ROWS];
      for (size_t g = 0; g < ATTN_ROWS; g++) {
        q[g] = q_base + (i0 + min_size(g, rows - 1)) * stride;
        p[g] = task_scores + g * n_pad;
      }
      attention_scores(q, k_t, n_pad, kd, ctx->scale, p);
      for (size_t g = 0; g < ATTN_ROWS; g++) {
        inv_sum[g] = attention_softmax(p[g], n);
      }
      const float* const* pc = (const float* const*)p;
      size_t e0 = 0;
      for (; e0 + CARVE_ATTN_V_CHUNK <= hd; e0 += CARVE_ATTN_V_CHUNK) {
        for (size_t g = 0; g < ATTN_ROWS; g++) {
          o[g] = ctx->out + (i0 + g) * ctx->out_stride + head * hd + e0;
        }
        attention_weighted_sum(pc, inv_sum, v_base + e0, stride, n, CARVE_ATTN_V_CHUNK, o, rows);
      }
      if (e0 < hd) {
        for (size_t g = 0; g < ATTN_ROWS; g++) {
          o[g] = ctx->out + (i0 + g) * ctx->out_stride + head * hd + e0;
        }
        attention_weighted_sum(pc, inv_sum, v_base + e0, stride, n, hd - e0, o, rows);
      }

      if (ctx->v_out != NULL) {
        for (size_t g = 0; g < rows; g++) {
          memcpy(ctx->v_out + (i0 + g) * ctx->v_stride + head * hd,
                 v_base + (i0 + g) * stride, hd * sizeof(float));
        }
      }
    }
  }
}

// ---- Attention on AVX-512 -------------------------------------------------------
//
// The portable kernel above, compiled for AVX-512 by target_clones, ran at about
// 50 GFLOP/s on the 400-token, 2-head yolo26n attention (a third of the FMA peak):
// no FMA (ISO C does not contract), 4 rows x 32 keys of accumulators (8 vectors:
// no more than the FMA latency needs, and each k / v vector loaded from L2 serves
// only 4 rows), and the softmax's exp_u10 some 45 instructions per 16 floats. Here
// the same algorithm runs as intrinsics, ATTN_R = 8 query rows at a time (a
// task's CARVE_ATTN_GROUP rows of scores): q k^T as 8 rows x 32 keys of FMAs (16
// accumulators, q broadcast), each row's maximum taken as its scores are stored;
// the softmax with silu16_avx512's exp (FMA polynomial, VSCALEFPS), summed in 16
// lanes; the weighted sums as 8 rows x 32 v channels of FMAs (p broadcast) with
// the portable kernel's two-level sum over CARVE_ATTN_SUM_BLOCK keys, times
// 1 / sum at the store. 1178 -> about 520 us per call on one thread (2.3x; 4 rows
// x 64 keys / channels: 620 us; bench/attention_bench.c). FMA rounds once where
// the portable loop rounds twice and the sums run in 16 lanes, so the last bits
// can differ from the portable path's (as SiLU's do); the error against the
// exact result stays within the same bound (tests/runtime/test_attention.c runs
// both paths).
#ifdef CARVE_HAVE_X86_SIMD
#define CARVE_ATTN_AVX512 __attribute__((target("avx512f")))
#define CARVE_ATTN_INLINE __attribute__((target("avx512f"), always_inline)) static inline

// exp(d) for d <= 0 (a score minus its row's maximum) or NaN: silu16_avx512's
// exp without the upper clamp (never reached). Below -104 the result is 0 in
// float either way; NaN is the second operand of the max, so it stays NaN.
CARVE_ATTN_INLINE __m512 attn_exp16_avx512(__m512 d) {
  return carve_exp16_avx512(_mm512_max_ps(_mm512_set1_ps(-104.0f), d));
}

// Lanes [0, count) of 16 (count may exceed 16: all of them).
CARVE_ATTN_INLINE __mmask16 attn_mask16(size_t count) {
  return count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
}

// Rows, vectors of 16 keys per q k^T block, vectors of 16 channels per weighted
// sum: 8 x 2 x 2 (16 accumulators of the 32 registers) measured best of 4x4x4,
// 6x4x4, 8x2x4 and 8x4x2 (16 to 32 accumulators: those spill). Macros so that bench/attention_bench.c can
// try others (n_pad, a multiple of 32, takes a last block of 2 key vectors).
#ifndef ATTN_R
#define ATTN_R 8
#endif
#ifndef ATTN_KEY_V
#define ATTN_KEY_V 2
#endif
#ifndef ATTN_CH_V
#define ATTN_CH_V 2
#endif
_Static_assert(ATTN_R <= CARVE_ATTN_GROUP, "R rows of scores per task");

// Scores of R query rows (R = ATTN_R, a constant) against keys [j0, j0 + 16 nv)
// (nv a constant after inlining), p[g][j] = (sum_d q_g[d] k_t[d][j]) * scale as in
// the portable attention_scores, and mx[g] = max(mx[g], p[g][j]) lane-wise over the keys < n.
CARVE_ATTN_INLINE void attn_scores_avx512(const float* const q[ATTN_R], const float* k_t, size_t n_pad,
                                          size_t kd, __m512 scale, size_t j0, size_t n, const int nv,
                                          float* const p[ATTN_R], __m512 mx[ATTN_R]) {
  __m512 acc[ATTN_R][4];
  for (int g = 0; g < ATTN_R; g++) {
    for (int c = 0; c < nv; c++) {
      acc[g][c] = _mm512_setzero_ps();
    }
  }
  for (size_t d = 0; d < kd; d++) {
    const float* k = k_t + d * n_pad + j0;
    __m512 kv[4];
    for (int c = 0; c < nv; c++) {
      kv[c] = _mm512_loadu_ps(k + 16 * c);
    }
    for (int g = 0; g < ATTN_R; g++) {
      const __m512 qg = _mm512_set1_ps(q[g][d]);
      for (int c = 0; c < nv; c++) {
        acc[g][c] = _mm512_fmadd_ps(qg, kv[c], acc[g][c]);
      }
    }
  }
  for (int c = 0; c < nv; c++) {
    const size_t j = j0 + 16 * (size_t)c;
    const __mmask16 valid = j < n ? attn_mask16(n - j) : 0;
    for (int g = 0; g < ATTN_R; g++) {
      const __m512 s = _mm512_mul_ps(acc[g][c], scale);
      _mm512_storeu_ps(p[g] + j, s);
      mx[g] = _mm512_mask_max_ps(mx[g], valid, mx[g], s);
    }
  }
}

// Softmax numerators in place, p[j] = exp(p[j] - max_s) for j < n; returns 1 / sum_j p[j].
CARVE_ATTN_INLINE float attn_softmax_avx512(float* p, size_t n, float max_s) {
  const __m512 m = _mm512_set1_ps(max_s);
  __m512 sum = _mm512_setzero_ps();
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = attn_exp16_avx512(_mm512_sub_ps(_mm512_loadu_ps(p + j), m));
    _mm512_storeu_ps(p + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {
    const __mmask16 k = attn_mask16(n - j);
    const __m512 e = attn_exp16_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), m));
    _mm512_mask_storeu_ps(p + j, k, e);
    sum = _mm512_mask_add_ps(sum, k, sum, e);
  }
  return 1.0f / _mm512_reduce_add_ps(sum);
}

// o[g][e] = inv_sum[g] * sum_j p[g][j] v[j][e] for e < ne <= 16 nv (nv and masked
// constants after inlining; masked: ne may be short of 16 nv), g < rows: the
// portable attention_weighted_sum with R rows x 16 nv channels of accumulators.
CARVE_ATTN_INLINE void attn_weighted_sum_avx512(const float* const p[ATTN_R], const float inv_sum[ATTN_R],
                                                const float* v, size_t v_stride, size_t n, size_t ne,
                                                const int nv, const int masked, float* const o[ATTN_R],
                                                size_t rows) {
  __mmask16 mk[4];
  for (int c = 0; c < nv; c++) {
    mk[c] = masked ? attn_mask16(ne - 16 * (size_t)c) : (__mmask16)0xFFFF;
  }
  __m512 sum[ATTN_R][4];
  for (int g = 0; g < ATTN_R; g++) {
    for (int c = 0; c < nv; c++) {
      sum[g][c] = _mm512_setzero_ps();
    }
  }
  for (size_t j0 = 0; j0 < n; j0 += CARVE_ATTN_SUM_BLOCK) {
    const size_t j1 = min_size(n, j0 + CARVE_ATTN_SUM_BLOCK);
    __m512 acc[ATTN_R][4];
    for (int g = 0; g < ATTN_R; g++) {
      for (int c = 0; c < nv; c++) {
        acc[g][c] = _mm512_setzero_ps();
      }
    }
    for (size_t j = j0; j < j1; j++) {
      const float* vj = v + j * v_stride;
      __m512 vv[4];
      for (int c = 0; c < nv; c++) {
        vv[c] = masked ? _mm512_maskz_loadu_ps(mk[c], vj + 16 * c) : _mm512_loadu_ps(vj + 16 * c);
      }
      for (int g = 0; g < ATTN_R; g++) {
        const __m512 pg = _mm512_set1_ps(p[g][j]);
        for (int c = 0; c < nv; c++) {
          acc[g][c] = _mm512_fmadd_ps(pg, vv[c], acc[g][c]);
        }
      }
    }
    for (int g = 0; g < ATTN_R; g++) {
      for (int c = 0; c < nv; c++) {
        sum[g][c] = _mm512_add_ps(sum[g][c], acc[g][c]);
      }
    }
  }
  for (size_t g = 0; g < rows; g++) {
    const __m512 inv = _mm512_set1_ps(inv_sum[g]);
    for (int c = 0; c < nv; c++) {
      _mm512_mask_storeu_ps(o[g] + 16 * c, mk[c], _mm512_mul_ps(sum[g][c], inv));
    }
  }
}

// attention_task on AVX-512: the same tasks and scratch, R rows at a time.
CARVE_ATTN_AVX512 static void attention_task_avx512(void* context, size_t start, size_t count) {
  const attention_ctx* ctx = context;
  const size_t n = ctx->n, n_pad = ctx->n_pad, kd = ctx->key_dim, hd = ctx->head_dim;
  const size_t stride = ctx->qkv_stride;
  const __m512 scale = _mm512_set1_ps(ctx->scale);
  for (size_t t = start; t < start + count; t++) {
    const size_t head = t / ctx->blocks;
    const size_t row0 = (t % ctx->blocks) * CARVE_ATTN_ROWS_PER_TASK;
    const size_t row1 = min_size(n, row0 + CARVE_ATTN_ROWS_PER_TASK);
    const float* q_base = ctx->qkv + head * (2 * kd + hd);
    const float* v_base = q_base + 2 * kd;
    const float* k_t = ctx->k_t + head * kd * n_pad;
    float* task_scores = ctx->scores + t * CARVE_ATTN_GROUP * n_pad;

    for (size_t i0 = row0; i0 < row1; i0 += ATTN_R) {
      const size_t rows = min_size(ATTN_R, row1 - i0);
      const float* q[ATTN_R];
      float* p[ATTN_R];
      float inv_sum[ATTN_R];
      float* o[ATTN_R];
      __m512 mx[ATTN_R];
      for (size_t g = 0; g < ATTN_R; g++) {
        q[g] = q_base + (i0 + min_size(g, rows - 1)) * stride;
        p[g] = task_scores + g * n_pad;
        mx[g] = _mm512_set1_ps(-INFINITY);
      }
      size_t j0 = 0;
      for (; j0 + 16 * ATTN_KEY_V <= n_pad; j0 += 16 * ATTN_KEY_V) {
        attn_scores_avx512(q, k_t, n_pad, kd, scale, j0, n, ATTN_KEY_V, p, mx);
      }
      if (j0 < n_pad) {  // n_pad is a multiple of 32
        attn_scores_avx512(q, k_t, n_pad, kd, scale, j0, n, 2, p, mx);
      }
      for (size_t g = 0; g < ATTN_R; g++) {
        inv_sum[g] = attn_softmax_avx512(p[g], n, _mm512_reduce_max_ps(mx[g]));
      }
      const float* const* pc = (const float* const*)p;
      for (size_t e0 = 0; e0 < hd; e0 += 16 * ATTN_CH_V) {
        const size_t ne = min_size(16 * ATTN_CH_V, hd - e0);
        for (size_t g = 0; g < ATTN_R; g++) {
          o[g] = ctx->out + (i0 + g) * ctx->out_stride + head * hd + e0;
        }
        const float* v = v_base + e0;
        if (ne == 16 * ATTN_CH_V) {
          attn_weighted_sum_avx512(pc, inv_sum, v, stride, n, ne, ATTN_CH_V, 0, o, rows);
        } else if (ne > 16) {
          attn_weighted_sum_avx512(pc, inv_sum, v, stride, n, ne, (int)((ne + 15) / 16), 1, o, rows);
        } else {
          attn_weighted_sum_avx512(pc, inv_sum, v, stride, n, ne, 1, 1, o, rows);
        }
      }

      if (ctx->v_out != NULL) {
        for (size_t g = 0; g < rows; g++) {
          memcpy(ctx->v_out + (i0 + g) * ctx->v_stride + head * hd,
                 v_base + (i0 + g) * stride, hd * sizeof(float));
        }
      }
    }
  }
}

// ---- Attention on AVX2 + FMA ------------------------------------------------------
//
// The AVX-512 kernel's algorithm in 8-lane vectors for CPUs without AVX-512: 16
// registers hold 4 query rows x 24 keys (or v channels) of accumulators, 3 k (v)
// vectors and a broadcast; silu8_avx2's exp. Keys go 24 at a time with a last
// block of 8 or 16 (n_pad is a multiple of 32), channels 24 at a time with a
// shorter, masked last chunk. On the AVX-512 machine of docs/performance.md,
// limited to AVX2: 1780 us per yolo26n call for the portable kernel's x86-64-v3
// clone, 1240 us for this (bench/attention_bench.c -DBENCH_SIMD=1).
#define ATTN2_R 4
_Static_assert(ATTN2_R <= CARVE_ATTN_GROUP, "R rows of scores per task");
#define CARVE_ATTN_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

// Lanes [0, count) of 8 as an AVX2 mask (all lanes for count >= 8).
CARVE_ATTN_AVX2_INLINE __m256i attn_mask8(size_t count) {
  const int c = count >= 8 ? 8 : (int)count;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(d) for d <= 0 or NaN, as attn_exp16_avx512 (max keeps a NaN second operand).
CARVE_ATTN_AVX2_INLINE __m256 attn_exp8_avx2(__m256 d) {
  return carve_exp8_avx2(_mm256_max_ps(_mm256_set1_ps(-104.0f), d));
}

// attn_scores_avx512 in 8 lanes: keys [j0, j0 + 8 nv), nv <= 3.
CARVE_ATTN_AVX2_INLINE void attn_scores_avx2(const float* const q[ATTN2_R], const float* k_t, size_t n_pad,
                                             size_t kd, __m256 scale, size_t j0, size_t n, const int nv,
                                             float* const p[ATTN2_R], __m256 mx[ATTN2_R]) {
  __m256 acc[ATTN2_R][3];
  for (int g = 0; g < ATTN2_R; g++) {
    for (int c = 0; c < nv; c++) {
      acc[g][c] = _mm256_setzero_ps();
    }
  }
  for (size_t d = 0; d < kd; d++) {
    const float* k = k_t + d * n_pad + j0;
    __m256 kv[3];
    for (int c = 0; c < nv; c++) {
      kv[c] = _mm256_loadu_ps(k + 8 * c);
    }
    for (int g = 0; g < ATTN2_R; g++) {
      const __m256 qg = _mm256_broadcast_ss(q[g] + d);
      for (int c = 0; c < nv; c++) {
        acc[g][c] = _mm256_fmadd_ps(qg, kv[c], acc[g][c]);
      }
    }
  }
  for (int c = 0; c < nv; c++) {
    const size_t j = j0 + 8 * (size_t)c;
    const __m256 valid = _mm256_castsi256_ps(attn_mask8(j < n ? n - j : 0));
    for (int g = 0; g < ATTN2_R; g++) {
      const __m256 s = _mm256_mul_ps(acc[g][c], scale);
      _mm256_storeu_ps(p[g] + j, s);
      mx[g] = _mm256_blendv_ps(mx[g], _mm256_max_ps(mx[g], s), valid);
    }
  }
}

// attn_softmax_avx512 in 8 lanes.
CARVE_ATTN_AVX2_INLINE float attn_softmax_avx2(float* p, size_t n, float max_s) {
  const __m256 m = _mm256_set1_ps(max_s);
  __m256 sum = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = attn_exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(p + j), m));
    _mm256_storeu_ps(p + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < n) {
    const __m256i k = attn_mask8(n - j);
    const __m256 e = _mm256_and_ps(attn_exp8_avx2(_mm256_sub_ps(_mm256_maskload_ps(p + j, k), m)),
                                   _mm256_castsi256_ps(k));
    _mm256_maskstore_ps(p + j, k, e);
    sum = _mm256_add_ps(sum, e);
  }
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return 1.0f / _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

CARVE_ATTN_AVX2_INLINE float attn_hmax_avx2(__m256 v) {
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
}

// attn_weighted_sum_avx512 in 8 lanes: e < ne <= 8 nv, nv <= 3.
CARVE_ATTN_AVX2_INLINE void attn_weighted_sum_avx2(const float* const p[ATTN2_R], const float inv_sum[ATTN2_R],
                                                   const float* v, size_t v_stride, size_t n, size_t ne,
                                                   const int nv, const int masked, float* const o[ATTN2_R],
                                                   size_t rows) {
  __m256i mk[3];
  for (int c = 0; c < nv; c++) {
    mk[c] = attn_mask8(ne - 8 * (size_t)c);
  }
  __m256 sum[ATTN2_R][3];
  for (int g = 0; g < ATTN2_R; g++) {
    for (int c = 0; c < nv; c++) {
      sum[g][c] = _mm256_setzero_ps();
    }
  }
  for (size_t j0 = 0; j0 < n; j0 += CARVE_ATTN_SUM_BLOCK) {
    const size_t j1 = min_size(n, j0 + CARVE_ATTN_SUM_BLOCK);
    __m256 acc[ATTN2_R][3];
    for (int g = 0; g < ATTN2_R; g++) {
      for (int c = 0; c < nv; c++) {
        acc[g][c] = _mm256_setzero_ps();
      }
    }
    for (size_t j = j0; j < j1; j++) {
      const float* vj = v + j * v_stride;
      __m256 vv[3];
      for (int c = 0; c < nv; c++) {
        vv[c] = masked ? _mm256_maskload_ps(vj + 8 * c, mk[c]) : _mm256_loadu_ps(vj + 8 * c);
      }
      for (int g = 0; g < ATTN2_R; g++) {
        const __m256 pg = _mm256_broadcast_ss(p[g] + j);
        for (int c = 0; c < nv; c++) {
          acc[g][c] = _mm256_fmadd_ps(pg, vv[c], acc[g][c]);
        }
      }
    }
    for (int g = 0; g < ATTN2_R; g++) {
      for (int c = 0; c < nv; c++) {
        sum[g][c] = _mm256_add_ps(sum[g][c], acc[g][c]);
      }
    }
  }
  for (size_t g = 0; g < rows; g++) {
    const __m256 inv = _mm256_set1_ps(inv_sum[g]);
    for (int c = 0; c < nv; c++) {
      const __m256 r = _mm256_mul_ps(sum[g][c], inv);
      if (masked) {
        _mm256_maskstore_ps(o[g] + 8 * c, mk[c], r);
      } else {
        _mm256_storeu_ps(o[g] + 8 * c, r);
      }
    }
  }
}

// attention_task on AVX2 + FMA: the same tasks and scratch, 4 rows at a time.
__attribute__((target("avx2,fma"))) static void attention_task_avx2(void* context, size_t start, size_t count) {
  const attention_ctx* ctx = context;
  const size_t n = ctx->n, n_pad = ctx->n_pad, kd = ctx->key_dim, hd = ctx->head_dim;
  const size_t stride = ctx->qkv_stride;
  const __m256 scale = _mm256_set1_ps(ctx->scale);
  for (size_t t = start; t < start + count; t++) {
    const size_t head = t / ctx->blocks;
    const size_t row0 = (t % ctx->blocks) * CARVE_ATTN_ROWS_PER_TASK;
    const size_t row1 = min_size(n, row0 + CARVE_ATTN_ROWS_PER_TASK);
    const float* q_base = ctx->qkv + head * (2 * kd + hd);
    const float* v_base = q_base + 2 * kd;
    const float* k_t = ctx->k_t + head * kd * n_pad;
    float* task_scores = ctx->scores + t * CARVE_ATTN_GROUP * n_pad;

    for (size_t i0 = row0; i0 < row1; i0 += ATTN2_R) {
      const size_t rows = min_size(ATTN2_R, row1 - i0);
      const float* q[ATTN2_R];
      float* p[ATTN2_R];
      float inv_sum[ATTN2_R];
      float* o[ATTN2_R];
      __m256 mx[ATTN2_R];
      for (size_t g = 0; g < ATTN2_R; g++) {
        q[g] = q_base + (i0 + min_size(g, rows - 1)) * stride;
        p[g] = task_scores + g * n_pad;
        mx[g] = _mm256_set1_ps(-INFINITY);
      }
      size_t j0 = 0;
      for (; j0 + 24 <= n_pad; j0 += 24) {
        attn_scores_avx2(q, k_t, n_pad, kd, scale, j0, n, 3, p, mx);
      }
      if (j0 + 16 == n_pad) {  // n_pad is a multiple of 8
        attn_scores_avx2(q, k_t, n_pad, kd, scale, j0, n, 2, p, mx);
      } else if (j0 < n_pad) {
        attn_scores_avx2(q, k_t, n_pad, kd, scale, j0, n, 1, p, mx);
      }
      for (size_t g = 0; g < ATTN2_R; g++) {
        inv_sum[g] = attn_softmax_avx2(p[g], n, attn_hmax_avx2(mx[g]));
      }
      const float* const* pc = (const float* const*)p;
      for (size_t e0 = 0; e0 < hd; e0 += 24) {
        const size_t ne = min_size(24, hd - e0);
        for (size_t g = 0; g < ATTN2_R; g++) {
          o[g] = ctx->out + (i0 + g) * ctx->out_stride + head * hd + e0;
        }
        const float* v = v_base + e0;
        if (ne == 24) {
          attn_weighted_sum_avx2(pc, inv_sum, v, stride, n, ne, 3, 0, o, rows);
        } else if (ne > 16) {
          attn_weighted_sum_avx2(pc, inv_sum, v, stride, n, ne, 3, 1, o, rows);
        } else if (ne == 16) {
          attn_weighted_sum_avx2(pc, inv_sum, v, stride, n, ne, 2, 0, o, rows);
        } else if (ne > 8) {
          attn_weighted_sum_avx2(pc, inv_sum, v, stride, n, ne, 2, 1, o, rows);
        } else {
          attn_weighted_sum_avx2(pc, inv_sum, v, stride, n, ne, 1, 1, o, rows);
        }
      }

      if (ctx->v_out != NULL) {
        for (size_t g = 0; g < rows; g++) {
          memcpy(ctx->v_out + (i0 + g) * ctx->v_stride + head * hd,
                 v_base + (i0 + g) * stride, hd * sizeof(float));
        }
      }
    }
  }
}
#endif

size_t carve_attention_scratch_floats(size_t n, size_t heads, size_t key_dim) {
  return CARVE_ATTENTION_SCRATCH_FLOATS(n, heads, key_dim);
}

// ---- Driver

// The variants' shared entry: checks the arguments, transposes k, and runs `task` (the variant's) over the
// (head, block of query rows) tasks.
static carve_status attention_drive(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                                    size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                                    size_t v_stride, float* scratch, carve_task_1d_tile_t task,
                                    pthreadpool_t pool) {
  if (qkv == NULL || out == NULL || scratch == NULL || n == 0 || heads == 0 || key_dim == 0 || head_dim == 0 ||
      qkv_stride < heads * (2 * key_dim + head_dim) || out_stride < heads * head_dim ||
      (v_out != NULL && v_stride < heads * head_dim)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t n_pad = div_round_up(n, CARVE_ATTN_KEY_BLOCK) * CARVE_ATTN_KEY_BLOCK;
  // k of each head transposed to (key_dim, n_pad), once for all of the head's
  // tasks: a few microseconds, on the calling thread.
  float* k_t = scratch;
  for (size_t h = 0; h < heads; h++) {
    const float* k = qkv + h * (2 * key_dim + head_dim) + key_dim;
    float* kh = k_t + h * key_dim * n_pad;
    for (size_t j = 0; j < n; j++) {
      for (size_t d = 0; d < key_dim; d++) {
        kh[d * n_pad + j] = k[j * qkv_stride + d];
      }
    }
    for (size_t d = 0; d < key_dim; d++) {
      for (size_t j = n; j < n_pad; j++) {
        kh[d * n_pad + j] = 0.0f;
      }
    }
  }
  attention_ctx ctx = {
      .qkv = qkv,
      .qkv_stride = qkv_stride,
      .n = n,
      .n_pad = n_pad,
      .key_dim = key_dim,
      .head_dim = head_dim,
      .blocks = div_round_up(n, CARVE_ATTN_ROWS_PER_TASK),
      .scale = scale,
      .out = out,
      .out_stride = out_stride,
      .v_out = v_out,
      .v_stride = v_stride,
      .k_t = k_t,
      .scores = k_t + heads * key_dim * n_pad,
  };
  carve_parallelize_1d_tile(pool, task, &ctx, heads * ctx.blocks, 1);
  return CARVE_OK;
}

// ---- Variants and selection

// The portable kernel runs in its target_clones (the loader picks the clone; every clone gives the same bits).
carve_status carve_attention__portable(const float* qkv, size_t qkv_stride, size_t n, size_t heads,
                                       size_t key_dim, size_t head_dim, float scale, float* out,
                                       size_t out_stride, float* v_out, size_t v_stride, float* scratch,
                                       pthreadpool_t pool) {
  return attention_drive(qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out, out_stride, v_out, v_stride,
                         scratch, attention_task, pool);
}

#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_attention__avx2(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                                   size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                                   size_t v_stride, float* scratch, pthreadpool_t pool) {
  return attention_drive(qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out, out_stride, v_out, v_stride,
                         scratch, attention_task_avx2, pool);
}

carve_status carve_attention__avx512(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                                     size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                                     size_t v_stride, float* scratch, pthreadpool_t pool) {
  return attention_drive(qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out, out_stride, v_out, v_stride,
                         scratch, attention_task_avx512, pool);
}
#endif

carve_attention_fn carve_attention_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512) {
    return carve_attention__avx512;
  }
  if (isa == CARVE_ISA_AVX2) {
    return carve_attention__avx2;
  }
#endif
  (void)isa;
  return carve_attention__portable;
}

carve_status carve_attention(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                             size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                             size_t v_stride, float* scratch, pthreadpool_t pool) {
  return carve_attention_select(carve_isa_detect())(qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out,
                                                    out_stride, v_out, v_stride, scratch, pool);
}
