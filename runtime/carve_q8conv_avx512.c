// carve runtime: carve_q8conv's AVX-512 VNNI and AMX variants (carve_q8conv_avx512.h; the driver and the contract:
// carve_q8conv.c, carve_q8conv.h).

#define _DEFAULT_SOURCE  // syscall (Linux: the AMX permission)

#include "carve_q8conv_avx512.h"
#include "carve_q8conv_impl.h"

#ifdef CARVE_HAVE_X86_SIMD
#include <cpuid.h>
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
// ---- AVX-512: packing, requantization, table ------------------------------------------------

#define Q8C_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define Q8C_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define Q8C_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))
#define Q8C_AVX512_VBMI Q8C_VBMI
#define Q8C_VNNI_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))

// The low n (< 64) bytes, or all 64.
static inline uint64_t byte_mask(size_t n) { return n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1; }

// d[0 .. n) = s[0 .. n) ^ flip, 64 bytes at a time, the tail stored masked (nothing past d + n is written). The
// tail is read by a plain 64-byte load where that stays below s_end (the end of the bytes that may be read: a packed
// input's own; NULL: none), else masked (nothing past s + n is read): a masked load costs more.
Q8C_AVX512 static inline void copy_flip(uint8_t* d, const uint8_t* s, size_t n, __m512i flip, const uint8_t* s_end) {
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    _mm512_storeu_si512(d, _mm512_xor_si512(_mm512_loadu_si512(s), flip));
  }
  if (n > 0 && n <= 16) {  // short runs (the stem's 9 bytes): 16- or 32-byte moves, which cross fewer cache lines
    const __mmask16 k = (__mmask16)((1u << n) - 1);
    const int plain = s_end != NULL && (size_t)(s_end - s) >= 16;  // s is below s_end when s_end is not NULL
    const __m128i v = plain ? _mm_loadu_si128((const __m128i*)(const void*)s) : _mm_maskz_loadu_epi8(k, s);
    _mm_mask_storeu_epi8(d, k, _mm_xor_si128(v, _mm512_castsi512_si128(flip)));
  } else if (n > 0 && n <= 32) {
    const __mmask32 k = (__mmask32)byte_mask(n);
    const int plain = s_end != NULL && (size_t)(s_end - s) >= 32;
    const __m256i v = plain ? _mm256_loadu_si256((const __m256i*)(const void*)s) : _mm256_maskz_loadu_epi8(k, s);
    _mm256_mask_storeu_epi8(d, k, _mm256_xor_si256(v, _mm512_castsi512_si256(flip)));
  } else if (n > 0) {
    const __mmask64 k = byte_mask(n);
    const int plain = s_end != NULL && (size_t)(s_end - s) >= 64;
    const __m512i v = plain ? _mm512_loadu_si512(s) : _mm512_maskz_loadu_epi8(k, s);
    _mm512_mask_storeu_epi8(d, k, _mm512_xor_si512(v, flip));
  }
}

// pack_block_portable with 64-byte moves, a kernel row at a time, for `rows` (<= MB, <= m - m0) rows. Each row
// of A is first filled with zx (the K padding then holds zx too, not zeros: its weights are zero, so any byte
// there adds 0), then the taps of kernel
// row ky that lie inside the image, [kx0, kx1) (the same for every ky of the pixel), are copied over it: with a
// packed input (pixel stride cin) as one run of bytes, else a tap at a time. Rows past m are left as they are (their
// sums are not stored).
Q8C_AVX512 static void pack_block_avx512(const q8c_ctx* c, size_t m0, size_t rows, uint8_t* a, uint8_t flip) {
  const size_t cin = c->cin, xs = c->x_stride, row = c->kw * cin;
  const int packed = xs == cin;
  // a packed input's bytes, all of which may be read (a strided view's gaps belong to other tensors)
  const uint8_t* x_end = packed ? (const uint8_t*)c->x + c->h * c->w * cin : NULL;
  const __m512i vflip = _mm512_set1_epi8((char)flip);
  const __m512i vfill = _mm512_set1_epi8((char)((uint8_t)c->zx ^ flip));
  size_t oy = m0 / c->ow, ox = m0 % c->ow;
  for (size_t i = 0; i < rows; i++, a += c->kp) {
    for (size_t j = 0; j < c->kp; j += 64) {
      _mm512_storeu_si512(a + j, vfill);
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
        copy_flip(d, s, (kx1 - kx0) * cin, vflip, x_end);
      } else {
        for (size_t kx = kx0; kx < kx1; kx++, d += cin, s += xs) {
          copy_flip(d, s, cin, vflip, x_end);
        }
      }
    }
    if (++ox == c->ow) {
      ox = 0;
      oy++;
    }
  }
}

