// carve runtime: carve_q8_run_pool's instruction-set variants (see carve_q8_pool.h).
//
// carve_q8.c checks the arguments, resolves the views and splits the op into tiles (carve_q8_run_pool_loops); a
// variant is the item loops for the ops it takes (carve_q8_isa.h). The AVX-512 (and AVX2 and NEON, below) loops
// compute carve_q8.c's integers and floats operation for operation (the same formulas, exact in any order where they are
// integer sums), so every byte is carve_q8_run's: tests/runtime/q8_vs_arith.py compares each variant with arith.py bit for bit, and
// q8_pool_vs_run.py with carve_q8_run on 1 to 7 threads.
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

#include "carve_q8_pool.h"
#include "carve_q8_isa.h"
#include "carve_q8_pool_isa.h"

#include <string.h>

#ifdef CARVE_HAVE_X86_SIMD
#include <immintrin.h>
#endif

// ---- Portable ------------------------------------------------------------------------------------------------

carve_status carve_q8_pool__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                     pthreadpool_t pool) {
  return carve_q8_run_pool(d, blob, arena, pool);
}

#if defined(CARVE_HAVE_X86_SIMD) || defined(CARVE_HAVE_NEON)  // shared by the SIMD variants

#define Q8P_INLINE __attribute__((always_inline)) static inline

static size_t out_size(size_t in, size_t k, size_t stride, size_t pad) { return (in + 2 * pad - k) / stride + 1; }

// carve_q8.c's tap_range: the kernel taps [lo, hi) of output o whose input lies inside [0, in).
static void tap_range(size_t o, size_t s, size_t pad, size_t k, size_t in, size_t* lo, size_t* hi) {
  const size_t first = o * s;
  *lo = first < pad ? pad - first : 0;
  const size_t end = in + pad > first ? in + pad - first : 0;
  *hi = end < k ? end : k;
}
#endif

#ifdef CARVE_HAVE_X86_SIMD

#define Q8P_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define Q8P_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

#define Q8P_DW_BLOCK 32                                    // channels of one depthwise block
#define Q8P_MAX_PAIRS ((CARVE_Q8_POOL_MAX_TAPS + 1) / 2)  // tap pairs of the largest kernel

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

#endif  // CARVE_HAVE_X86_SIMD

#if defined(CARVE_HAVE_X86_SIMD) || defined(CARVE_HAVE_NEON)
// ---- Items ----------------------------------------------------------------------------------------------------

static int takes(const carve_q8_desc* d) {
  switch (d->kind) {
    case CARVE_Q8_CONV:
      return d->groups == d->cin && d->cin == d->cout && (size_t)d->kh * d->kw <= CARVE_Q8_POOL_MAX_TAPS;
    case CARVE_Q8_ADD:
      return carve_q8_add_i32_ok(d);
    case CARVE_Q8_QUANTIZE:
    case CARVE_Q8_DEQUANTIZE:
    case CARVE_Q8_MAXPOOL:
      return 1;
    default:
      return 0;
  }
}

// The pixels [px0, px1) of the views as runs (carve_q8.c's runs_of): one run when every view is packed.
static size_t runs_of(size_t c, int packed, size_t px0, size_t px1, size_t* run) {
  *run = packed ? (px1 - px0) * c : c;
  return packed ? 1 : px1 - px0;
}

// The element-wise kinds over pixels [px0, px1), with one variant's run functions: inlined into each variant's
// `pixels`, so that the calls below are direct calls of that variant's code.
typedef void (*q8p_add_fn)(const carve_q8_desc* d, const int8_t* a, const int8_t* b, int8_t* y, size_t n);
typedef void (*q8p_quantize_fn)(const float* x, int8_t* y, size_t n, float scale, int32_t zp);
typedef void (*q8p_dequantize_fn)(const int8_t* x, float* y, size_t n, float scale, int32_t zp);

