// carve runtime: the int8 kernels (see carve_q8.h).
//
// Every kernel is the arithmetic of generator/carve/quant/arith.py, written out
// once per op; tests/runtime/q8_vs_arith.py compares them bit for bit, and
// tests/runtime/q8_pool_vs_run.py carve_q8_run_pool with carve_q8_run.
//
// Items. Each kernel computes a range [i0, i1) of its op's items (output rows of
// CONV and MAXPOOL, input rows of UPSAMPLE2X, pixels of the other kinds): an
// item's output bytes are written by that item alone, from the inputs only, by
// the same loops whatever the range. carve_q8_run runs all the items on the
// calling thread; carve_q8_run_pool hands tiles of them to the pool; so both
// give the same bytes for any thread count.
//
// Vectorisation. The convolutions' inner loops run over contiguous int8 with
// restrict pointers, widen each input to int16 after subtracting the zero point
// and accumulate in int32: the dense kernel as CARVE_Q8_OC dot products over one
// run of the input (GCC turns them into pmaddwd on x86-64), the depthwise one
// over CARVE_Q8_DW_CH channels with a fixed trip count. GCC 12's -O2 uses its
// "very cheap" vectoriser cost model, which leaves loops with a run-time trip
// count scalar; CARVE_Q8_VECTORIZE gives the kernels' loop functions -O3's
// model instead (as carve_portable.c steers GCC with an optimize attribute).
// docs/quantization.md ("Kernels") lists what GCC and Clang vectorise.

#include "carve_q8.h"
#include "carve_q8_isa.h"

#include <float.h>
#include <math.h>
#include <string.h>

// The requantization (acc * m + 2^(n-1)) >> n floors: `>>` of a negative int64
// must be an arithmetic shift. C11 leaves it implementation-defined (6.5.7);
// every compiler carve supports shifts arithmetically, and this checks it.
_Static_assert((-1 >> 1) == -1 && ((int64_t)-5 >> 1) == -3 && (INT64_MIN >> 62) == -2,
               "carve_q8 needs >> of a negative integer to be an arithmetic shift");

// The blob's int32 arrays are little-endian (carve_q8.h), read in place.
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "carve_q8.c reads the blob's int32 arrays in place: it needs a little-endian target"
#endif

// Output channels of one dense block: CARVE_Q8_OC dot products share each widened input. (Not part of the
// weight layout: a kernel-side choice.)
#define CARVE_Q8_OC 4
// Channels of one depthwise block: int32 accumulators on the stack (128 bytes).
#define CARVE_Q8_DW_CH 32
// Work of one pool task, about (multiply-adds, or element loads and stores): a tile is the fewest whole items
// that reach it. Small enough to spread a 20x20 layer over a few threads, large enough that the pool's
// hand-off per tile stays small against the loops.
#define CARVE_Q8_TASK_WORK 32768

#if defined(__GNUC__) && !defined(__clang__)
#define CARVE_Q8_VECTORIZE __attribute__((optimize("tree-loop-vectorize", "vect-cost-model=dynamic")))
// ... and for quantize, whose float compares GCC will not turn into masks while they could trap (-ftrapping-math,
// the default): no code here reads or enables floating-point exceptions, and every value is the same.
#define CARVE_Q8_VECTORIZE_FLOAT \
  __attribute__((optimize("tree-loop-vectorize", "vect-cost-model=dynamic", "no-trapping-math")))
#else
#define CARVE_Q8_VECTORIZE
#define CARVE_Q8_VECTORIZE_FLOAT
#endif

static size_t out_size(size_t in, size_t k, size_t stride, size_t pad) { return (in + 2 * pad - k) / stride + 1; }

static int8_t clamp8(int64_t v) { return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v); }

// arith.requantize + the zero point + clamp: clamp(zp + ((acc * m + 2^(n-1)) >> n)), in int64
// (|acc * m| < 2^62 and 2^(n-1) <= 2^61: no overflow).
static int8_t requantize(int32_t acc, int32_t m, int32_t n, int32_t zp) {
  const int64_t r = ((int64_t)acc * m + ((int64_t)1 << (n - 1))) >> n;
  return clamp8(zp + r);
}

