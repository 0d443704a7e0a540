// carve runtime: the depthwise 3x3 convolution, carve_dwconv3x3 (see carve_dwconv.h).
//
// The instruction-set variants sit side by side in this file: portable C, AVX-512 and AVX2 + FMA (each its own
// row function: interior rows 4 pixels at a time, edge rows channel block by block); one driver checks the
// arguments and splits the rows for all of them.

#include "carve_dwconv.h"
#include "carve_dwconv_isa.h"
#include "carve_simd.h"

// ---- Depthwise 3x3 convolution ----------------------------------------------------
//
// y = act(dwconv3x3(x) + bias), stride 1, pad 1, one filter per channel (yolo26n's head DWConvs and the PSA
// blocks' positional conv). XNNPACK 2022 runs these at about memory speed but the SiLU was a second pass over
// y; here each output is bias + its taps inside the image in (ky, kx) order, one multiply-add each, then the
// activation in registers before the store. A task is a run of output rows. On AVX-512 (AVX2 + FMA) a row
// whose 3 input rows are all inside the image goes 4 output pixels at a time (DW_QUAD), every block of 16 (8)
// channels of those pixels in turn (masked tail): the 6 input vectors of each row of taps serve 12 FMAs, input
// and output read and written in address order; the edge columns pixel by pixel. The first and last rows (and
// images narrower than 6) go channel block by channel block along the row, the block's 9 weights and bias in
// registers. Elsewhere portable C, all channels of a pixel at once (vectorised by the compiler).
// bench/dwconv_vs_xnnpack.c: 1.05x to 1.5x XNNPACK's depthwise convolution + SiLU pass on yolo26n's shapes.
#define DW_TASK_ELEMENTS 4096   // output elements per task, at least one row (20x20 layers: several tasks per thread)
#define DW_QUAD 4               // output pixels of one interior block (x86-64 paths)

typedef struct dw_ctx dw_ctx;

// One output row oy, every channel: the instruction-set-specific part of a variant.
typedef void (*dw_row_fn)(const dw_ctx* c, size_t oy);

struct dw_ctx {
  const float* x;
  size_t x_stride, h, w, c;
  const float* weights;  // (3, 3, c)
  const float* bias;     // (c)
  float* y;
  size_t y_stride;
  int silu;
  dw_row_fn row;         // the variant's row
};

// Rows ky in [*ky0, *ky1) of output row oy lie inside the image.
static inline void dw_rows(const dw_ctx* c, size_t oy, size_t* ky0, size_t* ky1) {
  *ky0 = oy == 0 ? 1 : 0;
  *ky1 = oy + 1 < c->h ? 3 : 2;
}

// ---- portable

static void dw_row_portable(const dw_ctx* c, size_t oy) {
  size_t ky0, ky1;
  dw_rows(c, oy, &ky0, &ky1);
  const size_t w = c->w, ch = c->c, xs = c->x_stride;
  for (size_t ox = 0; ox < w; ox++) {
    const size_t kx0 = ox == 0 ? 1 : 0, kx1 = ox + 1 < w ? 3 : 2;
    float* yp = c->y + (oy * w + ox) * c->y_stride;
    for (size_t k = 0; k < ch; k++) {
      yp[k] = c->bias[k];
    }
    for (size_t ky = ky0; ky < ky1; ky++) {
      for (size_t kx = kx0; kx < kx1; kx++) {
        const float* xp = c->x + ((oy + ky - 1) * w + ox + kx - 1) * xs;
        const float* wp = c->weights + (ky * 3 + kx) * ch;
        for (size_t k = 0; k < ch; k++) {
          yp[k] = CARVE_MLA(xp[k], wp[k], yp[k]);
        }
      }
    }
    if (c->silu) {
      for (size_t k = 0; k < ch; k++) {
        yp[k] = silu(yp[k]);
      }
    }
  }
}

// ---- AVX-512 and AVX2 + FMA

