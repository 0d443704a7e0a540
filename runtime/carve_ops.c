// carve runtime: element-wise and tensor ops (see carve_ops.h).

#include "carve_ops.h"

#include <math.h>
#include <string.h>

// Elements one epilogue task touches, so that small tensors stay on one thread.
#define CARVE_EPILOGUE_TASK_ELEMENTS 16384

// Tile edge of the blocked NCHW <-> NHWC transposes.
#define CARVE_TRANSPOSE_TILE 32

// Attention: query rows that share one pass over k and v, and v channels whose
// weighted sums are accumulated (in double) at a time.
#define CARVE_ATTN_GROUP 4
#define CARVE_ATTN_V_CHUNK 64

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// ---- Instruction sets ---------------------------------------------------------
//
// The hot loops (epilogue, attention) are compiled three times: for AVX-512
// (x86-64-v4), AVX2 + FMA (x86-64-v3) and the baseline the package is built for,
// and the dynamic loader picks the best one the CPU has (target_clones, an ELF
// ifunc). The package still runs on any x86-64. The clones evaluate the same
// float operations in the same order (GCC in ISO C mode does not contract
// a * b + c into an FMA), so every clone gives the same bits.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define CARVE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef CARVE_SIMD_CLONES
#define CARVE_SIMD_CLONES
#endif

static size_t div_round_up(size_t n, size_t d) { return (n + d - 1) / d; }

// ---- exp --------------------------------------------------------------------

#ifdef FP_FAST_FMAF
#define CARVE_MLA(a, b, c) fmaf(a, b, c)
#else
#define CARVE_MLA(a, b, c) ((a) * (b) + (c))
#endif

static inline float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

// exp(d) in float with SLEEF's expf_u10 algorithm (Boost Software License 1.0),
// the one PyTorch's vectorised CPU kernels call: q = rint(d / ln 2), s = d - q ln 2
// (ln 2 in two parts), exp(s) = 1 + s + s^2 P(s) with a degree-5 minimax P, then
// times 2^q in two steps; d < -104 gives 0, d > 100 gives +inf, NaN stays NaN.
// Error <= 1 ulp. Branch-free so that compilers vectorise the loops calling it;
// with FMA (FP_FAST_FMAF) the results are bit-identical to PyTorch's.
// Do not build the runtime with -ffast-math (it would cancel the rint trick).
static inline float exp_u10(float d) {
  const float log2e = 1.44269504088896341f;
  const float magic = 0x1.8p23f;  // adding and subtracting it rounds to an integer
  const float qf = (d * log2e + magic) - magic;
  const uint32_t q = float_to_bits(qf + magic) - 0x4B400000u;  // (int)qf while |qf| < 2^22
  float s = CARVE_MLA(qf, -0.693145751953125f, d);
  s = CARVE_MLA(qf, -1.428606765330187045e-06f, s);
  float u = 0.000198527617612853646278381f;
  u = CARVE_MLA(u, s, 0.00139304355252534151077271f);
  u = CARVE_MLA(u, s, 0.00833336077630519866943359f);
  u = CARVE_MLA(u, s, 0.0416664853692054748535156f);
  u = CARVE_MLA(u, s, 0.166666671633720397949219f);
  u = CARVE_MLA(u, s, 0.5f);
  u = 1.0f + CARVE_MLA(s * s, u, s);
  const uint32_t h = (q >> 1) | (q & 0x80000000u);  // q / 2 rounded down (arithmetic shift)
  u = u * bits_to_float(((h + 127u) & 0xFFu) << 23) * bits_to_float(((q - h + 127u) & 0xFFu) << 23);
  // Out of range, as bit masks rather than branches.
  const uint32_t under = 0u - (uint32_t)(d < -104.0f), over = 0u - (uint32_t)(d > 100.0f);
  const uint32_t bits = (float_to_bits(u) & ~under & ~over) | (0x7F800000u & over);
  return bits_to_float(bits);
}

// ---- Epilogue ---------------------------------------------------------------

typedef struct epilogue_ctx {
  float* y;                // (pixels, channels), row stride y_stride
  size_t y_stride;
  const float* residual;   // (pixels, channels), row stride r_stride, or NULL
  size_t r_stride;
  size_t channels;
  carve_act act;
} epilogue_ctx;

