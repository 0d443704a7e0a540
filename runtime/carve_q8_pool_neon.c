// carve runtime: carve_q8_run_pool's aarch64 NEON variant (carve_q8_pool_neon.h; the contract: carve_q8_pool.h;
// what the variants share: carve_q8_pool_impl.h).
//
// The ops the AVX-512 variant takes (carve_q8_pool_avx512.c) on aarch64's NEON, 16 channels or elements at a
// time; every operation is carve_q8.c's, exact:
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

#include "carve_q8_pool_neon.h"
#include "carve_q8_pool_impl.h"

#ifdef CARVE_HAVE_NEON
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
