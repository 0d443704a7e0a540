// carve runtime: carve_q8conv's AVX2 and AVX-VNNI variants (carve_q8conv_avx2.h; the driver and the contract:
// carve_q8conv.c, carve_q8conv.h).

#include "carve_q8conv_avx2.h"
#include "carve_q8conv_impl.h"

#ifdef CARVE_HAVE_X86_SIMD
#include <cpuid.h>
#include <immintrin.h>

// ---- AVX2 and AVX-VNNI --------------------------------------------------------------------------
//
// For x86-64 CPUs with AVX2 + FMA (carve_isa's AVX2 level) but no AVX-512, and, as a fallback, AVX-512 CPUs without
// VNNI. A block of A is packed by pack_block_avx2; the GEMM runs on 4 rows x a panel (its two halves of 8
// channels: 32 of a group's 64 bytes, 8 channels x 4 k, each), giving each row's 8 int32 sums of a half in one ymm:
//
//   avx2     A unflipped (s = 0, signed). Each group's 32 weight bytes are sign-extended to two ymm of 16 int16
//            (VPMOVSXBW: channels 0-1 | 2-3 and 4-5 | 6-7, 4 k each), a row's 4 bytes of the group broadcast and
//            sign-extended the same way, and VPMADDWD adds the products of pairs of k into int32: each channel
//            keeps two partial sums (k 0-1 and 2-3 of every group), added by VPHADDD after the last group and put
//            in channel order by VPERMQ. Exact: |a * w| <= 2^14, a pair below 2^15, no saturation (VPMADDWD
//            saturates only for four -32768; VPMADDUBSW, which saturates, is not used).
//   avxvnni  A flipped (s = 128, unsigned), the VEX-encoded VPDPBUSD on ymm (AVX-VNNI: Alder Lake, Sapphire
//            Rapids and later) of a row's broadcast 4 bytes and the group's 32 weight bytes: 8 channels' int32
//            sums directly, as the AVX-512 VNNI variant's on half a zmm.
//
// The requantization: with every shift >= 33 (c->narrow, as real convolutions are) the AVX-512 variant's int32
// path on 8 lanes (rq8_apply: high dwords of VPMULDQ products, VPSRAVD, then VPACKSSDW / VPACKSSWB, whose signed
// saturations are the clamp); otherwise the scalar requantize() of the 8 sums. The table: lut_rows_scalar after
// the block.

#define Q8C_AVX2 __attribute__((target("avx2,fma")))

// d[0 .. n) = s[0 .. n) ^ flip, in 32-, 16-, 8-, 4-byte and single moves: nothing outside the two runs is read
// or written (AVX2 has no byte masks).
Q8C_AVX2 static inline void copy_flip_avx2(uint8_t* d, const uint8_t* s, size_t n, __m256i flip) {
  for (; n >= 32; n -= 32, d += 32, s += 32) {
    _mm256_storeu_si256((__m256i*)(void*)d,
                        _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(const void*)s), flip));
  }
  const __m128i f = _mm256_castsi256_si128(flip);
  if (n >= 16) {
    _mm_storeu_si128((__m128i*)(void*)d, _mm_xor_si128(_mm_loadu_si128((const __m128i*)(const void*)s), f));
    n -= 16, d += 16, s += 16;
  }
  if (n >= 8) {
    _mm_storel_epi64((__m128i*)(void*)d, _mm_xor_si128(_mm_loadl_epi64((const __m128i*)(const void*)s), f));
    n -= 8, d += 8, s += 8;
  }
  const uint32_t f4 = (uint32_t)_mm_cvtsi128_si32(f);
  if (n >= 4) {
    uint32_t v;
    memcpy(&v, s, 4);
    v ^= f4;
    memcpy(d, &v, 4);
    n -= 4, d += 4, s += 4;
  }
  for (size_t j = 0; j < n; j++) {
    d[j] = (uint8_t)(s[j] ^ (uint8_t)f4);
  }
}