// pack_block_avx512 for small kernel rows where the CPU has VBMI (c->small: a packed input, K <= 64, at most 4
// kernel rows of R = kw * cin <= 16 bytes: the stem's 3 rows of 9 bytes). A row of A whose taps all lie inside the
// image is its kernel rows gathered by VPERM(T2)B and stored in one 64-byte store; its bytes from K on hold input
// bytes, not zx: their weights are zero. Where 4 such pixels follow each other in an output row and their 4 kernel
// rows span at most 32 bytes (c->small4: 3 * stride * cin + R <= 32; the stem: 27), each kernel row is one 32-byte
// load (rows 0, 1 in one zmm, 2, 3 in another) and pixel j's row of A is VPERMT2B of the two by c->small4_idx + j *
// stride * cin; else each kernel row is a 16-byte load into a 128-bit lane and VPERMB by c->small_idx. Loads are
// masked where fewer bytes of the input remain. A row with a tap in the padding is pack_block_avx512's.
Q8C_VBMI static void pack_block_small_vbmi(const q8c_ctx* c, size_t m0, size_t rows, uint8_t* a, uint8_t flip) {
  const size_t cin = c->cin, w = c->w, kh = c->kh, line = w * cin, step = c->stride * cin, kp = c->kp;
  const uint8_t* x = (const uint8_t*)c->x;
  const uint8_t* x_end = x + c->h * line;
  const __m512i idx = _mm512_loadu_si512(c->small_idx), vflip = _mm512_set1_epi8((char)flip);
  const __m512i idx4 = _mm512_loadu_si512(c->small4_idx), vstep = _mm512_set1_epi8((char)step);
  const size_t span4 = 3 * step + c->kw * cin;  // bytes of a kernel row of 4 pixels
  const __mmask16 k16 = (__mmask16)((1u << (c->kw * cin)) - 1);
  const __mmask32 k32 = c->small4 ? (__mmask32)(((uint64_t)1 << span4) - 1) : 0;
  const int rows_in_all = kh <= c->h;  // (kh <= h + 2 pad is checked; kh > h: no row is inside)
  size_t oy = m0 / c->ow, ox = m0 % c->ow;
  for (size_t i = 0; i < rows;) {
    const size_t iy = oy * c->stride, ix = ox * c->stride;  // plus pad
    const int row_in = rows_in_all && iy >= c->pad && iy - c->pad + kh <= c->h;
    if (row_in && c->small4 && i + 4 <= rows && ox + 4 <= c->ow && ix >= c->pad &&
        ix + 3 * c->stride - c->pad + c->kw <= w) {
      const uint8_t* s = x + ((iy - c->pad) * w + ix - c->pad) * cin;
      __m256i l[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                      _mm256_setzero_si256()};
      for (size_t r = 0; r < kh; r++, s += line) {
        l[r] = x_end - s >= 32 ? _mm256_loadu_si256((const __m256i*)(const void*)s) : _mm256_maskz_loadu_epi8(k32, s);
      }
      const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(l[0]), l[1], 1);
      const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(l[2]), l[3], 1);
      __m512i ij = idx4;
      for (int j = 0; j < 4; j++, a += kp, ij = _mm512_add_epi8(ij, vstep)) {
        _mm512_storeu_si512(a, _mm512_xor_si512(_mm512_permutex2var_epi8(lo, ij, hi), vflip));
      }
      i += 4;
      ox += 4;
    } else {
      if (row_in && ix >= c->pad && ix - c->pad + c->kw <= w) {
        const uint8_t* s = x + ((iy - c->pad) * w + ix - c->pad) * cin;
        __m512i v = _mm512_setzero_si512();
        for (size_t r = 0; r < kh; r++, s += line) {
          const __m128i l =
              x_end - s >= 16 ? _mm_loadu_si128((const __m128i*)(const void*)s) : _mm_maskz_loadu_epi8(k16, s);
          v = _mm512_mask_broadcast_i32x4(v, (__mmask16)(0xFu << (4 * r)), l);
        }
        _mm512_storeu_si512(a, _mm512_xor_si512(_mm512_permutexvar_epi8(idx, v), vflip));
      } else {
        pack_block_avx512(c, m0 + i, 1, a, flip);
      }
      i++;
      a += kp;
      ox++;
    }
    if (ox == c->ow) {
      ox = 0;
      oy++;
    }
  }
}

// The requantization of the 16 output channels of a panel: c0 = bias - zoff * wsum (zoff: zx plus A's shift) and
// m; for the int64 path, m and n as 8 + 8 int64 lanes (lo: the channels 2i, the low dword of each qword; hi: the
// channels 2i + 1) and the rounding term 2^(n-1); for the narrow path (every n >= 33), t = n - 32 and 2^(t-1).
typedef struct rq16 {
  __m512i c0, m, m_hi, n_lo, n_hi, r_lo, r_hi, t, r_t, zy32;
} rq16;

Q8C_AVX512 static inline rq16 rq16_load(const q8c_ctx* c, size_t q, int32_t zoff) {
  const size_t o = 16 * q;
  const __m512i m = _mm512_loadu_si512(c->mul + o), n = _mm512_loadu_si512(c->shift + o);
  const __m512i one = _mm512_set1_epi64(1), low = _mm512_set1_epi64(0xffffffff);
  rq16 r;
  // |zoff * wsum| <= 255 * sum|w| < 2^31 and |bias - zoff * wsum| < 2^31 (the record's precondition): no wrap
  r.c0 = _mm512_sub_epi32(_mm512_loadu_si512(c->bias + o),
                          _mm512_mullo_epi32(_mm512_set1_epi32(zoff), _mm512_loadu_si512(c->wsum + o)));
  r.m = m;
  r.m_hi = _mm512_srli_epi64(m, 32);
  r.n_lo = _mm512_and_si512(n, low);
  r.n_hi = _mm512_srli_epi64(n, 32);
  r.r_lo = _mm512_sllv_epi64(one, _mm512_sub_epi64(r.n_lo, one));
  r.r_hi = _mm512_sllv_epi64(one, _mm512_sub_epi64(r.n_hi, one));
  r.t = _mm512_sub_epi32(n, _mm512_set1_epi32(32));
  r.r_t = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_sub_epi32(r.t, _mm512_set1_epi32(1)));
  r.zy32 = _mm512_set1_epi32(c->zy);
  return r;
}