// The [lo, hi) range of kernel taps k whose input o * s + k - pad lies in [0, in): taps outside
// the image are padding, skipped (they hold the input zero point: contribute 0).
static void tap_range(size_t o, size_t s, size_t pad, size_t k, size_t in, size_t* lo, size_t* hi) {
  const size_t first = o * s;  // input coordinate of tap 0, plus pad
  *lo = first < pad ? pad - first : 0;
  const size_t end = in + pad > first ? in + pad - first : 0;  // taps below this are inside
  *hi = end < k ? end : k;
}

// ---- CONV record ----------------------------------------------------------------

typedef carve_q8_conv_params conv_params;  // (carve_q8_isa.h)

static conv_params conv_record(const carve_q8_desc* d, const uint8_t* blob) {
  const uint8_t* rec = blob + d->weight_off;
  const size_t cout = d->cout;
  conv_params p;
  p.bias = (const int32_t*)(const void*)rec;
  p.mul = p.bias + cout;
  p.shift = p.mul + cout;
  p.w = (const int8_t*)(const void*)(rec + 3 * cout * sizeof(int32_t));
  p.lut = d->act == CARVE_ACT_SILU ? (const int8_t*)(const void*)(blob + d->lut_off) : NULL;
  return p;
}

// y = (lut ? lut[q + 128] : q) for q = requantize(acc + bias) of output channel o.
static int8_t conv_out(const conv_params* p, size_t o, int32_t acc, int32_t zp) {
  const int8_t q = requantize(acc + p->bias[o], p->mul[o], p->shift[o], zp);
  return p->lut != NULL ? p->lut[q + 128] : q;
}

// ---- Dense and grouped convolution ----------------------------------------------

// acc[o] += sum_{i < n} (x[i] - zx) * w[o][off + i] for the CARVE_Q8_OC weight rows w[0..CARVE_Q8_OC-1]:
// CARVE_Q8_OC dot products over one contiguous run of input channels (and, for a packed
// input, of consecutive kernel taps). The products fit int16; the sums are int32.
_Static_assert(CARVE_Q8_OC == 4, "dot_rows is written for 4 output channels");

CARVE_Q8_VECTORIZE static void dot_rows(const int8_t* restrict x, const int8_t* const w[CARVE_Q8_OC], size_t off,
                                        size_t n, int32_t zx, int32_t acc[CARVE_Q8_OC]) {
  const int8_t* restrict w0 = w[0] + off;
  const int8_t* restrict w1 = w[1] + off;
  const int8_t* restrict w2 = w[2] + off;
  const int8_t* restrict w3 = w[3] + off;
  const int16_t z = (int16_t)zx;
  int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i < n; i++) {
    const int16_t v = (int16_t)(x[i] - z);
    a0 += v * w0[i];
    a1 += v * w1[i];
    a2 += v * w2[i];
    a3 += v * w3[i];
  }
  acc[0] += a0;
  acc[1] += a1;
  acc[2] += a2;
  acc[3] += a3;
}

// Output rows [oy0, oy1); per group and block of CARVE_Q8_OC output channels, per output pixel:
//   acc[o] = sum over in-image taps (ky, kx) and i < cin/g of (x[iy][ix][g*cin_g + i] - zx) * W[o][ky][kx][i]
// With one group and a packed input (in_stride == cin), the in-image taps of one kernel row are
// consecutive pixels, so a kernel row is one dot product over (kx_hi - kx_lo) * cin channels.
static void conv_dense(const carve_q8_desc* d, const conv_params* p, const int8_t* x, int8_t* y, size_t oy0,
                       size_t oy1) {
  const size_t h = d->h, wd = d->w, k_h = d->kh, k_w = d->kw, s = d->stride, pad = d->pad;
  const size_t groups = d->groups, cin_g = d->cin / groups, cout_g = d->cout / groups;
  const size_t row = k_h * k_w * cin_g;  // weights of one output channel
  const size_t ow = out_size(wd, k_w, s, pad);
  const size_t in_stride = d->in_stride, out_stride = d->out_stride;
  const int packed = groups == 1 && in_stride == cin_g;
  const int32_t zx = d->in_zero, zy = d->out_zero;
  for (size_t g = 0; g < groups; g++) {
    for (size_t o0 = 0; o0 < cout_g; o0 += CARVE_Q8_OC) {
      const size_t co = g * cout_g + o0;  // first output channel of the block
      const size_t nc = cout_g - o0 < CARVE_Q8_OC ? cout_g - o0 : CARVE_Q8_OC;
      const int8_t* w[CARVE_Q8_OC];
      for (size_t o = 0; o < CARVE_Q8_OC; o++) {
        w[o] = p->w + (co + (o < nc ? o : 0)) * row;  // a short block repeats its first row
      }
      for (size_t oy = oy0; oy < oy1; oy++) {
        size_t ky0, ky1;
        tap_range(oy, s, pad, k_h, h, &ky0, &ky1);
        for (size_t ox = 0; ox < ow; ox++) {
          size_t kx0, kx1;
          tap_range(ox, s, pad, k_w, wd, &kx0, &kx1);
          int32_t acc[CARVE_Q8_OC] = {0};
          for (size_t ky = ky0; ky < ky1 && kx0 < kx1; ky++) {
            const int8_t* xr = x + ((oy * s + ky - pad) * wd + (ox * s + kx0 - pad)) * in_stride + g * cin_g;
            const size_t off = (ky * k_w + kx0) * cin_g;
            if (packed) {
              dot_rows(xr, w, off, (kx1 - kx0) * cin_g, zx, acc);
            } else {
              for (size_t kx = kx0; kx < kx1; kx++) {
                dot_rows(xr + (kx - kx0) * in_stride, w, off + (kx - kx0) * cin_g, cin_g, zx, acc);
              }
            }
          }
          int8_t* yp = y + (oy * ow + ox) * out_stride + co;
          for (size_t o = 0; o < nc; o++) {
            yp[o] = conv_out(p, co + o, acc[o], zy);
          }
        }
      }
    }
  }
}