// pack_block_avx512 with AVX2 moves (copy_flip_avx2), for `rows` (<= MB, <= m - m0) rows: each row of A filled
// with zx (the K padding too: its weights are zero), then the taps of each kernel row that lie inside the image
// copied over it, with a packed input as one run of bytes. Rows past m are left as they are (their sums are not
// stored).
Q8C_AVX2 static void pack_block_avx2(const q8c_ctx* c, size_t m0, size_t rows, uint8_t* a, uint8_t flip) {
  const size_t cin = c->cin, xs = c->x_stride, row = c->kw * cin;
  const int packed = xs == cin;
  const __m256i vflip = _mm256_set1_epi8((char)flip);
  const __m256i vfill = _mm256_set1_epi8((char)((uint8_t)c->zx ^ flip));
  size_t oy = m0 / c->ow, ox = m0 % c->ow;
  for (size_t i = 0; i < rows; i++, a += c->kp) {
    for (size_t j = 0; j < c->kp; j += 32) {
      _mm256_storeu_si256((__m256i*)(void*)(a + j), vfill);
    }
    size_t kx0, kx1;
    tap_cols(c, ox, &kx0, &kx1);
    for (size_t ky = 0; ky < c->kh && kx0 < kx1; ky++) {
      const uint8_t* s = tap_row(c, oy, ox, ky, kx0);
      if (s == NULL) {
        continue;
      }
      uint8_t* d = a + ky * row + kx0 * cin;
      if (packed) {
        copy_flip_avx2(d, s, (kx1 - kx0) * cin, vflip);
      } else {
        for (size_t kx = kx0; kx < kx1; kx++, d += cin, s += xs) {
          copy_flip_avx2(d, s, cin, vflip);
        }
      }
    }
    if (++ox == c->ow) {
      ox = 0;
      oy++;
    }
  }
}

// The requantization constants of 8 output channels (o .. o + 7): c0 = bias - zoff * wsum, m (and m of the odd
// channels in the low dwords), t = n - 32 and 2^(t-1) (used only when c->narrow).
typedef struct rq8 {
  __m256i c0, m, m_hi, t, r_t, zy;
} rq8;

Q8C_AVX2 static inline rq8 rq8_load(const q8c_ctx* c, size_t o, int32_t zoff) {
  const __m256i m = _mm256_loadu_si256((const __m256i*)(const void*)(c->mul + o));
  const __m256i n = _mm256_loadu_si256((const __m256i*)(const void*)(c->shift + o));
  rq8 r;
  // |zoff * wsum| and |bias - zoff * wsum| stay below 2^31 (the record's precondition, carve_q8conv.h): no wrap
  r.c0 = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i*)(const void*)(c->bias + o)),
                          _mm256_mullo_epi32(_mm256_set1_epi32(zoff),
                                             _mm256_loadu_si256((const __m256i*)(const void*)(c->wsum + o))));
  r.m = m;
  r.m_hi = _mm256_srli_epi64(m, 32);
  r.t = _mm256_sub_epi32(n, _mm256_set1_epi32(32));
  r.r_t = _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_sub_epi32(r.t, _mm256_set1_epi32(1)));
  r.zy = _mm256_set1_epi32(c->zy);
  return r;
}

// rq16_apply's narrow path on 8 channels (see there: exact for every shift >= 33): the 8 int8 in the low 8 bytes.
Q8C_AVX2 static inline __m128i rq8_apply(const rq8* r, __m256i acc) {
  const __m256i v = _mm256_add_epi32(acc, r->c0);
  const __m256i lo = _mm256_mul_epi32(v, r->m);                            // channels 0, 2, 4, 6 (int64)
  const __m256i hi = _mm256_mul_epi32(_mm256_srli_epi64(v, 32), r->m_hi);  // channels 1, 3, 5, 7
  const __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(lo, 32), hi, 0xAA);  // the high dwords, in order
  const __m256i x = _mm256_add_epi32(_mm256_srav_epi32(_mm256_add_epi32(h, r->r_t), r->t), r->zy);
  const __m128i x16 = _mm_packs_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  return _mm_packs_epi16(x16, x16);
}

