// carve runtime: carve_q8conv's NEON variants, ARMv8.0 and the dot product (carve_q8conv_neon.h; the driver and
// the contract: carve_q8conv.c, carve_q8conv.h).

#include "carve_q8conv_neon.h"
#include "carve_q8conv_impl.h"

#ifdef CARVE_HAVE_NEON
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>  // getauxval: the dot-product instructions (HWCAP_ASIMDDP)
#endif

// ---- NEON (aarch64) ------------------------------------------------------------------------------
//
// For aarch64 (NEON is always there). A block of A is packed unflipped (s = 0, signed x signed) by pack_block_neon;
// two variants compute the GEMM from the same panels:
//
//   neondot  ARMv8.2 dot product (SDOT, vdotq_laneq_s32: Cortex-A76 / A78 / X1 and later, Neoverse N1 / V1 / N2:
//            a Raspberry Pi 5, Graviton 2 and later, Jetson Orin): 4 rows x a panel's 16 channels in 16 int32x4
//            accumulators; each 16 bytes of a row of A (4 groups of 4 k) are one register, and SDOT by its lane g
//            adds the 4 products of group g with each channel's 4 weights (one 16-byte quarter of the group's 64
//            bytes: 4 channels x 4 k) to the channel's int32. Where the compiler has the instructions
//            (CARVE_Q8CONV_HAVE_NEONDOT) and the CPU (getauxval(AT_HWCAP) & HWCAP_ASIMDDP on Linux).
//   neon     ARMv8.0 NEON (Cortex-A53 / A55 / A72: a Raspberry Pi 3 / 4): a row's 4 bytes of a group broadcast
//            to 16, SMULL / SMULL2 (vmull_s8, vmull_high_s8) with the group's weights into 8 int16 products
//            (exact: |a * w| <= 2^14), and SADALP (vpadalq_s16) adds each adjacent pair into an int32 at once
//            (no int16 sum of more than one product: two products of (-128) * (-128) would be 2^15); each
//            channel keeps two partial sums (k 0-1 and 2-3 of every group), added by ADDP (vpaddq_s32) after the
//            last group, which also puts them in channel order. 2 rows x 16 channels in 16 accumulators.
//
// The requantization, for every shift in [1, 62]: acc + (bias - zx * wsum) in int32 (within the record's bound),
// SMULL by m into int64, + 2^(n-1), SSHL by -n (an arithmetic right shift: the floor), + zy, and the saturating
// narrowings SQXTN int64 -> int32 -> int16 -> int8, whose composition is the clamp to [-128, 127]: arith's
// integers exactly. The table: TBL / TBX over its four 64-byte quarters, after the block.

#if defined(__ARM_FEATURE_DOTPROD)
#define CARVE_Q8CONV_NEONDOT_ATTR
#else
#define CARVE_Q8CONV_NEONDOT_ATTR __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

// pack_block_avx2 in plain C (memset and memcpy, which are NEON in the C library), s = 0: for `rows` (<= MB,
// <= m - m0) rows, each row of A (kp bytes) filled with zx (the K padding too: its weights are zero), then the
// taps of each kernel row that lie inside the image copied over it, with a packed input as one run of bytes.
// Nothing outside the input's taps is read. Rows past m are left as they are (their sums are not stored).
static void pack_block_neon(const q8c_ctx* c, size_t m0, size_t rows, uint8_t* a) {
  const size_t cin = c->cin, xs = c->x_stride, row = c->kw * cin;
  const int packed = xs == cin;
  size_t oy = m0 / c->ow, ox = m0 % c->ow;
  for (size_t i = 0; i < rows; i++, a += c->kp) {
    memset(a, (uint8_t)c->zx, c->kp);
    size_t kx0, kx1;
    tap_cols(c, ox, &kx0, &kx1);
    for (size_t ky = 0; ky < c->kh && kx0 < kx1; ky++) {
      const uint8_t* s = tap_row(c, oy, ox, ky, kx0);
      if (s == NULL) {
        continue;
      }
      uint8_t* d = a + ky * row + kx0 * cin;
      if (packed) {
        memcpy(d, s, (kx1 - kx0) * cin);
      } else {
        for (size_t kx = kx0; kx < kx1; kx++, d += cin, s += xs) {
          memcpy(d, s, cin);
        }
      }
    }
    if (++ox == c->ow) {
      ox = 0;
      oy++;
    }
  }
}

// The requantization constants of a panel's 16 channels (4 vectors of 4): c0 = bias - zx * wsum, m, 2^(n-1) and
// -n (int64, 2 vectors of 2 a vector of 4 channels).
typedef struct rqn {
  int32x4_t c0[4], m[4];
  int64x2_t r[8], nn[8];
  int64x2_t zy;
} rqn;

