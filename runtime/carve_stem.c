// carve runtime: the stem convolution, carve_conv3x3s2_small_cin (see carve_stem.h).
//
// The instruction-set variants sit side by side in this file: portable C, AVX-512 and AVX2 + FMA (register
// blocks of 12 and 6 pixels); one driver checks the arguments and walks the rows for all of them, with the
// variant's block and edge-pixel functions.

#include "carve_stem.h"
#include "carve_stem_isa.h"
#include "carve_simd.h"

// ---- Stem convolution -----------------------------------------------------------
//
// model.0 of every YOLO26 is a 3x3, stride 2, pad 1 convolution of the 3-channel
// image + bias + SiLU. As a GEMM its reduction is only 27 long, which XNNPACK's
// igemm runs at a fifth of the FMA peak, and its SiLU was a second pass over the
// largest activation of the network. Here each output pixel is bias + the sum
// over (ky, kx, ci) of x * w, one FMA per tap into a register that holds 16
// output channels, and the SiLU is applied to the registers before the store.
// The AVX-512 path keeps 12 output pixels x 16 channels in 12 registers, the
// AVX2 path 6 pixels x 2 x 8 channels; each tap is one weight vector load and
// one broadcast of an input value per pixel. Every pixel is computed with the
// same operations in the same order (taps outside the image skipped), so where
// a pixel falls in a block, and the number of threads, do not change its bits;
// the x86-64 paths agree bit for bit before the activation (FMA), the portable
// path (CARVE_MLA: FMA where the target has a fast one) and the SiLU kernels
// within their rounding.

#define STEM_OC 16             // output channels of one register block
#define STEM_PX_AVX512 12      // output pixels of one AVX-512 register block
#define STEM_PX_AVX2 6         // output pixels of one AVX2 register block
#define STEM_PX_PORTABLE 4     // output pixels of one portable block (4 x 16 floats: 16 NEON registers)
#define STEM_TASK_ELEMENTS 16384  // output elements per task, at least one row

typedef struct stem_ctx stem_ctx;

// One output pixel (or block of pixels starting at ox) of row oy, channels [oc, oc + 16).
typedef void (*stem_fn)(const stem_ctx* c, size_t oy, size_t ox, size_t oc);

struct stem_ctx {
  const float* x;          // (h, w, cin), pixel stride x_stride
  size_t x_stride, h, w, cin;
  const float* weights;    // (3, 3, cin, cout)
  const float* bias;       // (cout)
  size_t cout;
  float* y;                // (oh, ow, cout), pixel stride y_stride
  size_t y_stride, ow;
  int silu;
  stem_fn block, pixel;    // the variant's block of px interior pixels, and its edge pixel
  size_t px;
};

// Input rows 2*oy - 1 + ky for ky in [*ky0, *ky1) lie inside the image.
static inline void stem_rows(const stem_ctx* c, size_t oy, size_t* ky0, size_t* ky1) {
  *ky0 = oy == 0 ? 1 : 0;
  *ky1 = c->h + 1 - 2 * oy < 3 ? c->h + 1 - 2 * oy : 3;
}

// Input columns 2*ox - 1 + kx for kx in [*kx0, *kx1) lie inside the image.
static inline void stem_cols(const stem_ctx* c, size_t ox, size_t* kx0, size_t* kx1) {
  *kx0 = ox == 0 ? 1 : 0;
  *kx1 = c->w + 1 - 2 * ox < 3 ? c->w + 1 - 2 * ox : 3;
}

// ---- portable

// The portable pixel: the same sum in the same order, 16 channels at a time (vectorisable).
static void stem_pixel(const stem_ctx* c, size_t oy, size_t ox, size_t oc) {
  const size_t xs = c->x_stride, cin = c->cin, cout = c->cout;
  size_t ky0, ky1;
  stem_rows(c, oy, &ky0, &ky1);
  size_t kx0, kx1;
  stem_cols(c, ox, &kx0, &kx1);
  float acc[STEM_OC];
  for (size_t j = 0; j < STEM_OC; j++) {
    acc[j] = c->bias[oc + j];
  }
  for (size_t ky = ky0; ky < ky1; ky++) {
    for (size_t kx = kx0; kx < kx1; kx++) {
      const float* xp = c->x + ((2 * oy + ky - 1) * c->w + 2 * ox + kx - 1) * xs;
      const float* wp = c->weights + (ky * 3 + kx) * cin * cout + oc;
      for (size_t ci = 0; ci < cin; ci++) {
        const float v = xp[ci];
        for (size_t j = 0; j < STEM_OC; j++) {
          acc[j] = CARVE_MLA(v, wp[ci * cout + j], acc[j]);
        }
      }
    }
  }
  float* yp = c->y + (oy * c->ow + ox) * c->y_stride + oc;
  for (size_t j = 0; j < STEM_OC; j++) {
    yp[j] = c->silu ? silu(acc[j]) : acc[j];
  }
}