// clamp(zy + (((acc + c0) * m + 2^(n-1)) >> n)) of 16 int32 sums: 16 int8. The products are the signed 32 x 32
// -> 64 bit VPMULDQ of each qword's low dword (m < 2^31 is non-negative).
//
// narrow (every channel's n >= 33, t = n - 32 >= 1: real multipliers below 1/4, as a convolution's are): with
// P = (acc + c0) * m = H * 2^32 + L (H its high dword, signed; 0 <= L < 2^32), P + 2^(n-1) = (H + 2^(t-1)) * 2^32
// + L, whose floor division by 2^n is (H + 2^(t-1)) >> t exactly (L / 2^32 < 1 cannot carry past a multiple of
// 2^t). |H| <= 2^30 and 2^(t-1) <= 2^29, so that is int32 arithmetic (VPSRAVD), and VPMOVSDB's signed saturation
// is the clamp. Otherwise in int64: VPSRAVQ by n (<= 62) and 64-bit clamps.
Q8C_AVX512 static inline __m128i rq16_apply(const rq16* r, __m512i acc, __m512i zy, const int narrow) {
  const __m512i v = _mm512_add_epi32(acc, r->c0);
  __m512i lo = _mm512_mul_epi32(v, r->m);
  __m512i hi = _mm512_mul_epi32(_mm512_srli_epi64(v, 32), r->m_hi);
  if (narrow) {
    const __m512i h = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(lo, 32), hi);  // high dwords, in order
    const __m512i x = _mm512_srav_epi32(_mm512_add_epi32(h, r->r_t), r->t);
    return _mm512_cvtsepi32_epi8(_mm512_add_epi32(x, r->zy32));
  }
  const __m512i lo_clamp = _mm512_set1_epi64(-128), hi_clamp = _mm512_set1_epi64(127);
  lo = _mm512_add_epi64(zy, _mm512_srav_epi64(_mm512_add_epi64(lo, r->r_lo), r->n_lo));
  hi = _mm512_add_epi64(zy, _mm512_srav_epi64(_mm512_add_epi64(hi, r->r_hi), r->n_hi));
  lo = _mm512_min_epi64(_mm512_max_epi64(lo, lo_clamp), hi_clamp);
  hi = _mm512_min_epi64(_mm512_max_epi64(hi, lo_clamp), hi_clamp);
  return _mm512_cvtepi32_epi8(_mm512_mask_blend_epi32(0xAAAA, lo, _mm512_slli_epi64(hi, 32)));
}

// The table in four 64-byte quarters (VBMI's two 128-byte lookups).
typedef struct lut256 {
  __m512i t[4];
} lut256;

// lut[q + 128] of 16 int8 by VPERMI2B: each half of the table is one 128-byte lookup (bits 0-6 of q + 128), bit 7
// chooses the half. Not always_inline: called (and inlined) only from the *_vbmi instances of the block bodies,
// whose target has VBMI; the plain instances hold no call (their branch is dead).
Q8C_VBMI static inline __m128i lut16_vbmi(const lut256* t, __m128i q) {
  const __m512i idx = _mm512_castsi128_si512(_mm_xor_si128(q, _mm_set1_epi8((char)0x80)));
  const __m512i lo = _mm512_permutex2var_epi8(t->t[0], idx, t->t[1]);
  const __m512i hi = _mm512_permutex2var_epi8(t->t[2], idx, t->t[3]);
  return _mm512_castsi512_si128(_mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
}

// lut[y + 128] of the n int8 at y, in place, 64 at a time (the tail masked): a block's outputs when they are one
// run of bytes (c->lut_span), 4 pixels of 16 channels a lookup instead of one.
Q8C_VBMI static inline void lut_span_vbmi(const lut256* t, int8_t* y, size_t n) {
  const __m512i top = _mm512_set1_epi8((char)0x80);
  for (size_t i = 0; i < n; i += 64) {
    const __mmask64 k = byte_mask(n - i);
    const __m512i idx = _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, y + i), top);
    const __m512i lo = _mm512_permutex2var_epi8(t->t[0], idx, t->t[1]);
    const __m512i hi = _mm512_permutex2var_epi8(t->t[2], idx, t->t[3]);
    _mm512_mask_storeu_epi8(y + i, k, _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
  }
}

// The table of the conv, or zeros without one.
Q8C_AVX512 static inline lut256 lut256_load(const q8c_ctx* c) {
  lut256 t;
  for (int i = 0; i < 4; i++) {
    t.t[i] = c->lut != NULL ? _mm512_loadu_si512(c->lut + 64 * i) : _mm512_setzero_si512();
  }
  return t;
}