// SiLU(x) = x / (1 + exp(-x)) in float, the expression torch.nn.SiLU evaluates.
static inline float silu(float x) { return x / (1.0f + exp_u10(-x)); }

// y[p][c] = act(y[p][c]) + r[p][c] for pixels [start, start + count).
CARVE_SIMD_CLONES static void epilogue_task(void* context, size_t start, size_t count) {
  const epilogue_ctx* ctx = context;
  const size_t channels = ctx->channels;
  const int act = ctx->act == CARVE_ACT_SILU;
  for (size_t p = start; p < start + count; p++) {
    float* y = ctx->y + p * ctx->y_stride;
    const float* r = ctx->residual != NULL ? ctx->residual + p * ctx->r_stride : NULL;
    if (act && r != NULL) {
      for (size_t c = 0; c < channels; c++) {
        y[c] = silu(y[c]) + r[c];
      }
    } else if (act) {
      for (size_t c = 0; c < channels; c++) {
        y[c] = silu(y[c]);
      }
    } else if (r != NULL) {
      for (size_t c = 0; c < channels; c++) {
        y[c] += r[c];
      }
    }
  }
}

void carve_epilogue(float* y, size_t y_stride, const float* residual, size_t r_stride,
                    size_t pixels, size_t channels, carve_act act, pthreadpool_t pool) {
  if (y == NULL || pixels == 0 || channels == 0) {
    return;
  }
  if (act == CARVE_ACT_NONE && residual == NULL) {
    return;
  }
  epilogue_ctx ctx = {y, y_stride, residual, r_stride, channels, act};
  const size_t tile = channels >= CARVE_EPILOGUE_TASK_ELEMENTS
                          ? 1
                          : CARVE_EPILOGUE_TASK_ELEMENTS / channels;
  carve_parallelize_1d_tile(pool, epilogue_task, &ctx, pixels, tile);
}

// ---- Upsample ---------------------------------------------------------------

typedef struct upsample_ctx {
  const float* x;  // (h, w, c), row stride x_stride
  size_t x_stride;
  size_t w, c;
  float* y;        // (2h, 2w, c), row stride y_stride
  size_t y_stride;
} upsample_ctx;

// Output rows 2i and 2i+1 for source rows i in [start, start + count).
static void upsample_task(void* context, size_t start, size_t count) {
  const upsample_ctx* ctx = context;
  const size_t w = ctx->w, c = ctx->c;
  const size_t bytes = c * sizeof(float);
  for (size_t i = start; i < start + count; i++) {
    for (size_t j = 0; j < w; j++) {
      const float* src = ctx->x + (i * w + j) * ctx->x_stride;
      float* top = ctx->y + ((2 * i) * (2 * w) + 2 * j) * ctx->y_stride;
      float* bottom = top + (2 * w) * ctx->y_stride;
      memcpy(top, src, bytes);
      memcpy(top + ctx->y_stride, src, bytes);
      memcpy(bottom, src, bytes);
      memcpy(bottom + ctx->y_stride, src, bytes);
    }
  }
}

void carve_upsample_nearest2x(const float* x, size_t x_stride, size_t h, size_t w, size_t c,
                              float* y, size_t y_stride, pthreadpool_t pool) {
  if (x == NULL || y == NULL || h == 0 || w == 0 || c == 0) {
    return;
  }
  upsample_ctx ctx = {x, x_stride, w, c, y, y_stride};
  carve_parallelize_1d_tile(pool, upsample_task, &ctx, h, 1);
}

// ---- Attention --------------------------------------------------------------

typedef struct attention_ctx {
  const float* qkv;  // (n, heads * (2*key_dim + head_dim)), row stride qkv_stride
  size_t qkv_stride;
  size_t n, key_dim, head_dim, blocks;
  float scale;
  float* out;        // (n, heads * head_dim), row stride out_stride
  size_t out_stride;
  float* v_out;      // (n, heads * head_dim), row stride v_stride, or NULL
  size_t v_stride;
  float* scratch;    // (heads * blocks, CARVE_ATTN_GROUP, n)
} attention_ctx;

_Static_assert(CARVE_ATTN_GROUP == 4, "attention_scores and the v loop are written for 4 rows");

// Keys whose scores are accumulated side by side (vector lanes) in attention_scores.
#define CARVE_ATTN_KEY_BLOCK 16

