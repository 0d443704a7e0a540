// carve runtime, internal: the inline vector math that several kernel families
// share (exp and SiLU in portable C and per instruction set, the target_clones
// attribute, small index helpers). One copy, included by the family sources
// (carve_epilogue.c, carve_stem.c, carve_dwconv.c, carve_winograd.c,
// carve_attention.c); not part of the package's API. Everything is static
// inline: a family that does not use a function pays nothing for it.

#ifndef CARVE_SIMD_H
#define CARVE_SIMD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "carve_isa.h"

// ---- target_clones -------------------------------------------------------------
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

static inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static inline size_t div_round_up(size_t n, size_t d) { return (n + d - 1) / d; }

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

#ifdef CARVE_HAVE_X86_SIMD
#include <immintrin.h>

// exp(d) for d already clamped by the caller (to [-104, 100] or at least >= -104; NaN passes through):
// SLEEF's expf_u10 steps, times 2^q by VSCALEFPS. Shared by the SiLU below and the attention's softmax.
__attribute__((target("avx512f"), always_inline)) static inline __m512 carve_exp16_avx512(__m512 d) {
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

__attribute__((target("avx512f"))) static inline __m512 silu16_avx512(__m512 x) {
  // d = -x clamped to [-104, 100]: below, exp(d) is 0 in float; above, +inf. NaN x gives NaN below.
  const __m512 d = _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), x),
                                               _mm512_set1_ps(-104.0f)), _mm512_set1_ps(100.0f));
  const __m512 e = carve_exp16_avx512(d);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// exp(d) for d already clamped by the caller (as carve_exp16_avx512), times 2^q as two normal factors.
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 carve_exp8_avx2(__m256 d) {
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
  return _mm256_mul_ps(_mm256_mul_ps(u, p1), p2);
}

__attribute__((target("avx2,fma"))) static inline __m256 silu8_avx2(__m256 x) {
  const __m256 d = _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x),
                                               _mm256_set1_ps(-104.0f)), _mm256_set1_ps(100.0f));
  const __m256 e = carve_exp8_avx2(d);
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}
#endif  // CARVE_HAVE_X86_SIMD

#endif  // CARVE_SIMD_H
