// carve runtime: carve_q8_run_pool's AVX-512 variants, with and without VBMI (carve_q8_pool_avx512.h; the
// contract: carve_q8_pool.h; what the variants share: carve_q8_pool_impl.h).
//
// Depthwise CONV: a block of 32 channels of one output pixel in two int32 accumulators of 16. The taps go in
// pairs (t, t + 1): each tap's 32 input bytes are widened to int16 and the zero point subtracted (x - zx in
// [-255, 255]); the two taps' vectors interleaved (VPUNPCK[LH]WD) are multiplied by the two taps' weights,
// interleaved the same way once per block, and VPMADDWD adds the two products of each channel into its int32:
// exactly (x_t - zx) w_t + (x_t1 - zx) w_t1 (each product within +-32640). Unpacking the low and the high words
// puts channels {0-3, 8-11, 16-19, 24-27} in one accumulator and {4-7, 12-15, 20-23, 28-31} in the other;
// the bias, multipliers and shifts are loaded in that order, and VPACKSSDW of the two requantized vectors puts
// the channels back in order. A tap outside the image adds 0 (its vector is zero: arith pads with the zero point).
// The requantization clamp(zy + ((acc + bias) m + 2^(n-1)) >> n) is carve_q8conv's (VPMULDQ; in int32 when every
// channel's n >= 33, else int64), the clamp the saturating packs; then the table, with VPERMI2B (VBMI) or a byte
// at a time.
//
// ADD: carve_q8.c's int32 form (add_i32 there, and its derivation): a' = a - za, b' = b - zb as int16 pairs,
// p = a' mah + b' mbh and q = a' mal + b' mbl by VPMADDWD, zy + ((p + (q >> 16) + 2^(n-17)) >> (n - 16)),
// saturated to int8: 32 elements at a time. QUANTIZE: x / scale (VDIVPS, IEEE as the scalar division; or x times
// 1 / scale where that provably rounds the same, quantize_run), NaN -> 0, clamp to [-512, 512], rounded half to even
// (VCVTPS2DQ with round-to-nearest-even encoded, whatever MXCSR says), + zp, saturated: 16 at a time. DEQUANTIZE: (float)(q - zp) * scale, 16 at a time. MAXPOOL: VPMAXSB over the
// in-image taps from -128, 64 channels at a time. Tails are masked loads and stores: nothing outside a view is
// read or written.

#include "carve_q8_pool_avx512.h"
#include "carve_q8_pool_impl.h"

#ifdef CARVE_HAVE_X86_SIMD
#include <immintrin.h>

#define Q8P_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define Q8P_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

#define Q8P_DW_BLOCK 32                                    // channels of one depthwise block

static inline uint64_t low_bits(size_t n) { return n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1; }

// ---- Requantization -------------------------------------------------------------------------------------------

// 16 channels' requantization: bias, m, and n as 8 + 8 int64 lanes (lo: lanes 2i, hi: lanes 2i + 1) with their
// rounding terms 2^(n-1); for the int32 path (every n >= 33) t = n - 32 and 2^(t-1).
typedef struct q8p_rq {
  __m512i bias, m, m_hi, n_lo, n_hi, r_lo, r_hi, t, r_t;
} q8p_rq;

Q8P_AVX512 Q8P_INLINE q8p_rq rq_make(__m512i bias, __m512i m, __m512i n) {
  const __m512i one = _mm512_set1_epi64(1);
  q8p_rq r;
  r.bias = bias;
  r.m = m;
  r.m_hi = _mm512_srli_epi64(m, 32);
  r.n_lo = _mm512_and_si512(n, _mm512_set1_epi64(0xffffffff));
  r.n_hi = _mm512_srli_epi64(n, 32);
  r.r_lo = _mm512_sllv_epi64(one, _mm512_sub_epi64(r.n_lo, one));
  r.r_hi = _mm512_sllv_epi64(one, _mm512_sub_epi64(r.n_hi, one));
  r.t = _mm512_sub_epi32(n, _mm512_set1_epi32(32));
  r.r_t = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_sub_epi32(r.t, _mm512_set1_epi32(1)));
  return r;
}