static inline void rqn_load(const q8c_ctx* c, size_t q, rqn* r) {
  const size_t o = 16 * q;
  const int32x4_t zx = vdupq_n_s32(c->zx);
  for (int v = 0; v < 4; v++) {
    // |zx * wsum| and |bias - zx * wsum| stay below 2^31 (the record's precondition, carve_q8conv.h): no wrap
    r->c0[v] = vmlsq_s32(vld1q_s32(c->bias + o + 4 * v), zx, vld1q_s32(c->wsum + o + 4 * v));
    r->m[v] = vld1q_s32(c->mul + o + 4 * v);
    const int32x4_t n = vld1q_s32(c->shift + o + 4 * v);
    const int64x2_t n_lo = vmovl_s32(vget_low_s32(n)), n_hi = vmovl_high_s32(n);
    const int64x2_t one = vdupq_n_s64(1);
    r->r[2 * v] = vshlq_s64(one, vsubq_s64(n_lo, one));
    r->r[2 * v + 1] = vshlq_s64(one, vsubq_s64(n_hi, one));
    r->nn[2 * v] = vnegq_s64(n_lo);
    r->nn[2 * v + 1] = vnegq_s64(n_hi);
  }
  r->zy = vdupq_n_s64(c->zy);
}

// clamp(zy + (((acc + c0) * m + 2^(n-1)) >> n)) of the 4 channels 4v .. 4v + 3: int16 (in [-128, 127]).
static inline int16x4_t rqn_apply4(const rqn* r, int v, int32x4_t acc) {
  const int32x4_t x = vaddq_s32(acc, r->c0[v]);
  int64x2_t lo = vmull_s32(vget_low_s32(x), vget_low_s32(r->m[v]));
  int64x2_t hi = vmull_high_s32(x, r->m[v]);
  lo = vaddq_s64(vshlq_s64(vaddq_s64(lo, r->r[2 * v]), r->nn[2 * v]), r->zy);
  hi = vaddq_s64(vshlq_s64(vaddq_s64(hi, r->r[2 * v + 1]), r->nn[2 * v + 1]), r->zy);
  return vqmovn_s32(vcombine_s32(vqmovn_s64(lo), vqmovn_s64(hi)));
}

// The 16 channels of panel q of one output pixel (yp: its channel 0) from their int32 sums (acc[v]: channels
// 4v .. 4v + 3), requantized and stored: only the channels below cout.
static inline void out16_neon(const q8c_ctx* c, int8_t* yp, size_t q, const rqn* r, const int32x4_t acc[4]) {
  const int8x16_t v = vcombine_s8(vqmovn_s16(vcombine_s16(rqn_apply4(r, 0, acc[0]), rqn_apply4(r, 1, acc[1]))),
                                  vqmovn_s16(vcombine_s16(rqn_apply4(r, 2, acc[2]), rqn_apply4(r, 3, acc[3]))));
  const size_t n = min_size(16, c->cout - 16 * q);
  if (n == 16) {
    vst1q_s8(yp + 16 * q, v);
  } else {
    int8_t b[16];
    vst1q_s8(b, v);
    memcpy(yp + 16 * q, b, n);
  }
}

// y[p][o] = lut[y[p][o] + 128] for the block's rows, 16 bytes a lookup: TBL on the first quarter of the table,
// TBX (out-of-range indices keep the lane) on the others with the index less 64, 128, 192 (mod 256).
static void lut_rows_neon(const q8c_ctx* c, size_t m0, size_t rows) {
  int8x16x4_t t[4];
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 4; j++) {
      t[i].val[j] = vld1q_s8(c->lut + 64 * i + 16 * j);
    }
  }
  const uint8x16_t top = vdupq_n_u8(0x80), quarter = vdupq_n_u8(64);
  for (size_t r = 0; r < rows; r++) {
    int8_t* yp = c->y + (m0 + r) * c->y_stride;
    for (size_t o = 0; o < c->cout; o += 16) {
      const size_t n = min_size(16, c->cout - o);
      int8_t b[16] = {0};
      if (n < 16) {
        memcpy(b, yp + o, n);
      }
      uint8x16_t idx = veorq_u8(vreinterpretq_u8_s8(vld1q_s8(n == 16 ? yp + o : b)), top);
      int8x16_t v = vqtbl4q_s8(t[0], idx);
      idx = vsubq_u8(idx, quarter);
      v = vqtbx4q_s8(v, t[1], idx);
      idx = vsubq_u8(idx, quarter);
      v = vqtbx4q_s8(v, t[2], idx);
      idx = vsubq_u8(idx, quarter);
      v = vqtbx4q_s8(v, t[3], idx);
      if (n == 16) {
        vst1q_s8(yp + o, v);
      } else {
        vst1q_s8(b, v);
        memcpy(yp + o, b, n);
      }
    }
  }
}

