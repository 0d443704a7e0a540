// carve runtime: element-wise and tensor ops (see carve_ops.h).

#include "carve_ops.h"

#include <math.h>
#include <string.h>

// Elements one epilogue task touches, so that small tensors stay on one thread.
#define CARVE_EPILOGUE_TASK_ELEMENTS 16384

// Tile edge of the blocked NCHW <-> NHWC transposes.
#define CARVE_TRANSPOSE_TILE 32

// Attention: query rows that share one pass over k and v (CARVE_ATTN_GROUP, in
// carve_ops.h), and v channels whose weighted sums are accumulated at a time.
#define CARVE_ATTN_V_CHUNK 32
// Keys whose weighted v products are summed before joining the running sums.
#define CARVE_ATTN_SUM_BLOCK 64

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// ---- Instruction sets ---------------------------------------------------------
//
// The hot loops (epilogue, attention) are compiled three times: for AVX-512
// (x86-64-v4), AVX2 + FMA (x86-64-v3) and the baseline the package is built for,
// and the dynamic loader picks the best one the CPU has (target_clones, an ELF
// ifunc). The package still runs on any x86-64. The clones evaluate the same
// float operations in the same order (GCC in ISO C mode does not contract
// a * b + c into an FMA), so every clone gives the same bits; the one exception
// is SiLU, which has FMA intrinsics of its own (see "SiLU on AVX-512" below).
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
  int simd;                // silu_simd_level(): 2 AVX-512, 1 AVX2 + FMA, 0 the portable loop
} epilogue_ctx;

// SiLU(x) = x / (1 + exp(-x)) in float, the expression torch.nn.SiLU evaluates.
static inline float silu(float x) { return x / (1.0f + exp_u10(-x)); }

// ---- SiLU on AVX-512 and AVX2 + FMA ------------------------------------------
//
// SiLU is compute-bound: the portable exp_u10 above is some 45 vector
// instructions per 16 floats (integer exponent tricks, range masks, no FMA), and
// with 93 epilogues per yolo26n inference it was a fifth of the time. On
// x86-64 with AVX-512 (or AVX2 + FMA) the same algorithm runs as intrinsics: the
// argument clamped to [-104, 100] once (min / max) instead of two range masks,
// the reduction and the degree-5 polynomial as FMAs, 2^q by VSCALEFPS (AVX-512;
// AVX2 multiplies by two powers of two, as exp_u10 does), then the same IEEE
// division: 18 instructions per 16 floats, 1.7x faster on data in cache. These
// are the operations PyTorch's AVX2 / AVX-512 SiLU performs (SLEEF with FMA): on
// ops_vs_torch.py's 3M values the AVX-512 path is bit-equal to torch. Against
// the portable loop (no FMA, so it rounds twice where these round once) 99.96%
// of results are bit-equal and the rest within 4 ulp; the relative error against
// the exact value is 1.4e-7 at most, the portable loop's 1.74e-7
// (tests/runtime/test_silu_simd.c, every 32nd float in [-104, 100] and the
// specials). So the CPU a package runs on can change the last bits of a SiLU,
// as it can for XNNPACK's convolutions.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target)
#define CARVE_SILU_X86 1
#endif
#endif

#ifdef CARVE_SILU_X86
#include <immintrin.h>

__attribute__((target("avx512f"))) static inline __m512 silu16_avx512(__m512 x) {
  // d = -x clamped to [-104, 100]: below, exp(d) is 0 in float; above, +inf. NaN x gives NaN below.
  const __m512 d = _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), x),
                                               _mm512_set1_ps(-104.0f)), _mm512_set1_ps(100.0f));
  const __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(d, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 s = _mm512_fmadd_ps(q, _mm512_set1_ps(-0.693145751953125f), d);
  s = _mm512_fmadd_ps(q, _mm512_set1_ps(-1.428606765330187045e-06f), s);
  __m512 u = _mm512_fmadd_ps(_mm512_set1_ps(0.000198527617612853646278381f), s,
                             _mm512_set1_ps(0.00139304355252534151077271f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.00833336077630519866943359f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.0416664853692054748535156f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.166666671633720397949219f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.5f));
  u = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
  const __m512 e = _mm512_scalef_ps(u, q);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// y[i] = silu(y[i]) (+ r[i]) for i < count; the tail under a mask.
__attribute__((target("avx512f"))) static void silu_avx512(float* y, const float* r, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 v = silu16_avx512(_mm512_loadu_ps(y + i));
    if (r != NULL) {
      v = _mm512_add_ps(v, _mm512_loadu_ps(r + i));
    }
    _mm512_storeu_ps(y + i, v);
  }
  if (i < count) {
    const __mmask16 k = (__mmask16)((1u << (count - i)) - 1u);
    __m512 v = silu16_avx512(_mm512_maskz_loadu_ps(k, y + i));
    if (r != NULL) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, r + i));
    }
    _mm512_mask_storeu_ps(y + i, k, v);
  }
}

__attribute__((target("avx2,fma"))) static inline __m256 silu8_avx2(__m256 x) {
  const __m256 d = _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x),
                                               _mm256_set1_ps(-104.0f)), _mm256_set1_ps(100.0f));
  const __m256 q = _mm256_round_ps(_mm256_mul_ps(d, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 s = _mm256_fmadd_ps(q, _mm256_set1_ps(-0.693145751953125f), d);
  s = _mm256_fmadd_ps(q, _mm256_set1_ps(-1.428606765330187045e-06f), s);
  __m256 u = _mm256_fmadd_ps(_mm256_set1_ps(0.000198527617612853646278381f), s,
                             _mm256_set1_ps(0.00139304355252534151077271f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.00833336077630519866943359f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.0416664853692054748535156f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.166666671633720397949219f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.5f));
  u = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
  // times 2^q as 2^h * 2^(q - h), h = floor(q / 2): each factor a normal float for q in [-151, 145].
  const __m256i qi = _mm256_cvtps_epi32(q);
  const __m256i h = _mm256_srai_epi32(qi, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(qi, h), bias), 23));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(u, p1), p2);
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

__attribute__((target("avx2,fma"))) static void silu_avx2(float* y, const float* r, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 v = silu8_avx2(_mm256_loadu_ps(y + i));
    if (r != NULL) {
      v = _mm256_add_ps(v, _mm256_loadu_ps(r + i));
    }
    _mm256_storeu_ps(y + i, v);
  }
  if (i < count) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(count - i)), lanes);
    __m256 v = silu8_avx2(_mm256_maskload_ps(y + i, k));
    if (r != NULL) {
      v = _mm256_add_ps(v, _mm256_maskload_ps(r + i, k));
    }
    _mm256_maskstore_ps(y + i, k, v);
  }
}

// Which of the above the CPU runs (0: the portable loop). __builtin_cpu_supports
// reads what libgcc's constructor found, no system call.
static int silu_simd_level(void) {
  if (__builtin_cpu_supports("avx512f")) {
    return 2;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return 1;
  }
  return 0;
}
#endif

// y[i] = act(y[i]) + r[i] for i < count (r may be NULL).
static inline void epilogue_run(float* y, const float* r, size_t count, int act, int simd) {
#ifdef CARVE_SILU_X86
  if (act && simd == 2) {
    silu_avx512(y, r, count);
    return;
  }
  if (act && simd == 1) {
    silu_avx2(y, r, count);
    return;
  }
#else
  (void)simd;
#endif
  if (act && r != NULL) {
    for (size_t i = 0; i < count; i++) {
      y[i] = silu(y[i]) + r[i];
    }
  } else if (act) {
    for (size_t i = 0; i < count; i++) {
      y[i] = silu(y[i]);
    }
  } else if (r != NULL) {
    for (size_t i = 0; i < count; i++) {
      y[i] += r[i];
    }
  }
}

