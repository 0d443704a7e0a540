// carve runtime: what the files of carve_q8conv (the int8 dense convolution, carve_q8conv.h) share; not part of
// the API. The driver (carve_q8conv.c) checks a call's arguments, reads the record into a q8c_ctx and splits the
// output into blocks of CARVE_Q8CONV_MB pixels over `slots` tasks; a variant (q8c_isa) is how a task's blocks are
// computed: each block's im2col rows packed into the slot's A (or, AMX only, its tiles read in place by the
// implicit GEMM where amx_plan chooses it), the GEMM with the weight panels, the requantization, the table and the
// store. One file per instruction-set family: carve_q8conv.c (the driver, portable C, the selection),
// carve_q8conv_avx512.c (AVX-512 VNNI and AMX), carve_q8conv_avx2.c (AVX2 and AVX-VNNI), carve_q8conv_neon.c
// (NEON and the dot product); each declares its entry points in the header of its name, which
// carve_q8conv_isa.h gathers. Every variant computes the same integers (carve_q8conv.h, "exactness");
// tests/runtime/q8conv_vs_arith.py compares each with arith.qconv2d bit for bit.

#ifndef CARVE_Q8CONV_IMPL_H
#define CARVE_Q8CONV_IMPL_H

#include "carve_q8conv.h"

#include <stdlib.h>
#include <string.h>

#include "carve_simd.h"

// The requantization (acc * m + 2^(n-1)) >> n floors: `>>` of a negative int64 must be arithmetic (as carve_q8.c).
_Static_assert((-1 >> 1) == -1 && ((int64_t)-5 >> 1) == -3 && (INT64_MIN >> 62) == -2,
               "carve_q8conv needs >> of a negative integer to be an arithmetic shift");
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "carve_q8conv reads the record's int32 arrays in place: it needs a little-endian target"
#endif
_Static_assert(CARVE_Q8CONV_MB % 32 == 0, "a block is whole AMX tile pairs (2 x 16 rows) and VNNI row blocks (8)");
_Static_assert(CARVE_Q8CONV_NR == 16 && CARVE_Q8CONV_KB == 64,
               "a panel is 16 channels, a K block one 64-byte tile row");
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
static inline int8_t clamp8(int64_t v) { return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v); }

// arith: clamp(zy + ((acc * m + 2^(n-1)) >> n)) in int64 (|acc| < 2^31, m < 2^31, n in [1, 62]: no overflow).
static inline int8_t requantize(int64_t acc, int32_t m, int32_t n, int32_t zy) {
  return clamp8(zy + ((acc * m + ((int64_t)1 << (n - 1))) >> n));
}

// The variants' shared entry (carve_q8conv.c): checks the arguments (carve_q8conv.h), reads the record and runs
// isa->blocks over the slots on the pool.
carve_status carve_q8conv_drive(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool, const q8c_isa* isa);

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

// The first input byte of the taps [kx0, ...) of kernel row ky of output pixel (oy, ox) (kx0 from tap_cols: its
// column inside the image), or NULL when that kernel row lies above or below the image.
static inline const uint8_t* tap_row(const q8c_ctx* c, size_t oy, size_t ox, size_t ky, size_t kx0) {
  const size_t iy = oy * c->stride + ky;  // plus pad
  if (iy < c->pad || iy - c->pad >= c->h) {
    return NULL;
  }
  return (const uint8_t*)c->x + ((iy - c->pad) * c->w + ox * c->stride + kx0 - c->pad) * c->x_stride;
}

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

// y[p][o] = lut[y[p][o] + 128] for the block's rows (rows output pixels from m0), a byte at a time.
static inline void lut_rows_scalar(const q8c_ctx* c, size_t m0, size_t rows) {
  const int8_t* lut = c->lut;
  for (size_t r = 0; r < rows; r++) {
    int8_t* yp = c->y + (m0 + r) * c->y_stride;
    for (size_t o = 0; o < c->cout; o++) {
      yp[o] = lut[(uint8_t)yp[o] ^ 0x80];
    }
  }
}

#endif  // CARVE_Q8CONV_IMPL_H