// ---- Depthwise convolution --------------------------------------------------------

// acc[c] += (x[c] - zx) * w[c] for a full block of CARVE_Q8_DW_CH channels (a fixed trip count) ...
CARVE_Q8_VECTORIZE static void dw_tap_block(const int8_t* restrict x, const int8_t* restrict w, int32_t zx,
                                            int32_t* restrict acc) {
  const int16_t z = (int16_t)zx;
  for (size_t c = 0; c < CARVE_Q8_DW_CH; c++) {
    acc[c] += (int16_t)((int16_t)(x[c] - z) * w[c]);  // |product| <= 255 * 128: exact in int16
  }
}

// acc[c] += sum over the 3 taps t of (x_t[c] - zx) * w_t[c], for n channels: a kernel row of 3 in-image taps, so
// that acc is loaded and stored once per row (x_t = x + t * xs, w_t = w + t * ws).
CARVE_Q8_VECTORIZE static void dw_row3(const int8_t* restrict x, size_t xs, const int8_t* restrict w, size_t ws,
                                       int32_t zx, int32_t* restrict acc, size_t n) {
  const int16_t z = (int16_t)zx;
  const int8_t* restrict x0 = x;
  const int8_t* restrict x1 = x + xs;
  const int8_t* restrict x2 = x + 2 * xs;
  const int8_t* restrict w0 = w;
  const int8_t* restrict w1 = w + ws;
  const int8_t* restrict w2 = w + 2 * ws;
  for (size_t c = 0; c < n; c++) {
    acc[c] += (int16_t)((int16_t)(x0[c] - z) * w0[c]) + (int16_t)((int16_t)(x1[c] - z) * w1[c]) +
              (int16_t)((int16_t)(x2[c] - z) * w2[c]);
  }
}

// ... and for the last n < CARVE_Q8_DW_CH channels.
CARVE_Q8_VECTORIZE static void dw_tap_tail(const int8_t* restrict x, const int8_t* restrict w, int32_t zx,
                                           int32_t* restrict acc, size_t n) {
  const int16_t z = (int16_t)zx;
  for (size_t c = 0; c < n; c++) {
    acc[c] += (int16_t)((int16_t)(x[c] - z) * w[c]);
  }
}

// y[i] = conv_out(c0 + i, acc[i]) for i < n <= CARVE_Q8_DW_CH: the requantization in a loop of its own (it
// vectorises where the instruction set has 64-bit multiplies and shifts), then the table.
CARVE_Q8_VECTORIZE static void requant_block(const conv_params* p, size_t c0, const int32_t* restrict acc,
                                             int32_t zy, int8_t* restrict y, size_t n) {
  const int32_t* restrict bias = p->bias + c0;
  const int32_t* restrict mul = p->mul + c0;
  const int32_t* restrict shift = p->shift + c0;
  for (size_t i = 0; i < n; i++) {
    const int64_t v = ((int64_t)(acc[i] + bias[i]) * mul[i] + ((int64_t)1 << (shift[i] - 1))) >> shift[i];
    const int64_t q = zy + v;
    y[i] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
  }
  if (p->lut != NULL) {
    for (size_t i = 0; i < n; i++) {
      y[i] = p->lut[y[i] + 128];
    }
  }
}