// The 16 int8 of panel q of one output pixel (yp: the pixel's channel 0), requantized, through the table when
// vbmi and not c->lut_span (else lut_span_vbmi or lut_rows_scalar follows), stored: only the channels below cout.
Q8C_AVX512 __attribute__((always_inline)) static inline void out16(const q8c_ctx* c, int8_t* yp, size_t q,
                                                                   const rq16* r, __m512i acc, __m512i zy,
                                                                   const lut256* t, const int vbmi) {
  __m128i v = rq16_apply(r, acc, zy, c->narrow);
  if (vbmi && c->lut != NULL && !c->lut_span) {
    v = lut16_vbmi(t, v);
  }
  const size_t n = min_size(16, c->cout - 16 * q);
  _mm_mask_storeu_epi8(yp + 16 * q, (__mmask16)((1u << n) - 1), v);
}

// ---- AVX-512 VNNI -----------------------------------------------------------------------------
//
// A is packed with its bytes flipped (A + 128, unsigned); VPDPBUSD multiplies 4 unsigned bytes of A (one pixel's
// 4 consecutive k, broadcast) by the 4 signed weights of each of 16 channels (one 64-byte group of a panel) and
// adds the 4 products to the channel's int32. 8 rows x np panels (np = 2: 16 accumulators, 2 weight vectors and
// a broadcast in 19 of the 32 zmm registers), over the k4 groups that hold weights.

Q8C_VNNI __attribute__((always_inline)) static inline void vnni_tile(const q8c_ctx* c, const uint8_t* a, size_t q,
                                                                    const int np, __m512i acc[8][2]) {
  const size_t kp = c->kp;
  const int8_t* w0 = c->wt + q * kp * 16;
  const int8_t* w1 = w0 + kp * 16;
  for (int i = 0; i < 8; i++) {
    acc[i][0] = _mm512_setzero_si512();
    acc[i][1] = _mm512_setzero_si512();
  }
  for (size_t g = 0; g < c->k4; g++) {
    const __m512i b0 = _mm512_loadu_si512(w0 + g * 64);
    const __m512i b1 = np == 2 ? _mm512_loadu_si512(w1 + g * 64) : b0;
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      int32_t v;
      memcpy(&v, a + i * kp + 4 * g, 4);
      const __m512i av = _mm512_set1_epi32(v);
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], av, b0);
      if (np == 2) {
        acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], av, b1);
      }
    }
  }
}

Q8C_VNNI __attribute__((always_inline)) static inline void vnni_block(const q8c_ctx* c, size_t m0,
                                                                     unsigned char* slot, const int vbmi) {
  uint8_t* a = slot + SLOT_A;
  if (vbmi && c->small) {
    pack_block_small_vbmi(c, m0, min_size(MB, c->m - m0), a, 0x80);
  } else {
    pack_block_avx512(c, m0, min_size(MB, c->m - m0), a, 0x80);
  }
  const size_t rows = min_size(MB, c->m - m0);
  const int32_t zoff = c->zx + 128;
  const __m512i zy = _mm512_set1_epi64(c->zy);
  const lut256 t = lut256_load(c);
  for (size_t q = 0; q < c->panels; q += 2) {
    const int np = c->panels - q >= 2 ? 2 : 1;
    const rq16 r0 = rq16_load(c, q, zoff);
    const rq16 r1 = rq16_load(c, np == 2 ? q + 1 : q, zoff);
    for (size_t i0 = 0; i0 < rows; i0 += 8) {
      __m512i acc[8][2];
      if (np == 2) {
        vnni_tile(c, a + i0 * c->kp, q, 2, acc);
      } else {
        vnni_tile(c, a + i0 * c->kp, q, 1, acc);
      }
      const size_t n = min_size(8, rows - i0);
      for (size_t i = 0; i < n; i++) {
        int8_t* yp = c->y + (m0 + i0 + i) * c->y_stride;
        out16(c, yp, q, &r0, acc[i][0], zy, &t, vbmi);
        if (np == 2) {
          out16(c, yp, q + 1, &r1, acc[i][1], zy, &t, vbmi);
        }
      }
    }
  }
  if (vbmi && c->lut_span) {
    lut_span_vbmi(&t, c->y + m0 * c->y_stride, rows * c->cout);
  } else if (!vbmi && c->lut != NULL) {
    lut_rows_scalar(c, m0, rows);
  }
}

Q8C_VNNI static void blocks_avx512vnni(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  for (size_t b = b0; b < b1; b++) {
    vnni_block(c, b * MB, slot, 0);
  }
}

Q8C_VNNI_VBMI static void blocks_avx512vnni_vbmi(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  for (size_t b = b0; b < b1; b++) {
    vnni_block(c, b * MB, slot, 1);
  }
}

// ---- AMX ---------------------------------------------------------------------------------------
//
// Tiles 0..3: C, 2 x 2 tiles of 16 x 16 int32 (rows 0-15 / 16-31 of the block x channels of panels q / q + 1);
// 4, 5: A (16 rows x 64 bytes: 64 k of 16 pixels); 6, 7: B (16 rows x 64 bytes: panel q's or q + 1's groups of one
// K block). TDPBSSD adds, for each C element, the 64 signed products of an A row and a B column (4 per dword),
// with wrap-around. The tile instructions are written as inline assembly with a "memory" clobber: GCC's
// _tile_loadd does not tell the compiler that it reads memory, so stores to A could be moved past it.

#define Q8C_TILE_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void*)(base)), "r"((long)(stride)) : "memory")
#define Q8C_TILE_STORE(t, base, stride) \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void*)(base)), "r"((long)(stride)) : "memory")
#define Q8C_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define Q8C_TILE_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