// y[p][c] = act(y[p][c]) + r[p][c] for pixels [start, start + count). Where the
// rows are back to back (stride == channels, for y and the residual), the tile is
// one run of count * channels elements: the vector loop and its constants are set
// up once rather than once per pixel, which matters for 8 to 32 channels.
CARVE_SIMD_CLONES static void epilogue_task(void* context, size_t start, size_t count) {
  const epilogue_ctx* ctx = context;
  const size_t channels = ctx->channels;
  const int act = ctx->act == CARVE_ACT_SILU;
  const int simd = ctx->simd;
  const float* residual = ctx->residual;
  if (ctx->y_stride == channels && (residual == NULL || ctx->r_stride == channels)) {
    epilogue_run(ctx->y + start * channels, residual != NULL ? residual + start * channels : NULL,
                 count * channels, act, simd);
    return;
  }
  for (size_t p = start; p < start + count; p++) {
    epilogue_run(ctx->y + p * ctx->y_stride, residual != NULL ? residual + p * ctx->r_stride : NULL,
                 channels, act, simd);
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
#ifdef CARVE_SILU_X86
  const int simd = silu_simd_level();
#else
  const int simd = 0;
#endif
  epilogue_ctx ctx = {y, y_stride, residual, r_stride, channels, act, simd};
  const size_t tile = channels >= CARVE_EPILOGUE_TASK_ELEMENTS
                          ? 1
                          : CARVE_EPILOGUE_TASK_ELEMENTS / channels;
  carve_parallelize_1d_tile(pool, epilogue_task, &ctx, pixels, tile);
}

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

typedef struct stem_ctx {
  const float* x;          // (h, w, cin), pixel stride x_stride
  size_t x_stride, h, w, cin;
  const float* weights;    // (3, 3, cin, cout)
  const float* bias;       // (cout)
  size_t cout;
  float* y;                // (oh, ow, cout), pixel stride y_stride
  size_t y_stride, ow;
  int silu;
  int simd;                // 2 AVX-512, 1 AVX2 + FMA, 0 portable
} stem_ctx;

// One output pixel (or block of pixels starting at ox) of row oy, channels [oc, oc + 16).
typedef void (*stem_fn)(const stem_ctx* c, size_t oy, size_t ox, size_t oc);

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

#ifdef CARVE_SILU_X86
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
  stem_fn block = stem_block_portable, pixel = stem_pixel;
  size_t px = STEM_PX_PORTABLE;
#ifdef CARVE_SILU_X86
  if (c->simd == 2) {
    block = stem_block_avx512;
    pixel = stem_pixel_avx512;
    px = STEM_PX_AVX512;
  } else if (c->simd == 1) {
    block = stem_block_avx2;
    pixel = stem_pixel_avx2;
    px = STEM_PX_AVX2;
  }
#endif
  for (size_t oy = start; oy < start + count; oy++) {
    for (size_t oc = 0; oc < c->cout; oc += STEM_OC) {
      stem_row(c, oy, oc, block, pixel, px);
    }
  }
}