// zy + (((acc + bias) m + 2^(n-1)) >> n) of 16 int32 sums, as int32 that saturate to the right int8 (the int64
// path clamps to [-128, 127] itself). With P = (acc + bias) m = H 2^32 + L (0 <= L < 2^32) and n >= 33, t = n - 32:
// floor((P + 2^(n-1)) / 2^n) = (H + 2^(t-1)) >> t exactly (carve_q8conv_avx512.c's rq16_apply, "narrow"); |H| <= 2^30.
Q8P_AVX512 Q8P_INLINE __m512i rq_apply(const q8p_rq* r, __m512i acc, __m512i zy32, __m512i zy64, const int narrow) {
  const __m512i v = _mm512_add_epi32(acc, r->bias);  // within int32: carve_q8.h's accumulator precondition
  __m512i lo = _mm512_mul_epi32(v, r->m);
  __m512i hi = _mm512_mul_epi32(_mm512_srli_epi64(v, 32), r->m_hi);
  if (narrow) {
    const __m512i h = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(lo, 32), hi);
    return _mm512_add_epi32(_mm512_srav_epi32(_mm512_add_epi32(h, r->r_t), r->t), zy32);
  }
  const __m512i lo_clamp = _mm512_set1_epi64(-128), hi_clamp = _mm512_set1_epi64(127);
  lo = _mm512_add_epi64(zy64, _mm512_srav_epi64(_mm512_add_epi64(lo, r->r_lo), r->n_lo));
  hi = _mm512_add_epi64(zy64, _mm512_srav_epi64(_mm512_add_epi64(hi, r->r_hi), r->n_hi));
  lo = _mm512_min_epi64(_mm512_max_epi64(lo, lo_clamp), hi_clamp);
  hi = _mm512_min_epi64(_mm512_max_epi64(hi, lo_clamp), hi_clamp);
  return _mm512_mask_blend_epi32(0xAAAA, lo, _mm512_slli_epi64(hi, 32));
}

// ---- The table ------------------------------------------------------------------------------------------------

// lut[q + 128] of 32 int8 by VPERMI2B: bits 0-6 of q + 128 index a 128-byte half, bit 7 picks the half. Called only
// from the VBMI instances (the others' branch is dead; carve_q8conv_avx512.c's lut16_vbmi does the same).
Q8P_VBMI static inline __m256i lut32_vbmi(const __m512i t[4], __m256i q) {
  const __m512i idx = _mm512_castsi256_si512(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)));
  const __m512i lo = _mm512_permutex2var_epi8(t[0], idx, t[1]);
  const __m512i hi = _mm512_permutex2var_epi8(t[2], idx, t[3]);
  return _mm512_castsi512_si256(_mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
}

// ---- Depthwise convolution ------------------------------------------------------------------------------------

// The op and one block of channels [c0, c0 + n): the tap pairs' interleaved int16 weights and the requantization
// of the two accumulators' channel orders.
typedef struct dw_block {
  __m512i wlo[Q8P_MAX_PAIRS], whi[Q8P_MAX_PAIRS];
  q8p_rq rq_lo, rq_hi;
  __m512i lut[4];
  __mmask32 k;       // the block's channels (tail: fewer than 32)
  int full, narrow;  // all 32 channels; every channel's shift >= 33
} dw_block;

// 32 int8 at p (k: the lanes to read; full: all of them) widened to int16, minus z.
Q8P_AVX512 Q8P_INLINE __m512i load_sub16(const int8_t* p, __mmask32 k, int full, __m512i z) {
  const __m256i v = full ? _mm256_loadu_si256((const __m256i*)(const void*)p) : _mm256_maskz_loadu_epi8(k, p);
  return _mm512_sub_epi16(_mm512_cvtepi8_epi16(v), z);
}

// The channel orders of the two accumulators (the module comment): lo = {0-3, 8-11, 16-19, 24-27}, hi = the rest.
Q8P_AVX512 Q8P_INLINE __m512i order_lo(void) {
  return _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
}
Q8P_AVX512 Q8P_INLINE __m512i order_hi(void) {
  return _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}