Q8P_INLINE void pixels_with(const carve_q8_task* t, size_t px0, size_t px1, q8p_add_fn add,
                            q8p_quantize_fn quantize, q8p_dequantize_fn dequantize) {
  const carve_q8_desc* d = t->d;
  const size_t c = d->cin, xs = d->in_stride, ys = d->out_stride;
  size_t run;
  switch (d->kind) {
    case CARVE_Q8_ADD: {
      const size_t x2s = d->in2_stride, runs = runs_of(c, xs == c && x2s == c && ys == c, px0, px1, &run);
      const int8_t* a = (const int8_t*)(const void*)t->x + px0 * xs;
      const int8_t* b = (const int8_t*)(const void*)t->x2 + px0 * x2s;
      int8_t* y = (int8_t*)(void*)t->y + px0 * ys;
      for (size_t r = 0; r < runs; r++) {
        add(d, a + r * xs, b + r * x2s, y + r * ys, run);
      }
      break;
    }
    case CARVE_Q8_QUANTIZE: {
      const size_t runs = runs_of(c, xs == c && ys == c, px0, px1, &run);
      const float* x = (const float*)(const void*)t->x + px0 * xs;
      int8_t* y = (int8_t*)(void*)t->y + px0 * ys;
      for (size_t r = 0; r < runs; r++) {
        quantize(x + r * xs, y + r * ys, run, d->scale, d->out_zero);
      }
      break;
    }
    case CARVE_Q8_DEQUANTIZE: {
      const size_t runs = runs_of(c, xs == c && ys == c, px0, px1, &run);
      const int8_t* x = (const int8_t*)(const void*)t->x + px0 * xs;
      float* y = (float*)(void*)t->y + px0 * ys;
      for (size_t r = 0; r < runs; r++) {
        dequantize(x + r * xs, y + r * ys, run, d->scale, d->in_zero);
      }
      break;
    }
  }
}
#endif

#ifdef CARVE_HAVE_X86_SIMD
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

// ---- AVX2 -----------------------------------------------------------------------------------------------------
//
// The same loops on AVX2 + FMA (carve_isa's AVX2 level: CPUs without AVX-512), 16 channels (depthwise CONV, ADD),
// 8 floats (QUANTIZE, DEQUANTIZE) or 32 bytes (MAXPOOL) at a time. Depthwise: the taps of 16 channels widened to
// int16 in one ymm; VPUNPCK[LH]WD interleave two taps within each 128-bit lane, so one accumulator holds channels
// {0-3, 8-11} and the other {4-7, 12-15}, the record's arrays are loaded in those orders (VPERM2I128), and
// VPACKSSDW of the two requantized vectors puts the channels back in order (then VPACKSSWB of its two lanes);
// ADD's lanes work the same way. The requantization: the AVX-512 int32 path on 8 lanes where every channel's
// shift is >= 33, else carve_q8.c's scalar requantize of each sum (AVX2 has no 64-bit arithmetic shift); the table
// a byte at a time. AVX2 has no byte masks: a tail (fewer than a vector's elements left) is copied through a
// local buffer, so nothing outside a view is read or written.

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

#ifdef CARVE_HAVE_NEON
// ---- NEON (aarch64) -------------------------------------------------------------------------------------------
//
// The same ops on aarch64's NEON, 16 channels or elements at a time; every operation is carve_q8.c's, exact:
//   CONV (depthwise): per output pixel and block of 16 channels, each in-image tap's x - zx (SSUBL: int8 - int8
//     into int16, in [-255, 255]) times the tap's weights widened to int16 (SMLAL / SMLAL2 into 4 int32x4: each
//     product within +-32640, the sums exact); the requantization carve_q8conv_neon.c's one (SMULL by m into int64,
//     + 2^(n-1), SSHL by -n, + zy, the saturating narrowings SQXTN int64 -> int32 -> int16 -> int8 as the clamp), then
//     the table by TBL / TBX over its four 64-byte quarters.
//   ADD: carve_q8.c's add_i32 on int32 lanes: a' = a - za, b' = b - zb (int16), p = a' mah + b' mbh and q = a' mal +
//     b' mbl (SMULL + SMLAL by scalars), zy + ((p + (q >> 16) + 2^(n-17)) >> (n - 16)), saturated to int8.
//   QUANTIZE: x / scale (FDIV: IEEE, as the scalar division), NaN -> 0, clamp to [-512, 512], FRINTN (to nearest,
//     ties to even, whatever FPCR says: the scalar form's rounding in the default mode), + zp, saturated.
//   DEQUANTIZE: (float)(q - zp) * scale (one FMUL). MAXPOOL: SMAX over the in-image taps from -128.
// A tail (fewer than 16 elements left) goes through a local buffer: nothing outside a view is read or written.

