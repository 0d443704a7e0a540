// carve runtime: the int8 dense convolution on AMX, AVX-512 VNNI, AVX-VNNI, AVX2, NEON or portable C (see
// carve_q8conv.h).
//
// One driver checks the arguments, reads the record and splits the output into blocks of CARVE_Q8CONV_MB pixels
// over `slots` tasks; a variant is how a task's blocks are computed (q8c_isa): each block's im2col rows packed
// into the slot's A (or, AMX only, its tiles read in place by the implicit GEMM where amx_plan chooses it), the
// GEMM with the weight panels, the requantization, the table and the store. Every variant computes the same
// integers (carve_q8conv.h, "exactness"); tests/runtime/q8conv_vs_arith.py compares each with arith.qconv2d bit
// for bit.

#define _DEFAULT_SOURCE  // syscall (Linux: the AMX permission)

#include "carve_q8conv.h"
#include "carve_q8conv_isa.h"

#include <stdlib.h>
#include <string.h>

#include "carve_simd.h"

#ifdef CARVE_HAVE_X86_SIMD
#include <cpuid.h>
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif
#ifdef CARVE_HAVE_NEON
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>  // getauxval: the dot-product instructions (HWCAP_ASIMDDP)
#endif
#endif

// The requantization (acc * m + 2^(n-1)) >> n floors: `>>` of a negative int64 must be arithmetic (as carve_q8.c).
_Static_assert((-1 >> 1) == -1 && ((int64_t)-5 >> 1) == -3 && (INT64_MIN >> 62) == -2,
               "carve_q8conv needs >> of a negative integer to be an arithmetic shift");
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "carve_q8conv.c reads the record's int32 arrays in place: it needs a little-endian target"
#endif
_Static_assert(CARVE_Q8CONV_MB % 32 == 0, "a block is whole AMX tile pairs (2 x 16 rows) and VNNI row blocks (8)");
_Static_assert(CARVE_Q8CONV_NR == 16 && CARVE_Q8CONV_KB == 64, "a panel is 16 channels, a K block one 64-byte tile row");
_Static_assert(CARVE_Q8CONV_SLOT_FIXED % 64 == 0 && CARVE_Q8CONV_HEADER_BYTES % 64 == 0, "64-byte aligned parts");

#define MB CARVE_Q8CONV_MB
#define SLOT_C 64                        // the slot's int32 sums of a block (AMX): 2 buffers of MB rows x 32 channels
#define SLOT_A CARVE_Q8CONV_SLOT_FIXED   // the slot's A: MB rows of kp bytes

// ---- Context ------------------------------------------------------------------------

typedef struct q8c_ctx q8c_ctx;

// A variant: computes the blocks [b0, b1) (block b: output pixels [b * MB, b * MB + MB)) in one task's slot.
typedef struct q8c_isa {
  void (*blocks)(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot);
  int implicit;  // AMX: 0 no implicit GEMM, 1 where amx_plan's estimate says it pays, 2 wherever the shapes allow
} q8c_isa;

struct q8c_ctx {
  const int8_t* x;                   // (h, w, cin), pixel stride x_stride
  size_t x_stride, h, w, cin;
  size_t kh, kw, stride, pad;
  size_t oh, ow, m;                  // output size, m = oh * ow pixels (rows of A)
  size_t k, kp, k4;                  // K = kh * kw * cin, K padded to 64, groups of 4 k up to K (ceil(K / 4))
  size_t cout, panels;               // output channels, panels of 16
  const int32_t* bias;               // (coutp) each: the record's arrays
  const int32_t* wsum;
  const int32_t* mul;
  const int32_t* shift;
  const int8_t* wt;                  // the panels: panel q at wt + q * kp * 16
  const int8_t* lut;                 // int8[256], or NULL (act none)
  int8_t* y;                         // (oh, ow, cout), pixel stride y_stride
  size_t y_stride;
  int32_t zx, zy;                    // input zero point, output (pre-activation) zero point
  size_t blocks, slots, slot_bytes;
  unsigned char* scratch;            // slots of slot_bytes
  // AMX's implicit GEMM (amx_plan; chunk 0: off): K in chunks of `chunk` bytes (a multiple of 4, at most 64),
  // nch chunks per segment, nseg segments per kernel row; a segment is a run of input bytes that is a run of K too:
  // a whole kernel row (kw * cin bytes) of a packed input (x_stride == cin), else one tap (cin bytes)
  size_t chunk, nch, nseg;
  int flat;                          // 1x1, stride 1, pad 0: output pixel p reads input pixel p
  int small;                         // pack_block_small_vbmi's case (a packed input, K <= 64, kh <= 4, kw * cin <= 16)
  uint8_t small_idx[64];             // its VPERMB index: byte j of a row of A is byte j % R of kernel row j / R
  int small4;                        // and 4 pixels of an output row read by one 32-byte load a kernel row
  uint8_t small4_idx[64];            // their VPERMT2B index for the first of the 4 (rows 32 bytes apart)
  int narrow;                        // every output channel's shift is >= 33 (rq16_apply's int32 path)
  int lut_span;                      // a table and a packed output (y_stride == cout): lut_span_vbmi after a block
  const q8c_isa* isa;
};