// The C tiles of panels q (tiles 0, 2) and q + 1 (tiles 1, 3, when np == 2) for 32 rows of A from ai (rows lda
// bytes apart), over the kp / 64 K blocks; w0: panel q. With a single K block, A's tiles (4, 5) are loaded by the
// caller once for all the panels (a_loaded).
static inline void amx_tiles(const uint8_t* ai, size_t lda, const int8_t* w0, size_t kp, int np, int a_loaded) {
  Q8C_TILE_ZERO(0);
  Q8C_TILE_ZERO(2);
  if (np == 2) {
    Q8C_TILE_ZERO(1);
    Q8C_TILE_ZERO(3);
  }
  for (size_t kb = 0; kb < kp; kb += 64) {
    if (!a_loaded) {
      Q8C_TILE_LOAD(4, ai + kb, lda);
      Q8C_TILE_LOAD(5, ai + 16 * lda + kb, lda);
    }
    Q8C_TILE_LOAD(6, w0 + kb * 16, 64);
    Q8C_TILE_DPBSSD(0, 4, 6);
    Q8C_TILE_DPBSSD(2, 5, 6);
    if (np == 2) {
      Q8C_TILE_LOAD(7, w0 + kp * 16 + kb * 16, 64);
      Q8C_TILE_DPBSSD(1, 4, 7);
      Q8C_TILE_DPBSSD(3, 5, 7);
    }
  }
}

// The C tiles to cb: 32 rows x 32 int32 (panel q in columns 0-15, q + 1 in 16-31).
static inline void amx_store(int32_t* cb, int np) {
  Q8C_TILE_STORE(0, cb, 128);
  Q8C_TILE_STORE(2, cb + 16 * 32, 128);
  if (np == 2) {
    Q8C_TILE_STORE(1, cb + 16, 128);
    Q8C_TILE_STORE(3, cb + 16 * 32 + 16, 128);
  }
}

// The outputs of panels q (and q + 1) of the block's rows from their sums in cb (rows of 32 int32); after the
// block's last pair, its table pass when the table is not looked up in registers (lut_span_vbmi, lut_rows_scalar).
Q8C_AVX512 __attribute__((always_inline)) static inline void amx_out(const q8c_ctx* c, size_t m0, size_t rows,
                                                                    size_t q, int np, const int32_t* cb,
                                                                    const lut256* t, const int vbmi) {
  const __m512i zy = _mm512_set1_epi64(c->zy);
  const rq16 r0 = rq16_load(c, q, c->zx);
  const rq16 r1 = rq16_load(c, np == 2 ? q + 1 : q, c->zx);
  for (size_t r = 0; r < rows; r++) {
    int8_t* yp = c->y + (m0 + r) * c->y_stride;
    out16(c, yp, q, &r0, _mm512_loadu_si512(cb + r * 32), zy, t, vbmi);
    if (np == 2) {
      out16(c, yp, q + 1, &r1, _mm512_loadu_si512(cb + r * 32 + 16), zy, t, vbmi);
    }
  }
  if (vbmi && c->lut_span && q + 2 >= c->panels) {
    lut_span_vbmi(t, c->y + m0 * c->y_stride, rows * c->cout);
  } else if (!vbmi && c->lut != NULL && q + 2 >= c->panels) {
    lut_rows_scalar(c, m0, rows);
  }
}

// The tile configuration (palette 1) in the slot's first 64 bytes, loaded: C tiles 0-3 of 16 rows x 64 bytes; A
// tiles 4, 5 of 16 rows x `chunk` bytes; B tiles 6, 7 of chunk / 4 rows x 64 bytes (chunk 64: every tile 16 x 64).
static void amx_begin(unsigned char* slot, size_t chunk) {
  memset(slot, 0, 64);
  slot[0] = 1;  // palette
  for (int t = 0; t < 8; t++) {
    const size_t colsb = t == 4 || t == 5 ? chunk : 64;
    slot[16 + 2 * t] = (unsigned char)colsb;  // bytes per row (uint16, little-endian)
    slot[48 + t] = (unsigned char)(t >= 6 ? chunk / 4 : 16);  // rows
  }
  __asm__ volatile("ldtilecfg (%0)" ::"r"((const void*)slot) : "memory");
}

// The tiles released after a task: the thread leaves no AMX state behind (cheaper context switches).
static void amx_end(void) { __asm__ volatile("tilerelease" ::: "memory"); }

// ---- AMX's implicit GEMM ----
//
// A tile of A is 16 output pixels [p0, p0 + 16); with the implicit GEMM (c->chunk != 0) it is read in place from
// the input wherever that is possible ("direct"): the 16 pixels lie in one output row (or the conv is flat: 1x1,
// stride 1, pad 0, where pixel p is input pixel p) and every tap of all of them lies inside the image. Then the K
// chunk [koff, koff + chunk) of pixel i, within segment sg of kernel row ky (a segment: a run of K that is a run
// of input bytes, c->nseg per kernel row), is the chunk's bytes at base + i * stride * x_stride + doff, with base
// the input pixel of tap (0, 0) of p0 and doff = ky * w * x_stride + sg * x_stride + j * chunk: TILELOADD's row
// stride is stride * x_stride. B's rows of the chunk are the panel's groups koff / 4 .. (koff + chunk) / 4 - 1.
// A tile that is not direct (a row of taps in the padding, across two output rows, or past m) is packed as before
// (16 rows of kp bytes in the slot's A, K in the same order) and read by the same chunks, at koff. The chunks cover
// [0, K): the K padding, whose weights are zero, is skipped. A tile with at most 2 edge pixels (a tap left or right
// of the image; only with at most 4 panels) is direct too when every byte its rows read lies inside the input:
// an edge pixel's row then reads the neighbouring image row's pixels where its padded taps are, and its sums are
// replaced after the tile's (amx_fix, from its row packed with zx in the padding). So a direct tile's sums are the
// packed tile's, and padded taps contribute 0 exactly as zx.