#include <arm_neon.h>

#define Q8P_NEON_BLOCK 16  // channels of one depthwise block

// The 16 int8 at p, or the n < 16 there and zeros (nothing past p + n read).
static inline int8x16_t load16_tail(const int8_t* p, size_t n) {
  if (n >= 16) {
    return vld1q_s8(p);
  }
  int8_t b[16] = {0};
  memcpy(b, p, n);
  return vld1q_s8(b);
}

// Stores the first min(n, 16) lanes of v at p.
static inline void store16_tail(int8_t* p, int8x16_t v, size_t n) {
  if (n >= 16) {
    vst1q_s8(p, v);
    return;
  }
  int8_t b[16];
  vst1q_s8(b, v);
  memcpy(p, b, n);
}

// A depthwise block: its channels [c0, c0 + n), each tap's 16 weights as int16 (zeros past n), the requantization
// constants (bias, m; 2^(n-1) and -n as int64 pairs) and the table's quarters.
typedef struct q8p_neon_block {
  int16x8_t w[CARVE_Q8_POOL_MAX_TAPS][2];
  int32x4_t bias[4], m[4];
  int64x2_t r[8], nn[8];
  int8x16x4_t lut[4];
  size_t n;
} q8p_neon_block;

static void neon_block_init(const carve_q8_task* t, size_t c0, q8p_neon_block* b) {
  const carve_q8_desc* d = t->d;
  const size_t c = d->cin, taps = (size_t)d->kh * d->kw;
  b->n = c - c0 < Q8P_NEON_BLOCK ? c - c0 : Q8P_NEON_BLOCK;
  for (size_t i = 0; i < taps; i++) {
    const int8x16_t w = load16_tail(t->p.w + i * c + c0, b->n);
    b->w[i][0] = vmovl_s8(vget_low_s8(w));
    b->w[i][1] = vmovl_high_s8(w);
  }
  int32_t bias[16] = {0}, mul[16] = {0}, shift[16];
  for (size_t i = 0; i < 16; i++) {
    shift[i] = i < b->n ? t->p.shift[c0 + i] : 1;  // (the padding lanes are not stored)
  }
  memcpy(bias, t->p.bias + c0, b->n * sizeof(int32_t));
  memcpy(mul, t->p.mul + c0, b->n * sizeof(int32_t));
  const int64x2_t one = vdupq_n_s64(1);
  for (int v = 0; v < 4; v++) {
    b->bias[v] = vld1q_s32(bias + 4 * v);
    b->m[v] = vld1q_s32(mul + 4 * v);
    const int32x4_t n = vld1q_s32(shift + 4 * v);
    const int64x2_t n_lo = vmovl_s32(vget_low_s32(n)), n_hi = vmovl_high_s32(n);
    b->r[2 * v] = vshlq_s64(one, vsubq_s64(n_lo, one));
    b->r[2 * v + 1] = vshlq_s64(one, vsubq_s64(n_hi, one));
    b->nn[2 * v] = vnegq_s64(n_lo);
    b->nn[2 * v + 1] = vnegq_s64(n_hi);
  }
  for (int i = 0; i < 4 && t->p.lut != NULL; i++) {
    for (int j = 0; j < 4; j++) {
      b->lut[i].val[j] = vld1q_s8(t->p.lut + 64 * i + 16 * j);
    }
  }
}