// STEM_PX_PORTABLE (4) pixels from ox, every tap inside the image columns: four
// accumulator rows of 16 channels, written out so that compilers keep them in
// vector registers (4 x 4 NEON registers) and vectorise over the channels.
static void stem_block_portable(const stem_ctx* c, size_t oy, size_t ox, size_t oc) {
  const size_t xs = c->x_stride, step = 2 * xs, cin = c->cin, cout = c->cout;
  size_t ky0, ky1;
  stem_rows(c, oy, &ky0, &ky1);
  float a0[STEM_OC], a1[STEM_OC], a2[STEM_OC], a3[STEM_OC];
  for (size_t j = 0; j < STEM_OC; j++) {
    a0[j] = a1[j] = a2[j] = a3[j] = c->bias[oc + j];
  }
  for (size_t ky = ky0; ky < ky1; ky++) {
    const float* row = c->x + ((2 * oy + ky - 1) * c->w + 2 * ox - 1) * xs;
    const float* wk = c->weights + ky * 3 * cin * cout + oc;
    for (size_t kx = 0; kx < 3; kx++) {
      for (size_t ci = 0; ci < cin; ci++) {
        const float* wp = wk + (kx * cin + ci) * cout;
        const float* xp = row + kx * xs + ci;
        const float v0 = xp[0], v1 = xp[step], v2 = xp[2 * step], v3 = xp[3 * step];
        for (size_t j = 0; j < STEM_OC; j++) {
          const float wj = wp[j];
          a0[j] = CARVE_MLA(v0, wj, a0[j]);
          a1[j] = CARVE_MLA(v1, wj, a1[j]);
          a2[j] = CARVE_MLA(v2, wj, a2[j]);
          a3[j] = CARVE_MLA(v3, wj, a3[j]);
        }
      }
    }
  }
  float* yp = c->y + (oy * c->ow + ox) * c->y_stride + oc;
  const size_t ys = c->y_stride;
  for (size_t j = 0; j < STEM_OC; j++) {
    yp[j] = c->silu ? silu(a0[j]) : a0[j];
    yp[ys + j] = c->silu ? silu(a1[j]) : a1[j];
    yp[2 * ys + j] = c->silu ? silu(a2[j]) : a2[j];
    yp[3 * ys + j] = c->silu ? silu(a3[j]) : a3[j];
  }
}

// ---- AVX-512 and AVX2 + FMA

#ifdef CARVE_HAVE_X86_SIMD
__attribute__((target("avx512f"))) static void stem_pixel_avx512(const stem_ctx* c, size_t oy, size_t ox, size_t oc) {
  const size_t xs = c->x_stride, cin = c->cin, cout = c->cout;
  size_t ky0, ky1;
  stem_rows(c, oy, &ky0, &ky1);
  size_t kx0, kx1;
  stem_cols(c, ox, &kx0, &kx1);
  __m512 acc = _mm512_loadu_ps(c->bias + oc);
  for (size_t ky = ky0; ky < ky1; ky++) {
    for (size_t kx = kx0; kx < kx1; kx++) {
      const float* xp = c->x + ((2 * oy + ky - 1) * c->w + 2 * ox + kx - 1) * xs;
      const float* wp = c->weights + (ky * 3 + kx) * cin * cout + oc;
      for (size_t ci = 0; ci < cin; ci++) {
        acc = _mm512_fmadd_ps(_mm512_set1_ps(xp[ci]), _mm512_loadu_ps(wp + ci * cout), acc);
      }
    }
  }
  _mm512_storeu_ps(c->y + (oy * c->ow + ox) * c->y_stride + oc, c->silu ? silu16_avx512(acc) : acc);
}