// 32 int32 of a record array from channel c0 (k: the block's channels, others 0), in the lo and hi orders.
Q8P_AVX512 Q8P_INLINE void load_ordered(const int32_t* a, __mmask32 k, __m512i* lo, __m512i* hi) {
  const __m512i v0 = _mm512_maskz_loadu_epi32((__mmask16)k, a);
  const __m512i v1 = _mm512_maskz_loadu_epi32((__mmask16)(k >> 16), a + 16);
  *lo = _mm512_permutex2var_epi32(v0, order_lo(), v1);
  *hi = _mm512_permutex2var_epi32(v0, order_hi(), v1);
}

Q8P_AVX512 static void dw_block_init(const carve_q8_task* t, size_t c0, dw_block* b) {
  const carve_q8_desc* d = t->d;
  const size_t c = d->cin, taps = (size_t)d->kh * d->kw, n = c - c0 < Q8P_DW_BLOCK ? c - c0 : Q8P_DW_BLOCK;
  b->k = (__mmask32)low_bits(n);
  b->full = n == Q8P_DW_BLOCK;
  const __m512i zero = _mm512_setzero_si512();
  for (size_t i = 0; 2 * i < taps; i++) {
    const __m512i w0 = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(b->k, t->p.w + 2 * i * c + c0));
    const __m512i w1 = 2 * i + 1 < taps ? _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(b->k, t->p.w + (2 * i + 1) * c + c0))
                                        : zero;
    b->wlo[i] = _mm512_unpacklo_epi16(w0, w1);
    b->whi[i] = _mm512_unpackhi_epi16(w0, w1);
  }
  __m512i bias_lo, bias_hi, m_lo, m_hi, n_lo, n_hi;
  load_ordered(t->p.bias + c0, b->k, &bias_lo, &bias_hi);
  load_ordered(t->p.mul + c0, b->k, &m_lo, &m_hi);
  load_ordered(t->p.shift + c0, b->k, &n_lo, &n_hi);
  b->rq_lo = rq_make(bias_lo, m_lo, n_lo);
  b->rq_hi = rq_make(bias_hi, m_hi, n_hi);
  int narrow = 1;
  for (size_t i = 0; i < n; i++) {
    narrow &= t->p.shift[c0 + i] >= 33;
  }
  b->narrow = narrow;
  for (int i = 0; i < 4; i++) {
    b->lut[i] = t->p.lut != NULL ? _mm512_loadu_si512(t->p.lut + 64 * i) : zero;
  }
}

// One output pixel's block: the taps of rows [ky0, ky1) and columns [kx0, kx1) are inside the image (all of them
// when `inside`, so the compiler drops the checks); x0: the input address of tap (0, 0) plus c0, as an offset from
// x (negative at the top and left borders, used only for taps inside). Writes the block's channels at yp. kw and
// taps (kh * kw) are the op's, constants in the 3x3 instance (the tap loop unrolled).
Q8P_AVX512 Q8P_INLINE void dw_pixel(const carve_q8_task* t, const dw_block* b, ptrdiff_t x0, size_t ky0, size_t ky1,
                                    size_t kx0, size_t kx1, int8_t* yp, const size_t kw, const size_t taps,
                                    const int inside, const int vbmi) {
  const carve_q8_desc* d = t->d;
  const ptrdiff_t xs = (ptrdiff_t)d->in_stride, row = (ptrdiff_t)d->w * xs;
  const int8_t* x = (const int8_t*)(const void*)t->x;
  const __m512i z = _mm512_set1_epi16((short)d->in_zero), zero = _mm512_setzero_si512();
  __m512i acc_lo = zero, acc_hi = zero;
#pragma GCC unroll 25
  for (size_t i = 0; 2 * i < taps; i++) {
    __m512i a[2];
    for (size_t j = 0; j < 2; j++) {
      const size_t tap = 2 * i + j, ky = tap / kw, kx = tap % kw;
      a[j] = zero;
      if (tap < taps && (inside || (ky >= ky0 && ky < ky1 && kx >= kx0 && kx < kx1))) {
        a[j] = load_sub16(x + x0 + (ptrdiff_t)ky * row + (ptrdiff_t)kx * xs, b->k, b->full, z);
      }
    }
    acc_lo = _mm512_add_epi32(acc_lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(a[0], a[1]), b->wlo[i]));
    acc_hi = _mm512_add_epi32(acc_hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(a[0], a[1]), b->whi[i]));
  }
  const __m512i zy32 = _mm512_set1_epi32(d->out_zero), zy64 = _mm512_set1_epi64(d->out_zero);
  const __m512i lo = rq_apply(&b->rq_lo, acc_lo, zy32, zy64, b->narrow);
  const __m512i hi = rq_apply(&b->rq_hi, acc_hi, zy32, zy64, b->narrow);
  __m256i v = _mm512_cvtsepi16_epi8(_mm512_packs_epi32(lo, hi));  // the channels back in order, clamped
  if (vbmi && t->p.lut != NULL) {
    v = lut32_vbmi(b->lut, v);
  }
  _mm256_mask_storeu_epi8(yp, b->k, v);
  if (!vbmi && t->p.lut != NULL) {
    const size_t n = b->full ? Q8P_DW_BLOCK : (size_t)__builtin_popcount((unsigned)b->k);
    for (size_t i = 0; i < n; i++) {
      yp[i] = t->p.lut[(uint8_t)yp[i] ^ 0x80];
    }
  }
}