// int8 of int64 clamped to [-128, 127].
static int8_t clamp8(int64_t v) { return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v); }

// arith: clamp(zy + ((acc * m + 2^(n-1)) >> n)) in int64 (|acc| < 2^31, m < 2^31, n in [1, 62]: no overflow).
static int8_t requantize(int64_t acc, int32_t m, int32_t n, int32_t zy) {
  return clamp8(zy + ((acc * m + ((int64_t)1 << (n - 1))) >> n));
}

// ---- Packing A ------------------------------------------------------------------------
//
// Rows [m0, m0 + MB) of A into `a` (MB rows of kp bytes), every byte XORed with `flip` (0, or 0x80 for VNNI's
// unsigned A + 128): row p holds, for each tap (ky, kx) in order, the cin input channels of pixel
// (oy * stride + ky - pad, ox * stride + kx - pad), or cin copies of zx where that lies outside the image; then
// zeros up to kp. Rows p >= m are zeros.

// The input pixel of tap t (0 .. kh * kw) of output pixel (oy, ox), or NULL outside the image.
static inline const uint8_t* tap_pixel(const q8c_ctx* c, size_t oy, size_t ox, size_t ky, size_t kx) {
  const size_t iy = oy * c->stride + ky, ix = ox * c->stride + kx;  // plus pad
  if (iy < c->pad || ix < c->pad || iy - c->pad >= c->h || ix - c->pad >= c->w) {
    return NULL;
  }
  return (const uint8_t*)c->x + ((iy - c->pad) * c->w + (ix - c->pad)) * c->x_stride;
}

#if defined(CARVE_HAVE_X86_SIMD) || defined(CARVE_HAVE_NEON)  // its callers: the SIMD packers
// The taps kx of output column ox whose input column ox * stride + kx - pad lies inside the image: [kx0, kx1)
// (kx0 == kx1: none).
static inline void tap_cols(const q8c_ctx* c, size_t ox, size_t* kx0, size_t* kx1) {
  const size_t first = ox * c->stride;  // input column of tap 0, plus pad
  *kx0 = first < c->pad ? c->pad - first : 0;
  const size_t end = c->w + c->pad > first ? c->w + c->pad - first : 0;  // taps below this are inside
  *kx1 = end < c->kw ? end : c->kw;
  if (*kx1 < *kx0) {
    *kx1 = *kx0;
  }
}
#endif

static void pack_block_portable(const q8c_ctx* c, size_t m0, uint8_t* a, uint8_t flip) {
  size_t oy = m0 / c->ow, ox = m0 % c->ow;
  const uint8_t fill = (uint8_t)((uint8_t)c->zx ^ flip);
  for (size_t i = 0; i < MB; i++, a += c->kp) {
    if (m0 + i >= c->m) {
      memset(a, 0, c->kp);
      continue;
    }
    uint8_t* d = a;
    for (size_t ky = 0; ky < c->kh; ky++) {
      for (size_t kx = 0; kx < c->kw; kx++, d += c->cin) {
        const uint8_t* s = tap_pixel(c, oy, ox, ky, kx);
        if (s == NULL) {
          memset(d, fill, c->cin);
        } else {
          for (size_t j = 0; j < c->cin; j++) {
            d[j] = (uint8_t)(s[j] ^ flip);
          }
        }
      }
    }
    memset(d, 0, c->kp - c->k);
    if (++ox == c->ow) {
      ox = 0;
      oy++;
    }
  }
}

