// carve runtime: carve_q8_run_pool's AVX2 + FMA variant (carve_q8_pool_avx2.h; the contract: carve_q8_pool.h;
// what the variants share: carve_q8_pool_impl.h).
//
// The AVX-512 variant's loops (carve_q8_pool_avx512.c) on AVX2 + FMA (carve_isa's AVX2 level: CPUs without AVX-512), 16
// channels (depthwise CONV, ADD), 8 floats (QUANTIZE, DEQUANTIZE) or 32 bytes (MAXPOOL) at a time. Depthwise: the taps
// of 16 channels widened to int16 in one ymm; VPUNPCK[LH]WD interleave two taps within each 128-bit lane, so one
// accumulator holds channels {0-3, 8-11} and the other {4-7, 12-15}, the record's arrays are loaded in those orders
// (VPERM2I128), and VPACKSSDW of the two requantized vectors puts the channels back in order (then VPACKSSWB of its two
// lanes); ADD's lanes work the same way. The requantization: the AVX-512 int32 path on 8 lanes where every channel's
// shift is >= 33, else carve_q8.c's scalar requantize of each sum (AVX2 has no 64-bit arithmetic shift); the table a
// byte at a time. AVX2 has no byte masks: a tail (fewer than a vector's elements left) is copied through a local
// buffer, so nothing outside a view is read or written.

#include "carve_q8_pool_avx2.h"
#include "carve_q8_pool_impl.h"

#ifdef CARVE_HAVE_X86_SIMD
#include <immintrin.h>

#define Q8P_AVX2 __attribute__((target("avx2,fma")))

// carve_q8.c's requantize: clamp(zp + ((acc * m + 2^(n-1)) >> n)) in int64.
static int8_t requantize_scalar(int32_t acc, int32_t m, int32_t n, int32_t zp) {
  const int64_t r = zp + (((int64_t)acc * m + ((int64_t)1 << (n - 1))) >> n);
  return (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
}

// 8 channels' int32 requantization (every n >= 33): bias, m (and m of the odd lanes in the low dwords), t = n - 32,
// 2^(t-1).
typedef struct q8p_rq8 {
  __m256i bias, m, m_hi, t, r_t;
} q8p_rq8;

Q8P_AVX2 Q8P_INLINE q8p_rq8 rq8_make(__m256i bias, __m256i m, __m256i n) {
  q8p_rq8 r;
  r.bias = bias;
  r.m = m;
  r.m_hi = _mm256_srli_epi64(m, 32);
  r.t = _mm256_sub_epi32(n, _mm256_set1_epi32(32));
  r.r_t = _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_sub_epi32(r.t, _mm256_set1_epi32(1)));
  return r;
}

// rq_apply's int32 path on 8 lanes: zy + (((acc + bias) m + 2^(n-1)) >> n) as int32 that saturate to the int8.
Q8P_AVX2 Q8P_INLINE __m256i rq8_apply(const q8p_rq8* r, __m256i acc, __m256i zy32) {
  const __m256i v = _mm256_add_epi32(acc, r->bias);
  const __m256i lo = _mm256_mul_epi32(v, r->m);
  const __m256i hi = _mm256_mul_epi32(_mm256_srli_epi64(v, 32), r->m_hi);
  const __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(lo, 32), hi, 0xAA);
  return _mm256_add_epi32(_mm256_srav_epi32(_mm256_add_epi32(h, r->r_t), r->t), zy32);
}