// Scores of CARVE_ATTN_GROUP query rows against every key:
//   p[g][j] = (float)(scale * sum_d q_g[d] k_j[d]), dot products in double.
// Each dot product is summed over d in order from 0.0; keys go CARVE_ATTN_KEY_BLOCK
// at a time so that the sums of a block vectorise across keys.
static inline void attention_scores(const float* const q[CARVE_ATTN_GROUP], const float* k_base,
                                    size_t stride, size_t n, size_t kd, float scale,
                                    float* const p[CARVE_ATTN_GROUP]) {
  for (size_t j0 = 0; j0 < n; j0 += CARVE_ATTN_KEY_BLOCK) {
    const size_t nj = min_size(CARVE_ATTN_KEY_BLOCK, n - j0);
    double acc[CARVE_ATTN_GROUP][CARVE_ATTN_KEY_BLOCK] = {{0.0}};
    for (size_t d = 0; d < kd; d++) {
      double kv[CARVE_ATTN_KEY_BLOCK] = {0.0};  // k_j[d] of the block's keys (0 past the last key)
      for (size_t jj = 0; jj < nj; jj++) {
        kv[jj] = (double)k_base[(j0 + jj) * stride + d];
      }
      const double q0 = q[0][d], q1 = q[1][d], q2 = q[2][d], q3 = q[3][d];
      for (size_t jj = 0; jj < CARVE_ATTN_KEY_BLOCK; jj++) {
        acc[0][jj] += q0 * kv[jj];
        acc[1][jj] += q1 * kv[jj];
        acc[2][jj] += q2 * kv[jj];
        acc[3][jj] += q3 * kv[jj];
      }
    }
    for (size_t g = 0; g < CARVE_ATTN_GROUP; g++) {
      for (size_t jj = 0; jj < nj; jj++) {
        p[g][j0 + jj] = (float)(acc[g][jj] * scale);
      }
    }
  }
}

// Softmax numerators in place, p[j] = exp(p[j] - max_j p[j]); returns 1 / sum_j p[j].
// A NaN score makes the whole row NaN, as in PyTorch.
// The exponentials are one loop (it vectorises), the sum in order another.
static inline double attention_softmax(float* p, size_t n) {
  float max_s = -INFINITY;
  for (size_t j = 0; j < n; j++) {
    max_s = p[j] > max_s ? p[j] : max_s;
  }
  for (size_t j = 0; j < n; j++) {
    p[j] = exp_u10(p[j] - max_s);
  }
  double sum = 0.0;
  for (size_t j = 0; j < n; j++) {
    sum += (double)p[j];
  }
  return 1.0 / sum;
}