// Output rows [oy0, oy1) of a depthwise CONV, block by block of channels. A 3x3 kernel's pixels with the whole
// window inside go through an instance with the taps unrolled and unchecked.
Q8P_AVX512 Q8P_INLINE void dw_rows(const carve_q8_task* t, size_t oy0, size_t oy1, const int vbmi) {
  const carve_q8_desc* d = t->d;
  const size_t h = d->h, wd = d->w, c = d->cin, k_h = d->kh, k_w = d->kw, s = d->stride, pad = d->pad;
  const size_t ow = out_size(wd, k_w, s, pad);
  const ptrdiff_t xs = (ptrdiff_t)d->in_stride;
  const int k3 = k_h == 3 && k_w == 3;
  int8_t* y = (int8_t*)(void*)t->y;
  dw_block b;
  for (size_t c0 = 0; c0 < c; c0 += Q8P_DW_BLOCK) {
    dw_block_init(t, c0, &b);
    for (size_t oy = oy0; oy < oy1; oy++) {
      size_t ky0, ky1;
      tap_range(oy, s, pad, k_h, h, &ky0, &ky1);
      const ptrdiff_t row0 = ((ptrdiff_t)(oy * s) - (ptrdiff_t)pad) * (ptrdiff_t)wd;
      for (size_t ox = 0; ox < ow; ox++) {
        size_t kx0, kx1;
        tap_range(ox, s, pad, k_w, wd, &kx0, &kx1);
        const ptrdiff_t x0 = (row0 + (ptrdiff_t)(ox * s) - (ptrdiff_t)pad) * xs + (ptrdiff_t)c0;
        int8_t* yp = y + (oy * ow + ox) * d->out_stride + c0;
        if (k3 && ky1 - ky0 == 3 && kx1 - kx0 == 3) {
          dw_pixel(t, &b, x0, 0, 3, 0, 3, yp, 3, 9, 1, vbmi);
        } else {
          dw_pixel(t, &b, x0, ky0, ky1, kx0, kx1, yp, k_w, k_h * k_w, 0, vbmi);
        }
      }
    }
  }
}

// ---- Add ------------------------------------------------------------------------------------------------------

