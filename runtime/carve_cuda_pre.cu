// carve runtime, CUDA: letterbox and classification pre-processing on the device,
// bit-identical to carve_pre.c (read that file for where each formula comes from).
//
// The integer arithmetic is the same; the few double and float expressions that feed it
// are written with __dmul_rn / __dadd_rn / __dsub_rn so that nvcc cannot contract them into
// FMAs (the CPU code keeps them apart the same way), and the coefficient tables are
// computed on the device by one thread per output column / row.

#include "carve_cuda_impl.h"

#define CARVE_CU_LETTERBOX_PAD 114
#define CARVE_CU_PIL_PRECISION_BITS 22

// ---- Letterbox (cv::resize INTER_LINEAR, uint8) ----------------------------------------

// OpenCV's source coordinate (float)((d + 0.5) * scale - 0.5), each operation rounded.
static __device__ __forceinline__ float carve_cu_resize_src_coord(int d, double scale) {
  const double t = __dmul_rn((double)d + 0.5, scale);
  return (float)__dsub_rn(t, 0.5);
}

// saturate_cast<short>(v * 2048) for v in [0, 1]: round half to even.
static __device__ __forceinline__ int32_t carve_cu_resize_coef(float v) {
  return (int32_t)carve_cu_round_half_even((double)(v * 2048.0f));
}

extern "C" size_t carve_cu_letterbox_scratch_bytes(int src_w, int src_h, int out_w, int out_h) {
  (void)src_w;
  (void)src_h;
  if (out_w <= 0 || out_h <= 0) {
    return 0;
  }
  // Columns: xofs, a0, a1 (new_w <= out_w); rows: y0, y1, b0, b1 (new_h <= out_h); int32.
  return ((size_t)out_w * 3 + (size_t)out_h * 4) * sizeof(int32_t);
}

// Column plan: for dx < new_w, xofs[dx] = sx and (a0, a1) with the border clamp of
// resize_plan_columns; row plan: for dy < new_h, the clamped rows (y0, y1) and (b0, b1)
// (f not reset at the borders, the vertical pass' rule).
__global__ void carve_cu_letterbox_plan_kernel(int src_w, int src_h, int new_w, int new_h, int32_t* __restrict__ cols,
                                               int32_t* __restrict__ rows) {
  const double scale_x = 1.0 / ((double)new_w / (double)src_w);
  const double scale_y = 1.0 / ((double)new_h / (double)src_h);
  CARVE_CU_FOR(i, (size_t)new_w + (size_t)new_h) {
    if (i < (size_t)new_w) {
      const int dx = (int)i;
      float fx = carve_cu_resize_src_coord(dx, scale_x);
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
      cols[3 * i] = sx;
      cols[3 * i + 1] = carve_cu_resize_coef(1.0f - fx);
      cols[3 * i + 2] = carve_cu_resize_coef(fx);
    } else {
      const int dy = (int)(i - (size_t)new_w);
      float fy = carve_cu_resize_src_coord(dy, scale_y);
      const int sy = (int)floorf(fy);
      fy -= (float)sy;
      int32_t* r = rows + 4 * (size_t)dy;
      r[0] = sy < 0 ? 0 : (sy > src_h - 1 ? src_h - 1 : sy);
      r[1] = sy + 1 < 0 ? 0 : (sy + 1 > src_h - 1 ? src_h - 1 : sy + 1);
      r[2] = carve_cu_resize_coef(1.0f - fy);
      r[3] = carve_cu_resize_coef(fy);
    }
  }
}