// ---- Portable ----------------------------------------------------------------------------

#if defined(__GNUC__) && !defined(__clang__)
#define Q8C_VECTORIZE __attribute__((optimize("tree-loop-vectorize", "vect-cost-model=dynamic")))
#else
#define Q8C_VECTORIZE
#endif

// acc[j] = sum over the k4 groups g and i < 4 of a[4g + i] * panel[g * 64 + 4j + i] (16 channels of one row).
Q8C_VECTORIZE static void dot_panel(const int8_t* restrict a, const int8_t* restrict panel, size_t k4,
                                    int32_t acc[restrict 16]) {
  for (size_t j = 0; j < 16; j++) {
    acc[j] = 0;
  }
  for (size_t g = 0; g < k4; g++) {
    const int8_t* wg = panel + g * 64;
    const int8_t* ag = a + 4 * g;
    for (size_t j = 0; j < 16; j++) {
      acc[j] += ag[0] * wg[4 * j] + ag[1] * wg[4 * j + 1] + ag[2] * wg[4 * j + 2] + ag[3] * wg[4 * j + 3];
    }
  }
}

// y[p][o] = lut[y[p][o] + 128] for the block's rows (rows output pixels from m0), a byte at a time.
static void lut_rows_scalar(const q8c_ctx* c, size_t m0, size_t rows) {
  const int8_t* lut = c->lut;
  for (size_t r = 0; r < rows; r++) {
    int8_t* yp = c->y + (m0 + r) * c->y_stride;
    for (size_t o = 0; o < c->cout; o++) {
      yp[o] = lut[(uint8_t)yp[o] ^ 0x80];
    }
  }
}

static void block_portable(const q8c_ctx* c, size_t m0, unsigned char* slot) {
  uint8_t* a = slot + SLOT_A;
  pack_block_portable(c, m0, a, 0);
  const size_t rows = min_size(MB, c->m - m0);
  for (size_t r = 0; r < rows; r++) {
    const int8_t* ar = (const int8_t*)(a + r * c->kp);
    int8_t* yp = c->y + (m0 + r) * c->y_stride;
    for (size_t q = 0; q < c->panels; q++) {
      int32_t acc[16];
      dot_panel(ar, c->wt + q * c->kp * 16, c->k4, acc);
      const size_t n = min_size(16, c->cout - 16 * q);
      for (size_t j = 0; j < n; j++) {
        const size_t o = 16 * q + j;
        const int64_t v = (int64_t)acc[j] + c->bias[o] - (int64_t)c->zx * c->wsum[o];
        yp[o] = requantize(v, c->mul[o], c->shift[o], c->zy);
      }
    }
  }
  if (c->lut != NULL) {
    lut_rows_scalar(c, m0, rows);
  }
}

#ifdef CARVE_HAVE_X86_SIMD
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
      const size_t iy = oy * c->stride + ky;  // plus pad
      if (iy < c->pad || iy - c->pad >= c->h) {
        continue;
      }
      const uint8_t* s = (const uint8_t*)c->x + ((iy - c->pad) * c->w + ox * c->stride + kx0 - c->pad) * xs;
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
      const size_t iy = oy * c->stride + ky;  // plus pad
      if (iy < c->pad || iy - c->pad >= c->h) {
        continue;
      }
      const uint8_t* s = (const uint8_t*)c->x + ((iy - c->pad) * c->w + ox * c->stride + kx0 - c->pad) * xs;
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
#endif  // CARVE_HAVE_X86_SIMD

#ifdef CARVE_HAVE_NEON
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
      const size_t iy = oy * c->stride + ky;  // plus pad
      if (iy < c->pad || iy - c->pad >= c->h) {
        continue;
      }
      const uint8_t* s = (const uint8_t*)c->x + ((iy - c->pad) * c->w + ox * c->stride + kx0 - c->pad) * xs;
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
#endif  // CARVE_HAVE_NEON

// ---- Driver --------------------------------------------------------------------------------------