// Task t = head * blocks + b: query rows [b*R, b*R + R) of one head, R =
// CARVE_ATTN_ROWS_PER_TASK, taken CARVE_ATTN_GROUP at a time so that each k and
// v row read serves four queries:
//   out[i][e] = sum_j p[i][j] v[j][e] / sum_j p[i][j].
// A short last group repeats its last row; the copies are computed, not stored.
CARVE_SIMD_CLONES static void attention_task(void* context, size_t start, size_t count) {
  const attention_ctx* ctx = context;
  const size_t n = ctx->n, kd = ctx->key_dim, hd = ctx->head_dim;
  const size_t stride = ctx->qkv_stride;
  for (size_t t = start; t < start + count; t++) {
    const size_t head = t / ctx->blocks;
    const size_t row0 = (t % ctx->blocks) * CARVE_ATTN_ROWS_PER_TASK;
    const size_t row1 = min_size(n, row0 + CARVE_ATTN_ROWS_PER_TASK);
    const float* q_base = ctx->qkv + head * (2 * kd + hd);  // q of pixel 0
    const float* k_base = q_base + kd;
    const float* v_base = q_base + 2 * kd;
    float* task_scratch = ctx->scratch + t * CARVE_ATTN_GROUP * n;

    for (size_t i0 = row0; i0 < row1; i0 += CARVE_ATTN_GROUP) {
      const size_t rows = min_size(CARVE_ATTN_GROUP, row1 - i0);
      const float* q[CARVE_ATTN_GROUP];
      float* p[CARVE_ATTN_GROUP];  // (n) scores, then softmax numerators, of row i0 + g
      double inv_sum[CARVE_ATTN_GROUP];
      for (size_t g = 0; g < CARVE_ATTN_GROUP; g++) {
        q[g] = q_base + (i0 + min_size(g, rows - 1)) * stride;
        p[g] = task_scratch + g * n;
      }
      attention_scores(q, k_base, stride, n, kd, ctx->scale, p);
      for (size_t g = 0; g < CARVE_ATTN_GROUP; g++) {
        inv_sum[g] = attention_softmax(p[g], n);
      }

      // Weighted sums of v, CARVE_ATTN_V_CHUNK channels at a time.
      for (size_t e0 = 0; e0 < hd; e0 += CARVE_ATTN_V_CHUNK) {
        const size_t ne = min_size(CARVE_ATTN_V_CHUNK, hd - e0);
        double acc[CARVE_ATTN_GROUP][CARVE_ATTN_V_CHUNK] = {{0.0}};
        for (size_t j = 0; j < n; j++) {
          const float* v = v_base + j * stride + e0;
          const double p0 = p[0][j], p1 = p[1][j], p2 = p[2][j], p3 = p[3][j];
          for (size_t e = 0; e < ne; e++) {
            const double ve = (double)v[e];
            acc[0][e] += p0 * ve;
            acc[1][e] += p1 * ve;
            acc[2][e] += p2 * ve;
            acc[3][e] += p3 * ve;
          }
        }
        for (size_t g = 0; g < rows; g++) {
          float* o = ctx->out + (i0 + g) * ctx->out_stride + head * hd + e0;
          for (size_t e = 0; e < ne; e++) {
            o[e] = (float)(acc[g][e] * inv_sum[g]);
          }
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

size_t carve_attention_scratch_floats(size_t n, size_t heads) {
  _Static_assert(CARVE_ATTN_GROUP == 4, "CARVE_ATTENTION_SCRATCH_FLOATS is written for groups of 4 rows");
  return CARVE_ATTENTION_SCRATCH_FLOATS(n, heads);
}

void carve_attention(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                     size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                     size_t v_stride, float* scratch, pthreadpool_t pool) {
  if (qkv == NULL || out == NULL || scratch == NULL || n == 0 || heads == 0 || head_dim == 0) {
    return;
  }
  attention_ctx ctx = {
      .qkv = qkv,
      .qkv_stride = qkv_stride,
      .n = n,
      .key_dim = key_dim,
      .head_dim = head_dim,
      .blocks = div_round_up(n, CARVE_ATTN_ROWS_PER_TASK),
      .scale = scale,
      .out = out,
      .out_stride = out_stride,
      .v_out = v_out,
      .v_stride = v_stride,
      .scratch = scratch,
  };
  carve_parallelize_1d_tile(pool, attention_task, &ctx, heads * ctx.blocks, 1);
}

// ---- Layout -----------------------------------------------------------------

void carve_nchw_to_nhwc(const float* x, size_t c, size_t h, size_t w, float* y, size_t y_stride) {
  if (x == NULL || y == NULL) {
    return;
  }
  const size_t pixels = h * w;
  for (size_t p0 = 0; p0 < pixels; p0 += CARVE_TRANSPOSE_TILE) {
    const size_t p1 = min_size(pixels, p0 + CARVE_TRANSPOSE_TILE);
    for (size_t c0 = 0; c0 < c; c0 += CARVE_TRANSPOSE_TILE) {
      const size_t c1 = min_size(c, c0 + CARVE_TRANSPOSE_TILE);
      for (size_t p = p0; p < p1; p++) {
        for (size_t ch = c0; ch < c1; ch++) {
          y[p * y_stride + ch] = x[ch * pixels + p];
        }
      }
    }
  }
}

void carve_nhwc_to_nchw(const float* x, size_t x_stride, size_t h, size_t w, size_t c, float* y) {
  if (x == NULL || y == NULL) {
    return;
  }
  const size_t pixels = h * w;
  for (size_t c0 = 0; c0 < c; c0 += CARVE_TRANSPOSE_TILE) {
    const size_t c1 = min_size(c, c0 + CARVE_TRANSPOSE_TILE);
    for (size_t p0 = 0; p0 < pixels; p0 += CARVE_TRANSPOSE_TILE) {
      const size_t p1 = min_size(pixels, p0 + CARVE_TRANSPOSE_TILE);
      for (size_t ch = c0; ch < c1; ch++) {
        for (size_t p = p0; p < p1; p++) {
          y[ch * pixels + p] = x[p * x_stride + ch];
        }
      }
    }
  }
}