// The sums of 2 rows of A (a: the first, rows kp bytes apart) with a panel's 16 channels (w: its group 0), by
// SMULL / SMULL2 + SADALP: acc[i][v] = row i's sums of channels 4v .. 4v + 3. The 16 accumulators are named
// variables, not an array: GCC keeps an array indexed in loops on the stack.
static inline void neon_tile(const q8c_ctx* c, const int8_t* a, const int8_t* w, int32x4_t acc[2][4]) {
  const int8_t* a1 = a + c->kp;
  const int32x4_t z = vdupq_n_s32(0);
  // p<i><u>: row i, channels 2u, 2u + 1: their partial sums of k 0-1 and 2-3 (lanes c0 k01, c0 k23, c1 k01, c1 k23)
  int32x4_t p00 = z, p01 = z, p02 = z, p03 = z, p04 = z, p05 = z, p06 = z, p07 = z;
  int32x4_t p10 = z, p11 = z, p12 = z, p13 = z, p14 = z, p15 = z, p16 = z, p17 = z;
  for (size_t g = 0; g < c->k4; g++, w += 64) {
    const int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), w2 = vld1q_s8(w + 32), w3 = vld1q_s8(w + 48);
    uint32_t v0, v1;
    memcpy(&v0, a + 4 * g, 4);
    memcpy(&v1, a1 + 4 * g, 4);
#define Q8C_SMULL_ROW(i, v)                                                      \
  do {                                                                           \
    const int8x16_t av = vreinterpretq_s8_u32(vdupq_n_u32(v)); /* a0..a3 x 4 */  \
    const int8x8_t al = vget_low_s8(av);                                         \
    p##i##0 = vpadalq_s16(p##i##0, vmull_s8(al, vget_low_s8(w0)));               \
    p##i##1 = vpadalq_s16(p##i##1, vmull_high_s8(av, w0));                       \
    p##i##2 = vpadalq_s16(p##i##2, vmull_s8(al, vget_low_s8(w1)));               \
    p##i##3 = vpadalq_s16(p##i##3, vmull_high_s8(av, w1));                       \
    p##i##4 = vpadalq_s16(p##i##4, vmull_s8(al, vget_low_s8(w2)));               \
    p##i##5 = vpadalq_s16(p##i##5, vmull_high_s8(av, w2));                       \
    p##i##6 = vpadalq_s16(p##i##6, vmull_s8(al, vget_low_s8(w3)));               \
    p##i##7 = vpadalq_s16(p##i##7, vmull_high_s8(av, w3));                       \
  } while (0)
    Q8C_SMULL_ROW(0, v0);
    Q8C_SMULL_ROW(1, v1);
#undef Q8C_SMULL_ROW
  }
  // ADDP: (c0 k01, c0 k23, c1 k01, c1 k23), (c2 .., c3 ..) -> c0 c1 c2 c3
  acc[0][0] = vpaddq_s32(p00, p01), acc[0][1] = vpaddq_s32(p02, p03);
  acc[0][2] = vpaddq_s32(p04, p05), acc[0][3] = vpaddq_s32(p06, p07);
  acc[1][0] = vpaddq_s32(p10, p11), acc[1][1] = vpaddq_s32(p12, p13);
  acc[1][2] = vpaddq_s32(p14, p15), acc[1][3] = vpaddq_s32(p16, p17);
}

static void blocks_neon(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  uint8_t* a = slot + SLOT_A;
  for (size_t b = b0; b < b1; b++) {
    const size_t m0 = b * MB, rows = min_size(MB, c->m - m0);
    pack_block_neon(c, m0, rows, a);
    for (size_t q = 0; q < c->panels; q++) {
      const int8_t* w = c->wt + q * c->kp * 16;
      rqn r;
      rqn_load(c, q, &r);
      for (size_t i0 = 0; i0 < rows; i0 += 2) {  // a row past `rows` (scratch) is summed, not stored
        int32x4_t acc[2][4];
        neon_tile(c, (const int8_t*)(a + i0 * c->kp), w, acc);
        for (size_t i = 0; i < min_size(2, rows - i0); i++) {
          out16_neon(c, c->y + (m0 + i0 + i) * c->y_stride, q, &r, acc[i]);
        }
      }
    }
    if (c->lut != NULL) {
      lut_rows_neon(c, m0, rows);
    }
  }
}