// The kernel with its instruction set named (simd: 2 AVX-512, 1 AVX2 + FMA, 0
// portable; a level the CPU lacks falls back); carve_conv3x3s2_small_cin picks the best.
static carve_status stem_conv(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                              const float* weights, const float* bias, size_t cout, float* y, size_t y_stride,
                              carve_act act, int simd, pthreadpool_t pool) {
  if (x == NULL || weights == NULL || bias == NULL || y == NULL || h == 0 || w == 0 || cin == 0 ||
      cin > CARVE_STEM_MAX_CIN || cout == 0 || cout % CARVE_STEM_COUT_MULTIPLE != 0 || x_stride < cin ||
      y_stride < cout || (act != CARVE_ACT_NONE && act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1;
#ifdef CARVE_SILU_X86
  const int have = silu_simd_level();
  simd = simd < have ? simd : have;
#else
  simd = 0;
#endif
  stem_ctx ctx = {x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, ow, act == CARVE_ACT_SILU, simd};
  const size_t per_row = ow * cout;
  const size_t tile = per_row >= STEM_TASK_ELEMENTS ? 1 : STEM_TASK_ELEMENTS / per_row;
  carve_parallelize_1d_tile(pool, stem_task, &ctx, oh, tile);
  return CARVE_OK;
}

carve_status carve_conv3x3s2_small_cin(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                       const float* weights, const float* bias, size_t cout, float* y,
                                       size_t y_stride, carve_act act, pthreadpool_t pool) {
  return stem_conv(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, act, 2, pool);
}

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

typedef struct dw_ctx {
  const float* x;
  size_t x_stride, h, w, c;
  const float* weights;  // (3, 3, c)
  const float* bias;     // (c)
  float* y;
  size_t y_stride;
  int silu;
  int simd;
} dw_ctx;

// Rows ky in [*ky0, *ky1) of output row oy lie inside the image.
static inline void dw_rows(const dw_ctx* c, size_t oy, size_t* ky0, size_t* ky1) {
  *ky0 = oy == 0 ? 1 : 0;
  *ky1 = oy + 1 < c->h ? 3 : 2;
}

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

#ifdef CARVE_SILU_X86
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

static void dw_task(void* context, size_t start, size_t count) {
  const dw_ctx* c = context;
  for (size_t oy = start; oy < start + count; oy++) {
#ifdef CARVE_SILU_X86
    if (c->simd == 2) {
      dw_row_avx512(c, oy);
      continue;
    }
    if (c->simd == 1) {
      dw_row_avx2(c, oy);
      continue;
    }
#endif
    dw_row_portable(c, oy);
  }
}

// The kernel with its instruction set named (simd: 2 AVX-512, 1 AVX2 + FMA, 0 portable; a level the CPU
// lacks falls back); carve_dwconv3x3 picks the best.
static carve_status dw_conv(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
                            const float* bias, float* y, size_t y_stride, carve_act act, int simd,
                            pthreadpool_t pool) {
  if (x == NULL || weights == NULL || bias == NULL || y == NULL || h == 0 || w == 0 || c == 0 || x_stride < c ||
      y_stride < c || (act != CARVE_ACT_NONE && act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
#ifdef CARVE_SILU_X86
  const int have = silu_simd_level();
  simd = simd < have ? simd : have;
#else
  simd = 0;
#endif
  dw_ctx ctx = {x, x_stride, h, w, c, weights, bias, y, y_stride, act == CARVE_ACT_SILU, simd};
  const size_t per_row = w * c;
  const size_t tile = per_row >= DW_TASK_ELEMENTS ? 1 : DW_TASK_ELEMENTS / per_row;
  carve_parallelize_1d_tile(pool, dw_task, &ctx, h, tile);
  return CARVE_OK;
}

carve_status carve_dwconv3x3(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
                             const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool) {
  return dw_conv(x, x_stride, h, w, c, weights, bias, y, y_stride, act, 2, pool);
}

// ---- Winograd convolution -------------------------------------------------------
//
// A 3x3, stride 1, pad 1 convolution by Winograd F(2x2, 3x3) (bench/winograd_vs_xnnpack.c: 1.25x to 2.35x
// XNNPACK's direct convolution + SiLU pass on yolo26n/s's shapes, one thread). The output is cut into 2x2
// tiles, numbered row-major and taken CARVE_WINOGRAD_TILES at a time (a group; tiles past the last are all
// zeros). For each block of CARVE_WINOGRAD_KC input channels the input transform B^T d B of the 4x4 input
// patches (zeros outside the image) writes U[16][TILES][kc], and 16 GEMMs TILES x kc x cout accumulate
// U[k] x weights[k] into M[16][TILES][cout]; then the output transform A^T m A gives the 2x2 outputs, to
// which the bias, the activation and the residual are applied in registers before the (clipped) store.
// The transforms are additions and subtractions only, the same on every path; the GEMMs sum over the input
// channels in increasing order, with FMA on the x86-64 paths (AVX-512: 12 tiles x 32 channels in 24
// registers, or 12 x 16 for the last 16 channels; AVX2 + FMA: 6 tiles x 16 channels), with CARVE_MLA in
// the portable loops (2 tiles x 16 channels, which compilers vectorise); on aarch64 NEON replaces the
// portable path (GEMM 4 tiles x 16 channels, 16 accumulators and vfmaq_laneq_f32, 1.33 instructions per FMA
// in GCC 12's inner loop; NEON transforms, the portable SiLU): checked under qemu-aarch64 only, its speed
// unmeasured. One thread, 40x40x64 -> 64:
// 0.41 ms on AVX-512, 0.75 ms on AVX2 + FMA, 3.2 ms portable (SSE2); 80x80x32 -> 32: 0.54, 0.88, 4.0 ms. A tile's result depends only on its own data, so neither the split of the groups
// over the slots nor the number of threads changes a bit.
// Channels come in multiples of 8 (CARVE_WINOGRAD_CHANNEL_MULTIPLE): every path keeps its blocks of 16 (or 32)
// and ends an odd multiple of 8 with one 8-channel block, so the multiples of 16 run as before. On AVX-512 the
// transforms of that block load and store with the mask 0x00ff (a plain 512-bit load would read past the last
// pixel's channels) and the GEMM of the last 8 output channels is wino_gemm8_avx2 (12 tiles x 8 channels in
// 256-bit registers, shared with the AVX2 path); the portable and NEON loops have 8-channel instances. With
// exactly 8 channels the AVX-512 transforms take two tiles per register instead (input when the block has 8
// channels, output when cout is 8): their rows of U or M are adjacent. This is for yolo26n's model.2
// bottleneck (160x160, 16 -> 8, then 8 -> 16 + residual), XNNPACK's until then: one thread, 1.66x and 1.15x
// XNNPACK + its SiLU (+ residual) pass (docs/performance.md).

#define WINO_TILES CARVE_WINOGRAD_TILES
#define WINO_KC CARVE_WINOGRAD_KC
#define WINO_PAD 16  // floats after each plane of U and M: the 16 planes do not share one L1 set
#define WINO_U_PLANE (WINO_TILES * WINO_KC + WINO_PAD)

_Static_assert(CARVE_WINOGRAD_KC % 16 == 0 && CARVE_WINOGRAD_TILES % 12 == 0,
               "the micro-kernels take 12 (or 2 x 6, 3 x 4) tiles and 16 channels at a time");

// Input for the positions of a 4x4 patch outside the image (or of a tile past the last).
static const float wino_zeros[WINO_KC];

typedef struct wino_ctx {
  const float* x;          // (h, w, cin), pixel stride x_stride
  size_t x_stride, h, w, cin;
  const float* weights;    // (16, cin, cout)
  const float* bias;       // (cout)
  size_t cout;
  float* y;                // (h, w, cout), pixel stride y_stride
  size_t y_stride;
  const float* residual;   // (h, w, cout), pixel stride r_stride, or NULL
  size_t r_stride;
  size_t tw, tiles, groups, slots;  // tiles per row, tiles, groups of WINO_TILES tiles, slots
  unsigned char* scratch;  // slots of CARVE_WINOGRAD_SLOT_BYTES(cout)
  int silu;
  int simd;                // 2 AVX-512, 1 AVX2 + FMA (aarch64: NEON), 0 portable
} wino_ctx;

// A tile's number and its row and column in the grid of tiles, stepped one tile at a time: a division per
// tile (t / tw) cost some 8% of a 160x160x8 -> 16 layer, whose tiles carry little work each.
typedef struct wino_pos {
  size_t t, ty, tx;
} wino_pos;

static inline wino_pos wino_pos_at(const wino_ctx* c, size_t t) {
  const wino_pos q = {t, t / c->tw, t % c->tw};
  return q;
}

static inline void wino_pos_next(const wino_ctx* c, wino_pos* q) {
  q->t++;
  if (++q->tx == c->tw) {
    q->tx = 0;
    q->ty++;
  }
}

// p[r * 4 + q]: channels [c0, c0 + kc) of the input pixel (2 ty + r - 1, 2 tx + q - 1) of tile t, or zeros.
static inline void wino_patch(const wino_ctx* c, const wino_pos* t, size_t c0, const float* p[16]) {
  const size_t ty = t->ty, tx = t->tx;
  if (t->t < c->tiles && ty >= 1 && tx >= 1 && 2 * ty + 3 <= c->h && 2 * tx + 3 <= c->w) {
    // inside the image (most tiles): 16 pixels at fixed offsets from the first
    const float* p0 = c->x + ((2 * ty - 1) * c->w + (2 * tx - 1)) * c->x_stride + c0;
    for (size_t r = 0; r < 4; r++) {
      for (size_t q = 0; q < 4; q++) {
        p[r * 4 + q] = p0 + (r * c->w + q) * c->x_stride;
      }
    }
    return;
  }
  for (size_t r = 0; r < 4; r++) {
    for (size_t q = 0; q < 4; q++) {
      const size_t iy = 2 * ty + r, ix = 2 * tx + q;  // plus one
      const int inside = t->t < c->tiles && iy >= 1 && ix >= 1 && iy <= c->h && ix <= c->w;
      p[r * 4 + q] = inside ? c->x + ((iy - 1) * c->w + (ix - 1)) * c->x_stride + c0 : wino_zeros;
    }
  }
}

// The 2x2 output pixels of tile t (top-left, top-right, bottom-left, bottom-right): where to store them in y,
// their residuals (NULL without one) and which lie inside the image (the right column and bottom row of a tile
// at an odd edge do not).
static inline void wino_out_tile(const wino_ctx* c, const wino_pos* t, float* yp[4], const float* rp[4],
                                 int inside[4]) {
  const size_t oy = 2 * t->ty, ox = 2 * t->tx;
  const size_t pix[4] = {oy * c->w + ox, oy * c->w + ox + 1, (oy + 1) * c->w + ox, (oy + 1) * c->w + ox + 1};
  const int dx = ox + 1 < c->w, dy = oy + 1 < c->h;
  inside[0] = 1;
  inside[1] = dx;
  inside[2] = dy;
  inside[3] = dx && dy;
  for (int k = 0; k < 4; k++) {
    yp[k] = c->y + pix[k] * c->y_stride;
    rp[k] = c->residual != NULL ? c->residual + pix[k] * c->r_stride : NULL;
  }
}

static inline float* wino_m(unsigned char* slot) { return (float*)(void*)slot + 16 * WINO_U_PLANE; }

static inline size_t wino_m_plane(const wino_ctx* c) { return WINO_TILES * c->cout + WINO_PAD; }

// ---- portable

// Inlined with a constant channel count (16 or 8), so that each width is a loop the compiler vectorises.
#if defined(__GNUC__)
#define WINO_INLINE __attribute__((always_inline)) static inline
#else
#define WINO_INLINE static inline
#endif

// n (16 or 8) channels from ci of one tile's input transform; u is the tile's row of plane 0 (at channel 0).
WINO_INLINE void wino_input_block_portable(const float* const p[16], size_t ci, float* u, const int n) {
  float d[16][16], e[16][16];
  for (int i = 0; i < 16; i++) {
    for (int j = 0; j < n; j++) {
      d[i][j] = p[i][ci + j];
    }
  }
  for (int q = 0; q < 4; q++) {  // B^T d
    for (int j = 0; j < n; j++) {
      e[q][j] = d[q][j] - d[8 + q][j];
      e[4 + q][j] = d[4 + q][j] + d[8 + q][j];
      e[8 + q][j] = d[8 + q][j] - d[4 + q][j];
      e[12 + q][j] = d[4 + q][j] - d[12 + q][j];
    }
  }
  for (int r = 0; r < 4; r++) {  // (B^T d) B
    float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
    for (int j = 0; j < n; j++) {
      ur[j] = e[r * 4][j] - e[r * 4 + 2][j];
      ur[WINO_U_PLANE + j] = e[r * 4 + 1][j] + e[r * 4 + 2][j];
      ur[2 * WINO_U_PLANE + j] = e[r * 4 + 2][j] - e[r * 4 + 1][j];
      ur[3 * WINO_U_PLANE + j] = e[r * 4 + 1][j] - e[r * 4 + 3][j];
    }
  }
}

// kc is a multiple of 8: blocks of 16 channels, then one of 8 (constant widths, which the compiler vectorises).
static void wino_input_portable(const wino_ctx* c, size_t t0, size_t c0, size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    size_t ci = 0;
    for (; ci + 16 <= kc; ci += 16) {
      wino_input_block_portable(p, ci, u, 16);
    }
    if (ci < kc) {
      wino_input_block_portable(p, ci, u, 8);
    }
  }
}

// Tiles of one portable GEMM call: 2 x 16 accumulators, 8 SSE registers (x86-64's baseline has 16).
#ifndef WINO_PORTABLE_TILES
#define WINO_PORTABLE_TILES 2
#endif

// GCC's -O3 vectorises the loop over the input channels below (shuffling across them, 4x slower than -O2);
// the 16 channels of each accumulator row are vectorised by SLP, which this leaves on.
#if defined(__GNUC__) && !defined(__clang__)
#define WINO_NO_LOOP_VECTORIZE __attribute__((optimize("no-tree-loop-vectorize")))
#else
#define WINO_NO_LOOP_VECTORIZE
#endif

// m[WINO_PORTABLE_TILES][cout] (at co) (+)= u[WINO_PORTABLE_TILES][kc] x w[kc][cout] (at co), n (16 or 8)
// channels; += unless first.
WINO_NO_LOOP_VECTORIZE WINO_INLINE void wino_gemm_portable(const float* u, const float* w, float* m, size_t kc,
                                                           size_t cout, int first, const int n) {
  float acc[WINO_PORTABLE_TILES][16];
#pragma GCC unroll 4
  for (int i = 0; i < WINO_PORTABLE_TILES; i++) {
#pragma GCC unroll 16
    for (int j = 0; j < n; j++) {
      acc[i][j] = first ? 0.0f : m[i * cout + j];
    }
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const float* wr = w + ci * cout;
#pragma GCC unroll 4
    for (int i = 0; i < WINO_PORTABLE_TILES; i++) {
      const float a = u[i * kc + ci];
#pragma GCC unroll 16
      for (int j = 0; j < n; j++) {
        acc[i][j] = CARVE_MLA(a, wr[j], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < WINO_PORTABLE_TILES; i++) {
#pragma GCC unroll 16
    for (int j = 0; j < n; j++) {
      m[i * cout + j] = acc[i][j];
    }
  }
}

WINO_NO_LOOP_VECTORIZE static void wino_gemm16_portable(const float* u, const float* w, float* m, size_t kc,
                                                        size_t cout, int first) {
  wino_gemm_portable(u, w, m, kc, cout, first, 16);
}

WINO_NO_LOOP_VECTORIZE static void wino_gemm8_portable(const float* u, const float* w, float* m, size_t kc,
                                                       size_t cout, int first) {
  wino_gemm_portable(u, w, m, kc, cout, first, 8);
}

// cout is a multiple of 8: blocks of 16 output channels, the last one 8 if cout is an odd multiple of 8.
static void wino_gemms_portable(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 16) {
      for (size_t i = 0; i < WINO_TILES; i += WINO_PORTABLE_TILES) {
        const float* u = U + k * WINO_U_PLANE + i * kc;
        const float* w = c->weights + (k * cin + c0) * cout + co;
        float* m = M + k * mp + i * cout + co;
        if (cout - co >= 16) {
          wino_gemm16_portable(u, w, m, kc, cout, c0 == 0);
        } else {
          wino_gemm8_portable(u, w, m, kc, cout, c0 == 0);
        }
      }
    }
  }
}

// n (16 or 8) output channels from co of tile t (M at the tile's row, channel 0).
WINO_INLINE void wino_output_block_portable(const wino_ctx* c, const float* M, size_t co, float* const yp[4],
                                            const float* const rp[4], const int inside[4], const int n) {
  const size_t mp = wino_m_plane(c);
  const float* m = M + co;
  float r0[4][16], r1[4][16], o[4][16];
  for (int q = 0; q < 4; q++) {  // A^T m
    for (int j = 0; j < n; j++) {
      r0[q][j] = (m[q * mp + j] + m[(4 + q) * mp + j]) + m[(8 + q) * mp + j];
      r1[q][j] = (m[(4 + q) * mp + j] - m[(8 + q) * mp + j]) - m[(12 + q) * mp + j];
    }
  }
  for (int j = 0; j < n; j++) {  // (A^T m) A + bias
    const float b = c->bias[co + j];
    o[0][j] = ((r0[0][j] + r0[1][j]) + r0[2][j]) + b;
    o[1][j] = ((r0[1][j] - r0[2][j]) - r0[3][j]) + b;
    o[2][j] = ((r1[0][j] + r1[1][j]) + r1[2][j]) + b;
    o[3][j] = ((r1[1][j] - r1[2][j]) - r1[3][j]) + b;
  }
  for (int k = 0; k < 4; k++) {
    if (!inside[k]) {
      continue;
    }
    for (int j = 0; j < n; j++) {
      const float v = c->silu ? silu(o[k][j]) : o[k][j];
      yp[k][co + j] = rp[k] != NULL ? v + rp[k][co + j] : v;
    }
  }
}

static void wino_output_portable(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout;
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    size_t co = 0;
    for (; co + 16 <= cout; co += 16) {
      wino_output_block_portable(c, M + t * cout, co, yp, rp, inside, 16);
    }
    if (co < cout) {
      wino_output_block_portable(c, M + t * cout, co, yp, rp, inside, 8);
    }
  }
}

#ifdef CARVE_SILU_X86
// ---- AVX-512

// The input transform of one tile's 16 channels from ci (mode 1; u: the tile's row of plane 0), of a block's
// last 8 channels by masked loads and stores (mode 0: plain ones would read past cin, at the end of x), or of
// two tiles' 8 channels when the block has 8 (mode 2, ci 0): tile t (p) in the low half of each register and
// t + 1 (p1) in the high half, whose rows of U are adjacent, for half the arithmetic and stores of mode 0.
__attribute__((target("avx512f"), always_inline)) static inline void wino_input_block_avx512(
    const float* const p[16], const float* const p1[16], size_t ci, float* u, const int mode) {
  __m512 d[16], e[16];
  for (int i = 0; i < 16; i++) {
    if (mode == 1) {
      d[i] = _mm512_loadu_ps(p[i] + ci);
    } else if (mode == 0) {
      d[i] = _mm512_maskz_loadu_ps(0x00ff, p[i] + ci);
    } else {
      d[i] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(p[i]))),
                                                 _mm256_castps_pd(_mm256_loadu_ps(p1[i])), 1));
    }
  }
  for (int q = 0; q < 4; q++) {  // B^T d
    e[q] = _mm512_sub_ps(d[q], d[8 + q]);
    e[4 + q] = _mm512_add_ps(d[4 + q], d[8 + q]);
    e[8 + q] = _mm512_sub_ps(d[8 + q], d[4 + q]);
    e[12 + q] = _mm512_sub_ps(d[4 + q], d[12 + q]);
  }
  for (int r = 0; r < 4; r++) {  // (B^T d) B
    float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
    const __m512 v[4] = {_mm512_sub_ps(e[r * 4], e[r * 4 + 2]), _mm512_add_ps(e[r * 4 + 1], e[r * 4 + 2]),
                         _mm512_sub_ps(e[r * 4 + 2], e[r * 4 + 1]), _mm512_sub_ps(e[r * 4 + 1], e[r * 4 + 3])};
    for (int k = 0; k < 4; k++) {
      if (mode != 0) {
        _mm512_storeu_ps(ur + k * WINO_U_PLANE, v[k]);
      } else {
        _mm512_mask_storeu_ps(ur + k * WINO_U_PLANE, 0x00ff, v[k]);
      }
    }
  }
}