#ifdef CARVE_HAVE_X86_SIMD
// One output row, channels [k, k + 16) under mask m.
__attribute__((target("avx512f"))) static inline void dw_block_avx512(const dw_ctx* c, size_t oy, size_t ky0,
                                                                      size_t ky1, size_t k, __mmask16 m) {
  const size_t w = c->w, xs = c->x_stride, ys = c->y_stride, ch = c->c;
  __m512 wv[9];
  for (int t = 0; t < 9; t++) {
    wv[t] = _mm512_maskz_loadu_ps(m, c->weights + (size_t)t * ch + k);
  }
  const __m512 b = _mm512_maskz_loadu_ps(m, c->bias + k);
  const float* xk = c->x + k;
  float* yp = c->y + oy * w * ys + k;
  // Column 0: taps kx 1, 2.
  {
    __m512 acc = b;
    for (size_t ky = ky0; ky < ky1; ky++) {
      const float* r = xk + (oy + ky - 1) * w * xs;
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r), wv[ky * 3 + 1], acc);
      if (w > 1) {
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r + xs), wv[ky * 3 + 2], acc);
      }
    }
    _mm512_mask_storeu_ps(yp, m, c->silu ? silu16_avx512(acc) : acc);
  }
  if (w == 1) {
    return;
  }
  // Interior columns [1, w - 1).
  {
    for (size_t ox = 1; ox + 1 < w; ox++) {
      __m512 acc = b;
      for (size_t ky = ky0; ky < ky1; ky++) {
        const float* rr = xk + ((oy + ky - 1) * w + ox - 1) * xs;
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, rr), wv[ky * 3], acc);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, rr + xs), wv[ky * 3 + 1], acc);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, rr + 2 * xs), wv[ky * 3 + 2], acc);
      }
      _mm512_mask_storeu_ps(yp + ox * ys, m, c->silu ? silu16_avx512(acc) : acc);
    }
  }
  // Column w - 1: taps kx 0, 1.
  {
    const size_t ox = w - 1;
    __m512 acc = b;
    for (size_t ky = ky0; ky < ky1; ky++) {
      const float* r = xk + ((oy + ky - 1) * w + ox - 1) * xs;
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r), wv[ky * 3], acc);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r + xs), wv[ky * 3 + 1], acc);
    }
    _mm512_mask_storeu_ps(yp + ox * ys, m, c->silu ? silu16_avx512(acc) : acc);
  }
}

// One output pixel, every channel block, taps clipped to the image.
__attribute__((target("avx512f"))) static void dw_pixel_avx512(const dw_ctx* c, size_t oy, size_t ox, size_t ky0,
                                                               size_t ky1) {
  const size_t w = c->w, xs = c->x_stride, ch = c->c;
  const size_t kx0 = ox == 0 ? 1 : 0, kx1 = ox + 1 < w ? 3 : 2;
  for (size_t k = 0; k < ch; k += 16) {
    const __mmask16 m = ch - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (ch - k)) - 1);
    __m512 acc = _mm512_maskz_loadu_ps(m, c->bias + k);
    for (size_t ky = ky0; ky < ky1; ky++) {
      for (size_t kx = kx0; kx < kx1; kx++) {
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c->x + k + ((oy + ky - 1) * w + ox + kx - 1) * xs),
                              _mm512_maskz_loadu_ps(m, c->weights + (ky * 3 + kx) * ch + k), acc);
      }
    }
    _mm512_mask_storeu_ps(c->y + (oy * w + ox) * c->y_stride + k, m, c->silu ? silu16_avx512(acc) : acc);
  }
}