// clamp(zy + (((acc + bias) m + 2^(n-1)) >> n)) of lanes 4v .. 4v + 3, as int16 in [-128, 127].
static inline int16x4_t neon_requant4(const q8p_neon_block* b, int v, int32x4_t acc, int64x2_t zy) {
  const int32x4_t x = vaddq_s32(acc, b->bias[v]);  // within int32: carve_q8.h's accumulator precondition
  int64x2_t lo = vmull_s32(vget_low_s32(x), vget_low_s32(b->m[v]));
  int64x2_t hi = vmull_high_s32(x, b->m[v]);
  lo = vaddq_s64(vshlq_s64(vaddq_s64(lo, b->r[2 * v]), b->nn[2 * v]), zy);
  hi = vaddq_s64(vshlq_s64(vaddq_s64(hi, b->r[2 * v + 1]), b->nn[2 * v + 1]), zy);
  return vqmovn_s32(vcombine_s32(vqmovn_s64(lo), vqmovn_s64(hi)));
}

// lut[q + 128] of 16 int8: TBL on the first quarter, TBX (out-of-range lanes kept) on the others with the index
// less 64, 128, 192 (mod 256).
static inline int8x16_t neon_lut16(const int8x16x4_t t[4], int8x16_t q) {
  const uint8x16_t quarter = vdupq_n_u8(64);
  uint8x16_t idx = veorq_u8(vreinterpretq_u8_s8(q), vdupq_n_u8(0x80));
  int8x16_t v = vqtbl4q_s8(t[0], idx);
  idx = vsubq_u8(idx, quarter);
  v = vqtbx4q_s8(v, t[1], idx);
  idx = vsubq_u8(idx, quarter);
  v = vqtbx4q_s8(v, t[2], idx);
  idx = vsubq_u8(idx, quarter);
  return vqtbx4q_s8(v, t[3], idx);
}

// Output rows [oy0, oy1) of a depthwise CONV, block by block of 16 channels.
static void dw_rows_neon(const carve_q8_task* t, size_t oy0, size_t oy1) {
  const carve_q8_desc* d = t->d;
  const size_t h = d->h, wd = d->w, c = d->cin, k_h = d->kh, k_w = d->kw, s = d->stride, pad = d->pad;
  const size_t ow = out_size(wd, k_w, s, pad), xs = d->in_stride;
  const int8_t* x = (const int8_t*)(const void*)t->x;
  int8_t* y = (int8_t*)(void*)t->y;
  const int8x8_t zx = vdup_n_s8((int8_t)d->in_zero);
  const int64x2_t zy = vdupq_n_s64(d->out_zero);
  q8p_neon_block b;
  for (size_t c0 = 0; c0 < c; c0 += Q8P_NEON_BLOCK) {
    neon_block_init(t, c0, &b);
    for (size_t oy = oy0; oy < oy1; oy++) {
      size_t ky0, ky1;
      tap_range(oy, s, pad, k_h, h, &ky0, &ky1);
      for (size_t ox = 0; ox < ow; ox++) {
        size_t kx0, kx1;
        tap_range(ox, s, pad, k_w, wd, &kx0, &kx1);
        int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
        for (size_t ky = ky0; ky < ky1; ky++) {
          const int8_t* xr = x + ((oy * s + ky - pad) * wd + (ox * s - pad)) * xs + c0;  // + kx * xs: in the image
          for (size_t kx = kx0; kx < kx1; kx++) {
            const int8x16_t xv = load16_tail(xr + kx * xs, b.n);
            const int16x8_t lo = vsubl_s8(vget_low_s8(xv), zx), hi = vsubl_s8(vget_high_s8(xv), zx);
            const int16x8_t* w = b.w[ky * k_w + kx];
            a0 = vmlal_s16(a0, vget_low_s16(lo), vget_low_s16(w[0]));
            a1 = vmlal_high_s16(a1, lo, w[0]);
            a2 = vmlal_s16(a2, vget_low_s16(hi), vget_low_s16(w[1]));
            a3 = vmlal_high_s16(a3, hi, w[1]);
          }
        }
        int8x16_t v = vcombine_s8(vqmovn_s16(vcombine_s16(neon_requant4(&b, 0, a0, zy), neon_requant4(&b, 1, a1, zy))),
                                  vqmovn_s16(vcombine_s16(neon_requant4(&b, 2, a2, zy), neon_requant4(&b, 3, a3, zy))));
        if (t->p.lut != NULL) {
          v = neon_lut16(b.lut, v);
        }
        store16_tail(y + (oy * ow + ox) * d->out_stride + c0, v, b.n);
      }
    }
  }
}