__attribute__((target("avx512f"))) static void wino_input_avx512(const wino_ctx* c, size_t t0, size_t c0,
                                                                 size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  if (kc == 8) {  // an 8-channel block (cin 8, or the last of an odd multiple of 8): pairs of tiles
    _Static_assert(WINO_TILES % 2 == 0, "tiles are paired");
    for (size_t t = 0; t < WINO_TILES; t += 2) {
      const float* p[16];
      const float* p1[16];
      wino_patch(c, &pos, c0, p);
      wino_pos_next(c, &pos);
      wino_patch(c, &pos, c0, p1);
      wino_pos_next(c, &pos);
      wino_input_block_avx512(p, p1, 0, U + t * kc, 2);
    }
    return;
  }
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    size_t ci = 0;
    for (; ci + 16 <= kc; ci += 16) {
      wino_input_block_avx512(p, p, ci, u, 1);
    }
    if (ci < kc) {
      wino_input_block_avx512(p, p, ci, u, 0);
    }
  }
}

// m[12][cout] (at co) (+)= u[12][kc] x w[kc][cout] (at co), nv * 16 channels; += unless first.
__attribute__((target("avx512f"), always_inline)) static inline void wino_gemm_avx512(
    const float* u, const float* w, float* m, size_t kc, size_t cout, int first, const int nv) {
  __m512 acc[12][2];
  for (int i = 0; i < 12; i++) {
    acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(m + i * cout);
    acc[i][1] = first || nv == 1 ? _mm512_setzero_ps() : _mm512_loadu_ps(m + i * cout + 16);
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const __m512 w0 = _mm512_loadu_ps(w + ci * cout);
    const __m512 w1 = nv == 2 ? _mm512_loadu_ps(w + ci * cout + 16) : w0;
#pragma GCC unroll 16
    for (int i = 0; i < 12; i++) {
      const __m512 a = _mm512_set1_ps(u[i * kc + ci]);
      acc[i][0] = _mm512_fmadd_ps(a, w0, acc[i][0]);
      if (nv == 2) {
        acc[i][1] = _mm512_fmadd_ps(a, w1, acc[i][1]);
      }
    }
  }
  for (int i = 0; i < 12; i++) {
    _mm512_storeu_ps(m + i * cout, acc[i][0]);
    if (nv == 2) {
      _mm512_storeu_ps(m + i * cout + 16, acc[i][1]);
    }
  }
}