// groups == cin == cout: y[oy][ox][c] = out(sum over in-image taps of (x[iy][ix][c] - zx) * W[ky][kx][c]),
// for output rows [oy0, oy1), per output pixel and block of CARVE_Q8_DW_CH channels (weights (kh, kw, c): each
// tap's channels contiguous).
static void conv_depthwise(const carve_q8_desc* d, const conv_params* p, const int8_t* x, int8_t* y, size_t oy0,
                           size_t oy1) {
  const size_t h = d->h, wd = d->w, c = d->cin, k_h = d->kh, k_w = d->kw, s = d->stride, pad = d->pad;
  const size_t ow = out_size(wd, k_w, s, pad);
  const int32_t zx = d->in_zero, zy = d->out_zero;
  for (size_t oy = oy0; oy < oy1; oy++) {
    size_t ky0, ky1;
    tap_range(oy, s, pad, k_h, h, &ky0, &ky1);
    for (size_t ox = 0; ox < ow; ox++) {
      size_t kx0, kx1;
      tap_range(ox, s, pad, k_w, wd, &kx0, &kx1);
      int8_t* yp = y + (oy * ow + ox) * d->out_stride;
      for (size_t c0 = 0; c0 < c; c0 += CARVE_Q8_DW_CH) {
        const size_t nc = c - c0 < CARVE_Q8_DW_CH ? c - c0 : CARVE_Q8_DW_CH;
        int32_t acc[CARVE_Q8_DW_CH] = {0};
        for (size_t ky = ky0; ky < ky1; ky++) {
          if (kx1 - kx0 == 3) {
            const int8_t* xp = x + ((oy * s + ky - pad) * wd + (ox * s + kx0 - pad)) * d->in_stride + c0;
            dw_row3(xp, d->in_stride, p->w + (ky * k_w + kx0) * c + c0, c, zx, acc, nc);
            continue;
          }
          for (size_t kx = kx0; kx < kx1; kx++) {
            const int8_t* xp = x + ((oy * s + ky - pad) * wd + (ox * s + kx - pad)) * d->in_stride + c0;
            const int8_t* wp = p->w + (ky * k_w + kx) * c + c0;
            if (nc == CARVE_Q8_DW_CH) {
              dw_tap_block(xp, wp, zx, acc);
            } else {
              dw_tap_tail(xp, wp, zx, acc, nc);
            }
          }
        }
        requant_block(p, c0, acc, zy, yp + c0, nc);
      }
    }
  }
}

static int is_depthwise(const carve_q8_desc* d) { return d->groups == d->cin && d->cin == d->cout; }

static void conv2d(const carve_q8_desc* d, const conv_params* p, const int8_t* x, int8_t* y, size_t oy0, size_t oy1) {
  if (is_depthwise(d)) {
    conv_depthwise(d, p, x, y, oy0, oy1);
  } else {
    conv_dense(d, p, x, y, oy0, oy1);
  }
}

// ---- Element-wise -----------------------------------------------------------------

// The pixels [px0, px1) of views with these pixel strides as runs of equal length: one run of
// (px1 - px0) * c elements when every view is packed (stride c), else a run of c per pixel. Returns the number
// of runs; *run is their length (the inner loops then vectorise over a whole packed tensor, whatever c).
static size_t runs_of(size_t c, int packed, size_t px0, size_t px1, size_t* run) {
  *run = packed ? (px1 - px0) * c : c;
  return packed ? 1 : px1 - px0;
}