// The 16 int8 of two int32 vectors in the orders {0-3, 8-11} (lo) and {4-7, 12-15} (hi), in channel order,
// saturated.
Q8P_AVX2 Q8P_INLINE __m128i pack16(__m256i lo, __m256i hi) {
  const __m256i w = _mm256_packs_epi32(lo, hi);  // lane 0: channels 0-7, lane 1: 8-15 (int16)
  return _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

// n (<= 16) int8 at p widened to int16 (the rest 0), minus z (the rest -z: their products meet zero weights or
// are not stored).
Q8P_AVX2 __attribute__((noinline)) static __m128i load_tail16(const int8_t* p, size_t n) {
  int8_t b[16] = {0};
  memcpy(b, p, n);
  return _mm_loadu_si128((const __m128i*)(const void*)b);
}

Q8P_AVX2 Q8P_INLINE __m256i load_sub16_avx2(const int8_t* p, size_t n, __m256i z) {
  const __m128i v = n >= 16 ? _mm_loadu_si128((const __m128i*)(const void*)p) : load_tail16(p, n);
  return _mm256_sub_epi16(_mm256_cvtepi8_epi16(v), z);
}

// 16 int8 of v at p, only the first n.
Q8P_AVX2 Q8P_INLINE void store16(int8_t* p, size_t n, __m128i v) {
  if (n >= 16) {
    _mm_storeu_si128((__m128i*)(void*)p, v);
  } else {
    int8_t b[16];
    _mm_storeu_si128((__m128i*)(void*)b, v);
    memcpy(p, b, n);
  }
}

// 16 int32 of a record array from a (n of them, the rest 0) in the lo and hi orders.
Q8P_AVX2 Q8P_INLINE void load_ordered16(const int32_t* a, size_t n, __m256i* lo, __m256i* hi) {
  int32_t b[16] = {0};
  memcpy(b, a, (n < 16 ? n : 16) * sizeof(int32_t));
  const __m256i v0 = _mm256_loadu_si256((const __m256i*)(const void*)b);
  const __m256i v1 = _mm256_loadu_si256((const __m256i*)(const void*)(b + 8));
  *lo = _mm256_permute2x128_si256(v0, v1, 0x20);  // channels 0-3, 8-11
  *hi = _mm256_permute2x128_si256(v0, v1, 0x31);  // channels 4-7, 12-15
}

#define Q8P_DW_BLOCK16 16

typedef struct dw_block16 {
  __m256i wlo[Q8P_MAX_PAIRS], whi[Q8P_MAX_PAIRS];
  q8p_rq8 rq_lo, rq_hi;
  size_t c0, n;  // the block's channels [c0, c0 + n)
  int narrow;    // every channel's shift >= 33
} dw_block16;

Q8P_AVX2 static void dw_block16_init(const carve_q8_task* t, size_t c0, dw_block16* b) {
  const carve_q8_desc* d = t->d;
  const size_t c = d->cin, taps = (size_t)d->kh * d->kw, n = c - c0 < Q8P_DW_BLOCK16 ? c - c0 : Q8P_DW_BLOCK16;
  b->c0 = c0;
  b->n = n;
  const __m256i zero = _mm256_setzero_si256();
  for (size_t i = 0; 2 * i < taps; i++) {
    const __m256i w0 = load_sub16_avx2(t->p.w + 2 * i * c + c0, n, zero);
    const __m256i w1 = 2 * i + 1 < taps ? load_sub16_avx2(t->p.w + (2 * i + 1) * c + c0, n, zero) : zero;
    b->wlo[i] = _mm256_unpacklo_epi16(w0, w1);
    b->whi[i] = _mm256_unpackhi_epi16(w0, w1);
  }
  __m256i bias_lo, bias_hi, m_lo, m_hi, n_lo, n_hi;
  load_ordered16(t->p.bias + c0, n, &bias_lo, &bias_hi);
  load_ordered16(t->p.mul + c0, n, &m_lo, &m_hi);
  load_ordered16(t->p.shift + c0, n, &n_lo, &n_hi);
  b->rq_lo = rq8_make(bias_lo, m_lo, n_lo);
  b->rq_hi = rq8_make(bias_hi, m_hi, n_hi);
  int narrow = 1;
  for (size_t i = 0; i < n; i++) {
    narrow &= t->p.shift[c0 + i] >= 33;
  }
  b->narrow = narrow;
}

// dw_pixel on AVX2, 16 channels (full: all 16, a constant in the 3x3 inside instance).
Q8P_AVX2 Q8P_INLINE void dw_pixel16(const carve_q8_task* t, const dw_block16* b, ptrdiff_t x0, size_t ky0,
                                    size_t ky1, size_t kx0, size_t kx1, int8_t* yp, const size_t kw,
                                    const size_t taps, const int inside, const int full) {
  const carve_q8_desc* d = t->d;
  const ptrdiff_t xs = (ptrdiff_t)d->in_stride, row = (ptrdiff_t)d->w * xs;
  const int8_t* x = (const int8_t*)(const void*)t->x;
  const __m256i z = _mm256_set1_epi16((short)d->in_zero), zero = _mm256_setzero_si256();
  __m256i acc_lo = zero, acc_hi = zero;
#pragma GCC unroll 25
  for (size_t i = 0; 2 * i < taps; i++) {
    __m256i a[2];
    for (size_t j = 0; j < 2; j++) {
      const size_t tap = 2 * i + j, ky = tap / kw, kx = tap % kw;
      a[j] = zero;
      if (tap < taps && (inside || (ky >= ky0 && ky < ky1 && kx >= kx0 && kx < kx1))) {
        a[j] = load_sub16_avx2(x + x0 + (ptrdiff_t)ky * row + (ptrdiff_t)kx * xs, full ? 16 : b->n, z);
      }
    }
    acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a[0], a[1]), b->wlo[i]));
    acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a[0], a[1]), b->whi[i]));
  }
  const size_t c0 = b->c0, n = full ? 16 : b->n;
  if (b->narrow) {
    const __m256i zy32 = _mm256_set1_epi32(d->out_zero);
    store16(yp, n, pack16(rq8_apply(&b->rq_lo, acc_lo, zy32), rq8_apply(&b->rq_hi, acc_hi, zy32)));
  } else {
    int32_t s[16];  // channel order: lo lanes 0-3 -> 0-3, 4-7 -> 8-11; hi lanes 0-3 -> 4-7, 4-7 -> 12-15
    _mm256_storeu_si256((__m256i*)(void*)s, _mm256_permute2x128_si256(acc_lo, acc_hi, 0x20));
    _mm256_storeu_si256((__m256i*)(void*)(s + 8), _mm256_permute2x128_si256(acc_lo, acc_hi, 0x31));
    for (size_t i = 0; i < n; i++) {
      yp[i] = requantize_scalar(s[i] + t->p.bias[c0 + i], t->p.mul[c0 + i], t->p.shift[c0 + i], d->out_zero);
    }
  }
  if (t->p.lut != NULL) {
    for (size_t i = 0; i < n; i++) {
      yp[i] = t->p.lut[(uint8_t)yp[i] ^ 0x80];
    }
  }
}