// Slots [start, start + count): slot s computes blocks [s * blocks / slots, (s + 1) * blocks / slots).
static void q8c_task(void* context, size_t start, size_t count) {
  const q8c_ctx* c = context;
  for (size_t s = start; s < start + count; s++) {
    const size_t b0 = s * c->blocks / c->slots, b1 = (s + 1) * c->blocks / c->slots;
    if (b0 == b1) {
      continue;
    }
    c->isa->blocks(c, b0, b1, c->scratch + s * c->slot_bytes);
  }
}

static uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static int zero_point_ok(int32_t z) { return z >= -128 && z <= 127; }

// The number of full tiles of A (16 pixels [16t, 16t + 16) with 16t + 16 <= m) that tile_direct takes in place,
// counted a output row at a time: the rows whose taps are all inside, times the tiles that start in the row at a
// column ox in [lo, hi] (ox * stride >= pad, ox + 16 <= ow, (ox + 15) * stride - pad + kw <= w).
static size_t direct_tiles(const q8c_ctx* c) {
  if (c->flat) {
    return c->m / 16;
  }
  const long long s = (long long)c->stride, pad = (long long)c->pad;
  const long long lo = (pad + s - 1) / s;
  const long long by_w = (long long)c->w + pad - (long long)c->kw - 15 * s;  // hi * s <= by_w
  long long hi = (long long)c->ow - 16;
  if (by_w < 0) {
    return 0;
  }
  hi = by_w / s < hi ? by_w / s : hi;
  if (hi < lo) {
    return 0;
  }
  size_t n = 0;
  for (size_t oy = 0; oy < c->oh; oy++) {
    if (oy * c->stride < c->pad || oy * c->stride - c->pad + c->kh > c->h) {
      continue;
    }
    const long long a = (long long)(oy * c->ow) + lo, b = (long long)(oy * c->ow) + hi;  // multiples of 16 in [a, b]
    n += (size_t)(b / 16 - (a + 15) / 16 + 1);
  }
  return n;
}

// AMX: whether and how the conv runs as an implicit GEMM (the chunk, nch, nseg and flat of q8c_ctx; chunk 0: the
// packed blocks of 64-byte K blocks). The chunk is the largest multiple of 4 up to 64 that divides a segment (none:
// a segment of a length not a multiple of 4, such as the stem's 3 x 3 bytes). Unless forced (the tests), only where
// at least a quarter of the tiles are direct: a packed tile costs more in chunks than in 64-byte K blocks when the
// chunk is short, and reading a tile in place saves far more than its extra TDPBSSDs cost (the packing dominates:
// bench/q8conv_vs_xnnpack.c, docs/quantization.md).
static void amx_plan(q8c_ctx* c, int force) {
  c->chunk = 0;
  c->flat = c->kh == 1 && c->kw == 1 && c->stride == 1 && c->pad == 0;
  const int row_seg = c->x_stride == c->cin;  // a kernel row of a packed input is one run of bytes
  const size_t seg = row_seg ? c->kw * c->cin : c->cin;
  size_t ch = 0;
  for (size_t d = 64; d >= 4 && ch == 0; d -= 4) {
    ch = seg % d == 0 ? d : 0;
  }
  if (ch == 0 || (!force && 4 * direct_tiles(c) < div_round_up(c->m, 16))) {
    return;
  }
  c->chunk = ch;
  c->nch = seg / ch;
  c->nseg = row_seg ? 1 : c->kw;
}