// y[i] for i < n of carve_q8.c's add_i32, 32 at a time.
Q8P_AVX512 static void add_run(const carve_q8_desc* d, const int8_t* a, const int8_t* b, int8_t* y, size_t n) {
  const int32_t mah = (d->mul_a + (1 << 15)) >> 16, mbh = (d->mul_b + (1 << 15)) >> 16;
  const int32_t mal = d->mul_a - mah * 65536, mbl = d->mul_b - mbh * 65536;
  // the int16 pairs (a', b') meet (mah, mbh) and (mal, mbl): a' in the low word of each dword
  const __m512i mh = _mm512_set1_epi32((int32_t)(((uint32_t)(uint16_t)mbh << 16) | (uint16_t)mah));
  const __m512i ml = _mm512_set1_epi32((int32_t)(((uint32_t)(uint16_t)mbl << 16) | (uint16_t)(int16_t)mal));
  const __m512i za = _mm512_set1_epi16((short)d->in_zero), zb = _mm512_set1_epi16((short)d->in2_zero);
  const __m512i zy = _mm512_set1_epi32(d->out_zero), rnd = _mm512_set1_epi32((int32_t)1 << (d->shift - 17));
  const __m128i sh = _mm_cvtsi32_si128(d->shift - 16);
  for (size_t i = 0; i < n; i += 32) {
    const __mmask32 k = (__mmask32)low_bits(n - i);
    const int full = n - i >= 32;
    const __m512i av = load_sub16(a + i, k, full, za), bv = load_sub16(b + i, k, full, zb);
    const __m512i lo = _mm512_unpacklo_epi16(av, bv), hi = _mm512_unpackhi_epi16(av, bv);
    const __m512i p_lo = _mm512_madd_epi16(lo, mh), q_lo = _mm512_madd_epi16(lo, ml);
    const __m512i p_hi = _mm512_madd_epi16(hi, mh), q_hi = _mm512_madd_epi16(hi, ml);
    const __m512i v_lo = _mm512_add_epi32(
        zy, _mm512_sra_epi32(_mm512_add_epi32(_mm512_add_epi32(p_lo, _mm512_srai_epi32(q_lo, 16)), rnd), sh));
    const __m512i v_hi = _mm512_add_epi32(
        zy, _mm512_sra_epi32(_mm512_add_epi32(_mm512_add_epi32(p_hi, _mm512_srai_epi32(q_hi, 16)), rnd), sh));
    _mm256_mask_storeu_epi8(y + i, k, _mm512_cvtsepi16_epi8(_mm512_packs_epi32(v_lo, v_hi)));
  }
}

// ---- Quantize / dequantize ------------------------------------------------------------------------------------

// arith.quantize of n floats, 16 at a time (carve_q8.c's quantize): v = x / scale, NaN -> 0, clamp to [-512, 512],
// rounded half to even, + zp, saturated. The division is the costly part (VDIVPS: one per 16 floats every ~10
// cycles); so where inv = 1 / scale is a normal float (fast), v' = x * inv stands in for v when it cannot round
// differently: v' = (x / scale)(1 + e1)(1 + e2) with |e1|, |e2| <= 2^-24, so |v' - v| <= 2^-22.9 |v| < 2^-13 for
// |v| <= 513 (and both clamp alike beyond), and rint(v') = rint(v) unless a half-integer lies within 2^-13 of v'.
// A vector with a lane within 2^-12 of a half-integer (after the clamp; x / scale landing on a tie exactly is one
// of them) is divided instead. Overflow and underflow of the product meet the same clamp and rounding as the
// quotient (|x / scale| > 512 or < 2^-126 both ways); inf and NaN inputs give inf and NaN either way.
Q8P_AVX512 Q8P_INLINE __m512 quantize_clamp(__m512 v) {
  v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);  // NaN -> 0
  return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-512.0f)), _mm512_set1_ps(512.0f));
}

Q8P_AVX512 static void quantize_run(const float* x, int8_t* y, size_t n, float scale, int32_t zp) {
  const __m512i vzp = _mm512_set1_epi32(zp);
  const __m512 vs = _mm512_set1_ps(scale), half = _mm512_set1_ps(0.5f), near = _mm512_set1_ps(1.0f / 4096);
  const int fast = scale > 0x1p-125f && scale < 0x1p125f;  // 1 / scale normal, and its rounding error 2^-24
  const __m512 inv = _mm512_set1_ps(fast ? 1.0f / scale : 0.0f);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = (__mmask16)low_bits(n - i);
    const __m512 xv = n - i >= 16 ? _mm512_loadu_ps(x + i) : _mm512_maskz_loadu_ps(k, x + i);
    __m512 v = quantize_clamp(_mm512_mul_ps(xv, inv));
    const __m512 frac = _mm512_sub_ps(v, _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    const __m512 dist = _mm512_abs_ps(_mm512_sub_ps(frac, half));  // from the half-integer between floor and ceil
    if (!fast || _mm512_cmp_ps_mask(dist, near, _CMP_LE_OQ) != 0) {
      v = quantize_clamp(_mm512_div_ps(xv, vs));
    }
    const __m512i q = _mm512_add_epi32(_mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vzp);
    _mm_mask_storeu_epi8(y + i, k, _mm512_cvtsepi32_epi8(q));
  }
}