// out[y][x][ch] = 114 / 255 outside the image region at (top, left); inside it, the
// source byte (no resize) or the resized one:
//   S_r = a0 p[y_r][sx][ch] + a1 p[y_r][sx + 1][ch]   (r = 0, 1; sx + 1 clamped)
//   v = ((S_0 >> 4) b0 >> 16) + ((S_1 >> 4) b1 >> 16), byte = clamp((v + 2) >> 2, 0, 255),
// then byte / 255.0f.
__global__ void carve_cu_letterbox_kernel(const uint8_t* __restrict__ rgb, int src_w, size_t src_stride, int new_w,
                                          int new_h, int left, int top, int resize, int out_w, int out_h,
                                          const int32_t* __restrict__ cols, const int32_t* __restrict__ rows,
                                          float* __restrict__ out) {
  CARVE_CU_FOR(e, (size_t)out_w * out_h * 3) {
    const size_t p = e / 3, ch = e % 3;
    const int y = (int)(p / (size_t)out_w), x = (int)(p % (size_t)out_w);
    const int dy = y - top, dx = x - left;
    int byte;
    if (dy < 0 || dy >= new_h || dx < 0 || dx >= new_w) {
      byte = CARVE_CU_LETTERBOX_PAD;
    } else if (!resize) {
      byte = rgb[(size_t)dy * src_stride + (size_t)dx * 3 + ch];
    } else {
      const int32_t sx = cols[3 * (size_t)dx], a0 = cols[3 * (size_t)dx + 1], a1 = cols[3 * (size_t)dx + 2];
      const int32_t* r = rows + 4 * (size_t)dy;
      const size_t c0 = (size_t)sx * 3 + ch, c1 = (sx + 1 < src_w ? (size_t)(sx + 1) : (size_t)sx) * 3 + ch;
      const uint8_t* p0 = rgb + (size_t)r[0] * src_stride;
      const uint8_t* p1 = rgb + (size_t)r[1] * src_stride;
      const int32_t s0 = a0 * p0[c0] + a1 * p0[c1];
      const int32_t s1 = a0 * p1[c0] + a1 * p1[c1];
      const int32_t v = (((s0 >> 4) * r[2]) >> 16) + (((s1 >> 4) * r[3]) >> 16);
      const int32_t o = (v + 2) >> 2;
      byte = o < 0 ? 0 : (o > 255 ? 255 : o);
    }
    out[e] = (float)byte / 255.0f;
  }
}