#ifdef CARVE_Q8CONV_HAVE_NEONDOT
// The sums of 4 rows of A (a: the first, rows kp bytes apart) with a panel's 16 channels (w: its group 0), by
// SDOT: acc[i][v] = row i's sums of channels 4v .. 4v + 3. 16 bytes of each row (4 groups) a step: the groups up to
// k4 rounded up to 4 (within kp: A holds zx and the panel zeros there). Named accumulators, as neon_tile's.
CARVE_Q8CONV_NEONDOT_ATTR static inline void neondot_tile(const q8c_ctx* c, const int8_t* a, const int8_t* w,
                                                          int32x4_t acc[4][4]) {
  const size_t kp = c->kp, steps = (c->k4 + 3) / 4;
  const int32x4_t z = vdupq_n_s32(0);
  int32x4_t c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;  // c<row><channels / 4>
  int32x4_t c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
  for (size_t s = 0; s < steps; s++, w += 256) {
    const int8x16_t a0 = vld1q_s8(a + 16 * s), a1 = vld1q_s8(a + kp + 16 * s);
    const int8x16_t a2 = vld1q_s8(a + 2 * kp + 16 * s), a3 = vld1q_s8(a + 3 * kp + 16 * s);
#define Q8C_SDOT_ROW(i, l)                                \
  do {                                                    \
    c##i##0 = vdotq_laneq_s32(c##i##0, w0, a##i, l);      \
    c##i##1 = vdotq_laneq_s32(c##i##1, w1, a##i, l);      \
    c##i##2 = vdotq_laneq_s32(c##i##2, w2, a##i, l);      \
    c##i##3 = vdotq_laneq_s32(c##i##3, w3, a##i, l);      \
  } while (0)
#define Q8C_SDOT_GROUP(l)                                                                    \
  do {                                                                                       \
    const int8x16_t w0 = vld1q_s8(w + 64 * (l)), w1 = vld1q_s8(w + 64 * (l) + 16);          \
    const int8x16_t w2 = vld1q_s8(w + 64 * (l) + 32), w3 = vld1q_s8(w + 64 * (l) + 48);     \
    Q8C_SDOT_ROW(0, l);                                                                      \
    Q8C_SDOT_ROW(1, l);                                                                      \
    Q8C_SDOT_ROW(2, l);                                                                      \
    Q8C_SDOT_ROW(3, l);                                                                      \
  } while (0)
    Q8C_SDOT_GROUP(0);
    Q8C_SDOT_GROUP(1);
    Q8C_SDOT_GROUP(2);
    Q8C_SDOT_GROUP(3);
#undef Q8C_SDOT_GROUP
#undef Q8C_SDOT_ROW
  }
  acc[0][0] = c00, acc[0][1] = c01, acc[0][2] = c02, acc[0][3] = c03;
  acc[1][0] = c10, acc[1][1] = c11, acc[1][2] = c12, acc[1][3] = c13;
  acc[2][0] = c20, acc[2][1] = c21, acc[2][2] = c22, acc[2][3] = c23;
  acc[3][0] = c30, acc[3][1] = c31, acc[3][2] = c32, acc[3][3] = c33;
}

CARVE_Q8CONV_NEONDOT_ATTR static void blocks_neondot(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  uint8_t* a = slot + SLOT_A;
  for (size_t b = b0; b < b1; b++) {
    const size_t m0 = b * MB, rows = min_size(MB, c->m - m0);
    pack_block_neon(c, m0, rows, a);
    for (size_t q = 0; q < c->panels; q++) {
      const int8_t* w = c->wt + q * c->kp * 16;
      rqn r;
      rqn_load(c, q, &r);
      for (size_t i0 = 0; i0 < rows; i0 += 4) {  // rows past `rows` (scratch) are summed, not stored
        int32x4_t acc[4][4];
        neondot_tile(c, (const int8_t*)(a + i0 * c->kp), w, acc);
        for (size_t i = 0; i < min_size(4, rows - i0); i++) {
          out16_neon(c, c->y + (m0 + i0 + i) * c->y_stride, q, &r, acc[i]);
        }
      }
    }
    if (c->lut != NULL) {
      lut_rows_neon(c, m0, rows);
    }
  }
}
#endif  // CARVE_Q8CONV_HAVE_NEONDOT

// ---- Entry points ----

static const q8c_isa q8c_neon = {blocks_neon, 0};

carve_status carve_q8conv__neon(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, &q8c_neon);
}

#ifdef CARVE_Q8CONV_HAVE_NEONDOT
static const q8c_isa q8c_neondot = {blocks_neondot, 0};

carve_status carve_q8conv__neondot(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                   size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, &q8c_neondot);
}
#endif
#endif  // CARVE_HAVE_NEON

// HWCAP_ASIMDDP of Linux's asm/hwcap.h (arm64): the CPU has SDOT / UDOT.
#define Q8C_HWCAP_ASIMDDP (1ul << 20)

int carve_q8conv_neondot_ready(void) {
#if defined(CARVE_HAVE_NEON) && defined(CARVE_Q8CONV_HAVE_NEONDOT)
#if defined(__ARM_FEATURE_DOTPROD)
  return 1;
#elif defined(__linux__)
  return (getauxval(AT_HWCAP) & Q8C_HWCAP_ASIMDDP) != 0;
#else
  return 0;
#endif
#else
  return 0;
#endif
}