// One tile of A: its first row, row stride, and whether in place (offsets doff) or packed (koff); a direct tile's
// rows fix[0 .. nfix) are edge pixels (a tap in the left or right padding), whose sums are recomputed (amx_fix).
typedef struct atile {
  const uint8_t* base;
  size_t ld;
  int direct, nfix;
  size_t fix[2];
} atile;

// Whether the tile of pixels [p0, p0 + 16) is direct (above), filling t's base (the input pixel of tap (0, 0) of
// pixel p0: may lie left of the image, in the previous image row) and its edge rows. An edge tile is direct when
// it has at most 2 edge pixels and every byte its rows read lies inside the input (the edge pixels' taps in the
// padding read the neighbouring image row's pixels instead of zx: their sums are garbage until amx_fix).
static inline int tile_direct(const q8c_ctx* c, size_t p0, atile* t) {
  t->nfix = 0;
  if (p0 + 16 > c->m) {
    return 0;
  }
  if (c->flat) {
    t->base = (const uint8_t*)c->x + p0 * c->x_stride;
    return 1;
  }
  const size_t oy = p0 / c->ow, ox = p0 % c->ow;
  const size_t iy = oy * c->stride, ix = ox * c->stride;  // plus pad
  if (ox + 16 > c->ow || iy < c->pad || iy - c->pad + c->kh > c->h) {
    return 0;
  }
  // pixels [0, nl) have a tap left of the image, [16 - nr, 16) one right of it
  const size_t s = c->stride, nl = ix >= c->pad ? 0 : (c->pad - ix + s - 1) / s;
  const size_t right = c->w + c->pad;  // pixel i's taps are inside while ix + i * s + kw <= right
  if (ix + c->kw > right) {  // every pixel has a tap right of the image
    return 0;
  }
  const size_t nr = ix + 15 * s + c->kw <= right ? 0 : 15 - (right - c->kw - ix) / s;
  if (nl + nr > (c->panels <= 4 ? 2u : 0u)) {  // (an edge pixel's amx_fix costs k4 VPDPBUSDs per panel)
    return 0;
  }
  // the bytes read: linear pixels [(iy - pad) * w + ix - pad, (iy - pad + kh - 1) * w + ix - pad + 15 s + kw)
  const size_t first = (iy - c->pad) * c->w + ix;  // plus -pad
  if (first < c->pad || first - c->pad + (c->kh - 1) * c->w + 15 * s + c->kw > c->h * c->w) {
    return 0;
  }
  t->base = (const uint8_t*)c->x + (first - c->pad) * c->x_stride;
  for (size_t i = 0; i < nl; i++) {
    t->fix[t->nfix++] = i;
  }
  for (size_t i = 16 - nr; i < 16; i++) {
    t->fix[t->nfix++] = i;
  }
  return 1;
}

// The sums of panels q (and q + 1) of one row of A packed at a (kp bytes, zx in the padding) into cb (32 int32):
// VPDPBUSD of A's bytes flipped (A + 128) with the panels' groups, minus 128 * wsum (carve_q8conv.h, "exactness":
// the same integers as TDPBSSD's). Not inlined: the AMX blocks' targets have no VNNI (every AMX CPU has it).
Q8C_VNNI __attribute__((noinline)) static void amx_fix(const q8c_ctx* c, const uint8_t* a, size_t q, int np,
                                                       int32_t* cb) {
  const int8_t* w0 = c->wt + q * c->kp * 16;
  const int8_t* w1 = w0 + c->kp * 16;
  const __m512i top = _mm512_set1_epi32((int)0x80808080u);
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  for (size_t g = 0; g < c->k4; g++) {
    int32_t v;
    memcpy(&v, a + 4 * g, 4);
    const __m512i av = _mm512_xor_si512(_mm512_set1_epi32(v), top);
    s0 = _mm512_dpbusd_epi32(s0, av, _mm512_loadu_si512(w0 + g * 64));
    if (np == 2) {
      s1 = _mm512_dpbusd_epi32(s1, av, _mm512_loadu_si512(w1 + g * 64));
    }
  }
  const size_t o = 16 * q;
  _mm512_storeu_si512(cb, _mm512_sub_epi32(s0, _mm512_slli_epi32(_mm512_loadu_si512(c->wsum + o), 7)));
  if (np == 2) {
    _mm512_storeu_si512(cb + 16, _mm512_sub_epi32(s1, _mm512_slli_epi32(_mm512_loadu_si512(c->wsum + o + 16), 7)));
  }
}