extern "C" carve_status carve_cu_letterbox(const carve_cu_ctx* ctx, const uint8_t* rgb, int src_w, int src_h,
                                           size_t src_stride_bytes, const carve_letterbox_info* info, int out_w,
                                           int out_h, float* out, void* scratch) {
  if (ctx == NULL || rgb == NULL || info == NULL || out == NULL || scratch == NULL || out_w <= 0 || out_h <= 0 ||
      (uintptr_t)scratch % sizeof(int32_t) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (src_w <= 0 || src_h <= 0 || src_stride_bytes < (size_t)src_w * 3) {
    return CARVE_ERR_BAD_IMAGE;
  }
  // The geometry must be the one of these sizes (carve_letterbox_geometry).
  const int left = (int)info->pad_x, top = (int)info->pad_y;
  if (info->src_w != src_w || info->src_h != src_h || info->new_w <= 0 || info->new_h <= 0 ||
      info->new_w > out_w || info->new_h > out_h || left < 0 || top < 0 || left + info->new_w > out_w ||
      top + info->new_h > out_h) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  int32_t* cols = (int32_t*)scratch;              // (new_w, 3) xofs, a0, a1
  int32_t* rows = cols + 3 * (size_t)out_w;       // (new_h, 4) y0, y1, b0, b1
  const int resize = info->new_w != src_w || info->new_h != src_h;
  if (resize) {
    CARVE_LAUNCH(carve_cu_letterbox_plan_kernel, carve_cu_blocks((size_t)info->new_w + info->new_h), CARVE_CU_THREADS,
                 ctx->stream, src_w, src_h, info->new_w, info->new_h, cols, rows);
    CARVE_CU_CHECK_LAUNCH();
  }
  CARVE_LAUNCH(carve_cu_letterbox_kernel, carve_cu_blocks((size_t)out_w * out_h * 3), CARVE_CU_THREADS, ctx->stream,
               rgb, src_w, src_stride_bytes, info->new_w, info->new_h, left, top, resize, out_w, out_h,
               (const int32_t*)cols, (const int32_t*)rows, out);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- Classification (Pillow BILINEAR resize + centre crop) --------------------------------

typedef struct cls_plan {
  int new_w, new_h, top, left;
  int resize_x, resize_y;
  int ksize_x, ksize_y;
} cls_plan;

static double pil_scale(int in, int out) { return (double)(float)in / (double)out; }

static int pil_ksize(int in, int out) {
  const double scale = pil_scale(in, out);
  const double support = scale < 1.0 ? 1.0 : scale;
  return (int)ceil(support) * 2 + 1;
}

// carve_pre.c's classify_plan_of: torchvision's resized size, the crop offsets, the kernels.
static void cls_plan_of(int w, int h, int out, cls_plan* p) {
  const int64_t shorter = w <= h ? w : h, longer = w <= h ? h : w;
  const int new_long = (int)((double)((int64_t)out * longer) / (double)shorter);
  p->new_w = w <= h ? out : new_long;
  p->new_h = w <= h ? new_long : out;
  p->top = (int)carve_cu_round_half_even((p->new_h - out) / 2.0);
  p->left = (int)carve_cu_round_half_even((p->new_w - out) / 2.0);
  p->resize_x = p->new_w != w;
  p->resize_y = p->new_h != h;
  p->ksize_x = p->resize_x ? pil_ksize(w, p->new_w) : 0;
  p->ksize_y = p->resize_y ? pil_ksize(h, p->new_h) : 0;
}

extern "C" size_t carve_cu_classify_scratch_bytes(int w, int h, int out) {
  if (w <= 0 || h <= 0 || out <= 0) {
    return 0;
  }
  cls_plan p;
  cls_plan_of(w, h, out, &p);
  // Bounds and weights of both axes (int32), then h horizontally resampled rows (uint8),
  // indexed by source row.
  const size_t coeffs = (size_t)out * (size_t)(4 + p.ksize_x + p.ksize_y);
  const size_t rows = p.resize_x ? (size_t)h * (size_t)out * 3 : 0;
  return coeffs * sizeof(int32_t) + rows;
}

static __device__ __forceinline__ double carve_cu_pil_triangle(double x) {
  if (x < 0.0) {
    x = -x;
  }
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's precompute_coeffs for outputs [first, first + count) of an in -> out axis (one
// thread per output): bounds (xmin, n) and ksize fixed-point weights
//   w_x = tri(((xmin + x) - center + 0.5) / filterscale) / sum, as (int)(w 2^22 +- 0.5).
__global__ void carve_cu_pil_coeffs_kernel(int in, int out, int first, int count, int ksize, int32_t* __restrict__ bounds,
                                           int32_t* __restrict__ kk) {
  const double scale = (double)(float)in / (double)out;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  const double ss = 1.0 / filterscale;
  CARVE_CU_FOR(i, (size_t)count) {
    const int xx = first + (int)i;
    const double center = __dadd_rn(0.0, __dmul_rn(xx + 0.5, scale));
    int xmin = (int)__dadd_rn(__dsub_rn(center, support), 0.5);
    if (xmin < 0) {
      xmin = 0;
    }
    int xmax = (int)__dadd_rn(__dadd_rn(center, support), 0.5);
    if (xmax > in) {
      xmax = in;
    }
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) {
      ww = __dadd_rn(ww, carve_cu_pil_triangle(__dmul_rn(__dadd_rn(__dsub_rn((double)(x + xmin), center), 0.5), ss)));
    }
    int32_t* k = kk + i * (size_t)ksize;
    for (int x = 0; x < xmax; x++) {
      double wgt = carve_cu_pil_triangle(__dmul_rn(__dadd_rn(__dsub_rn((double)(x + xmin), center), 0.5), ss));
      if (ww != 0.0) {
        wgt /= ww;
      }
      k[x] = wgt < 0 ? (int32_t)__dadd_rn(-0.5, __dmul_rn(wgt, (double)(1 << CARVE_CU_PIL_PRECISION_BITS)))
                     : (int32_t)__dadd_rn(0.5, __dmul_rn(wgt, (double)(1 << CARVE_CU_PIL_PRECISION_BITS)));
    }
    bounds[2 * i] = xmin;
    bounds[2 * i + 1] = xmax;
  }
}

// Pillow's clip8.
static __device__ __forceinline__ uint8_t carve_cu_pil_clip8(int32_t ss) {
  const int32_t v = ss >> CARVE_CU_PIL_PRECISION_BITS;
  return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Horizontal pass of the source rows the vertical pass reads, [yb[0], yb[last] + n_last)
// (or the crop rows [top, top + out) when y is not resampled):
//   rows[y][x][ch] = clip8(2^21 + sum_i p[y][xmin_x + i][ch] k_x[i]).
__global__ void carve_cu_pil_hpass_kernel(const uint8_t* __restrict__ rgb, size_t stride, int h, int out,
                                          int resize_y, int top, const int32_t* __restrict__ xb,
                                          const int32_t* __restrict__ xk, int ksize_x, const int32_t* __restrict__ yb,
                                          uint8_t* __restrict__ rows) {
  const int y_lo = resize_y ? yb[0] : top;
  const int y_hi = resize_y ? yb[2 * (size_t)(out - 1)] + yb[2 * (size_t)(out - 1) + 1] : top + out;
  CARVE_CU_FOR(e, (size_t)h * out) {
    const int y = (int)(e / (size_t)out), x = (int)(e % (size_t)out);
    if (y < y_lo || y >= y_hi) {
      continue;
    }
    const uint8_t* in = rgb + (size_t)y * stride;
    const int32_t xmin = xb[2 * (size_t)x], n = xb[2 * (size_t)x + 1];
    const int32_t* k = xk + (size_t)x * (size_t)ksize_x;
    int32_t s0 = 1 << (CARVE_CU_PIL_PRECISION_BITS - 1), s1 = s0, s2 = s0;
    for (int32_t i = 0; i < n; i++) {
      const uint8_t* px = in + (size_t)(xmin + i) * 3;
      s0 += px[0] * k[i];
      s1 += px[1] * k[i];
      s2 += px[2] * k[i];
    }
    uint8_t* o = rows + e * 3;
    o[0] = carve_cu_pil_clip8(s0);
    o[1] = carve_cu_pil_clip8(s1);
    o[2] = carve_cu_pil_clip8(s2);
  }
}

// Vertical pass (or the crop) and /255: out[yy][i] = clip8(2^21 + sum_j src[ymin + j][i] k_y[j]) / 255,
// src being the horizontally resampled rows or the source at column offset `left`.
__global__ void carve_cu_pil_vpass_kernel(const uint8_t* __restrict__ src, size_t src_stride, size_t src_x, int out,
                                          int resize_y, int top, const int32_t* __restrict__ yb,
                                          const int32_t* __restrict__ yk, int ksize_y, float* __restrict__ o) {
  const size_t row = (size_t)out * 3;
  CARVE_CU_FOR(e, (size_t)out * row) {
    const size_t yy = e / row, i = e % row;
    int byte;
    if (resize_y) {
      const int32_t ymin = yb[2 * yy], n = yb[2 * yy + 1];
      const int32_t* k = yk + yy * (size_t)ksize_y;
      int32_t s = 1 << (CARVE_CU_PIL_PRECISION_BITS - 1);
      for (int32_t j = 0; j < n; j++) {
        s += src[(size_t)(ymin + j) * src_stride + src_x * 3 + i] * k[j];
      }
      byte = carve_cu_pil_clip8(s);
    } else {
      byte = src[(size_t)(top + (int)yy) * src_stride + src_x * 3 + i];
    }
    o[e] = (float)byte / 255.0f;
  }
}

extern "C" carve_status carve_cu_classify_preprocess(const carve_cu_ctx* ctx, const uint8_t* rgb, int w, int h,
                                                     size_t stride, int out, float* out_nhwc, void* scratch) {
  if (ctx == NULL || rgb == NULL || out_nhwc == NULL || scratch == NULL || out <= 0 ||
      (uintptr_t)scratch % sizeof(int32_t) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (w <= 0 || h <= 0 || stride < (size_t)w * 3) {
    return CARVE_ERR_BAD_IMAGE;
  }
  cls_plan p;
  cls_plan_of(w, h, out, &p);
  int32_t* xb = (int32_t*)scratch;                            // (out, 2) column bounds
  int32_t* xk = xb + 2 * (size_t)out;                         // (out, ksize_x)
  int32_t* yb = xk + (size_t)out * (size_t)p.ksize_x;         // (out, 2) row bounds
  int32_t* yk = yb + 2 * (size_t)out;                         // (out, ksize_y)
  uint8_t* rows = (uint8_t*)(yk + (size_t)out * (size_t)p.ksize_y);  // (h, out, 3) by source row
  if (p.resize_x) {
    CARVE_LAUNCH(carve_cu_pil_coeffs_kernel, carve_cu_blocks((size_t)out), CARVE_CU_THREADS, ctx->stream, w, p.new_w,
                 p.left, out, p.ksize_x, xb, xk);
    CARVE_CU_CHECK_LAUNCH();
  }
  if (p.resize_y) {
    CARVE_LAUNCH(carve_cu_pil_coeffs_kernel, carve_cu_blocks((size_t)out), CARVE_CU_THREADS, ctx->stream, h, p.new_h,
                 p.top, out, p.ksize_y, yb, yk);
    CARVE_CU_CHECK_LAUNCH();
  }
  const uint8_t* src = rgb;
  size_t src_stride = stride, src_x = (size_t)p.left;
  if (p.resize_x) {
    CARVE_LAUNCH(carve_cu_pil_hpass_kernel, carve_cu_blocks((size_t)h * out), CARVE_CU_THREADS, ctx->stream, rgb,
                 stride, h, out, p.resize_y, p.top, (const int32_t*)xb, (const int32_t*)xk, p.ksize_x,
                 (const int32_t*)yb, rows);
    CARVE_CU_CHECK_LAUNCH();
    src = rows;
    src_stride = (size_t)out * 3;
    src_x = 0;
  }
  CARVE_LAUNCH(carve_cu_pil_vpass_kernel, carve_cu_blocks((size_t)out * out * 3), CARVE_CU_THREADS, ctx->stream, src,
               src_stride, src_x, out, p.resize_y, p.top, (const int32_t*)yb, (const int32_t*)yk, p.ksize_y,
               out_nhwc);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}