// The requantization of ADD, arith.qadd: y = clamp(zy + (((a - za) ma + (b - zb) mb + 2^(n-1)) >> n)), two
// ways, the same value:
//   * add_i64: as written, in int64 (|(a - za) m| < 2^39); any ma, mb in [0, 2^31), n in [1, 62];
//   * add_i32: in int32, for n in [17, 47] and ma, mb < 2^31 - 2^15 (every add of the quantization pass: n is
//     30 - floor(log2(the larger scale ratio)), 17..47 for ratios in (2^-18, 2^14)), so that it vectorises on
//     every SIMD unit (the products are int16 x int16). With m = mh 2^16 + ml, mh = (m + 2^15) >> 16 in
//     [0, 2^15), ml in [-2^15, 2^15), A = a - za, B = b - zb in [-255, 255]: the sum is P 2^16 + Q + 2^(n-1),
//     P = A mah + B mbh (|P| < 2^24), Q = A mal + B mbl (|Q| < 2^24). With Q = Qh 2^16 + Ql, Qh = Q >> 16
//     (flooring), 0 <= Ql < 2^16, and 2^(n-1) = 2^(n-17) 2^16: sum = (P + Qh + 2^(n-17)) 2^16 + Ql, whose floor
//     division by 2^n is (P + Qh + 2^(n-17)) >> (n - 16) exactly (Ql cannot carry into 2^16); P + Qh + 2^(n-17)
//     < 2^24 + 2^8 + 2^30 fits int32, and n - 16 is in [1, 31].
CARVE_Q8_VECTORIZE static void add_i64(const carve_q8_desc* d, const int8_t* restrict a, const int8_t* restrict b,
                                       int8_t* restrict y, size_t runs, size_t run) {
  const int64_t ma = d->mul_a, mb = d->mul_b, rnd = (int64_t)1 << (d->shift - 1);
  const int32_t za = d->in_zero, zb = d->in2_zero, zy = d->out_zero, n = d->shift;
  for (size_t r = 0; r < runs; r++) {
    const int8_t* restrict ap = a + r * d->in_stride;
    const int8_t* restrict bp = b + r * d->in2_stride;
    int8_t* restrict yp = y + r * d->out_stride;
    for (size_t i = 0; i < run; i++) {
      const int64_t sum = (ap[i] - za) * ma + (bp[i] - zb) * mb + rnd;
      yp[i] = clamp8(zy + (sum >> n));
    }
  }
}