// STEM_PX_AVX512 pixels from ox, every tap inside the image columns.
__attribute__((target("avx512f"))) static void stem_block_avx512(const stem_ctx* c, size_t oy, size_t ox, size_t oc) {
  const size_t xs = c->x_stride, step = 2 * xs, cin = c->cin, cout = c->cout;
  size_t ky0, ky1;
  stem_rows(c, oy, &ky0, &ky1);
  __m512 acc[STEM_PX_AVX512];
  const __m512 b = _mm512_loadu_ps(c->bias + oc);
#pragma GCC unroll 16
  for (int p = 0; p < STEM_PX_AVX512; p++) {
    acc[p] = b;
  }
  for (size_t ky = ky0; ky < ky1; ky++) {
    const float* row = c->x + ((2 * oy + ky - 1) * c->w + 2 * ox - 1) * xs;
    const float* wk = c->weights + ky * 3 * cin * cout + oc;
    for (size_t kx = 0; kx < 3; kx++) {
      for (size_t ci = 0; ci < cin; ci++) {
        const __m512 wv = _mm512_loadu_ps(wk + (kx * cin + ci) * cout);
        const float* xp = row + kx * xs + ci;
#pragma GCC unroll 16
        for (int p = 0; p < STEM_PX_AVX512; p++) {
          acc[p] = _mm512_fmadd_ps(_mm512_set1_ps(xp[(size_t)p * step]), wv, acc[p]);
        }
      }
    }
  }
  float* yp = c->y + (oy * c->ow + ox) * c->y_stride + oc;
#pragma GCC unroll 16
  for (int p = 0; p < STEM_PX_AVX512; p++) {
    _mm512_storeu_ps(yp + (size_t)p * c->y_stride, c->silu ? silu16_avx512(acc[p]) : acc[p]);
  }
}

__attribute__((target("avx2,fma"))) static void stem_pixel_avx2(const stem_ctx* c, size_t oy, size_t ox, size_t oc) {
  const size_t xs = c->x_stride, cin = c->cin, cout = c->cout;
  size_t ky0, ky1;
  stem_rows(c, oy, &ky0, &ky1);
  size_t kx0, kx1;
  stem_cols(c, ox, &kx0, &kx1);
  __m256 lo = _mm256_loadu_ps(c->bias + oc), hi = _mm256_loadu_ps(c->bias + oc + 8);
  for (size_t ky = ky0; ky < ky1; ky++) {
    for (size_t kx = kx0; kx < kx1; kx++) {
      const float* xp = c->x + ((2 * oy + ky - 1) * c->w + 2 * ox + kx - 1) * xs;
      const float* wp = c->weights + (ky * 3 + kx) * cin * cout + oc;
      for (size_t ci = 0; ci < cin; ci++) {
        const __m256 v = _mm256_set1_ps(xp[ci]);
        lo = _mm256_fmadd_ps(v, _mm256_loadu_ps(wp + ci * cout), lo);
        hi = _mm256_fmadd_ps(v, _mm256_loadu_ps(wp + ci * cout + 8), hi);
      }
    }
  }
  float* yp = c->y + (oy * c->ow + ox) * c->y_stride + oc;
  _mm256_storeu_ps(yp, c->silu ? silu8_avx2(lo) : lo);
  _mm256_storeu_ps(yp + 8, c->silu ? silu8_avx2(hi) : hi);
}

// STEM_PX_AVX2 pixels from ox, every tap inside the image columns.
__attribute__((target("avx2,fma"))) static void stem_block_avx2(const stem_ctx* c, size_t oy, size_t ox, size_t oc) {
  const size_t xs = c->x_stride, step = 2 * xs, cin = c->cin, cout = c->cout;
  size_t ky0, ky1;
  stem_rows(c, oy, &ky0, &ky1);
  __m256 lo[STEM_PX_AVX2], hi[STEM_PX_AVX2];
  const __m256 blo = _mm256_loadu_ps(c->bias + oc), bhi = _mm256_loadu_ps(c->bias + oc + 8);
#pragma GCC unroll 8
  for (int p = 0; p < STEM_PX_AVX2; p++) {
    lo[p] = blo;
    hi[p] = bhi;
  }
  for (size_t ky = ky0; ky < ky1; ky++) {
    const float* row = c->x + ((2 * oy + ky - 1) * c->w + 2 * ox - 1) * xs;
    const float* wk = c->weights + ky * 3 * cin * cout + oc;
    for (size_t kx = 0; kx < 3; kx++) {
      for (size_t ci = 0; ci < cin; ci++) {
        const __m256 wlo = _mm256_loadu_ps(wk + (kx * cin + ci) * cout);
        const __m256 whi = _mm256_loadu_ps(wk + (kx * cin + ci) * cout + 8);
        const float* xp = row + kx * xs + ci;
#pragma GCC unroll 8
        for (int p = 0; p < STEM_PX_AVX2; p++) {
          const __m256 v = _mm256_set1_ps(xp[(size_t)p * step]);
          lo[p] = _mm256_fmadd_ps(v, wlo, lo[p]);
          hi[p] = _mm256_fmadd_ps(v, whi, hi[p]);
        }
      }
    }
  }
  float* yp = c->y + (oy * c->ow + ox) * c->y_stride + oc;
#pragma GCC unroll 8
  for (int p = 0; p < STEM_PX_AVX2; p++) {
    _mm256_storeu_ps(yp + (size_t)p * c->y_stride, c->silu ? silu8_avx2(lo[p]) : lo[p]);
    _mm256_storeu_ps(yp + (size_t)p * c->y_stride + 8, c->silu ? silu8_avx2(hi[p]) : hi[p]);
  }
}
#endif