__attribute__((target("avx512f"))) static void wino_gemm32_avx512(const float* u, const float* w, float* m,
                                                                  size_t kc, size_t cout, int first) {
  wino_gemm_avx512(u, w, m, kc, cout, first, 2);
}

__attribute__((target("avx512f"))) static void wino_gemm16_avx512(const float* u, const float* w, float* m,
                                                                  size_t kc, size_t cout, int first) {
  wino_gemm_avx512(u, w, m, kc, cout, first, 1);
}

__attribute__((target("avx2,fma"))) static void wino_gemm8_avx2(const float* u, const float* w, float* m,
                                                                size_t kc, size_t cout, int first);

// cout is a multiple of 8: blocks of 32 output channels, the last one 16, 24 (16 + 8) or 8 (wino_gemm8_avx2:
// 12 tiles x 8 channels in 256-bit registers; every CPU with AVX-512F has AVX2 and FMA).
static void wino_gemms_avx512(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 32) {
      for (size_t i = 0; i < WINO_TILES; i += 12) {
        const float* u = U + k * WINO_U_PLANE + i * kc;
        const float* w = c->weights + (k * cin + c0) * cout + co;
        float* m = M + k * mp + i * cout + co;
        if (cout - co >= 32) {
          wino_gemm32_avx512(u, w, m, kc, cout, c0 == 0);
        } else if (cout - co >= 16) {
          wino_gemm16_avx512(u, w, m, kc, cout, c0 == 0);
          if (cout - co == 24) {
            wino_gemm8_avx2(u, w + 16, m + 16, kc, cout, c0 == 0);
          }
        } else {
          wino_gemm8_avx2(u, w, m, kc, cout, c0 == 0);
        }
      }
    }
  }
}

// 16 output channels from co of one tile (M at the tile's row, channel 0), or with full == 0 the last 8 of
// cout by masked loads and stores.
__attribute__((target("avx512f"), always_inline)) static inline void wino_output_block_avx512(
    const wino_ctx* c, const float* M, size_t co, float* const yp[4], const float* const rp[4],
    const int inside[4], const int full) {
  const size_t mp = wino_m_plane(c);
  const __mmask16 mk = full ? 0xffff : 0x00ff;
  const float* mq = M + co;
  __m512 m[16], r0[4], r1[4], o[4];
  for (int k = 0; k < 16; k++) {
    m[k] = full ? _mm512_loadu_ps(mq + k * mp) : _mm512_maskz_loadu_ps(mk, mq + k * mp);
  }
  for (int q = 0; q < 4; q++) {  // A^T m
    r0[q] = _mm512_add_ps(_mm512_add_ps(m[q], m[4 + q]), m[8 + q]);
    r1[q] = _mm512_sub_ps(_mm512_sub_ps(m[4 + q], m[8 + q]), m[12 + q]);
  }
  const __m512 b = full ? _mm512_loadu_ps(c->bias + co) : _mm512_maskz_loadu_ps(mk, c->bias + co);
  o[0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r0[0], r0[1]), r0[2]), b);
  o[1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r0[1], r0[2]), r0[3]), b);
  o[2] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r1[0], r1[1]), r1[2]), b);
  o[3] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r1[1], r1[2]), r1[3]), b);
  for (int k = 0; k < 4; k++) {
    if (!inside[k]) {
      continue;
    }
    __m512 v = c->silu ? silu16_avx512(o[k]) : o[k];
    if (rp[k] != NULL) {
      v = _mm512_add_ps(v, full ? _mm512_loadu_ps(rp[k] + co) : _mm512_maskz_loadu_ps(mk, rp[k] + co));
    }
    if (full) {
      _mm512_storeu_ps(yp[k] + co, v);
    } else {
      _mm512_mask_storeu_ps(yp[k] + co, mk, v);
    }
  }
}