// y[i] for i < n of carve_q8.c's add_i32, 16 at a time.
static void add_run_neon(const carve_q8_desc* d, const int8_t* a, const int8_t* b, int8_t* y, size_t n) {
  const int16_t mah = (int16_t)((d->mul_a + (1 << 15)) >> 16), mbh = (int16_t)((d->mul_b + (1 << 15)) >> 16);
  const int16_t mal = (int16_t)(d->mul_a - mah * 65536), mbl = (int16_t)(d->mul_b - mbh * 65536);
  const int8x8_t za = vdup_n_s8((int8_t)d->in_zero), zb = vdup_n_s8((int8_t)d->in2_zero);
  const int32x4_t zy = vdupq_n_s32(d->out_zero), rnd = vdupq_n_s32((int32_t)1 << (d->shift - 17));
  const int32x4_t sh = vdupq_n_s32(16 - d->shift);  // SSHL by -(n - 16): the arithmetic right shift
  for (size_t i = 0; i < n; i += 16) {
    const int8x16_t av = load16_tail(a + i, n - i), bv = load16_tail(b + i, n - i);
    const int16x8_t al = vsubl_s8(vget_low_s8(av), za), ah = vsubl_s8(vget_high_s8(av), za);
    const int16x8_t bl = vsubl_s8(vget_low_s8(bv), zb), bh = vsubl_s8(vget_high_s8(bv), zb);
    const int16x4_t as[4] = {vget_low_s16(al), vget_high_s16(al), vget_low_s16(ah), vget_high_s16(ah)};
    const int16x4_t bs[4] = {vget_low_s16(bl), vget_high_s16(bl), vget_low_s16(bh), vget_high_s16(bh)};
    int16x4_t out[4];
    for (int j = 0; j < 4; j++) {
      const int32x4_t p = vmlal_n_s16(vmull_n_s16(as[j], mah), bs[j], mbh);
      const int32x4_t q = vmlal_n_s16(vmull_n_s16(as[j], mal), bs[j], mbl);
      const int32x4_t v = vaddq_s32(zy, vshlq_s32(vaddq_s32(vaddq_s32(p, vshrq_n_s32(q, 16)), rnd), sh));
      out[j] = vqmovn_s32(v);
    }
    store16_tail(y + i, vcombine_s8(vqmovn_s16(vcombine_s16(out[0], out[1])), vqmovn_s16(vcombine_s16(out[2], out[3]))),
                 n - i);
  }
}

// carve_q8.c's quantize of n floats, 4 at a time (a tail of fewer through a buffer).
static void quantize_run_neon(const float* x, int8_t* y, size_t n, float scale, int32_t zp) {
  const float32x4_t vs = vdupq_n_f32(scale), lo = vdupq_n_f32(-512.0f), hi = vdupq_n_f32(512.0f);
  const int32x4_t vzp = vdupq_n_s32(zp);
  for (size_t i = 0; i < n; i += 4) {
    const size_t k = n - i < 4 ? n - i : 4;
    float xb[4] = {0};
    if (k < 4) {
      memcpy(xb, x + i, k * sizeof(float));
    }
    float32x4_t v = vdivq_f32(vld1q_f32(k < 4 ? xb : x + i), vs);
    v = vbslq_f32(vceqq_f32(v, v), v, vdupq_n_f32(0.0f));  // NaN -> 0 (FCVTZS would also make NaN 0)
    v = vminq_f32(vmaxq_f32(v, lo), hi);
    const int32x4_t q = vaddq_s32(vcvtq_s32_f32(vrndnq_f32(v)), vzp);  // an integer: the conversion is exact
    const int8x8_t b = vqmovn_s16(vcombine_s16(vqmovn_s32(q), vdup_n_s16(0)));
    int8_t yb[8];
    vst1_s8(yb, b);
    memcpy(y + i, yb, k);
  }
}