// Interior rows (all 3 taps rows inside): 4 pixels [ox, ox + 4) at a time, every channel block, weights from L1.
__attribute__((target("avx512f"))) static void dw_quad_avx512(const dw_ctx* c, size_t oy, size_t ox) {
  const size_t w = c->w, xs = c->x_stride, ys = c->y_stride, ch = c->c;
  for (size_t k = 0; k < ch; k += 16) {
    const __mmask16 m = ch - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (ch - k)) - 1);
    const __m512 b = _mm512_maskz_loadu_ps(m, c->bias + k);
    __m512 a0 = b, a1 = b, a2 = b, a3 = b;
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ky++) {
      const float* rr = c->x + k + ((oy + ky - 1) * w + ox - 1) * xs;
      const float* wk = c->weights + (size_t)ky * 3 * ch + k;
      const __m512 v0 = _mm512_maskz_loadu_ps(m, rr), v1 = _mm512_maskz_loadu_ps(m, rr + xs);
      const __m512 v2 = _mm512_maskz_loadu_ps(m, rr + 2 * xs), v3 = _mm512_maskz_loadu_ps(m, rr + 3 * xs);
      const __m512 v4 = _mm512_maskz_loadu_ps(m, rr + 4 * xs), v5 = _mm512_maskz_loadu_ps(m, rr + 5 * xs);
      const __m512 w0 = _mm512_maskz_loadu_ps(m, wk), w1 = _mm512_maskz_loadu_ps(m, wk + ch);
      const __m512 w2 = _mm512_maskz_loadu_ps(m, wk + 2 * ch);
      a0 = _mm512_fmadd_ps(v0, w0, a0);
      a1 = _mm512_fmadd_ps(v1, w0, a1);
      a2 = _mm512_fmadd_ps(v2, w0, a2);
      a3 = _mm512_fmadd_ps(v3, w0, a3);
      a0 = _mm512_fmadd_ps(v1, w1, a0);
      a1 = _mm512_fmadd_ps(v2, w1, a1);
      a2 = _mm512_fmadd_ps(v3, w1, a2);
      a3 = _mm512_fmadd_ps(v4, w1, a3);
      a0 = _mm512_fmadd_ps(v2, w2, a0);
      a1 = _mm512_fmadd_ps(v3, w2, a1);
      a2 = _mm512_fmadd_ps(v4, w2, a2);
      a3 = _mm512_fmadd_ps(v5, w2, a3);
    }
    if (c->silu) {
      a0 = silu16_avx512(a0);
      a1 = silu16_avx512(a1);
      a2 = silu16_avx512(a2);
      a3 = silu16_avx512(a3);
    }
    float* yo = c->y + (oy * w + ox) * ys + k;
    _mm512_mask_storeu_ps(yo, m, a0);
    _mm512_mask_storeu_ps(yo + ys, m, a1);
    _mm512_mask_storeu_ps(yo + 2 * ys, m, a2);
    _mm512_mask_storeu_ps(yo + 3 * ys, m, a3);
  }
}

__attribute__((target("avx512f"))) static void dw_row_avx512(const dw_ctx* c, size_t oy) {
  size_t ky0, ky1;
  dw_rows(c, oy, &ky0, &ky1);
  if (ky0 == 0 && ky1 == 3 && c->w >= DW_QUAD + 2) {
    size_t ox = 1;
    for (; ox + DW_QUAD < c->w; ox += DW_QUAD) {
      dw_quad_avx512(c, oy, ox);
    }
    if (ox + 1 < c->w) {
      dw_quad_avx512(c, oy, c->w - 1 - DW_QUAD);  // recomputes a few pixels of the one before (same values)
    }
    dw_pixel_avx512(c, oy, 0, ky0, ky1);
    dw_pixel_avx512(c, oy, c->w - 1, ky0, ky1);
    return;
  }
  size_t k = 0;
  for (; k + 16 <= c->c; k += 16) {
    dw_block_avx512(c, oy, ky0, ky1, k, (__mmask16)0xFFFF);
  }
  if (k < c->c) {
    dw_block_avx512(c, oy, ky0, ky1, k, (__mmask16)((1u << (c->c - k)) - 1));
  }
}

// One output row, channels [k, k + 8) under mask m (lanes past the channels are loaded as 0, not stored).
__attribute__((target("avx2,fma"))) static inline void dw_block_avx2(const dw_ctx* c, size_t oy, size_t ky0,
                                                                    size_t ky1, size_t k, __m256i m) {
  const size_t w = c->w, xs = c->x_stride, ys = c->y_stride, ch = c->c;
  __m256 wv[9];
  for (int t = 0; t < 9; t++) {
    wv[t] = _mm256_maskload_ps(c->weights + (size_t)t * ch + k, m);
  }
  const __m256 b = _mm256_maskload_ps(c->bias + k, m);
  const float* xk = c->x + k;
  float* yp = c->y + oy * w * ys + k;
  for (size_t ox = 0; ox < w; ox++) {
    const size_t kx0 = ox == 0 ? 1 : 0, kx1 = ox + 1 < w ? 3 : 2;
    __m256 acc = b;
    for (size_t ky = ky0; ky < ky1; ky++) {
      for (size_t kx = kx0; kx < kx1; kx++) {
        const float* r = xk + ((oy + ky - 1) * w + ox + kx - 1) * xs;
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(r, m), wv[ky * 3 + kx], acc);
      }
    }
    _mm256_maskstore_ps(yp + ox * ys, m, c->silu ? silu8_avx2(acc) : acc);
  }
}