// dw_rows on AVX2: output rows [oy0, oy1), block by block of 16 channels.
Q8P_AVX2 static void dw_rows_avx2(const carve_q8_task* t, size_t oy0, size_t oy1) {
  const carve_q8_desc* d = t->d;
  const size_t h = d->h, wd = d->w, c = d->cin, k_h = d->kh, k_w = d->kw, s = d->stride, pad = d->pad;
  const size_t ow = out_size(wd, k_w, s, pad);
  const ptrdiff_t xs = (ptrdiff_t)d->in_stride;
  const int k3 = k_h == 3 && k_w == 3;
  int8_t* y = (int8_t*)(void*)t->y;
  dw_block16 b;
  for (size_t c0 = 0; c0 < c; c0 += Q8P_DW_BLOCK16) {
    dw_block16_init(t, c0, &b);
    for (size_t oy = oy0; oy < oy1; oy++) {
      size_t ky0, ky1;
      tap_range(oy, s, pad, k_h, h, &ky0, &ky1);
      const ptrdiff_t row0 = ((ptrdiff_t)(oy * s) - (ptrdiff_t)pad) * (ptrdiff_t)wd;
      for (size_t ox = 0; ox < ow; ox++) {
        size_t kx0, kx1;
        tap_range(ox, s, pad, k_w, wd, &kx0, &kx1);
        const ptrdiff_t x0 = (row0 + (ptrdiff_t)(ox * s) - (ptrdiff_t)pad) * xs + (ptrdiff_t)c0;
        int8_t* yp = y + (oy * ow + ox) * d->out_stride + c0;
        if (k3 && ky1 - ky0 == 3 && kx1 - kx0 == 3 && b.n == Q8P_DW_BLOCK16) {
          dw_pixel16(t, &b, x0, 0, 3, 0, 3, yp, 3, 9, 1, 1);
        } else {
          dw_pixel16(t, &b, x0, ky0, ky1, kx0, kx1, yp, k_w, k_h * k_w, 0, 0);
        }
      }
    }
  }
}