// Two tiles of 8 output channels (cout == 8): tile t in the low half of each register, t + 1 in the high half
// (their rows of M are adjacent), so that the loads of M, the transform and the SiLU are half those of two
// masked 16-lane blocks. A pixel outside the image reads no residual and stores nothing.
__attribute__((target("avx512f"))) static void wino_output_pair8_avx512(const wino_ctx* c, const float* M,
                                                                        const wino_pos* pos) {
  const size_t mp = wino_m_plane(c);
  wino_pos next = *pos;
  wino_pos_next(c, &next);
  float* yp[2][4];
  const float* rp[2][4];
  int inside[2][4];
  wino_out_tile(c, pos, yp[0], rp[0], inside[0]);
  wino_out_tile(c, &next, yp[1], rp[1], inside[1]);
  __m512 m[16], r0[4], r1[4], o[4];
  for (int k = 0; k < 16; k++) {
    m[k] = _mm512_loadu_ps(M + k * mp);
  }
  for (int q = 0; q < 4; q++) {  // A^T m
    r0[q] = _mm512_add_ps(_mm512_add_ps(m[q], m[4 + q]), m[8 + q]);
    r1[q] = _mm512_sub_ps(_mm512_sub_ps(m[4 + q], m[8 + q]), m[12 + q]);
  }
  const __m256 b8 = _mm256_loadu_ps(c->bias);
  const __m512 b = _mm512_insertf32x4(_mm512_insertf32x4(_mm512_castps256_ps512(b8), _mm256_castps256_ps128(b8), 2),
                                      _mm256_extractf128_ps(b8, 1), 3);
  o[0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r0[0], r0[1]), r0[2]), b);
  o[1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r0[1], r0[2]), r0[3]), b);
  o[2] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r1[0], r1[1]), r1[2]), b);
  o[3] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r1[1], r1[2]), r1[3]), b);
  for (int k = 0; k < 4; k++) {
    if (!inside[0][k] && !inside[1][k]) {
      continue;
    }
    __m512 v = c->silu ? silu16_avx512(o[k]) : o[k];
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    if (inside[0][k]) {
      _mm256_storeu_ps(yp[0][k], rp[0][k] != NULL ? _mm256_add_ps(lo, _mm256_loadu_ps(rp[0][k])) : lo);
    }
    if (inside[1][k]) {
      _mm256_storeu_ps(yp[1][k], rp[1][k] != NULL ? _mm256_add_ps(hi, _mm256_loadu_ps(rp[1][k])) : hi);
    }
  }
}

__attribute__((target("avx512f"))) static void wino_output_avx512(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout;
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  size_t t = 0;
  if (cout == 8) {  // pairs of tiles; an odd last tile below
    for (; t + 2 <= n; t += 2, wino_pos_next(c, &pos), wino_pos_next(c, &pos)) {
      wino_output_pair8_avx512(c, M + t * cout, &pos);
    }
  }
  for (; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    size_t co = 0;
    for (; co + 16 <= cout; co += 16) {
      wino_output_block_avx512(c, M + t * cout, co, yp, rp, inside, 1);
    }
    if (co < cout) {
      wino_output_block_avx512(c, M + t * cout, co, yp, rp, inside, 0);
    }
  }
}

// ---- AVX2 + FMA

__attribute__((target("avx2,fma"))) static void wino_input_avx2(const wino_ctx* c, size_t t0, size_t c0,
                                                                size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    for (size_t ci = 0; ci < kc; ci += 8) {
      for (int r = 0; r < 4; r++) {  // row r of B^T d, then times B
        __m256 e[4];
        for (int q = 0; q < 4; q++) {
          const __m256 d4 = _mm256_loadu_ps(p[4 + q] + ci), d8 = _mm256_loadu_ps(p[8 + q] + ci);
          e[q] = r == 0   ? _mm256_sub_ps(_mm256_loadu_ps(p[q] + ci), d8)
                 : r == 1 ? _mm256_add_ps(d4, d8)
                 : r == 2 ? _mm256_sub_ps(d8, d4)
                          : _mm256_sub_ps(d4, _mm256_loadu_ps(p[12 + q] + ci));
        }
        float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
        _mm256_storeu_ps(ur, _mm256_sub_ps(e[0], e[2]));
        _mm256_storeu_ps(ur + WINO_U_PLANE, _mm256_add_ps(e[1], e[2]));
        _mm256_storeu_ps(ur + 2 * WINO_U_PLANE, _mm256_sub_ps(e[2], e[1]));
        _mm256_storeu_ps(ur + 3 * WINO_U_PLANE, _mm256_sub_ps(e[1], e[3]));
      }
    }
  }
}

// m[6][cout] (at co) (+)= u[6][kc] x w[kc][cout] (at co), 16 channels in 12 registers; += unless first.
__attribute__((target("avx2,fma"))) static void wino_gemm_avx2(const float* u, const float* w, float* m,
                                                               size_t kc, size_t cout, int first) {
  __m256 lo[6], hi[6];
#pragma GCC unroll 8
  for (int i = 0; i < 6; i++) {
    lo[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(m + i * cout);
    hi[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(m + i * cout + 8);
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const __m256 w0 = _mm256_loadu_ps(w + ci * cout), w1 = _mm256_loadu_ps(w + ci * cout + 8);
#pragma GCC unroll 8
    for (int i = 0; i < 6; i++) {
      const __m256 a = _mm256_broadcast_ss(u + i * kc + ci);
      lo[i] = _mm256_fmadd_ps(a, w0, lo[i]);
      hi[i] = _mm256_fmadd_ps(a, w1, hi[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 6; i++) {
    _mm256_storeu_ps(m + i * cout, lo[i]);
    _mm256_storeu_ps(m + i * cout + 8, hi[i]);
  }
}

// m[12][cout] (at co) (+)= u[12][kc] x w[kc][cout] (at co), 8 channels in 12 registers; += unless first. The
// last 8 channels of a cout that is an odd multiple of 8, on the AVX2 and the AVX-512 paths.
__attribute__((target("avx2,fma"))) static void wino_gemm8_avx2(const float* u, const float* w, float* m,
                                                                size_t kc, size_t cout, int first) {
  __m256 acc[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    acc[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(m + i * cout);
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const __m256 w0 = _mm256_loadu_ps(w + ci * cout);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(u + i * kc + ci), w0, acc[i]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    _mm256_storeu_ps(m + i * cout, acc[i]);
  }
}

// cout is a multiple of 8: blocks of 16 output channels, the last one 8 (wino_gemm8_avx2) if cout is an odd
// multiple of 8.
static void wino_gemms_avx2(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 16) {
      const float* w = c->weights + (k * cin + c0) * cout + co;
      if (cout - co < 16) {
        wino_gemm8_avx2(U + k * WINO_U_PLANE, w, M + k * mp + co, kc, cout, c0 == 0);
        continue;
      }
      for (size_t i = 0; i < WINO_TILES; i += 6) {
        wino_gemm_avx2(U + k * WINO_U_PLANE + i * kc, w, M + k * mp + i * cout + co, kc, cout, c0 == 0);
      }
    }
  }
}

__attribute__((target("avx2,fma"))) static void wino_output_avx2(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout, mp = wino_m_plane(c);
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    for (size_t co = 0; co < cout; co += 8) {
      const float* mq = M + t * cout + co;
      __m256 r0[4], r1[4], o[4];
      for (int q = 0; q < 4; q++) {  // A^T m
        const __m256 m4 = _mm256_loadu_ps(mq + (4 + q) * mp), m8 = _mm256_loadu_ps(mq + (8 + q) * mp);
        r0[q] = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(mq + q * mp), m4), m8);
        r1[q] = _mm256_sub_ps(_mm256_sub_ps(m4, m8), _mm256_loadu_ps(mq + (12 + q) * mp));
      }
      const __m256 b = _mm256_loadu_ps(c->bias + co);
      o[0] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r0[0], r0[1]), r0[2]), b);
      o[1] = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(r0[1], r0[2]), r0[3]), b);
      o[2] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r1[0], r1[1]), r1[2]), b);
      o[3] = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(r1[1], r1[2]), r1[3]), b);
      for (int k = 0; k < 4; k++) {
        if (!inside[k]) {
          continue;
        }
        __m256 v = c->silu ? silu8_avx2(o[k]) : o[k];
        if (rp[k] != NULL) {
          v = _mm256_add_ps(v, _mm256_loadu_ps(rp[k] + co));
        }
        _mm256_storeu_ps(yp[k] + co, v);
      }
    }
  }
}
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
// ---- aarch64 NEON (checked under qemu-aarch64 only; its speed is unmeasured)
#define CARVE_WINO_NEON 1
#include <arm_neon.h>