#ifdef CARVE_Q8CONV_CHECK_READS
// Tests only (the AddressSanitizer build of q8conv_tool): aborts unless the TILELOADD of 16 rows of `bytes` at lo,
// ld apart, lies inside the input view (AddressSanitizer does not see tile loads; the guard pages only catch reads
// past the end of the arena).
static void check_tile_read(const q8c_ctx* c, const uint8_t* lo, size_t ld, size_t bytes) {
  const uint8_t* x0 = (const uint8_t*)c->x;
  if (lo < x0 || lo + 15 * ld + bytes > x0 + (c->h * c->w - 1) * c->x_stride + c->cin) {
    abort();
  }
}
#endif

// The C tiles of panels q (and q + 1) of the two A tiles over the chunks of K; w0: panel q. A single chunk's A
// tiles (4, 5) are loaded by the caller once for all the panels (a_loaded).
static inline void amx_tiles_implicit(const q8c_ctx* c, const atile* t0, const atile* t1, const int8_t* w0,
                                      int np, int a_loaded) {
  const size_t cin = c->cin, xs = c->x_stride, ch = c->chunk, wt_next = c->kp * 16;
  Q8C_TILE_ZERO(0);
  Q8C_TILE_ZERO(2);
  if (np == 2) {
    Q8C_TILE_ZERO(1);
    Q8C_TILE_ZERO(3);
  }
  for (size_t ky = 0; ky < c->kh; ky++) {
    for (size_t sg = 0; sg < c->nseg; sg++) {
      const size_t k_seg = (ky * c->kw + sg) * cin, d_seg = ky * c->w * xs + sg * xs;
      for (size_t j = 0; j < c->nch; j++) {
        const size_t koff = k_seg + j * ch, doff = d_seg + j * ch;
#ifdef CARVE_Q8CONV_CHECK_READS
        if (t0->direct) {
          check_tile_read(c, t0->base + doff, t0->ld, ch);
        }
        if (t1->direct) {
          check_tile_read(c, t1->base + doff, t1->ld, ch);
        }
#endif
        if (!a_loaded) {
          Q8C_TILE_LOAD(4, t0->base + (t0->direct ? doff : koff), t0->ld);
          Q8C_TILE_LOAD(5, t1->base + (t1->direct ? doff : koff), t1->ld);
        }
        Q8C_TILE_LOAD(6, w0 + koff * 16, 64);
        Q8C_TILE_DPBSSD(0, 4, 6);
        Q8C_TILE_DPBSSD(2, 5, 6);
        if (np == 2) {
          Q8C_TILE_LOAD(7, w0 + wt_next + koff * 16, 64);
          Q8C_TILE_DPBSSD(1, 4, 7);
          Q8C_TILE_DPBSSD(3, 5, 7);
        }
      }
    }
  }
}

// A task's blocks as one software pipeline of units (a unit: one pair of panels of one block): for each block, A
// packed (or, implicit, each of its two tiles read in place where direct; with a single K block or chunk, its two
// tiles loaded once), then per unit its tiles, whose sums go to one of two buffers in turn. The requantization of
// the previous unit, of this block or the last one, is issued after the current unit's TDPBSSDs, so that the core
// works on it while the tile unit computes.
Q8C_AVX512 __attribute__((always_inline)) static inline void amx_run(const q8c_ctx* c, size_t b0, size_t b1,
                                                                    unsigned char* slot, const int vbmi) {
  _Static_assert(MB == 32, "a block is one pair of 16-row tiles");
  int32_t* cbuf[2] = {(int32_t*)(void*)(slot + SLOT_C), (int32_t*)(void*)(slot + SLOT_C) + MB * 32};
  const size_t kp = c->kp;
  const int implicit = c->chunk != 0;
  const lut256 t = lut256_load(c);
  size_t u = 0, p_m0 = 0, p_rows = 0, p_q = 0;  // units issued; the previous unit's block and panel
  int p_np = 0;
  amx_begin(slot, implicit ? c->chunk : 64);
  for (size_t b = b0; b < b1; b++) {
    const size_t m0 = b * MB, rows = min_size(MB, c->m - m0);
    atile at[2] = {{NULL, 0, 0, 0, {0, 0}}, {NULL, 0, 0, 0, {0, 0}}};
    int a_once;
    if (implicit) {  // (the previous units' tile loads of A come before the packing's stores in program order)
      for (int i = 0; i < 2; i++) {
        const size_t p0 = m0 + 16 * (size_t)i;
        uint8_t* a = slot + SLOT_A + 16 * (size_t)i * kp;
        at[i].direct = tile_direct(c, p0, &at[i]);
        if (at[i].direct) {
          at[i].ld = c->stride * c->x_stride;
          for (int f = 0; f < at[i].nfix; f++) {  // the edge pixels' rows, packed (zx in the padding)
            pack_block_avx512(c, p0 + at[i].fix[f], 1, a + (size_t)f * kp, 0);
          }
        } else {
          if (p0 < c->m) {
            pack_block_avx512(c, p0, min_size(16, c->m - p0), a, 0);
          }
          at[i].base = a;
          at[i].ld = kp;
        }
      }
      a_once = c->nseg * c->nch * c->kh == 1;
      if (a_once) {
        Q8C_TILE_LOAD(4, at[0].base, at[0].ld);
        Q8C_TILE_LOAD(5, at[1].base, at[1].ld);
      }
    } else {
      if (vbmi && c->small) {
        pack_block_small_vbmi(c, m0, rows, slot + SLOT_A, 0);
      } else {
        pack_block_avx512(c, m0, rows, slot + SLOT_A, 0);
      }
      at[0].base = slot + SLOT_A;
      at[0].ld = kp;
      a_once = kp == 64;
      if (a_once) {
        Q8C_TILE_LOAD(4, at[0].base, kp);
        Q8C_TILE_LOAD(5, at[0].base + 16 * kp, kp);
      }
    }
    for (size_t q = 0; q < c->panels; q += 2, u++) {
      const int np = c->panels - q >= 2 ? 2 : 1;
      if (implicit) {
        amx_tiles_implicit(c, &at[0], &at[1], c->wt + q * kp * 16, np, a_once);
      } else {
        amx_tiles(at[0].base, kp, c->wt + q * kp * 16, kp, np, a_once);
      }
      if (u > 0) {
        amx_out(c, p_m0, p_rows, p_q, p_np, cbuf[(u - 1) & 1], &t, vbmi);
      }
      amx_store(cbuf[u & 1], np);
      if (implicit) {  // the edge pixels' sums, over the garbage of their in-place rows
        for (int i = 0; i < 2; i++) {
          for (int f = 0; f < at[i].nfix; f++) {
            amx_fix(c, slot + SLOT_A + (16 * (size_t)i + (size_t)f) * kp, q, np,
                    cbuf[u & 1] + (16 * (size_t)i + at[i].fix[f]) * 32);
          }
        }
      }
      p_m0 = m0, p_rows = rows, p_q = q, p_np = np;
    }
  }
  amx_out(c, p_m0, p_rows, p_q, p_np, cbuf[(u - 1) & 1], &t, vbmi);
  amx_end();
}