CARVE_Q8_VECTORIZE static void add_i32(const carve_q8_desc* d, const int8_t* restrict a, const int8_t* restrict b,
                                       int8_t* restrict y, size_t runs, size_t run) {
  const int16_t mah = (int16_t)((d->mul_a + (1 << 15)) >> 16), mbh = (int16_t)((d->mul_b + (1 << 15)) >> 16);
  const int16_t mal = (int16_t)(d->mul_a - mah * 65536), mbl = (int16_t)(d->mul_b - mbh * 65536);
  const int16_t za = (int16_t)d->in_zero, zb = (int16_t)d->in2_zero;
  const int32_t zy = d->out_zero, s = d->shift - 16, rnd = (int32_t)1 << (d->shift - 17);
  for (size_t r = 0; r < runs; r++) {
    const int8_t* restrict ap = a + r * d->in_stride;
    const int8_t* restrict bp = b + r * d->in2_stride;
    int8_t* restrict yp = y + r * d->out_stride;
    for (size_t i = 0; i < run; i++) {
      const int16_t av = (int16_t)(ap[i] - za), bv = (int16_t)(bp[i] - zb);
      const int32_t p = av * mah + bv * mbh;
      const int32_t q = av * mal + bv * mbl;
      const int32_t v = zy + ((p + (q >> 16) + rnd) >> s);
      yp[i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
    }
  }
}

// arith.qadd on pixels [px0, px1).
static void add(const carve_q8_desc* d, const int8_t* a, const int8_t* b, int8_t* y, size_t px0, size_t px1) {
  const size_t c = d->cin;
  size_t run;
  const size_t runs =
      runs_of(c, d->in_stride == c && d->in2_stride == c && d->out_stride == c, px0, px1, &run);
  a += px0 * d->in_stride;
  b += px0 * d->in2_stride;
  y += px0 * d->out_stride;
  if (carve_q8_add_i32_ok(d)) {  // (carve_q8_isa.h)
    add_i32(d, a, b, y, runs, run);
  } else {
    add_i64(d, a, b, y, runs, run);
  }
}

// y[p][0:c] = x[p][0:c] for pixels [px0, px1).
static void copy_channels(const carve_q8_desc* d, const int8_t* restrict x, int8_t* restrict y, size_t px0,
                          size_t px1) {
  size_t run;
  const size_t runs = runs_of(d->cin, d->in_stride == d->cin && d->out_stride == d->cin, px0, px1, &run);
  for (size_t r = 0; r < runs; r++) {
    memcpy(y + (px0 + r) * d->out_stride, x + (px0 + r) * d->in_stride, run);
  }
}

// y[2i + a][2j + b][c] = x[i][j][c] for a, b in {0, 1}, input rows i in [i0, i1).
static void upsample2x(const carve_q8_desc* d, const int8_t* restrict x, int8_t* restrict y, size_t i0,
                       size_t i1) {
  const size_t wd = d->w, c = d->cin, ow = 2 * wd;
  for (size_t i = i0; i < i1; i++) {
    for (size_t j = 0; j < wd; j++) {
      const int8_t* restrict xp = x + (i * wd + j) * d->in_stride;
      for (size_t a = 0; a < 2; a++) {
        for (size_t b = 0; b < 2; b++) {
          memcpy(y + ((2 * i + a) * ow + 2 * j + b) * d->out_stride, xp, c);
        }
      }
    }
  }
}

// ---- Pooling ----------------------------------------------------------------------

// y[oy][ox][c] = max over the in-image taps of the k x k window (padding never wins), output rows [oy0, oy1).
CARVE_Q8_VECTORIZE static void maxpool2d(const carve_q8_desc* d, const int8_t* restrict x, int8_t* restrict y,
                                         size_t oy0, size_t oy1) {
  const size_t h = d->h, wd = d->w, c = d->cin, k = d->kh, s = d->stride, pad = d->pad;
  const size_t ow = out_size(wd, k, s, pad);
  for (size_t oy = oy0; oy < oy1; oy++) {
    size_t ky0, ky1;
    tap_range(oy, s, pad, k, h, &ky0, &ky1);
    for (size_t ox = 0; ox < ow; ox++) {
      size_t kx0, kx1;
      tap_range(ox, s, pad, k, wd, &kx0, &kx1);
      int8_t* restrict yp = y + (oy * ow + ox) * d->out_stride;
      for (size_t ch = 0; ch < c; ch++) {
        yp[ch] = INT8_MIN;
      }
      for (size_t ky = ky0; ky < ky1; ky++) {
        for (size_t kx = kx0; kx < kx1; kx++) {
          const int8_t* restrict xp = x + ((oy * s + ky - pad) * wd + (ox * s + kx - pad)) * d->in_stride;
          for (size_t ch = 0; ch < c; ch++) {
            yp[ch] = xp[ch] > yp[ch] ? xp[ch] : yp[ch];
          }
        }
      }
    }
  }
}

// ---- Quantize / dequantize -----------------------------------------------------------

// ROUND_HALF_EVEN(v): rint(v), half to even, of a float32 |v| <= 512. v + 1.5 * 2^23 lies in [2^23, 2^24), where
// the float32 step is 1, so the sum is v rounded to an integer in the default rounding mode (to nearest, ties to
// even: the constant is even, so the sum's parity is the rounded value's), and subtracting the constant back is
// exact. The same value as nearbyintf(v), without the call: the loop vectorises (SSE2 has no rounding
// instruction, and nearbyintf keeps the floating-point environment). Needs float32 evaluation (FLT_EVAL_METHOD 0:
// SSE, NEON, the Cortex-M FPUs); elsewhere nearbyintf. (A macro: GCC does not inline a function into one with
// other optimize attributes.)
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
#define ROUND_HALF_EVEN(v) (((v) + 12582912.0f) - 12582912.0f)
#else
#define ROUND_HALF_EVEN(v) nearbyintf(v)
#endif

// arith.quantize: v = x / scale in float32; NaN -> 0, clamped to [-512, 512] (so +-inf -> +-512);
// q = clamp(rint(v) + zp), rint rounding half to even (ROUND_HALF_EVEN, in the default rounding mode); pixels
// [px0, px1).
CARVE_Q8_VECTORIZE_FLOAT static void quantize(const carve_q8_desc* d, const float* restrict x, int8_t* restrict y,
                                        size_t px0, size_t px1) {
  const float scale = d->scale;
  const int32_t zp = d->out_zero;
  size_t run;
  const size_t runs = runs_of(d->cin, d->in_stride == d->cin && d->out_stride == d->cin, px0, px1, &run);
  for (size_t r = 0; r < runs; r++) {
    const float* restrict xp = x + (px0 + r) * d->in_stride;
    int8_t* restrict yp = y + (px0 + r) * d->out_stride;
    for (size_t ch = 0; ch < run; ch++) {
      float v = xp[ch] / scale;
      v = v != v ? 0.0f : v;  // NaN
      v = v > 512.0f ? 512.0f : v < -512.0f ? -512.0f : v;
      const int32_t q = (int32_t)ROUND_HALF_EVEN(v) + zp;  // int32 throughout: the loop vectorises
      yp[ch] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
    }
  }
}

// arith.dequantize: y = (float)(q - zp) * scale, one float32 multiply; pixels [px0, px1).
CARVE_Q8_VECTORIZE static void dequantize(const carve_q8_desc* d, const int8_t* restrict x, float* restrict y,
                                          size_t px0, size_t px1) {
  const float scale = d->scale;
  const int32_t zp = d->in_zero;
  size_t run;
  const size_t runs = runs_of(d->cin, d->in_stride == d->cin && d->out_stride == d->cin, px0, px1, &run);
  for (size_t r = 0; r < runs; r++) {
    const int8_t* restrict xp = x + (px0 + r) * d->in_stride;
    float* restrict yp = y + (px0 + r) * d->out_stride;
    for (size_t ch = 0; ch < run; ch++) {
      yp[ch] = (float)(xp[ch] - zp) * scale;
    }
  }
}

// ---- Argument checks ----------------------------------------------------------------

static int is_zero_point(int32_t z) { return z >= -128 && z <= 127; }

static int is_aligned(const void* ptr) { return ((uintptr_t)ptr % CARVE_Q8_ALIGN) == 0; }

// A kernel of k taps with stride s and padding pad on an input of n: at least one output.
static int window_ok(uint32_t n, uint32_t k, uint32_t s, uint32_t pad) {
  return n > 0 && k > 0 && s > 0 && (uint64_t)n + 2 * (uint64_t)pad >= k;
}

static int valid_conv(const carve_q8_desc* d, const uint8_t* blob) {
  if (blob == NULL || d->groups == 0 || d->cin == 0 || d->cout == 0 || d->cin % d->groups != 0 ||
      d->cout % d->groups != 0 || !window_ok(d->h, d->kh, d->stride, d->pad) ||
      !window_ok(d->w, d->kw, d->stride, d->pad) || !is_zero_point(d->in_zero) || !is_zero_point(d->out_zero) ||
      (d->act != CARVE_ACT_NONE && d->act != CARVE_ACT_SILU) || !is_aligned(blob + d->weight_off)) {
    return 0;
  }
  // a depthwise input may be a channel slice; a dense one is read cin/groups channels per group
  if (d->in_stride < d->cin || d->out_stride < d->cout) {
    return 0;
  }
  const int32_t* shift = (const int32_t*)(const void*)(blob + d->weight_off) + 2 * (size_t)d->cout;
  for (size_t o = 0; o < d->cout; o++) {
    if (shift[o] < 1 || shift[o] > 62) {
      return 0;
    }
  }
  return 1;
}

static int valid_scale(float s) { return s > 0.0f && s <= FLT_MAX; }  // positive and finite (NaN fails)

// The per-pixel kinds: h * w pixels of cin channels.
static int valid_pixels(const carve_q8_desc* d) {
  return d->h > 0 && d->w > 0 && d->cin > 0 && d->in_stride >= d->cin && d->out_stride >= d->cin;
}

static int valid(const carve_q8_desc* d, const uint8_t* blob, const uint8_t* arena) {
  switch (d->kind) {
    case CARVE_Q8_CONV:
      return valid_conv(d, blob);
    case CARVE_Q8_ADD:
      return valid_pixels(d) && d->in2_stride >= d->cin && is_zero_point(d->in_zero) &&
             is_zero_point(d->in2_zero) && is_zero_point(d->out_zero) && d->shift >= 1 && d->shift <= 62;
    case CARVE_Q8_MAXPOOL:
      // PyTorch's rule pad <= k / 2: every window has an in-image tap
      return valid_pixels(d) && window_ok(d->h, d->kh, d->stride, d->pad) &&
             window_ok(d->w, d->kh, d->stride, d->pad) && 2 * (uint64_t)d->pad <= d->kh;
    case CARVE_Q8_COPY:
    case CARVE_Q8_UPSAMPLE2X:
      return valid_pixels(d);
    case CARVE_Q8_QUANTIZE:
      return valid_pixels(d) && is_zero_point(d->out_zero) && valid_scale(d->scale) &&
             is_aligned(arena + d->in_off);
    case CARVE_Q8_DEQUANTIZE:
      return valid_pixels(d) && is_zero_point(d->in_zero) && valid_scale(d->scale) &&
             is_aligned(arena + d->out_off);
  }
  return 0;  // an unknown kind
}

// ---- Items and dispatch ---------------------------------------------------------------

// The op's items (see the top of this file): output rows, input rows or pixels.
static size_t items(const carve_q8_desc* d) {
  switch (d->kind) {
    case CARVE_Q8_CONV:
    case CARVE_Q8_MAXPOOL:
      return out_size(d->h, d->kh, d->stride, d->pad);
    case CARVE_Q8_UPSAMPLE2X:
      return d->h;
    default:
      return (size_t)d->h * d->w;
  }
}

// Items per pool task: the fewest whole items holding CARVE_Q8_TASK_WORK of work (at least one).
static size_t tile_items(const carve_q8_desc* d) {
  size_t work;  // per item
  switch (d->kind) {
    case CARVE_Q8_CONV:
      work = out_size(d->w, d->kw, d->stride, d->pad) * d->cout * d->kh * d->kw * (d->cin / d->groups);
      break;
    case CARVE_Q8_MAXPOOL:
      work = out_size(d->w, d->kh, d->stride, d->pad) * d->cin * d->kh * d->kh;
      break;
    case CARVE_Q8_UPSAMPLE2X:
      work = 4 * (size_t)d->w * d->cin;
      break;
    default:
      work = d->cin;
      break;
  }
  const size_t tile = CARVE_Q8_TASK_WORK / (work > 0 ? work : 1);
  return tile > 0 ? tile : 1;
}

// One op, checked, with its views resolved: the context of every tile (carve_q8_isa.h).
typedef carve_q8_task q8_task;

static q8_task make_task(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena) {
  q8_task t;
  memset(&t, 0, sizeof t);
  t.d = d;
  if (d->kind == CARVE_Q8_CONV) {
    t.p = conv_record(d, blob);
  }
  t.x = arena + d->in_off;
  t.x2 = arena + d->in2_off;
  t.y = arena + d->out_off;
  return t;
}

// Items [start, start + count) of the task's op (a carve_task_1d_tile_t).
static void run_items(void* context, size_t start, size_t count) {
  const q8_task* t = (const q8_task*)context;
  const carve_q8_desc* d = t->d;
  const size_t end = start + count;
  const int8_t* x = (const int8_t*)(const void*)t->x;
  int8_t* y = (int8_t*)(void*)t->y;
  switch (d->kind) {
    case CARVE_Q8_CONV:
      conv2d(d, &t->p, x, y, start, end);
      break;
    case CARVE_Q8_ADD:
      add(d, x, (const int8_t*)(const void*)t->x2, y, start, end);
      break;
    case CARVE_Q8_MAXPOOL:
      maxpool2d(d, x, y, start, end);
      break;
    case CARVE_Q8_COPY:
      copy_channels(d, x, y, start, end);
      break;
    case CARVE_Q8_UPSAMPLE2X:
      upsample2x(d, x, y, start, end);
      break;
    case CARVE_Q8_QUANTIZE:
      quantize(d, (const float*)(const void*)t->x, y, start, end);
      break;
    case CARVE_Q8_DEQUANTIZE:
      dequantize(d, x, (float*)(void*)t->y, start, end);
      break;
  }
}

carve_status carve_q8_run(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena) {
  if (d == NULL || arena == NULL || !valid(d, blob, arena)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const q8_task t = make_task(d, blob, arena);
  run_items((void*)&t, 0, items(d));
  return CARVE_OK;
}

carve_status carve_q8_run_pool_loops(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                     pthreadpool_t pool, const carve_q8_isa_loops* loops) {
  if (d == NULL || arena == NULL || !valid(d, blob, arena)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const q8_task t = make_task(d, blob, arena);
  const carve_task_1d_tile_t fn = loops != NULL && loops->takes(d) ? loops->items : run_items;
  carve_parallelize_1d_tile(pool, fn, (void*)&t, items(d), tile_items(d));
  return CARVE_OK;
}

carve_status carve_q8_run_pool(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool) {
  return carve_q8_run_pool_loops(d, blob, arena, pool, NULL);
}