// The 8 channels o .. o + 7 of one output pixel (yp: its channel 0) from their int32 sums: requantized, stored
// (only the channels below cout). The table follows (lut_rows_scalar).
Q8C_AVX2 __attribute__((always_inline)) static inline void out8(const q8c_ctx* c, int8_t* yp, size_t o,
                                                                const rq8* r, __m256i acc, int32_t zoff) {
  const size_t n = min_size(8, c->cout - o);
  if (c->narrow) {
    const __m128i v = rq8_apply(r, acc);
    if (n == 8) {
      _mm_storel_epi64((__m128i*)(void*)(yp + o), v);
    } else {
      int8_t b[16];
      _mm_storeu_si128((__m128i*)(void*)b, v);
      memcpy(yp + o, b, n);
    }
    return;
  }
  int32_t s[8];
  _mm256_storeu_si256((__m256i*)(void*)s, acc);
  for (size_t j = 0; j < n; j++) {
    const int64_t v = (int64_t)s[j] + c->bias[o + j] - (int64_t)zoff * c->wsum[o + j];
    yp[o + j] = requantize(v, c->mul[o + j], c->shift[o + j], c->zy);
  }
}

// The sums of 4 rows of A (a: the first, rows kp bytes apart) with the 8 channels of the 32-byte column w of a
// panel (w: group 0; group g at w + g * 64), by VPMADDWD: acc[i][h] = row i's 8 int32 sums in channel order.
Q8C_AVX2 __attribute__((always_inline)) static inline void avx2_tile(const q8c_ctx* c, const uint8_t* a,
                                                                    const int8_t* w, __m256i acc[4][2],
                                                                    const int h) {
  const size_t kp = c->kp;
  __m256i p0[4], p1[4];  // row i's two partial sums a channel: p0 channels 0-1 | 2-3, p1 channels 4-5 | 6-7
  for (int i = 0; i < 4; i++) {
    p0[i] = _mm256_setzero_si256();
    p1[i] = _mm256_setzero_si256();
  }
  for (size_t g = 0; g < c->k4; g++) {
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(const void*)(w + g * 64)));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(const void*)(w + g * 64 + 16)));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      int32_t v;
      memcpy(&v, a + i * kp + 4 * g, 4);
      const __m256i av = _mm256_cvtepi8_epi16(_mm_set1_epi32(v));  // a0 a1 a2 a3 (int16) 4 times
      p0[i] = _mm256_add_epi32(p0[i], _mm256_madd_epi16(av, w0));
      p1[i] = _mm256_add_epi32(p1[i], _mm256_madd_epi16(av, w1));
    }
  }
  for (int i = 0; i < 4; i++) {
    // lane 0: channels 0, 1, 4, 5; lane 1: 2, 3, 6, 7 -> qwords (0 1)(4 5)(2 3)(6 7) -> VPERMQ 0, 2, 1, 3
    acc[i][h] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(p0[i], p1[i]), 0xD8);
  }
}

#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
#define Q8C_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))

// The sums of 4 rows of A + 128 (a: the first, rows kp bytes apart, unsigned) with the nh (1 or 2) halves of 8
// channels of a panel (w: its group 0), by AVX-VNNI's VPDPBUSD: acc[i][h] = row i's sums of channels 8h .. 8h + 7.
// 8 accumulators for a whole panel: VPDPBUSD's latency of several cycles needs that many independent chains.
// Not always_inline (as lut16_vbmi): called, and inlined, only from blocks_avxvnni's instance of avx2_block,
// whose target has AVX-VNNI; blocks_avx2's holds no call.
Q8C_AVXVNNI static inline void avxvnni_tile(const q8c_ctx* c, const uint8_t* a, const int8_t* w, const int nh,
                                            __m256i acc[4][2]) {
  const size_t kp = c->kp;
  for (int i = 0; i < 4; i++) {
    acc[i][0] = _mm256_setzero_si256();
    acc[i][1] = _mm256_setzero_si256();
  }
  for (size_t g = 0; g < c->k4; g++) {
    const __m256i b0 = _mm256_loadu_si256((const __m256i*)(const void*)(w + g * 64));
    const __m256i b1 = nh == 2 ? _mm256_loadu_si256((const __m256i*)(const void*)(w + g * 64 + 32)) : b0;
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      int32_t v;
      memcpy(&v, a + i * kp + 4 * g, 4);
      const __m256i av = _mm256_set1_epi32(v);
      acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], av, b0);
      if (nh == 2) {
        acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], av, b1);
      }
    }
  }
}
#endif