// add_run on AVX2, 16 at a time.
Q8P_AVX2 static void add_run_avx2(const carve_q8_desc* d, const int8_t* a, const int8_t* b, int8_t* y, size_t n) {
  const int32_t mah = (d->mul_a + (1 << 15)) >> 16, mbh = (d->mul_b + (1 << 15)) >> 16;
  const int32_t mal = d->mul_a - mah * 65536, mbl = d->mul_b - mbh * 65536;
  const __m256i mh = _mm256_set1_epi32((int32_t)(((uint32_t)(uint16_t)mbh << 16) | (uint16_t)mah));
  const __m256i ml = _mm256_set1_epi32((int32_t)(((uint32_t)(uint16_t)mbl << 16) | (uint16_t)(int16_t)mal));
  const __m256i za = _mm256_set1_epi16((short)d->in_zero), zb = _mm256_set1_epi16((short)d->in2_zero);
  const __m256i zy = _mm256_set1_epi32(d->out_zero), rnd = _mm256_set1_epi32((int32_t)1 << (d->shift - 17));
  const __m128i sh = _mm_cvtsi32_si128(d->shift - 16);
  for (size_t i = 0; i < n; i += 16) {
    const size_t m = n - i < 16 ? n - i : 16;
    const __m256i av = load_sub16_avx2(a + i, m, za), bv = load_sub16_avx2(b + i, m, zb);
    const __m256i lo = _mm256_unpacklo_epi16(av, bv), hi = _mm256_unpackhi_epi16(av, bv);
    const __m256i p_lo = _mm256_madd_epi16(lo, mh), q_lo = _mm256_madd_epi16(lo, ml);
    const __m256i p_hi = _mm256_madd_epi16(hi, mh), q_hi = _mm256_madd_epi16(hi, ml);
    const __m256i v_lo = _mm256_add_epi32(
        zy, _mm256_sra_epi32(_mm256_add_epi32(_mm256_add_epi32(p_lo, _mm256_srai_epi32(q_lo, 16)), rnd), sh));
    const __m256i v_hi = _mm256_add_epi32(
        zy, _mm256_sra_epi32(_mm256_add_epi32(_mm256_add_epi32(p_hi, _mm256_srai_epi32(q_hi, 16)), rnd), sh));
    store16(y + i, m, pack16(v_lo, v_hi));
  }
}

// quantize (carve_q8.c's): v = x / scale (VDIVPS, IEEE as the scalar division), NaN -> 0, clamped to [-512, 512],
// rounded half to even (VROUNDPS with the mode encoded), + zp, saturated: 8 at a time.
Q8P_AVX2 static void quantize_run_avx2(const float* x, int8_t* y, size_t n, float scale, int32_t zp) {
  const __m256i vzp = _mm256_set1_epi32(zp);
  const __m256 vs = _mm256_set1_ps(scale), lo = _mm256_set1_ps(-512.0f), hi = _mm256_set1_ps(512.0f);
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = n - i < 8 ? n - i : 8;
    float b[8] = {0};
    if (m < 8) {
      memcpy(b, x + i, m * sizeof(float));
    }
    __m256 v = _mm256_div_ps(_mm256_loadu_ps(m == 8 ? x + i : b), vs);
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i q = _mm256_add_epi32(
        _mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), vzp);
    const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i q8 = _mm_packs_epi16(q16, q16);
    if (m == 8) {
      _mm_storel_epi64((__m128i*)(void*)(y + i), q8);
    } else {
      int8_t o[16];
      _mm_storeu_si128((__m128i*)(void*)o, q8);
      memcpy(y + i, o, m);
    }
  }
}