Q8C_AVX512 static void blocks_amx(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  amx_run(c, b0, b1, slot, 0);
}

Q8C_AVX512_VBMI static void blocks_amx_vbmi(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  amx_run(c, b0, b1, slot, 1);
}

// ---- Entry points ----

static int cpu_has_vbmi(void) { return __builtin_cpu_supports("avx512vbmi"); }

static const q8c_isa q8c_avx512vnni = {blocks_avx512vnni, 0};
static const q8c_isa q8c_avx512vnni_vbmi = {blocks_avx512vnni_vbmi, 0};
static const q8c_isa q8c_amx = {blocks_amx, 1};
static const q8c_isa q8c_amx_vbmi = {blocks_amx_vbmi, 1};
static const q8c_isa q8c_amx_packed = {blocks_amx, 0};
static const q8c_isa q8c_amx_packed_vbmi = {blocks_amx_vbmi, 0};
static const q8c_isa q8c_amx_implicit_vbmi = {blocks_amx_vbmi, 2};
static const q8c_isa q8c_amx_implicit = {blocks_amx, 2};

carve_status carve_q8conv__avx512vnni(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool,
                            cpu_has_vbmi() ? &q8c_avx512vnni_vbmi : &q8c_avx512vnni);
}

carve_status carve_q8conv__avx512vnni_novbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                             void* scratch, size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, &q8c_avx512vnni);
}

carve_status carve_q8conv__amx(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                               size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, cpu_has_vbmi() ? &q8c_amx_vbmi : &q8c_amx);
}

carve_status carve_q8conv__amx_novbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, &q8c_amx);
}

carve_status carve_q8conv__amx_packed(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool,
                            cpu_has_vbmi() ? &q8c_amx_packed_vbmi : &q8c_amx_packed);
}

carve_status carve_q8conv__amx_implicit(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                        size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool,
                   cpu_has_vbmi() ? &q8c_amx_implicit_vbmi : &q8c_amx_implicit);
}
#endif  // CARVE_HAVE_X86_SIMD

int carve_q8conv_vnni_ready(void) {
#ifdef CARVE_HAVE_X86_SIMD
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return 0;
#endif
}

// Linux's arch_prctl for the dynamically enabled XSAVE features (asm/prctl.h, Linux 5.16) and AMX's tile data.
#define Q8C_ARCH_GET_XCOMP_PERM 0x1022
#define Q8C_ARCH_REQ_XCOMP_PERM 0x1023
#define Q8C_XFEATURE_XTILEDATA 18

int carve_q8conv_amx_ready(void) {
#if defined(CARVE_HAVE_X86_SIMD) && defined(__linux__) && defined(SYS_arch_prctl)
  unsigned int a, b, c, d;
  // CPUID.(7, 0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8; the requantization needs AVX-512 F, BW and VL (every CPU
  // with AMX has them, and VNNI)
  if (!carve_q8conv_vnni_ready() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) ||
      !(d & (1u << 25))) {
    return 0;
  }
  // The kernel (>= 5.16) enables the 8 KB of tile data per thread only for a process that asked: a refusal
  // (older kernel, a hypervisor or seccomp policy that hides AMX) leaves the VNNI variant.
  if (syscall(SYS_arch_prctl, Q8C_ARCH_REQ_XCOMP_PERM, Q8C_XFEATURE_XTILEDATA) != 0) {
    return 0;
  }
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, Q8C_ARCH_GET_XCOMP_PERM, &perm) != 0) {
    return 0;
  }
  return (int)((perm >> Q8C_XFEATURE_XTILEDATA) & 1);
#else
  return 0;
#endif
}