// The variants' shared entry: checks the arguments (carve_q8conv.h) and splits the blocks over the slots.
static carve_status q8c_drive(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                              size_t slots, pthreadpool_t pool, const q8c_isa* isa) {
  if (d == NULL || blob == NULL || arena == NULL || scratch == NULL || slots == 0 ||
      (uintptr_t)scratch % CARVE_Q8CONV_ALIGN != 0 || d->kind != CARVE_Q8_CONV || d->groups != 1 || d->kh == 0 ||
      d->kw == 0 || d->stride == 0 || d->cin == 0 || d->cout == 0 || d->h == 0 || d->w == 0 ||
      d->kh > (size_t)d->h + 2 * (size_t)d->pad || d->kw > (size_t)d->w + 2 * (size_t)d->pad ||
      d->in_stride < d->cin || d->out_stride < d->cout || !zero_point_ok(d->in_zero) ||
      !zero_point_ok(d->out_zero) || (d->act != CARVE_ACT_NONE && d->act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const uint8_t* rec = blob + d->weight_off;
  const size_t kp = CARVE_Q8CONV_KP(d->kh, d->kw, d->cin), coutp = CARVE_Q8CONV_COUTP(d->cout);
  if ((uintptr_t)rec % CARVE_Q8CONV_ALIGN != 0 || read_u32(rec) != CARVE_Q8CONV_LAYOUT ||
      read_u32(rec + 4) != d->kh || read_u32(rec + 8) != d->kw || read_u32(rec + 12) != d->cin ||
      read_u32(rec + 16) != d->cout || read_u32(rec + 20) != kp || read_u32(rec + 24) != coutp) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const int32_t* bias = (const int32_t*)(const void*)(rec + CARVE_Q8CONV_HEADER_BYTES);
  const int32_t* shift = bias + 3 * coutp;
  int narrow = 1;
  for (size_t o = 0; o < coutp; o++) {
    if (shift[o] < 1 || shift[o] > 62) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    narrow &= o >= d->cout || shift[o] >= 33;  // the padding channels' sums are not stored
  }
  const size_t oh = (d->h + 2 * (size_t)d->pad - d->kh) / d->stride + 1;
  const size_t ow = (d->w + 2 * (size_t)d->pad - d->kw) / d->stride + 1;
  const size_t k = (size_t)d->kh * d->kw * d->cin;
  q8c_ctx c = {
      .x = (const int8_t*)(arena + d->in_off), .x_stride = d->in_stride, .h = d->h, .w = d->w, .cin = d->cin,
      .kh = d->kh, .kw = d->kw, .stride = d->stride, .pad = d->pad, .oh = oh, .ow = ow, .m = oh * ow,
      .k = k, .kp = kp, .k4 = (k + 3) / 4, .cout = d->cout, .panels = coutp / CARVE_Q8CONV_NR,
      .bias = bias, .wsum = bias + coutp, .mul = bias + 2 * coutp, .shift = shift,
      .wt = (const int8_t*)(const void*)(rec + CARVE_Q8CONV_HEADER_BYTES + 16 * coutp),
      .lut = d->act == CARVE_ACT_SILU ? (const int8_t*)(const void*)(blob + d->lut_off) : NULL,
      .y = (int8_t*)(arena + d->out_off), .y_stride = d->out_stride, .zx = d->in_zero, .zy = d->out_zero,
      .blocks = div_round_up(oh * ow, MB), .slots = slots,
      .slot_bytes = CARVE_Q8CONV_SLOT_BYTES(d->kh, d->kw, d->cin), .scratch = scratch,
      .narrow = narrow,
      .lut_span = d->act == CARVE_ACT_SILU && d->out_stride == d->cout,
      .isa = isa};
  if (isa->implicit) {
    amx_plan(&c, isa->implicit == 2);
  }
  const size_t row_bytes = (size_t)d->kw * d->cin;
  c.small = d->in_stride == d->cin && d->kh <= 4 && row_bytes <= 16 && kp == 64;
  c.small4 = c.small && 3 * (size_t)d->stride * d->cin + row_bytes <= 32;
  for (size_t j = 0; j < 64; j++) {
    c.small_idx[j] = (uint8_t)(c.small && j < k ? j / row_bytes * 16 + j % row_bytes : 0);
    c.small4_idx[j] = (uint8_t)(c.small4 && j < k ? j / row_bytes * 32 + j % row_bytes : 0);
  }
  carve_parallelize_1d_tile(pool, q8c_task, (void*)&c, slots, 1);
  return CARVE_OK;
}

// ---- Variants and selection ------------------------------------------------------------------------

static void blocks_portable(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  for (size_t b = b0; b < b1; b++) {
    block_portable(c, b * MB, slot);
  }
}

static const q8c_isa q8c_portable = {blocks_portable, 0};

carve_status carve_q8conv__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                    size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, &q8c_portable);
}