// dequantize: (float)(q - zp) * scale, 8 at a time.
Q8P_AVX2 static void dequantize_run_avx2(const int8_t* x, float* y, size_t n, float scale, int32_t zp) {
  const __m256i vzp = _mm256_set1_epi32(zp);
  const __m256 vs = _mm256_set1_ps(scale);
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = n - i < 8 ? n - i : 8;
    int8_t b[16] = {0};
    if (m < 8) {
      memcpy(b, x + i, m);
    }
    const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)(m == 8 ? x + i : b)));
    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, vzp)), vs);
    if (m == 8) {
      _mm256_storeu_ps(y + i, v);
    } else {
      float o[8];
      _mm256_storeu_ps(o, v);
      memcpy(y + i, o, m * sizeof(float));
    }
  }
}

// maxpool_rows on AVX2: VPMAXSB over the in-image taps from -128, 32 channels at a time (a tail through a buffer).
Q8P_AVX2 static void maxpool_rows_avx2(const carve_q8_task* t, size_t oy0, size_t oy1) {
  const carve_q8_desc* d = t->d;
  const size_t h = d->h, wd = d->w, c = d->cin, k = d->kh, s = d->stride, pad = d->pad;
  const size_t ow = out_size(wd, k, s, pad);
  const int8_t* x = (const int8_t*)(const void*)t->x;
  int8_t* y = (int8_t*)(void*)t->y;
  for (size_t oy = oy0; oy < oy1; oy++) {
    size_t ky0, ky1;
    tap_range(oy, s, pad, k, h, &ky0, &ky1);
    for (size_t ox = 0; ox < ow; ox++) {
      size_t kx0, kx1;
      tap_range(ox, s, pad, k, wd, &kx0, &kx1);
      int8_t* yp = y + (oy * ow + ox) * d->out_stride;
      for (size_t c0 = 0; c0 < c; c0 += 32) {
        const size_t m = c - c0 < 32 ? c - c0 : 32;
        __m256i v = _mm256_set1_epi8(INT8_MIN);
        for (size_t ky = ky0; ky < ky1; ky++) {
          for (size_t kx = kx0; kx < kx1; kx++) {
            const int8_t* xp = x + ((oy * s + ky - pad) * wd + (ox * s + kx - pad)) * d->in_stride + c0;
            __m256i l;
            if (m == 32) {
              l = _mm256_loadu_si256((const __m256i*)(const void*)xp);
            } else {
              int8_t b[32];
              memset(b, INT8_MIN, sizeof b);
              memcpy(b, xp, m);
              l = _mm256_loadu_si256((const __m256i*)(const void*)b);
            }
            v = _mm256_max_epi8(v, l);
          }
        }
        if (m == 32) {
          _mm256_storeu_si256((__m256i*)(void*)(yp + c0), v);
        } else {
          int8_t b[32];
          _mm256_storeu_si256((__m256i*)(void*)b, v);
          memcpy(yp + c0, b, m);
        }
      }
    }
  }
}

Q8P_AVX2 static void pixels_avx2(const carve_q8_task* t, size_t px0, size_t px1) {
  pixels_with(t, px0, px1, add_run_avx2, quantize_run_avx2, dequantize_run_avx2);
}

Q8P_AVX2 static void items_avx2(void* task, size_t start, size_t count) {
  const carve_q8_task* t = (const carve_q8_task*)task;
  switch (t->d->kind) {
    case CARVE_Q8_CONV:
      dw_rows_avx2(t, start, start + count);
      break;
    case CARVE_Q8_MAXPOOL:
      maxpool_rows_avx2(t, start, start + count);
      break;
    default:
      pixels_avx2(t, start, start + count);
      break;
  }
}

static const carve_q8_isa_loops loops_avx2 = {takes, items_avx2};

carve_status carve_q8_pool__avx2(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool) {
  return carve_q8_run_pool_loops(d, blob, arena, pool, &loops_avx2);
}
#endif  // CARVE_HAVE_X86_SIMD

int carve_q8_pool_avx2_ready(void) {
#ifdef CARVE_HAVE_X86_SIMD
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}
