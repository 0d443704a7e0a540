// carve runtime: letterbox and box scaling (see carve_pre.h).
//
// The resize reproduces OpenCV's cv::resize(INTER_LINEAR) for 8-bit images as
// Ultralytics calls it (opencv-python 4.x/5.x, x86 SIMD build):
//   * scale = 1 / (dst / src), both as double;
//   * source coordinate f = (float)((d + 0.5) * scale - 0.5), s = floor(f), f -= s;
//   * coefficients (1 - f, f) in float, times 2048 (INTER_RESIZE_COEF_BITS = 11),
//     rounded half to even to integers;
//   * horizontally, s < 0 or s >= src_w - 1 clamps to one tap (f = 0), and the
//     pass writes exact integers S = a0 * p[s] + a1 * p[s + 1];
//   * vertically f is NOT reset at the borders, the row indices s and s + 1 are
//     clamped to [0, src_h - 1] instead, and the pass is the SIMD one
//     (VResizeLinearVec_32s8u): v = ((S0 >> 4) * b0 >> 16) + ((S1 >> 4) * b1 >> 16),
//     out = saturate_u8((v + 2) >> 2). This truncates differently from the
//     scalar (S0 * b0 + S1 * b1 + 2^21) >> 22, which OpenCV does not use here.
// tests/runtime/letterbox_vs_cv2.py checks the result against cv2 bit for bit.

#include "carve_pre.h"

#include <math.h>
#include <string.h>

#include "carve_pre_math.h"  // the arithmetic shared with carve_cuda_pre.cu

// The letterbox's vertical pass is compiled for AVX-512, AVX2 and the baseline,
// the loader picking the best (target_clones, as in the kernel families, carve_simd.h); integer and
// single float operations only, so every clone gives the same bits.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define CARVE_PRE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef CARVE_PRE_SIMD_CLONES
#define CARVE_PRE_SIMD_CLONES
#endif

// ---- Geometry ---------------------------------------------------------------