#ifdef CARVE_HAVE_X86_SIMD
static const q8c_isa q8c_avx512vnni = {blocks_avx512vnni, 0};
static const q8c_isa q8c_avx512vnni_vbmi = {blocks_avx512vnni_vbmi, 0};
static const q8c_isa q8c_amx = {blocks_amx, 1};
static const q8c_isa q8c_amx_vbmi = {blocks_amx_vbmi, 1};
static const q8c_isa q8c_amx_packed = {blocks_amx, 0};
static const q8c_isa q8c_amx_packed_vbmi = {blocks_amx_vbmi, 0};
static const q8c_isa q8c_amx_implicit_vbmi = {blocks_amx_vbmi, 2};
static const q8c_isa q8c_amx_implicit = {blocks_amx, 2};

static int cpu_has_vbmi(void) { return __builtin_cpu_supports("avx512vbmi"); }

static const q8c_isa q8c_avx2 = {blocks_avx2, 0};

carve_status carve_q8conv__avx2(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, &q8c_avx2);
}

#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
static const q8c_isa q8c_avxvnni = {blocks_avxvnni, 0};

carve_status carve_q8conv__avxvnni(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                   size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, &q8c_avxvnni);
}
#endif

carve_status carve_q8conv__avx512vnni(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, cpu_has_vbmi() ? &q8c_avx512vnni_vbmi : &q8c_avx512vnni);
}

carve_status carve_q8conv__avx512vnni_novbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                             void* scratch, size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, &q8c_avx512vnni);
}

carve_status carve_q8conv__amx(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                               size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, cpu_has_vbmi() ? &q8c_amx_vbmi : &q8c_amx);
}

carve_status carve_q8conv__amx_novbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, &q8c_amx);
}

carve_status carve_q8conv__amx_packed(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, cpu_has_vbmi() ? &q8c_amx_packed_vbmi : &q8c_amx_packed);
}

carve_status carve_q8conv__amx_implicit(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                        size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool,
                   cpu_has_vbmi() ? &q8c_amx_implicit_vbmi : &q8c_amx_implicit);
}
#endif

#ifdef CARVE_HAVE_NEON
static const q8c_isa q8c_neon = {blocks_neon, 0};

carve_status carve_q8conv__neon(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, &q8c_neon);
}

#ifdef CARVE_Q8CONV_HAVE_NEONDOT
static const q8c_isa q8c_neondot = {blocks_neondot, 0};

carve_status carve_q8conv__neondot(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                   size_t slots, pthreadpool_t pool) {
  return q8c_drive(d, blob, arena, scratch, slots, pool, &q8c_neondot);
}
#endif
#endif

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

carve_q8conv_fn carve_q8conv_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512) {
    if (carve_q8conv_amx_ready()) {
      return carve_q8conv__amx;
    }
    if (carve_q8conv_vnni_ready()) {
      return carve_q8conv__avx512vnni;
    }
  }
  if (isa == CARVE_ISA_AVX512 || isa == CARVE_ISA_AVX2) {  // (an AVX-512 CPU without VNNI: Skylake-SP)
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
    if (carve_q8conv_avxvnni_ready()) {
      return carve_q8conv__avxvnni;
    }
#endif
    if (carve_q8conv_avx2_ready()) {
      return carve_q8conv__avx2;
    }
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (isa == CARVE_ISA_NEON) {
#ifdef CARVE_Q8CONV_HAVE_NEONDOT
    if (carve_q8conv_neondot_ready()) {
      return carve_q8conv__neondot;
    }
#endif
    return carve_q8conv__neon;
  }
#endif
  (void)isa;
  return carve_q8conv__portable;
}

const char* carve_q8conv_name(carve_q8conv_fn fn) {
#ifdef CARVE_HAVE_X86_SIMD
  if (fn == carve_q8conv__amx || fn == carve_q8conv__amx_novbmi || fn == carve_q8conv__amx_packed ||
      fn == carve_q8conv__amx_implicit) {
    return "amx";
  }
  if (fn == carve_q8conv__avx512vnni || fn == carve_q8conv__avx512vnni_novbmi) {
    return "avx512vnni";
  }
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
  if (fn == carve_q8conv__avxvnni) {
    return "avxvnni";
  }
#endif
  if (fn == carve_q8conv__avx2) {
    return "avx2";
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (fn == carve_q8conv__neon) {
    return "neon";
  }
#ifdef CARVE_Q8CONV_HAVE_NEONDOT
  if (fn == carve_q8conv__neondot) {
    return "neondot";
  }
#endif
#endif
  return fn == carve_q8conv__portable ? "portable" : "unknown";
}