// ---- Driver

// One output row, channels [oc, oc + 16): the edge columns pixel by pixel, the
// interior (columns whose 3 taps lie inside the image) in blocks of px pixels;
// the last block ends at the interior's end and may recompute a few pixels of
// the one before (same operations, same values).
static void stem_row(const stem_ctx* c, size_t oy, size_t oc, stem_fn block, stem_fn pixel, size_t px) {
  const size_t end = c->w / 2 > 1 ? c->w / 2 : 1;  // interior columns [1, end)
  pixel(c, oy, 0, oc);
  size_t ox = 1;
  if (end - 1 >= px) {
    for (; ox + px <= end; ox += px) {
      block(c, oy, ox, oc);
    }
    if (ox < end) {
      block(c, oy, end - px, oc);
      ox = end;
    }
  }
  for (; ox < c->ow; ox++) {
    pixel(c, oy, ox, oc);
  }
}

static void stem_task(void* context, size_t start, size_t count) {
  const stem_ctx* c = context;
  for (size_t oy = start; oy < start + count; oy++) {
    for (size_t oc = 0; oc < c->cout; oc += STEM_OC) {
      stem_row(c, oy, oc, c->block, c->pixel, c->px);
    }
  }
}

// The variants' shared entry: checks the arguments and splits the output rows over the pool; block, pixel
// and px are the variant's.
static carve_status stem_drive(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                               const float* weights, const float* bias, size_t cout, float* y, size_t y_stride,
                               carve_act act, stem_fn block, stem_fn pixel, size_t px, pthreadpool_t pool) {
  if (x == NULL || weights == NULL || bias == NULL || y == NULL || h == 0 || w == 0 || cin == 0 ||
      cin > CARVE_STEM_MAX_CIN || cout == 0 || cout % CARVE_STEM_COUT_MULTIPLE != 0 || x_stride < cin ||
      y_stride < cout || (act != CARVE_ACT_NONE && act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1;
  stem_ctx ctx = {x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, ow, act == CARVE_ACT_SILU,
                  block, pixel, px};
  const size_t per_row = ow * cout;
  const size_t tile = per_row >= STEM_TASK_ELEMENTS ? 1 : STEM_TASK_ELEMENTS / per_row;
  carve_parallelize_1d_tile(pool, stem_task, &ctx, oh, tile);
  return CARVE_OK;
}

// ---- Variants and selection

carve_status carve_conv3x3s2_small_cin__portable(const float* x, size_t x_stride, size_t h, size_t w,
                                                 size_t cin, const float* weights, const float* bias,
                                                 size_t cout, float* y, size_t y_stride, carve_act act,
                                                 pthreadpool_t pool) {
  return stem_drive(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, act, stem_block_portable,
                    stem_pixel, STEM_PX_PORTABLE, pool);
}

#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_conv3x3s2_small_cin__avx2(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                             const float* weights, const float* bias, size_t cout, float* y,
                                             size_t y_stride, carve_act act, pthreadpool_t pool) {
  return stem_drive(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, act, stem_block_avx2,
                    stem_pixel_avx2, STEM_PX_AVX2, pool);
}

carve_status carve_conv3x3s2_small_cin__avx512(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                               const float* weights, const float* bias, size_t cout, float* y,
                                               size_t y_stride, carve_act act, pthreadpool_t pool) {
  return stem_drive(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, act, stem_block_avx512,
                    stem_pixel_avx512, STEM_PX_AVX512, pool);
}
#endif

carve_conv3x3s2_small_cin_fn carve_conv3x3s2_small_cin_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512) {
    return carve_conv3x3s2_small_cin__avx512;
  }
  if (isa == CARVE_ISA_AVX2) {
    return carve_conv3x3s2_small_cin__avx2;
  }
#endif
  (void)isa;
  return carve_conv3x3s2_small_cin__portable;
}

carve_status carve_conv3x3s2_small_cin(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                       const float* weights, const float* bias, size_t cout, float* y,
                                       size_t y_stride, carve_act act, pthreadpool_t pool) {
  return carve_conv3x3s2_small_cin_select(carve_isa_detect())(x, x_stride, h, w, cin, weights, bias, cout, y,
                                                              y_stride, act, pool);
}