// arith.dequantize of n int8, 16 at a time.
Q8P_AVX512 static void dequantize_run(const int8_t* x, float* y, size_t n, float scale, int32_t zp) {
  const __m512i vzp = _mm512_set1_epi32(zp);
  const __m512 vs = _mm512_set1_ps(scale);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = (__mmask16)low_bits(n - i);
    const __m128i q = n - i >= 16 ? _mm_loadu_si128((const __m128i*)(const void*)(x + i)) : _mm_maskz_loadu_epi8(k, x + i);
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(q), vzp)), vs);
    _mm512_mask_storeu_ps(y + i, k, v);
  }
}

// ---- Max pool -------------------------------------------------------------------------------------------------

// Output rows [oy0, oy1): y = max over the in-image taps, from -128 (carve_q8.c's maxpool2d), 64 channels at a time.
Q8P_AVX512 static void maxpool_rows(const carve_q8_task* t, size_t oy0, size_t oy1) {
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
      for (size_t c0 = 0; c0 < c; c0 += 64) {
        const __mmask64 m = low_bits(c - c0);
        __m512i v = _mm512_set1_epi8(INT8_MIN);
        for (size_t ky = ky0; ky < ky1; ky++) {
          for (size_t kx = kx0; kx < kx1; kx++) {
            const int8_t* xp = x + ((oy * s + ky - pad) * wd + (ox * s + kx - pad)) * d->in_stride + c0;
            v = _mm512_max_epi8(v, _mm512_maskz_loadu_epi8(m, xp));
          }
        }
        _mm512_mask_storeu_epi8(yp + c0, m, v);
      }
    }
  }
}

Q8P_AVX512 static void pixels(const carve_q8_task* t, size_t px0, size_t px1) {
  pixels_with(t, px0, px1, add_run, quantize_run, dequantize_run);
}

Q8P_AVX512 Q8P_INLINE void items_body(void* task, size_t start, size_t count, const int vbmi) {
  const carve_q8_task* t = (const carve_q8_task*)task;
  switch (t->d->kind) {
    case CARVE_Q8_CONV:
      dw_rows(t, start, start + count, vbmi);
      break;
    case CARVE_Q8_MAXPOOL:
      maxpool_rows(t, start, start + count);
      break;
    default:
      pixels(t, start, start + count);
      break;
  }
}

Q8P_AVX512 static void items_avx512(void* task, size_t start, size_t count) { items_body(task, start, count, 0); }

Q8P_VBMI static void items_avx512vbmi(void* task, size_t start, size_t count) { items_body(task, start, count, 1); }

static const carve_q8_isa_loops loops_avx512 = {takes, items_avx512};
static const carve_q8_isa_loops loops_avx512vbmi = {takes, items_avx512vbmi};

carve_status carve_q8_pool__avx512(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool) {
  return carve_q8_run_pool_loops(d, blob, arena, pool, &loops_avx512);
}

carve_status carve_q8_pool__avx512vbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                       pthreadpool_t pool) {
  return carve_q8_run_pool_loops(d, blob, arena, pool, &loops_avx512vbmi);
}
#endif  // CARVE_HAVE_X86_SIMD

int carve_q8_pool_avx512_ready(void) {
#ifdef CARVE_HAVE_X86_SIMD
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return 0;
#endif
}

int carve_q8_pool_vbmi_ready(void) {
#ifdef CARVE_HAVE_X86_SIMD
  return carve_q8_pool_avx512_ready() && __builtin_cpu_supports("avx512vbmi");
#else
  return 0;
#endif
}