// The first min(n, 8) lanes.
__attribute__((target("avx2,fma"))) static inline __m256i dw_mask8(size_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 8 ? (int)n : 8), lane);
}

// One output pixel, every channel block, taps clipped to the image.
__attribute__((target("avx2,fma"))) static void dw_pixel_avx2(const dw_ctx* c, size_t oy, size_t ox, size_t ky0,
                                                               size_t ky1) {
  const size_t w = c->w, xs = c->x_stride, ch = c->c;
  const size_t kx0 = ox == 0 ? 1 : 0, kx1 = ox + 1 < w ? 3 : 2;
  for (size_t k = 0; k < ch; k += 8) {
    const __m256i m = dw_mask8(ch - k);
    __m256 acc = _mm256_maskload_ps(c->bias + k, m);
    for (size_t ky = ky0; ky < ky1; ky++) {
      for (size_t kx = kx0; kx < kx1; kx++) {
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(c->x + k + ((oy + ky - 1) * w + ox + kx - 1) * xs, m),
                              _mm256_maskload_ps(c->weights + (ky * 3 + kx) * ch + k, m), acc);
      }
    }
    _mm256_maskstore_ps(c->y + (oy * w + ox) * c->y_stride + k, m, c->silu ? silu8_avx2(acc) : acc);
  }
}

// Interior rows (all 3 taps rows inside): 4 pixels [ox, ox + 4) at a time, every channel block, weights from L1.
__attribute__((target("avx2,fma"))) static void dw_quad_avx2(const dw_ctx* c, size_t oy, size_t ox) {
  const size_t w = c->w, xs = c->x_stride, ys = c->y_stride, ch = c->c;
  for (size_t k = 0; k < ch; k += 8) {
    const __m256i m = dw_mask8(ch - k);
    const __m256 b = _mm256_maskload_ps(c->bias + k, m);
    __m256 a0 = b, a1 = b, a2 = b, a3 = b;
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ky++) {
      const float* rr = c->x + k + ((oy + ky - 1) * w + ox - 1) * xs;
      const float* wk = c->weights + (size_t)ky * 3 * ch + k;
      const __m256 v0 = _mm256_maskload_ps(rr, m), v1 = _mm256_maskload_ps(rr + xs, m);
      const __m256 v2 = _mm256_maskload_ps(rr + 2 * xs, m), v3 = _mm256_maskload_ps(rr + 3 * xs, m);
      const __m256 v4 = _mm256_maskload_ps(rr + 4 * xs, m), v5 = _mm256_maskload_ps(rr + 5 * xs, m);
      const __m256 w0 = _mm256_maskload_ps(wk, m), w1 = _mm256_maskload_ps(wk + ch, m);
      const __m256 w2 = _mm256_maskload_ps(wk + 2 * ch, m);
      a0 = _mm256_fmadd_ps(v0, w0, a0);
      a1 = _mm256_fmadd_ps(v1, w0, a1);
      a2 = _mm256_fmadd_ps(v2, w0, a2);
      a3 = _mm256_fmadd_ps(v3, w0, a3);
      a0 = _mm256_fmadd_ps(v1, w1, a0);
      a1 = _mm256_fmadd_ps(v2, w1, a1);
      a2 = _mm256_fmadd_ps(v3, w1, a2);
      a3 = _mm256_fmadd_ps(v4, w1, a3);
      a0 = _mm256_fmadd_ps(v2, w2, a0);
      a1 = _mm256_fmadd_ps(v3, w2, a1);
      a2 = _mm256_fmadd_ps(v4, w2, a2);
      a3 = _mm256_fmadd_ps(v5, w2, a3);
    }
    if (c->silu) {
      a0 = silu8_avx2(a0);
      a1 = silu8_avx2(a1);
      a2 = silu8_avx2(a2);
      a3 = silu8_avx2(a3);
    }
    float* yo = c->y + (oy * w + ox) * ys + k;
    _mm256_maskstore_ps(yo, m, a0);
    _mm256_maskstore_ps(yo + ys, m, a1);
    _mm256_maskstore_ps(yo + 2 * ys, m, a2);
    _mm256_maskstore_ps(yo + 3 * ys, m, a3);
  }
}