// carve_q8.c's dequantize of n int8, 16 at a time.
static void dequantize_run_neon(const int8_t* x, float* y, size_t n, float scale, int32_t zp) {
  const float32x4_t vs = vdupq_n_f32(scale);
  const int16x8_t vzp = vdupq_n_s16((int16_t)zp);
  for (size_t i = 0; i < n; i += 16) {
    const size_t k = n - i < 16 ? n - i : 16;
    const int8x16_t q = load16_tail(x + i, k);
    const int16x8_t l = vsubq_s16(vmovl_s8(vget_low_s8(q)), vzp), h = vsubq_s16(vmovl_high_s8(q), vzp);
    float r[16];
    vst1q_f32(r, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(l))), vs));
    vst1q_f32(r + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(l)), vs));
    vst1q_f32(r + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vs));
    vst1q_f32(r + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(h)), vs));
    memcpy(y + i, r, k * sizeof(float));
  }
}

// Output rows [oy0, oy1): y = max over the in-image taps, from -128 (carve_q8.c's maxpool2d), 16 channels at a time.
static void maxpool_rows_neon(const carve_q8_task* t, size_t oy0, size_t oy1) {
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
      for (size_t c0 = 0; c0 < c; c0 += 16) {
        int8x16_t v = vdupq_n_s8(INT8_MIN);
        for (size_t ky = ky0; ky < ky1; ky++) {
          for (size_t kx = kx0; kx < kx1; kx++) {
            const int8_t* xp = x + ((oy * s + ky - pad) * wd + (ox * s + kx - pad)) * d->in_stride + c0;
            v = vmaxq_s8(v, load16_tail(xp, c - c0));  // a tail's zero lanes are not stored
          }
        }
        store16_tail(yp + c0, v, c - c0);
      }
    }
  }
}

static void items_neon(void* task, size_t start, size_t count) {
  const carve_q8_task* t = (const carve_q8_task*)task;
  switch (t->d->kind) {
    case CARVE_Q8_CONV:
      dw_rows_neon(t, start, start + count);
      break;
    case CARVE_Q8_MAXPOOL:
      maxpool_rows_neon(t, start, start + count);
      break;
    default:
      pixels_with(t, start, start + count, add_run_neon, quantize_run_neon, dequantize_run_neon);
      break;
  }
}

static const carve_q8_isa_loops loops_neon = {takes, items_neon};

carve_status carve_q8_pool__neon(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool) {
  return carve_q8_run_pool_loops(d, blob, arena, pool, &loops_neon);
}
#endif  // CARVE_HAVE_NEON

// ---- Selection ------------------------------------------------------------------------------------------------

int carve_q8_pool_avx512_ready(void) {
#ifdef CARVE_HAVE_X86_SIMD
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return 0;
#endif
}

int carve_q8_pool_avx2_ready(void) {
#ifdef CARVE_HAVE_X86_SIMD
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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

carve_q8_pool_fn carve_q8_pool_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512 && carve_q8_pool_avx512_ready()) {
    return carve_q8_pool_vbmi_ready() ? carve_q8_pool__avx512vbmi : carve_q8_pool__avx512;
  }
  if ((isa == CARVE_ISA_AVX2 || isa == CARVE_ISA_AVX512) && carve_q8_pool_avx2_ready()) {
    return carve_q8_pool__avx2;
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (isa == CARVE_ISA_NEON) {
    return carve_q8_pool__neon;
  }
#endif
  (void)isa;
  return carve_q8_pool__portable;
}

const char* carve_q8_pool_name(carve_q8_pool_fn fn) {
#ifdef CARVE_HAVE_X86_SIMD
  if (fn == carve_q8_pool__avx512vbmi) {
    return "avx512vbmi";
  }
  if (fn == carve_q8_pool__avx512) {
    return "avx512";
  }
  if (fn == carve_q8_pool__avx2) {
    return "avx2";
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (fn == carve_q8_pool__neon) {
    return "neon";
  }
#endif
  return fn == carve_q8_pool__portable ? "portable" : "unknown";
}

carve_status carve_q8_pool(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool) {
  return carve_q8_pool_select(carve_isa_detect())(d, blob, arena, pool);
}