// A block on AVX2 (vnni 0, A signed) or AVX-VNNI (vnni 1, A flipped): 4 rows x a panel's 16 channels (its halves
// below cout) at a time.
Q8C_AVX2 __attribute__((always_inline)) static inline void avx2_block(const q8c_ctx* c, size_t m0,
                                                                     unsigned char* slot, const int vnni) {
  uint8_t* a = slot + SLOT_A;
  const size_t rows = min_size(MB, c->m - m0);
  pack_block_avx2(c, m0, rows, a, vnni ? 0x80 : 0);
  const int32_t zoff = c->zx + (vnni ? 128 : 0);
  for (size_t q = 0; q < c->panels; q++) {
    const int8_t* w = c->wt + q * c->kp * 16;
    const int nh = c->cout - 16 * q > 8 ? 2 : 1;  // halves of 8 channels below cout
    const rq8 r0 = rq8_load(c, 16 * q, zoff), r1 = rq8_load(c, 16 * q + 8, zoff);
    for (size_t i0 = 0; i0 < rows; i0 += 4) {  // rows from `rows` up to the next multiple of 4 are not stored
      __m256i acc[4][2];
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
      if (vnni && nh == 2) {
        avxvnni_tile(c, a + i0 * c->kp, w, 2, acc);
      } else if (vnni) {
        avxvnni_tile(c, a + i0 * c->kp, w, 1, acc);
      }
#endif
      if (!vnni) {
        avx2_tile(c, a + i0 * c->kp, w, acc, 0);
        if (nh == 2) {
          avx2_tile(c, a + i0 * c->kp, w + 32, acc, 1);
        }
      }
      const size_t n = min_size(4, rows - i0);
      for (size_t i = 0; i < n; i++) {
        int8_t* yp = c->y + (m0 + i0 + i) * c->y_stride;
        out8(c, yp, 16 * q, &r0, acc[i][0], zoff);
        if (nh == 2) {
          out8(c, yp, 16 * q + 8, &r1, acc[i][1], zoff);
        }
      }
    }
  }
  if (c->lut != NULL) {
    lut_rows_scalar(c, m0, rows);
  }
}

Q8C_AVX2 static void blocks_avx2(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  for (size_t b = b0; b < b1; b++) {
    avx2_block(c, b * MB, slot, 0);
  }
}

#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
Q8C_AVXVNNI static void blocks_avxvnni(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  for (size_t b = b0; b < b1; b++) {
    avx2_block(c, b * MB, slot, 1);
  }
}
#endif

// ---- Entry points ----

static const q8c_isa q8c_avx2 = {blocks_avx2, 0};

carve_status carve_q8conv__avx2(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, &q8c_avx2);
}

#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
static const q8c_isa q8c_avxvnni = {blocks_avxvnni, 0};

carve_status carve_q8conv__avxvnni(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                   size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, &q8c_avxvnni);
}
#endif
#endif  // CARVE_HAVE_X86_SIMD

int carve_q8conv_avx2_ready(void) {
#ifdef CARVE_HAVE_X86_SIMD
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

int carve_q8conv_avxvnni_ready(void) {
#if defined(CARVE_HAVE_X86_SIMD) && defined(CARVE_Q8CONV_HAVE_AVXVNNI)
  // CPUID.(7, 1):EAX bit 4 AVX-VNNI (VEX-encoded, on xmm / ymm; the OS's saving of the ymm state is AVX2's check)
  unsigned int a, b, c, d;
  return carve_q8conv_avx2_ready() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
#else
  return 0;
#endif
}