__attribute__((target("avx2,fma"))) static void dw_row_avx2(const dw_ctx* c, size_t oy) {
  size_t ky0, ky1;
  dw_rows(c, oy, &ky0, &ky1);
  if (ky0 == 0 && ky1 == 3 && c->w >= DW_QUAD + 2) {
    size_t ox = 1;
    for (; ox + DW_QUAD < c->w; ox += DW_QUAD) {
      dw_quad_avx2(c, oy, ox);
    }
    if (ox + 1 < c->w) {
      dw_quad_avx2(c, oy, c->w - 1 - DW_QUAD);
    }
    dw_pixel_avx2(c, oy, 0, ky0, ky1);
    dw_pixel_avx2(c, oy, c->w - 1, ky0, ky1);
    return;
  }
  size_t k = 0;
  for (; k + 8 <= c->c; k += 8) {
    dw_block_avx2(c, oy, ky0, ky1, k, _mm256_set1_epi32(-1));
  }
  if (k < c->c) {
    const int n = (int)(c->c - k);
    dw_block_avx2(c, oy, ky0, ky1, k, _mm256_setr_epi32(0 < n ? -1 : 0, 1 < n ? -1 : 0, 2 < n ? -1 : 0,
                                                        3 < n ? -1 : 0, 4 < n ? -1 : 0, 5 < n ? -1 : 0,
                                                        6 < n ? -1 : 0, 7 < n ? -1 : 0));
  }
}
#endif

// ---- Driver

static void dw_task(void* context, size_t start, size_t count) {
  const dw_ctx* c = context;
  for (size_t oy = start; oy < start + count; oy++) {
    c->row(c, oy);
  }
}

// The variants' shared entry: checks the arguments and splits the rows over the pool; row is the variant's.
static carve_status dw_drive(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
                             const float* bias, float* y, size_t y_stride, carve_act act, dw_row_fn row,
                             pthreadpool_t pool) {
  if (x == NULL || weights == NULL || bias == NULL || y == NULL || h == 0 || w == 0 || c == 0 || x_stride < c ||
      y_stride < c || (act != CARVE_ACT_NONE && act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  dw_ctx ctx = {x, x_stride, h, w, c, weights, bias, y, y_stride, act == CARVE_ACT_SILU, row};
  const size_t per_row = w * c;
  const size_t tile = per_row >= DW_TASK_ELEMENTS ? 1 : DW_TASK_ELEMENTS / per_row;
  carve_parallelize_1d_tile(pool, dw_task, &ctx, h, tile);
  return CARVE_OK;
}

// ---- Variants and selection

carve_status carve_dwconv3x3__portable(const float* x, size_t x_stride, size_t h, size_t w, size_t c,
                                       const float* weights, const float* bias, float* y, size_t y_stride,
                                       carve_act act, pthreadpool_t pool) {
  return dw_drive(x, x_stride, h, w, c, weights, bias, y, y_stride, act, dw_row_portable, pool);
}

#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_dwconv3x3__avx2(const float* x, size_t x_stride, size_t h, size_t w, size_t c,
                                   const float* weights, const float* bias, float* y, size_t y_stride,
                                   carve_act act, pthreadpool_t pool) {
  return dw_drive(x, x_stride, h, w, c, weights, bias, y, y_stride, act, dw_row_avx2, pool);
}

carve_status carve_dwconv3x3__avx512(const float* x, size_t x_stride, size_t h, size_t w, size_t c,
                                     const float* weights, const float* bias, float* y, size_t y_stride,
                                     carve_act act, pthreadpool_t pool) {
  return dw_drive(x, x_stride, h, w, c, weights, bias, y, y_stride, act, dw_row_avx512, pool);
}
#endif

carve_dwconv3x3_fn carve_dwconv3x3_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512) {
    return carve_dwconv3x3__avx512;
  }
  if (isa == CARVE_ISA_AVX2) {
    return carve_dwconv3x3__avx2;
  }
#endif
  (void)isa;
  return carve_dwconv3x3__portable;
}

carve_status carve_dwconv3x3(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
                             const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool) {
  return carve_dwconv3x3_select(carve_isa_detect())(x, x_stride, h, w, c, weights, bias, y, y_stride, act, pool);
}
