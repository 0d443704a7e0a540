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
static void letterbox_geometry(int src_w, int src_h, int out_w, int out_h,
                               carve_letterbox_info* info) {
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
  return (size_t)out_w * 9 * sizeof(int32_t);
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
  letterbox_geometry(src_w, src_h, out_w, out_h, &geo);
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