static void wino_input_neon(const wino_ctx* c, size_t t0, size_t c0, size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    for (size_t ci = 0; ci < kc; ci += 4) {
      for (int r = 0; r < 4; r++) {  // row r of B^T d, then times B
        float32x4_t e[4];
        for (int q = 0; q < 4; q++) {
          const float32x4_t d4 = vld1q_f32(p[4 + q] + ci), d8 = vld1q_f32(p[8 + q] + ci);
          e[q] = r == 0   ? vsubq_f32(vld1q_f32(p[q] + ci), d8)
                 : r == 1 ? vaddq_f32(d4, d8)
                 : r == 2 ? vsubq_f32(d8, d4)
                          : vsubq_f32(d4, vld1q_f32(p[12 + q] + ci));
        }
        float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
        vst1q_f32(ur, vsubq_f32(e[0], e[2]));
        vst1q_f32(ur + WINO_U_PLANE, vaddq_f32(e[1], e[2]));
        vst1q_f32(ur + 2 * WINO_U_PLANE, vsubq_f32(e[2], e[1]));
        vst1q_f32(ur + 3 * WINO_U_PLANE, vsubq_f32(e[1], e[3]));
      }
    }
  }
}

// m[4][cout] (at co) (+)= u[4][kc] x w[kc][cout] (at co), 4 * nv channels (nv 4 or 2); += unless first. nv 4:
// 16 accumulators, 4 registers of u (4 input channels of each tile, used by lane) and 4 of w: 24 of the 32.
// kc % 4 == 0.
__attribute__((always_inline)) static inline void wino_gemm_neon(const float* u, const float* w, float* m,
                                                                 size_t kc, size_t cout, int first, const int nv) {
  float32x4_t acc[4][4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) {
      acc[i][j] = first ? vdupq_n_f32(0.0f) : vld1q_f32(m + i * cout + 4 * j);
    }
  }
  for (size_t ci = 0; ci < kc; ci += 4) {
    float32x4_t a[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      a[i] = vld1q_f32(u + i * kc + ci);
    }
#define WINO_NEON_STEP(L)                                                \
  do {                                                                   \
    const float* wr = w + (ci + (L)) * cout;                             \
    float32x4_t wv[4];                                                   \
    for (int j = 0; j < nv; j++) {                                       \
      wv[j] = vld1q_f32(wr + 4 * j);                                     \
    }                                                                    \
    for (int i = 0; i < 4; i++) {                                        \
      for (int j = 0; j < nv; j++) {                                     \
        acc[i][j] = vfmaq_laneq_f32(acc[i][j], wv[j], a[i], (L));        \
      }                                                                  \
    }                                                                    \
  } while (0)
    WINO_NEON_STEP(0);
    WINO_NEON_STEP(1);
    WINO_NEON_STEP(2);
    WINO_NEON_STEP(3);
#undef WINO_NEON_STEP
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) {
      vst1q_f32(m + i * cout + 4 * j, acc[i][j]);
    }
  }
}

static void wino_gemm16_neon(const float* u, const float* w, float* m, size_t kc, size_t cout, int first) {
  wino_gemm_neon(u, w, m, kc, cout, first, 4);
}

static void wino_gemm8_neon(const float* u, const float* w, float* m, size_t kc, size_t cout, int first) {
  wino_gemm_neon(u, w, m, kc, cout, first, 2);
}

// cout is a multiple of 8: blocks of 16 output channels, the last one 8 if cout is an odd multiple of 8.
static void wino_gemms_neon(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 16) {
      for (size_t i = 0; i < WINO_TILES; i += 4) {
        const float* u = U + k * WINO_U_PLANE + i * kc;
        const float* w = c->weights + (k * cin + c0) * cout + co;
        float* m = M + k * mp + i * cout + co;
        if (cout - co >= 16) {
          wino_gemm16_neon(u, w, m, kc, cout, c0 == 0);
        } else {
          wino_gemm8_neon(u, w, m, kc, cout, c0 == 0);
        }
      }
    }
  }
}

// The transform as vectors; bias, SiLU (the portable silu, per element) and residual as the portable path.
static void wino_output_neon(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout, mp = wino_m_plane(c);
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    for (size_t co = 0; co < cout; co += 16) {
      const size_t nb = min_size(16, cout - co);  // 16, or 8 for the last block of an odd multiple of 8
      float o[4][16];
      for (size_t j = 0; j < nb; j += 4) {
        const float* mq = M + t * cout + co + j;
        float32x4_t r0[4], r1[4];
        for (int q = 0; q < 4; q++) {  // A^T m
          const float32x4_t m4 = vld1q_f32(mq + (4 + q) * mp), m8 = vld1q_f32(mq + (8 + q) * mp);
          r0[q] = vaddq_f32(vaddq_f32(vld1q_f32(mq + q * mp), m4), m8);
          r1[q] = vsubq_f32(vsubq_f32(m4, m8), vld1q_f32(mq + (12 + q) * mp));
        }
        const float32x4_t b = vld1q_f32(c->bias + co + j);  // (A^T m) A + bias
        vst1q_f32(o[0] + j, vaddq_f32(vaddq_f32(vaddq_f32(r0[0], r0[1]), r0[2]), b));
        vst1q_f32(o[1] + j, vaddq_f32(vsubq_f32(vsubq_f32(r0[1], r0[2]), r0[3]), b));
        vst1q_f32(o[2] + j, vaddq_f32(vaddq_f32(vaddq_f32(r1[0], r1[1]), r1[2]), b));
        vst1q_f32(o[3] + j, vaddq_f32(vsubq_f32(vsubq_f32(r1[1], r1[2]), r1[3]), b));
      }
      for (int k = 0; k < 4; k++) {
        if (!inside[k]) {
          continue;
        }
        for (size_t j = 0; j < nb; j++) {
          const float v = c->silu ? silu(o[k][j]) : o[k][j];
          yp[k][co + j] = rp[k] != NULL ? v + rp[k][co + j] : v;
        }
      }
    }
  }
}
#endif

