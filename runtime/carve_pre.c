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

#define CARVE_RESIZE_COEF_SCALE 2048.0f  // 1 << INTER_RESIZE_COEF_BITS
#define CARVE_LETTERBOX_PAD 114

// ---- Rounding ---------------------------------------------------------------

// Python's round(x): nearest integer, ties to even (independent of fenv).
static double round_half_even(double x) {
  const double f = floor(x);
  const double frac = x - f;  // exact
  if (frac > 0.5) {
    return f + 1.0;
  }
  if (frac < 0.5) {
    return f;
  }
  return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

// OpenCV's saturate_cast<short>(v * 2048) for v in [0, 1]: round half to even.
static int32_t resize_coef(float v) {
  return (int32_t)round_half_even((double)(v * CARVE_RESIZE_COEF_SCALE));
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// OpenCV's source coordinate (float)((d + 0.5) * scale - 0.5), rounded after each
// operation as OpenCV's own build does: the volatile keeps a compiler allowed to
// contract (-ffp-contract=fast, the GNU C default) from fusing them into an FMA.
static float resize_src_coord(int d, double scale) {
  volatile double t = ((double)d + 0.5) * scale;
  return (float)(t - 0.5);
}

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
  const double new_w = fmax(round_half_even((double)src_w * r), 1.0);
  const double new_h = fmax(round_half_even((double)src_h * r), 1.0);
  info->gain = (float)r;
  info->new_w = (int)new_w;
  info->new_h = (int)new_h;
  info->pad_x = (float)round_half_even((out_w - new_w) / 2.0 - 0.1);
  info->pad_y = (float)round_half_even((out_h - new_h) / 2.0 - 0.1);
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
  int32_t* rows;   // (2, new_w * 3) horizontally resized source rows
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

// Vertical pass, OpenCV's SIMD arithmetic: ((S0>>4)*b0>>16) + ((S1>>4)*b1>>16), then (v+2)>>2.
static uint8_t resize_v(int32_t s0, int32_t s1, int32_t b0, int32_t b1) {
  const int32_t v = (((s0 >> 4) * b0) >> 16) + (((s1 >> 4) * b1) >> 16);
  const int32_t out = (v + 2) >> 2;
  return (uint8_t)(out < 0 ? 0 : (out > 255 ? 255 : out));
}

// Fills xofs / xcoef for src_w -> new_w columns.
static void resize_plan_columns(int src_w, int new_w, resize_plan* plan) {
  const double scale_x = 1.0 / ((double)new_w / (double)src_w);
  for (int dx = 0; dx < new_w; dx++) {
    float fx = resize_src_coord(dx, scale_x);
    int sx = (int)floorf(fx);
    fx -= (float)sx;
    if (sx < 0) {
      fx = 0.0f;
      sx = 0;
    }
    if (sx >= src_w - 1) {
      fx = 0.0f;
      sx = src_w - 1;
    }
    plan->xofs[dx] = sx;
    plan->xcoef[2 * (size_t)dx] = resize_coef(1.0f - fx);
    plan->xcoef[2 * (size_t)dx + 1] = resize_coef(fx);
  }
}

// ---- Letterbox --------------------------------------------------------------

size_t carve_letterbox_scratch_bytes(int out_w, int out_h) {
  if (out_w <= 0 || out_h <= 0) {
    return 0;
  }
  // xofs (w) + xcoef (2w) + two rows (2 * 3w) int32.
  return CARVE_LETTERBOX_SCRATCH_BYTES(out_w, out_h);
}

carve_status carve_letterbox(const uint8_t* rgb, int src_w, int src_h, size_t src_stride_bytes,
                             int out_w, int out_h, float* out_nhwc, void* scratch,
                             carve_letterbox_info* info) {
  if (rgb == NULL || out_nhwc == NULL || scratch == NULL) {
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
  const int new_w = geo.new_w, new_h = geo.new_h;
  const int left = (int)geo.pad_x, top = (int)geo.pad_y;

  // uint8 -> float / 255, as im.float() / 255 in float32.
  float to_float[256];
  for (int v = 0; v < 256; v++) {
    to_float[v] = (float)v / 255.0f;
  }
  const float pad = to_float[CARVE_LETTERBOX_PAD];

  const size_t out_row = (size_t)out_w * 3;  // floats per output row
  for (int y = 0; y < out_h; y++) {
    float* row = out_nhwc + (size_t)y * out_row;
    if (y < top || y >= top + new_h) {
      for (size_t i = 0; i < out_row; i++) {
        row[i] = pad;
      }
      continue;
    }
    for (size_t i = 0; i < (size_t)left * 3; i++) {
      row[i] = pad;
    }
    for (size_t i = (size_t)(left + new_w) * 3; i < out_row; i++) {
      row[i] = pad;
    }
  }

  // The image region: (new_h, new_w, 3) at (top, left).
  float* dst = out_nhwc + (size_t)top * out_row + (size_t)left * 3;
  if (new_w == src_w && new_h == src_h) {
    for (int y = 0; y < new_h; y++) {
      const uint8_t* s = rgb + (size_t)y * src_stride_bytes;
      float* d = dst + (size_t)y * out_row;
      for (size_t i = 0; i < (size_t)new_w * 3; i++) {
        d[i] = to_float[s[i]];
      }
    }
  } else {
    int32_t* base = scratch;
    resize_plan plan = {base, base + new_w, base + 3 * (size_t)new_w};
    int32_t* cache[2] = {plan.rows, plan.rows + 3 * (size_t)new_w};
    int cached[2] = {-1, -1};  // source row held by each cache slot
    resize_plan_columns(src_w, new_w, &plan);

    const double scale_y = 1.0 / ((double)new_h / (double)src_h);
    for (int dy = 0; dy < new_h; dy++) {
      float fy = resize_src_coord(dy, scale_y);
      const int sy = (int)floorf(fy);
      fy -= (float)sy;
      const int32_t b0 = resize_coef(1.0f - fy), b1 = resize_coef(fy);
      const int y0 = clamp_int(sy, 0, src_h - 1), y1 = clamp_int(sy + 1, 0, src_h - 1);

      // Horizontal pass of rows y0 and y1 (equal or adjacent), cached in slot row % 2.
      const int32_t* s[2];
      const int want[2] = {y0, y1};
      for (int k = 0; k < 2; k++) {
        const int slot = want[k] & 1;
        if (cached[slot] != want[k]) {
          resize_row_h(rgb + (size_t)want[k] * src_stride_bytes, src_w, new_w, &plan, cache[slot]);
          cached[slot] = want[k];
        }
        s[k] = cache[slot];
      }

      float* d = dst + (size_t)dy * out_row;
      for (size_t i = 0; i < (size_t)new_w * 3; i++) {
        d[i] = to_float[resize_v(s[0][i], s[1][i], b0, b1)];
      }
    }
  }

  if (info != NULL) {
    *info = geo;
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
// resampled at all. All the doubles are computed in Pillow's order; none of its
// expressions can be changed by FMA contraction (the only product-plus-sum,
// w * 2^22 + 0.5, multiplies by a power of two).

#define CARVE_PIL_PRECISION_BITS 22

// Resized (w, h) for Resize(out): torchvision's _compute_resized_output_size.
static void classify_resized_size(int w, int h, int out, int* new_w, int* new_h) {
  const int64_t shorter = w <= h ? w : h, longer = w <= h ? h : w;
  const int new_long = (int)((double)((int64_t)out * longer) / (double)shorter);
  *new_w = w <= h ? out : new_long;
  *new_h = w <= h ? new_long : out;
}

static double pil_scale(int in, int out) { return (double)(float)in / (double)out; }

static int pil_ksize(int in, int out) {
  const double scale = pil_scale(in, out);
  const double support = scale < 1.0 ? 1.0 : scale;
  return (int)ceil(support) * 2 + 1;
}

static double pil_triangle(double x) {
  if (x < 0.0) {
    x = -x;
  }
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Bounds (xmin, n) and fixed-point weights (ksize per output) of outputs
// [first, first + count) of an in -> out axis.
static void pil_axis_coeffs(int in, int out, int first, int count, int ksize, int32_t* bounds,
                            int32_t* kk) {
  const double scale = pil_scale(in, out);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  const double ss = 1.0 / filterscale;
  for (int i = 0; i < count; i++) {
    const int xx = first + i;
    const double center = 0.0 + (xx + 0.5) * scale;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0) {
      xmin = 0;
    }
    int xmax = (int)(center + support + 0.5);
    if (xmax > in) {
      xmax = in;
    }
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) {
      ww += pil_triangle((x + xmin - center + 0.5) * ss);
    }
    int32_t* k = kk + (size_t)i * (size_t)ksize;
    for (int x = 0; x < xmax; x++) {
      double wgt = pil_triangle((x + xmin - center + 0.5) * ss);
      if (ww != 0.0) {
        wgt /= ww;
      }
      k[x] = wgt < 0 ? (int32_t)(-0.5 + wgt * (1 << CARVE_PIL_PRECISION_BITS))
                     : (int32_t)(0.5 + wgt * (1 << CARVE_PIL_PRECISION_BITS));
    }
    bounds[2 * i] = xmin;
    bounds[2 * i + 1] = xmax;
  }
}

// Pillow's clip8: the fixed-point sum to a byte.
static uint8_t pil_clip8(int32_t ss) {
  const int32_t v = ss >> CARVE_PIL_PRECISION_BITS;  // arithmetic shift, as Pillow's
  return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

typedef struct classify_plan {
  int new_w, new_h, top, left;
  int resize_x, resize_y;  // the axis is resampled
  int ksize_x, ksize_y;
} classify_plan;

static void classify_plan_of(int w, int h, int out, classify_plan* p) {
  classify_resized_size(w, h, out, &p->new_w, &p->new_h);
  p->top = (int)round_half_even((p->new_h - out) / 2.0);
  p->left = (int)round_half_even((p->new_w - out) / 2.0);
  p->resize_x = p->new_w != w;
  p->resize_y = p->new_h != h;
  p->ksize_x = p->resize_x ? pil_ksize(w, p->new_w) : 0;
  p->ksize_y = p->resize_y ? pil_ksize(h, p->new_h) : 0;
}

size_t carve_classify_scratch_bytes(int w, int h, int out) {
  if (w <= 0 || h <= 0 || out <= 0) {
    return 0;
  }
  classify_plan p;
  classify_plan_of(w, h, out, &p);
  // Bounds and weights of both axes, then up to h horizontally resampled rows.
  const size_t coeffs = (size_t)out * (size_t)(4 + p.ksize_x + p.ksize_y);
  const size_t rows = p.resize_x ? (size_t)h * (size_t)out * 3 : 0;
  return coeffs * sizeof(int32_t) + rows;
}

carve_status carve_classify_preprocess(const uint8_t* rgb, int w, int h, size_t stride, int out,
                                       float* out_nhwc, void* scratch) {
  if (rgb == NULL || out_nhwc == NULL || scratch == NULL || out <= 0 ||
      (uintptr_t)scratch % _Alignof(int32_t) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (w <= 0 || h <= 0 || stride < (size_t)w * 3) {
    return CARVE_ERR_BAD_IMAGE;
  }
  classify_plan p;
  classify_plan_of(w, h, out, &p);

  int32_t* xb = scratch;                                   // (out, 2) column bounds
  int32_t* xk = xb + 2 * (size_t)out;                      // (out, ksize_x)
  int32_t* yb = xk + (size_t)out * (size_t)p.ksize_x;      // (out, 2) row bounds
  int32_t* yk = yb + 2 * (size_t)out;                      // (out, ksize_y)
  uint8_t* rows = (uint8_t*)(yk + (size_t)out * (size_t)p.ksize_y);  // (ny, out, 3)
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
  // column x at src + (y - y_lo) * src_stride + (x + src_x) * 3.
  const uint8_t* src = rgb + (size_t)y_lo * stride;
  size_t src_stride = stride;
  size_t src_x = (size_t)p.left;
  if (p.resize_x) {
    for (int y = y_lo; y < y_hi; y++) {
      const uint8_t* in = rgb + (size_t)y * stride;
      uint8_t* o = rows + (size_t)(y - y_lo) * (size_t)out * 3;
      for (int x = 0; x < out; x++) {
        const int32_t xmin = xb[2 * (size_t)x], n = xb[2 * (size_t)x + 1];
        const int32_t* k = xk + (size_t)x * (size_t)p.ksize_x;
        int32_t s0 = 1 << (CARVE_PIL_PRECISION_BITS - 1), s1 = s0, s2 = s0;
        for (int32_t i = 0; i < n; i++) {
          const uint8_t* px = in + (size_t)(xmin + i) * 3;
          s0 += px[0] * k[i];
          s1 += px[1] * k[i];
          s2 += px[2] * k[i];
        }
        o[3 * (size_t)x] = pil_clip8(s0);
        o[3 * (size_t)x + 1] = pil_clip8(s1);
        o[3 * (size_t)x + 2] = pil_clip8(s2);
      }
    }
    src = rows;
    src_stride = (size_t)out * 3;
    src_x = 0;
  }

  for (int yy = 0; yy < out; yy++) {
    float* o = out_nhwc + (size_t)yy * (size_t)out * 3;
    if (p.resize_y) {
      const int32_t ymin = yb[2 * (size_t)yy], n = yb[2 * (size_t)yy + 1];
      const int32_t* k = yk + (size_t)yy * (size_t)p.ksize_y;
      for (size_t i = 0; i < (size_t)out * 3; i++) {
        int32_t s = 1 << (CARVE_PIL_PRECISION_BITS - 1);
        for (int32_t j = 0; j < n; j++) {
          s += src[(size_t)(ymin + j - y_lo) * src_stride + src_x * 3 + i] * k[j];
        }
        o[i] = (float)pil_clip8(s) / 255.0f;
      }
    } else {
      const uint8_t* row = src + (size_t)(p.top + yy - y_lo) * src_stride + src_x * 3;
      for (size_t i = 0; i < (size_t)out * 3; i++) {
        o[i] = (float)row[i] / 255.0f;
      }
    }
  }
  return CARVE_OK;
}

// ---- Box scaling ------------------------------------------------------------

// clamp(v, lo, hi) that keeps NaN, as torch.clamp_ does.
static float clamp_keep_nan(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

void carve_scale_boxes_xyxy(float* rows, size_t n, size_t row_stride,
                            const carve_letterbox_info* info) {
  if (rows == NULL || info == NULL) {
    return;
  }
  const float w = (float)info->src_w, h = (float)info->src_h;
  for (size_t i = 0; i < n; i++) {
    float* b = rows + i * row_stride;
    b[0] = clamp_keep_nan((b[0] - info->pad_x) / info->gain_x, 0.0f, w);
    b[1] = clamp_keep_nan((b[1] - info->pad_y) / info->gain_y, 0.0f, h);
    b[2] = clamp_keep_nan((b[2] - info->pad_x) / info->gain_x, 0.0f, w);
    b[3] = clamp_keep_nan((b[3] - info->pad_y) / info->gain_y, 0.0f, h);
  }
}

void carve_scale_coords(float* coords, size_t n, size_t stride, const carve_letterbox_info* info) {
  if (coords == NULL || info == NULL) {
    return;
  }
  const float w = (float)info->src_w, h = (float)info->src_h;
  for (size_t i = 0; i < n; i++) {
    float* p = coords + i * stride;
    p[0] = clamp_keep_nan((p[0] - info->pad_x) / info->gain_x, 0.0f, w);
    p[1] = clamp_keep_nan((p[1] - info->pad_y) / info->gain_y, 0.0f, h);
  }
}

void carve_scale_boxes_xywhr(float* rows, size_t n, size_t row_stride,
                             const carve_letterbox_info* info) {
  if (rows == NULL || info == NULL) {
    return;
  }
  for (size_t i = 0; i < n; i++) {
    float* b = rows + i * row_stride;
    b[0] = (b[0] - info->pad_x) / info->gain_x;
    b[1] = (b[1] - info->pad_y) / info->gain_y;
    b[2] = b[2] / info->gain_x;
    b[3] = b[3] / info->gain_y;
  }
}