// LetterBox.get_params with auto=False, scaleup=True, center=True; the same
// numbers ops.scale_boxes recomputes from the two shapes.
carve_status carve_letterbox_geometry(int src_w, int src_h, int out_w, int out_h,
                                      carve_letterbox_info* info) {
  if (info == NULL || out_w <= 0 || out_h <= 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (src_w <= 0 || src_h <= 0) {
    return CARVE_ERR_BAD_IMAGE;
  }
  const double r_h = (double)out_h / (double)src_h;
  const double r_w = (double)out_w / (double)src_w;
  const double r = r_w < r_h ? r_w : r_h;
  const double new_w = fmax(carve_pre_round_half_even((double)src_w * r), 1.0);
  const double new_h = fmax(carve_pre_round_half_even((double)src_h * r), 1.0);
  info->gain = (float)r;
  info->new_w = (int)new_w;
  info->new_h = (int)new_h;
  info->pad_x = (float)carve_pre_round_half_even((out_w - new_w) / 2.0 - 0.1);
  info->pad_y = (float)carve_pre_round_half_even((out_h - new_h) / 2.0 - 0.1);
  info->src_w = src_w;
  info->src_h = src_h;
  info->gain_x = (float)(new_w / (double)src_w);
  info->gain_y = (float)(new_h / (double)src_h);
  return CARVE_OK;
}

// ---- Resize (cv::resize INTER_LINEAR, uint8) --------------------------------

typedef struct resize_plan {
  int32_t* xofs;   // (new_w) leftmost source column of each output column
  int32_t* xcoef;  // (new_w, 2) horizontal coefficients a0, a1 (sum 2048)
  int32_t* rows;   // (CARVE_LETTERBOX_BANDS, 2, new_w * 3) horizontally resized source rows, two per band
} resize_plan;

// Horizontal pass of one source row: S[dx][ch] = a0 * p[sx][ch] + a1 * p[sx + 1][ch].
static void resize_row_h(const uint8_t* src, int src_w, int new_w, const resize_plan* plan,
                         int32_t* dst) {
  for (int dx = 0; dx < new_w; dx++) {
    const int sx = plan->xofs[dx];
    const uint8_t* p0 = src + (size_t)sx * 3;
    const uint8_t* p1 = sx + 1 < src_w ? p0 + 3 : p0;  // a1 == 0 when clamped
    const int32_t a0 = plan->xcoef[2 * (size_t)dx];
    const int32_t a1 = plan->xcoef[2 * (size_t)dx + 1];
    for (int ch = 0; ch < 3; ch++) {
      dst[(size_t)dx * 3 + ch] = a0 * p0[ch] + a1 * p1[ch];
    }
  }
}

// Vertical pass and conversion of one output row: d[i] = v / 255 in float with v
// the resized byte of the two horizontally resized source rows (the division is
// the expression of the uint8 -> float table, so the same bits; being
// arithmetic rather than a table lookup, the loop vectorises).
CARVE_PRE_SIMD_CLONES static void resize_row_v(const int32_t* s0, const int32_t* s1, int32_t b0,
                                               int32_t b1, size_t n, float* d) {
  for (size_t i = 0; i < n; i++) {
    // carve_pre_resize_v with its clamp as min / max, which the vectoriser takes
    // (tests/runtime/letterbox_vs_cv2.py: bit-exact against cv2.resize).
    int32_t v = ((((s0[i] >> 4) * b0) >> 16) + (((s1[i] >> 4) * b1) >> 16) + 2) >> 2;
    v = v < 0 ? 0 : v;
    v = v > 255 ? 255 : v;
    d[i] = (float)v / 255.0f;
  }
}

// The same vertical pass for an int8 output: d[i] = v - 128 (carve_pre.h: arith.quantize of v / 255.0f at
// scale 1/255, zero point -128, exactly).
CARVE_PRE_SIMD_CLONES static void resize_row_v_q8(const int32_t* s0, const int32_t* s1, int32_t b0,
                                                  int32_t b1, size_t n, int8_t* d) {
  for (size_t i = 0; i < n; i++) {
    int32_t v = ((((s0[i] >> 4) * b0) >> 16) + (((s1[i] >> 4) * b1) >> 16) + 2) >> 2;
    v = v < 0 ? 0 : v;
    v = v > 255 ? 255 : v;
    d[i] = (int8_t)(v + CARVE_PRE_Q8_ZERO);
  }
}

// Fills xofs / xcoef for src_w -> new_w columns.
static void resize_plan_columns(int src_w, int new_w, resize_plan* plan) {
  const double scale_x = carve_pre_resize_scale(src_w, new_w);
  for (int dx = 0; dx < new_w; dx++) {
    carve_pre_resize_column(dx, src_w, scale_x, &plan->xofs[dx], &plan->xcoef[2 * (size_t)dx],
                            &plan->xcoef[2 * (size_t)dx + 1]);
  }
}

// ---- Letterbox --------------------------------------------------------------

size_t carve_letterbox_scratch_bytes(int out_w, int out_h) {
  if (out_w <= 0 || out_h <= 0) {
    return 0;
  }
  // xofs (w) + xcoef (2w) + per band two rows (2 * 3w) int32.
  return CARVE_LETTERBOX_SCRATCH_BYTES(out_w, out_h);
}

typedef struct letterbox_ctx {
  const uint8_t* rgb;
  size_t src_stride;
  int src_w, src_h, out_h, new_w, new_h, left, top;
  size_t out_row;     // values per output row
  float* out;         // (out_h, out_w, 3) float32, or NULL for
  int8_t* out_q8;     // (out_h, out_w, 3) int8 (carve_letterbox_q8)
  float pad;          // the border value, 114 / 255
  resize_plan plan;   // xofs, xcoef; rows: CARVE_LETTERBOX_BANDS pairs of rows
  double scale_y;
  const float* to_float;  // uint8 -> float / 255 (256 entries)
} letterbox_ctx;

// Values [i0, i1) of output row y set to the border (114 / 255, or 114 - 128 in int8).
static void fill_border(const letterbox_ctx* c, int y, size_t i0, size_t i1) {
  const size_t at = (size_t)y * c->out_row;
  if (c->out_q8 != NULL) {
    memset(c->out_q8 + at + i0, (uint8_t)(int8_t)(CARVE_PRE_LETTERBOX_PAD + CARVE_PRE_Q8_ZERO), i1 - i0);
    return;
  }
  for (size_t i = i0; i < i1; i++) {
    c->out[at + i] = c->pad;
  }
}

// Output rows [y0, y1): the border, then the image region of those rows (copied
// when the size does not change, else resized with two cached source rows).
static void letterbox_rows(const letterbox_ctx* c, int y0, int y1, int32_t* rows) {
  const size_t out_row = c->out_row;
  for (int y = y0; y < y1; y++) {
    if (y < c->top || y >= c->top + c->new_h) {
      fill_border(c, y, 0, out_row);
      continue;
    }
    fill_border(c, y, 0, (size_t)c->left * 3);
    fill_border(c, y, (size_t)(c->left + c->new_w) * 3, out_row);
  }
  // The image rows dy of these output rows: (new_h, new_w, 3) at (top, left).
  const int d0 = y0 - c->top < 0 ? 0 : y0 - c->top;
  const int d1 = y1 - c->top > c->new_h ? c->new_h : y1 - c->top;
  const size_t at = (size_t)c->top * out_row + (size_t)c->left * 3;  // of image row 0
  const size_t n = (size_t)c->new_w * 3;
  if (c->new_w == c->src_w && c->new_h == c->src_h) {
    for (int y = d0; y < d1; y++) {
      const uint8_t* s = c->rgb + (size_t)y * c->src_stride;
      if (c->out_q8 != NULL) {
        int8_t* d = c->out_q8 + at + (size_t)y * out_row;
        for (size_t i = 0; i < n; i++) {
          d[i] = (int8_t)((int32_t)s[i] + CARVE_PRE_Q8_ZERO);
        }
      } else {
        float* d = c->out + at + (size_t)y * out_row;
        for (size_t i = 0; i < n; i++) {
          d[i] = c->to_float[s[i]];
        }
      }
    }
    return;
  }
  int32_t* cache[2] = {rows, rows + n};
  int cached[2] = {-1, -1};  // source row held by each cache slot
  for (int dy = d0; dy < d1; dy++) {
    int32_t sy0, sy1, b0, b1;
    carve_pre_resize_row(dy, c->src_h, c->scale_y, &sy0, &sy1, &b0, &b1);
    // Horizontal pass of rows sy0 and sy1 (equal or adjacent), cached in slot row % 2.
    const int32_t* s[2];
    const int want[2] = {sy0, sy1};
    for (int k = 0; k < 2; k++) {
      const int slot = want[k] & 1;
      if (cached[slot] != want[k]) {
        resize_row_h(c->rgb + (size_t)want[k] * c->src_stride, c->src_w, c->new_w, &c->plan, cache[slot]);
        cached[slot] = want[k];
      }
      s[k] = cache[slot];
    }
    if (c->out_q8 != NULL) {
      resize_row_v_q8(s[0], s[1], b0, b1, n, c->out_q8 + at + (size_t)dy * out_row);
    } else {
      resize_row_v(s[0], s[1], b0, b1, n, c->out + at + (size_t)dy * out_row);
    }
  }
}

// Bands [start, start + count) of CARVE_LETTERBOX_BANDS, each with its own row cache.
static void letterbox_task(void* context, size_t start, size_t count) {
  const letterbox_ctx* c = context;
  for (size_t b = start; b < start + count; b++) {
    const int y0 = (int)((size_t)c->out_h * b / CARVE_LETTERBOX_BANDS);
    const int y1 = (int)((size_t)c->out_h * (b + 1) / CARVE_LETTERBOX_BANDS);
    letterbox_rows(c, y0, y1, c->plan.rows + b * 2 * (size_t)c->new_w * 3);
  }
}

// carve_letterbox into out_f (float32) or, when out_f is NULL, into out_q (int8).
static carve_status letterbox_to(const uint8_t* rgb, int src_w, int src_h, size_t src_stride_bytes, int out_w,
                                 int out_h, float* out_f, int8_t* out_q, void* scratch, carve_letterbox_info* info,
                                 pthreadpool_t pool) {
  if (rgb == NULL || (out_f == NULL && out_q == NULL) || scratch == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if ((uintptr_t)scratch % _Alignof(int32_t) != 0 || out_w <= 0 || out_h <= 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (src_w <= 0 || src_h <= 0 || src_stride_bytes < (size_t)src_w * 3) {
    return CARVE_ERR_BAD_IMAGE;
  }

  carve_letterbox_info geo;
  const carve_status status = carve_letterbox_geometry(src_w, src_h, out_w, out_h, &geo);
  if (status != CARVE_OK) {
    return status;
  }

  // uint8 -> float / 255, as im.float() / 255 in float32.
  float to_float[256];
  for (int v = 0; v < 256; v++) {
    to_float[v] = (float)v / 255.0f;
  }
  int32_t* base = scratch;
  letterbox_ctx ctx = {rgb, src_stride_bytes, src_w, src_h, out_h, geo.new_w, geo.new_h, (int)geo.pad_x,
                       (int)geo.pad_y, (size_t)out_w * 3, out_f, out_f == NULL ? out_q : NULL,
                       to_float[CARVE_PRE_LETTERBOX_PAD], {base, base + geo.new_w, base + 3 * (size_t)geo.new_w},
                       carve_pre_resize_scale(src_h, geo.new_h), to_float};
  if (geo.new_w != src_w || geo.new_h != src_h) {
    resize_plan_columns(src_w, geo.new_w, &ctx.plan);
  }
  carve_parallelize_1d_tile(pool, letterbox_task, &ctx, CARVE_LETTERBOX_BANDS, 1);

  if (info != NULL) {
    *info = geo;
  }
  return CARVE_OK;
}

carve_status carve_letterbox(const uint8_t* rgb, int src_w, int src_h, size_t src_stride_bytes,
                             int out_w, int out_h, float* out_nhwc, void* scratch,
                             carve_letterbox_info* info, pthreadpool_t pool) {
  if (out_nhwc == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  return letterbox_to(rgb, src_w, src_h, src_stride_bytes, out_w, out_h, out_nhwc, NULL, scratch, info, pool);
}

carve_status carve_letterbox_q8(const uint8_t* rgb, int src_w, int src_h, size_t src_stride_bytes,
                                int out_w, int out_h, int8_t* out_nhwc, void* scratch,
                                carve_letterbox_info* info, pthreadpool_t pool) {
  if (out_nhwc == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  return letterbox_to(rgb, src_w, src_h, src_stride_bytes, out_w, out_h, NULL, out_nhwc, scratch, info, pool);
}

// ---- int8 input from a float32 tensor ----------------------------------------

// arith.quantize(x, CARVE_PRE_Q8_SCALE, CARVE_PRE_Q8_ZERO): v = x / scale in float32, NaN -> 0, clamped to
// [-512, 512]; q = clamp(rint(v) + zp), rint half to even (nearbyintf in the default rounding mode), as
// CARVE_Q8_QUANTIZE computes it.
static int8_t quantize_input(float x) {
  float v = x / CARVE_PRE_Q8_SCALE;
  v = v != v ? 0.0f : v;
  v = v > 512.0f ? 512.0f : v < -512.0f ? -512.0f : v;
  const int32_t q = (int32_t)nearbyintf(v) + CARVE_PRE_Q8_ZERO;
  return (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
}

carve_status carve_nchw_to_nhwc_q8(const float* x, size_t c, size_t h, size_t w, int8_t* y) {
  if (x == NULL || y == NULL || c == 0 || h == 0 || w == 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t pixels = h * w;
  for (size_t ch = 0; ch < c; ch++) {
    const float* xc = x + ch * pixels;
    for (size_t p = 0; p < pixels; p++) {
      y[p * c + ch] = quantize_input(xc[p]);
    }
  }
  return CARVE_OK;
}

// ---- Classification (torchvision Resize on a PIL image + CenterCrop) -------
//
// Pillow's Image.resize(BILINEAR) (src/libImaging/Resample.c), for one axis of
// `in` source pixels resampled to `out`:
//   scale = in / out, filterscale = max(scale, 1), support = filterscale (the
//   triangle's support is 1), ksize = ceil(support) * 2 + 1 slots per output;
//   output xx is centred at center = (xx + 0.5) * scale and reads source pixels
//   [xmin, xmin + n) with xmin = max((int)(center - support + 0.5), 0) and
//   xmin + n = min((int)(center + support + 0.5), in) ((int) truncates);
//   weight of pixel xmin + x: tri(((xmin + x) - center + 0.5) / filterscale),
//   tri(t) = max(1 - |t|, 0), divided by the sum of the weights, then as
//   fixed point (int)(w * 2^22 +- 0.5) (rounded away from zero);
//   a pass sums pixel * weight in int from 2^21 and keeps clamp(sum >> 22, 0, 255).
// The horizontal pass runs first (on the rows the vertical pass reads), its
// uint8 result feeds the vertical one; an axis whose size does not change is not
// resampled at all. All the doubles are computed in Pillow's order, each operation
// rounded (carve_pre_math.h, shared with carve_cuda_pre.cu).

// Bounds (xmin, n) and fixed-point weights (ksize per output) of outputs
// [first, first + count) of an in -> out axis.
static void pil_axis_coeffs(int in, int out, int first, int count, int ksize, int32_t* bounds,
                            int32_t* kk) {
  for (int i = 0; i < count; i++) {
    carve_pre_pil_coeffs(in, out, first + i, bounds + 2 * (size_t)i, kk + (size_t)i * (size_t)ksize);
  }
}

size_t carve_classify_scratch_bytes(int w, int h, int out) {
  return carve_pre_classify_scratch_bytes(w, h, out);
}

typedef struct classify_ctx {
  const carve_pre_classify_plan* p;
  const uint8_t* rgb;
  size_t stride;
  int out, y_lo;
  const int32_t *xb, *xk, *yb, *yk;
  uint8_t* rows;          // (y_hi - y_lo, out, 3): the horizontal pass
  const uint8_t* src;     // what the vertical pass reads: rows, or the source image
  size_t src_stride, src_x;
  float* out_nhwc;        // float32 output, or NULL for
  int8_t* out_q8;         // int8 output (carve_classify_preprocess_q8)
} classify_ctx;

// Horizontal pass of source rows [y_lo + start, y_lo + start + count).
static void classify_rows_h(void* context, size_t start, size_t count) {
  const classify_ctx* c = context;
  for (size_t r = start; r < start + count; r++) {
    const uint8_t* in = c->rgb + (size_t)(c->y_lo + (int)r) * c->stride;
    uint8_t* o = c->rows + r * (size_t)c->out * 3;
    for (int x = 0; x < c->out; x++) {
      carve_pre_pil_hpixel(in, c->xb[2 * (size_t)x], c->xb[2 * (size_t)x + 1],
                           c->xk + (size_t)x * (size_t)c->p->ksize_x, o + 3 * (size_t)x);
    }
  }
}

// Vertical pass (or the crop) and the conversion to float (value / 255) or int8 (value - 128) of output rows
// [start, start + count).
static void classify_rows_v(void* context, size_t start, size_t count) {
  const classify_ctx* c = context;
  const size_t n = (size_t)c->out * 3;
  for (size_t yy = start; yy < start + count; yy++) {
    float* o = c->out_nhwc != NULL ? c->out_nhwc + yy * n : NULL;
    int8_t* o8 = c->out_q8 != NULL ? c->out_q8 + yy * n : NULL;
    if (c->p->resize_y) {
      const int32_t ymin = c->yb[2 * yy], taps = c->yb[2 * yy + 1];
      const int32_t* k = c->yk + yy * (size_t)c->p->ksize_y;
      const uint8_t* col = c->src + (size_t)(ymin - c->y_lo) * c->src_stride + c->src_x * 3;
      if (o8 != NULL) {
        for (size_t i = 0; i < n; i++) {
          o8[i] = (int8_t)((int32_t)carve_pre_pil_vvalue(col + i, c->src_stride, taps, k) + CARVE_PRE_Q8_ZERO);
        }
      } else {
        for (size_t i = 0; i < n; i++) {
          o[i] = (float)carve_pre_pil_vvalue(col + i, c->src_stride, taps, k) / 255.0f;
        }
      }
    } else {
      const uint8_t* row = c->src + (size_t)(c->p->top + (int)yy - c->y_lo) * c->src_stride + c->src_x * 3;
      if (o8 != NULL) {
        for (size_t i = 0; i < n; i++) {
          o8[i] = (int8_t)((int32_t)row[i] + CARVE_PRE_Q8_ZERO);
        }
      } else {
        for (size_t i = 0; i < n; i++) {
          o[i] = (float)row[i] / 255.0f;
        }
      }
    }
  }
}

// carve_classify_preprocess into out_f (float32) or, when out_f is NULL, into out_q (int8).
static carve_status classify_to(const uint8_t* rgb, int w, int h, size_t stride, int out, float* out_f,
                                int8_t* out_q, void* scratch, pthreadpool_t pool) {
  carve_pre_classify_plan p;
  carve_pre_classify_scratch sc;
  const void* dst = out_f != NULL ? (const void*)out_f : (const void*)out_q;
  const carve_status status = carve_pre_classify_prepare(rgb, w, h, stride, out, dst, scratch, &p, &sc);
  if (status != CARVE_OK) {
    return status;
  }
  int32_t *xb = sc.xb, *xk = sc.xk, *yb = sc.yb, *yk = sc.yk;
  if (p.resize_x) {
    pil_axis_coeffs(w, p.new_w, p.left, out, p.ksize_x, xb, xk);
  }
  if (p.resize_y) {
    pil_axis_coeffs(h, p.new_h, p.top, out, p.ksize_y, yb, yk);
  }

  // Source rows the vertical pass (or the crop) reads: [y_lo, y_hi).
  const int y_lo = p.resize_y ? yb[0] : p.top;
  const int y_hi = p.resize_y ? yb[2 * (size_t)(out - 1)] + yb[2 * (size_t)(out - 1) + 1]
                              : p.top + out;

  // After the horizontal pass: row y of the source (y_lo <= y < y_hi), output
  // column x at src + (y - y_lo) * src_stride + (x + src_x) * 3. Both passes are
  // split by rows over the pool; each row is computed alone, so the bits do not
  // depend on the number of threads.
  classify_ctx ctx = {&p, rgb, stride, out, y_lo, xb, xk, yb, yk, sc.rows, rgb + (size_t)y_lo * stride, stride,
                      (size_t)p.left, out_f, out_f == NULL ? out_q : NULL};
  if (p.resize_x) {
    carve_parallelize_1d_tile(pool, classify_rows_h, &ctx, (size_t)(y_hi - y_lo), 8);
    ctx.src = sc.rows;
    ctx.src_stride = (size_t)out * 3;
    ctx.src_x = 0;
  }
  carve_parallelize_1d_tile(pool, classify_rows_v, &ctx, (size_t)out, 8);
  return CARVE_OK;
}

carve_status carve_classify_preprocess(const uint8_t* rgb, int w, int h, size_t stride, int out,
                                       float* out_nhwc, void* scratch, pthreadpool_t pool) {
  if (out_nhwc == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  return classify_to(rgb, w, h, stride, out, out_nhwc, NULL, scratch, pool);
}

carve_status carve_classify_preprocess_q8(const uint8_t* rgb, int w, int h, size_t stride, int out,
                                          int8_t* out_nhwc, void* scratch, pthreadpool_t pool) {
  if (out_nhwc == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  return classify_to(rgb, w, h, stride, out, NULL, out_nhwc, scratch, pool);
}

// ---- Box scaling ------------------------------------------------------------

// clamp(v, lo, hi) that keeps NaN, as torch.clamp_ does.
static float clamp_keep_nan(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

carve_status carve_scale_boxes_xyxy(float* rows, size_t n, size_t row_stride,
                            const carve_letterbox_info* info) {
  if (rows == NULL || info == NULL || (n > 0 && row_stride < 4)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const float w = (float)info->src_w, h = (float)info->src_h;
  for (size_t i = 0; i < n; i++) {
    float* b = rows + i * row_stride;
    b[0] = clamp_keep_nan((b[0] - info->pad_x) / info->gain_x, 0.0f, w);
    b[1] = clamp_keep_nan((b[1] - info->pad_y) / info->gain_y, 0.0f, h);
    b[2] = clamp_keep_nan((b[2] - info->pad_x) / info->gain_x, 0.0f, w);
    b[3] = clamp_keep_nan((b[3] - info->pad_y) / info->gain_y, 0.0f, h);
  }  return CARVE_OK;
}

carve_status carve_scale_coords(float* coords, size_t n, size_t stride, const carve_letterbox_info* info) {
  if (coords == NULL || info == NULL || (n > 0 && stride < 2)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const float w = (float)info->src_w, h = (float)info->src_h;
  for (size_t i = 0; i < n; i++) {
    float* p = coords + i * stride;
    p[0] = clamp_keep_nan((p[0] - info->pad_x) / info->gain_x, 0.0f, w);
    p[1] = clamp_keep_nan((p[1] - info->pad_y) / info->gain_y, 0.0f, h);
  }  return CARVE_OK;
}

carve_status carve_scale_boxes_xywhr(float* rows, size_t n, size_t row_stride,
                             const carve_letterbox_info* info) {
  if (rows == NULL || info == NULL || (n > 0 && row_stride < 4)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < n; i++) {
    float* b = rows + i * row_stride;
    b[0] = (b[0] - info->pad_x) / info->gain_x;
    b[1] = (b[1] - info->pad_y) / info->gain_y;
    b[2] = b[2] / info->gain_x;
    b[3] = b[3] / info->gain_y;
  }  return CARVE_OK;
}