// Slots [start, start + count): slot s computes the groups [s * groups / slots, (s + 1) * groups / slots).
static void wino_task(void* context, size_t start, size_t count) {
  const wino_ctx* c = context;
  for (size_t s = start; s < start + count; s++) {
    unsigned char* slot = c->scratch + s * CARVE_WINOGRAD_SLOT_BYTES(c->cout);
    float* U = (float*)(void*)slot;
    float* M = wino_m(slot);
    const size_t g1 = (s + 1) * c->groups / c->slots;
    for (size_t g = s * c->groups / c->slots; g < g1; g++) {
      const size_t t0 = g * WINO_TILES;
      for (size_t c0 = 0; c0 < c->cin; c0 += WINO_KC) {
        const size_t kc = min_size(WINO_KC, c->cin - c0);
#ifdef CARVE_SILU_X86
        if (c->simd == 2) {
          wino_input_avx512(c, t0, c0, kc, U);
          wino_gemms_avx512(c, U, c0, kc, M);
          continue;
        }
        if (c->simd == 1) {
          wino_input_avx2(c, t0, c0, kc, U);
          wino_gemms_avx2(c, U, c0, kc, M);
          continue;
        }
#elif defined(CARVE_WINO_NEON)
        if (c->simd == 1) {
          wino_input_neon(c, t0, c0, kc, U);
          wino_gemms_neon(c, U, c0, kc, M);
          continue;
        }
#endif
        wino_input_portable(c, t0, c0, kc, U);
        wino_gemms_portable(c, U, c0, kc, M);
      }
#ifdef CARVE_SILU_X86
      if (c->simd == 2) {
        wino_output_avx512(c, M, t0);
        continue;
      }
      if (c->simd == 1) {
        wino_output_avx2(c, M, t0);
        continue;
      }
#elif defined(CARVE_WINO_NEON)
      if (c->simd == 1) {
        wino_output_neon(c, M, t0);
        continue;
      }
#endif
      wino_output_portable(c, M, t0);
    }
  }
}

// The kernel with its instruction set named (simd: 2 AVX-512, 1 AVX2 + FMA, 0 portable; on aarch64 1 and 2
// NEON; a level the CPU lacks falls back); carve_conv3x3s1_winograd picks the best.
static carve_status wino_conv(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                              const float* weights, const float* bias, size_t cout, float* y, size_t y_stride,
                              const float* residual, size_t r_stride, carve_act act, void* scratch, size_t slots,
                              int simd, pthreadpool_t pool) {
  if (x == NULL || weights == NULL || bias == NULL || y == NULL || scratch == NULL || h == 0 || w == 0 ||
      cin == 0 || cout == 0 || cin % CARVE_WINOGRAD_CHANNEL_MULTIPLE != 0 ||
      cout % CARVE_WINOGRAD_CHANNEL_MULTIPLE != 0 || x_stride < cin || y_stride < cout ||
      (residual != NULL && r_stride < cout) || slots == 0 || (uintptr_t)scratch % 64 != 0 ||
      (act != CARVE_ACT_NONE && act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
#ifdef CARVE_SILU_X86
  const int have = silu_simd_level();
  simd = simd < have ? simd : have;
#elif defined(CARVE_WINO_NEON)
  simd = simd < 1 ? simd : 1;  // aarch64 always has NEON
#else
  simd = 0;
#endif
  const size_t tw = (w + 1) / 2, tiles = tw * ((h + 1) / 2);
  const wino_ctx ctx = {.x = x, .x_stride = x_stride, .h = h, .w = w, .cin = cin, .weights = weights,
                        .bias = bias, .cout = cout, .y = y, .y_stride = y_stride, .residual = residual,
                        .r_stride = residual != NULL ? r_stride : 0, .tw = tw, .tiles = tiles,
                        .groups = div_round_up(tiles, WINO_TILES), .slots = slots, .scratch = scratch,
                        .silu = act == CARVE_ACT_SILU, .simd = simd};
  carve_parallelize_1d_tile(pool, wino_task, (void*)&ctx, slots, 1);
  return CARVE_OK;
}

carve_status carve_conv3x3s1_winograd(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                      const float* weights, const float* bias, size_t cout, float* y,
                                      size_t y_stride, const float* residual, size_t r_stride, carve_act act,
                                      void* scratch, size_t slots, pthreadpool_t pool) {
  return wino_conv(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, residual, r_stride, act, scratch,
                   slots, 2, pool);
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
#ifdef CARVE_SILU_X86
#define CARVE_ATTN_AVX512 __attribute__((target("avx512f")))
#define CARVE_ATTN_INLINE __attribute__((target("avx512f"), always_inline)) static inline

// exp(d) for d <= 0 (a score minus its row's maximum) or NaN: silu16_avx512's
// exp without the upper clamp (never reached). Below -104 the result is 0 in
// float either way; NaN is the second operand of the max, so it stays NaN.
CARVE_ATTN_INLINE __m512 attn_exp16_avx512(__m512 d) {
  d = _mm512_max_ps(_mm512_set1_ps(-104.0f), d);
  const __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(d, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 s = _mm512_fmadd_ps(q, _mm512_set1_ps(-0.693145751953125f), d);
  s = _mm512_fmadd_ps(q, _mm512_set1_ps(-1.428606765330187045e-06f), s);
  __m512 u = _mm512_fmadd_ps(_mm512_set1_ps(0.000198527617612853646278381f), s,
                             _mm512_set1_ps(0.00139304355252534151077271f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.00833336077630519866943359f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.0416664853692054748535156f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.166666671633720397949219f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.5f));
  u = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
  return _mm512_scalef_ps(u, q);
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
  d = _mm256_max_ps(_mm256_set1_ps(-104.0f), d);
  const __m256 q = _mm256_round_ps(_mm256_mul_ps(d, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 s = _mm256_fmadd_ps(q, _mm256_set1_ps(-0.693145751953125f), d);
  s = _mm256_fmadd_ps(q, _mm256_set1_ps(-1.428606765330187045e-06f), s);
  __m256 u = _mm256_fmadd_ps(_mm256_set1_ps(0.000198527617612853646278381f), s,
                             _mm256_set1_ps(0.00139304355252534151077271f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.00833336077630519866943359f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.0416664853692054748535156f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.166666671633720397949219f));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.5f));
  u = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
  // times 2^q as 2^h * 2^(q - h), h = floor(q / 2), as silu8_avx2.
  const __m256i qi = _mm256_cvtps_epi32(q);
  const __m256i h = _mm256_srai_epi32(qi, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(qi, h), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(u, p1), p2);
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

// carve_attention with its instruction set named (simd: 2 AVX-512, 1 AVX2 + FMA,
// 0 the portable kernel in its target_clones; a level the CPU lacks falls back).
static void attention_run(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                          size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                          size_t v_stride, float* scratch, int simd, pthreadpool_t pool) {
  if (qkv == NULL || out == NULL || scratch == NULL || n == 0 || heads == 0 || head_dim == 0) {
    return;
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
#ifdef CARVE_SILU_X86
  const int have = silu_simd_level();
  simd = simd < have ? simd : have;
  if (simd == 2) {
    carve_parallelize_1d_tile(pool, attention_task_avx512, &ctx, heads * ctx.blocks, 1);
    return;
  }
  if (simd == 1) {
    carve_parallelize_1d_tile(pool, attention_task_avx2, &ctx, heads * ctx.blocks, 1);
    return;
  }
#else
  (void)simd;
#endif
  carve_parallelize_1d_tile(pool, attention_task, &ctx, heads * ctx.blocks, 1);
}

void carve_attention(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
                     size_t head_dim, float scale, float* out, size_t out_stride, float* v_out,
                     size_t v_stride, float* scratch, pthreadpool_t pool) {
  attention_run(qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out, out_stride, v_out, v_stride,
                scratch, 2, pool);
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
