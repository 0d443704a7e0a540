// carve runtime, CUDA: letterbox and classification pre-processing on the device,
// bit-identical to carve_pre.c (read that file for where each formula comes from).
//
// The arithmetic is carve_pre.c's own: both use the helpers of carve_pre_math.h, where the
// double and float expressions that feed the integer passes are written so that nvcc cannot
// contract them into FMAs (__dmul_rn / __dadd_rn / __dsub_rn / __fmul_rn on the device). The
// coefficient tables are computed on the device by one thread per output column / row.

#include "carve_cuda_impl.h"
#include "carve_pre_math.h"

// ---- Letterbox (cv::resize INTER_LINEAR, uint8) ----------------------------------------

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
  CARVE_CU_KERNEL_ENTRY();
  const double scale_x = carve_pre_resize_scale(src_w, new_w);
  const double scale_y = carve_pre_resize_scale(src_h, new_h);
  CARVE_CU_FOR(i, (size_t)new_w + (size_t)new_h) {
    if (i < (size_t)new_w) {
      carve_pre_resize_column((int)i, src_w, scale_x, &cols[3 * i], &cols[3 * i + 1], &cols[3 * i + 2]);
    } else {
      int32_t* r = rows + 4 * (i - (size_t)new_w);
      carve_pre_resize_row((int)(i - (size_t)new_w), src_h, scale_y, &r[0], &r[1], &r[2], &r[3]);
    }
  }
}

// out[y][x][ch] = 114 / 255 outside the image region at (top, left); inside it, the
// source byte (no resize) or the resized one:
//   S_r = a0 p[y_r][sx][ch] + a1 p[y_r][sx + 1][ch]   (r = 0, 1; sx + 1 clamped)
//   v = ((S_0 >> 4) b0 >> 16) + ((S_1 >> 4) b1 >> 16), byte = clamp((v + 2) >> 2, 0, 255),
// then byte / 255.0f, stored as T (float, or __half for an fp16 package's input: that float rounded once to
// nearest even, as carve_cu_f32_to_f16 rounds it). One thread per output pixel (its 3 channels share the
// column and row coefficients), 32-bit indices (out_w out_h < 2^31: checked by the caller).
template <typename T>
__global__ void carve_cu_letterbox_kernel(const uint8_t* __restrict__ rgb, int src_w, size_t src_stride, int new_w,
                                          int new_h, int left, int top, int resize, int out_w, int out_h,
                                          const int32_t* __restrict__ cols, const int32_t* __restrict__ rows,
                                          T* __restrict__ out) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR32(p, (uint32_t)out_w * (uint32_t)out_h) {
    const int y = (int)(p / (uint32_t)out_w), x = (int)(p - (uint32_t)y * (uint32_t)out_w);
    const int dy = y - top, dx = x - left;
    int byte[3];
    if (dy < 0 || dy >= new_h || dx < 0 || dx >= new_w) {
      for (int ch = 0; ch < 3; ch++) {
        byte[ch] = CARVE_PRE_LETTERBOX_PAD;
      }
    } else if (!resize) {
      const uint8_t* px = rgb + (size_t)dy * src_stride + (size_t)dx * 3;
      for (int ch = 0; ch < 3; ch++) {
        byte[ch] = px[ch];
      }
    } else {
      const int32_t sx = cols[3 * dx], a0 = cols[3 * dx + 1], a1 = cols[3 * dx + 2];
      const int32_t* r = rows + 4 * dy;
      const size_t c0 = (size_t)sx * 3, c1 = (sx + 1 < src_w ? (size_t)(sx + 1) : (size_t)sx) * 3;
      const uint8_t* p0 = rgb + (size_t)r[0] * src_stride;
      const uint8_t* p1 = rgb + (size_t)r[1] * src_stride;
      for (int ch = 0; ch < 3; ch++) {
        const int32_t s0 = a0 * p0[c0 + ch] + a1 * p0[c1 + ch];
        const int32_t s1 = a0 * p1[c0 + ch] + a1 * p1[c1 + ch];
        byte[ch] = carve_pre_resize_v(s0, s1, r[2], r[3]);
      }
    }
    for (int ch = 0; ch < 3; ch++) {
      carve_cu_st(out, (size_t)p * 3 + ch, (float)byte[ch] / 255.0f);
    }
  }
}

// carve_cu_letterbox over the output type (the checks and launches of both overloads).
template <typename T>
static carve_status letterbox(const carve_cu_ctx* ctx, const uint8_t* rgb, int src_w, int src_h,
                              size_t src_stride_bytes, const carve_letterbox_info* info, int out_w, int out_h, T* out,
                              void* scratch) {
  if (ctx == NULL || rgb == NULL || info == NULL || out == NULL || scratch == NULL || out_w <= 0 || out_h <= 0 ||
      (size_t)out_w * (size_t)out_h > (size_t)INT32_MAX || (uintptr_t)scratch % sizeof(int32_t) != 0) {
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
  CARVE_LAUNCH(carve_cu_letterbox_kernel<T>, carve_cu_blocks((size_t)out_w * out_h), CARVE_CU_THREADS,
               ctx->stream, rgb, src_w, src_stride_bytes, info->new_w, info->new_h, left, top, resize, out_w, out_h,
               (const int32_t*)cols, (const int32_t*)rows, out);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

extern "C" carve_status carve_cu_letterbox(const carve_cu_ctx* ctx, const uint8_t* rgb, int src_w, int src_h,
                                           size_t src_stride_bytes, const carve_letterbox_info* info, int out_w,
                                           int out_h, float* out, void* scratch) {
  return letterbox(ctx, rgb, src_w, src_h, src_stride_bytes, info, out_w, out_h, out, scratch);
}

carve_status carve_cu_letterbox(const carve_cu_ctx* ctx, const uint8_t* rgb, int src_w, int src_h,
                                size_t src_stride_bytes, const carve_letterbox_info* info, int out_w, int out_h,
                                __half* out, void* scratch) {
  return letterbox(ctx, rgb, src_w, src_h, src_stride_bytes, info, out_w, out_h, out, scratch);
}

// ---- Classification (Pillow BILINEAR resize + centre crop) --------------------------------

// Scratch: carve_classify_scratch_bytes' (the horizontally resampled rows indexed by source row).
extern "C" size_t carve_cu_classify_scratch_bytes(int w, int h, int out) {
  return carve_pre_classify_scratch_bytes(w, h, out);
}

// Pillow's precompute_coeffs for outputs [first, first + count) of an in -> out axis (one
// thread per output): bounds (xmin, n) and ksize fixed-point weights
//   w_x = tri(((xmin + x) - center + 0.5) / filterscale) / sum, as (int)(w 2^22 +- 0.5).
__global__ void carve_cu_pil_coeffs_kernel(int in, int out, int first, int count, int ksize, int32_t* __restrict__ bounds,
                                           int32_t* __restrict__ kk) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(i, (size_t)count) {
    carve_pre_pil_coeffs(in, out, first + (int)i, bounds + 2 * i, kk + i * (size_t)ksize);
  }
}

// Horizontal pass of the source rows the vertical pass reads, [yb[0], yb[last] + n_last)
// (or the crop rows [top, top + out) when y is not resampled):
//   rows[y][x][ch] = clip8(2^21 + sum_i p[y][xmin_x + i][ch] k_x[i]).
__global__ void carve_cu_pil_hpass_kernel(const uint8_t* __restrict__ rgb, size_t stride, int h, int out,
                                          int resize_y, int top, const int32_t* __restrict__ xb,
                                          const int32_t* __restrict__ xk, int ksize_x, const int32_t* __restrict__ yb,
                                          uint8_t* __restrict__ rows) {
  CARVE_CU_KERNEL_ENTRY();
  const int y_lo = resize_y ? yb[0] : top;
  const int y_hi = resize_y ? yb[2 * (size_t)(out - 1)] + yb[2 * (size_t)(out - 1) + 1] : top + out;
  CARVE_CU_FOR(e, (size_t)h * out) {
    const int y = (int)(e / (size_t)out), x = (int)(e % (size_t)out);
    if (y < y_lo || y >= y_hi) {
      continue;
    }
    carve_pre_pil_hpixel(rgb + (size_t)y * stride, xb[2 * (size_t)x], xb[2 * (size_t)x + 1],
                         xk + (size_t)x * (size_t)ksize_x, rows + e * 3);
  }
}

// Vertical pass (or the crop) and /255: out[yy][i] = clip8(2^21 + sum_j src[ymin + j][i] k_y[j]) / 255,
// src being the horizontally resampled rows or the source at column offset `left`; stored as T (float, or
// __half for an fp16 package's input: that float rounded once to nearest even).
template <typename T>
__global__ void carve_cu_pil_vpass_kernel(const uint8_t* __restrict__ src, size_t src_stride, size_t src_x, int out,
                                          int resize_y, int top, const int32_t* __restrict__ yb,
                                          const int32_t* __restrict__ yk, int ksize_y, T* __restrict__ o) {
  CARVE_CU_KERNEL_ENTRY();
  const size_t row = (size_t)out * 3;
  CARVE_CU_FOR(e, (size_t)out * row) {
    const size_t yy = e / row, i = e % row;
    int byte;
    if (resize_y) {
      byte = carve_pre_pil_vvalue(src + (size_t)yb[2 * yy] * src_stride + src_x * 3 + i, src_stride, yb[2 * yy + 1],
                                  yk + yy * (size_t)ksize_y);
    } else {
      byte = src[(size_t)(top + (int)yy) * src_stride + src_x * 3 + i];
    }
    carve_cu_st(o, e, (float)byte / 255.0f);
  }
}

template <typename T>
static carve_status classify_preprocess(const carve_cu_ctx* ctx, const uint8_t* rgb, int w, int h, size_t stride,
                                        int out, T* out_nhwc, void* scratch) {
  if (ctx == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  carve_pre_classify_plan p;
  carve_pre_classify_scratch sc;
  const carve_status status = carve_pre_classify_prepare(rgb, w, h, stride, out, out_nhwc, scratch, &p, &sc);
  if (status != CARVE_OK) {
    return status;
  }
  int32_t *xb = sc.xb, *xk = sc.xk, *yb = sc.yb, *yk = sc.yk;
  uint8_t* rows = sc.rows;  // (h, out, 3) by source row
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
  CARVE_LAUNCH(carve_cu_pil_vpass_kernel<T>, carve_cu_blocks((size_t)out * out * 3), CARVE_CU_THREADS, ctx->stream, src,
               src_stride, src_x, out, p.resize_y, p.top, (const int32_t*)yb, (const int32_t*)yk, p.ksize_y,
               out_nhwc);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

extern "C" carve_status carve_cu_classify_preprocess(const carve_cu_ctx* ctx, const uint8_t* rgb, int w, int h,
                                                     size_t stride, int out, float* out_nhwc, void* scratch) {
  return classify_preprocess(ctx, rgb, w, h, stride, out, out_nhwc, scratch);
}

carve_status carve_cu_classify_preprocess(const carve_cu_ctx* ctx, const uint8_t* rgb, int w, int h, size_t stride,
                                          int out, __half* out_nhwc, void* scratch) {
  return classify_preprocess(ctx, rgb, w, h, stride, out, out_nhwc, scratch);
}

// ---- NCHW -> NHWC (a run from a device tensor) ------------------------------------------

// y_b[(i * w + j) * c + ch] = x_b[(ch * h + i) * w + j] for each of `batch` images (x_b = x + b c h w, y_b = y + b h w c),
// one thread per pixel of the batch (its c channels), stored as T (float: exact; __half: rounded once to nearest
// even); 32-bit pixel indices (batch h w < 2^31: checked by the caller).
template <typename T>
__global__ void carve_cu_nchw_to_nhwc_kernel(const float* __restrict__ x, uint32_t c, uint32_t hw, uint32_t pixels,
                                             T* __restrict__ y) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR32(q, pixels) {
    const uint32_t b = q / hw, p = q - b * hw;
    const float* xb = x + (size_t)b * hw * c + p;
    for (uint32_t ch = 0; ch < c; ch++) {
      carve_cu_st(y, (size_t)q * c + ch, xb[(size_t)ch * hw]);
    }
  }
}

template <typename T>
static carve_status nchw_to_nhwc(const carve_cu_ctx* ctx, const float* x, uint32_t batch, uint32_t c, uint32_t h,
                                 uint32_t w, T* y) {
  const size_t hw = (size_t)h * w, pixels = hw * batch;
  if (ctx == NULL || x == NULL || y == NULL || batch == 0 || c == 0 || h == 0 || w == 0 || pixels > (size_t)INT32_MAX) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  CARVE_LAUNCH(carve_cu_nchw_to_nhwc_kernel<T>, carve_cu_blocks(pixels), CARVE_CU_THREADS, ctx->stream, x, c,
               (uint32_t)hw, (uint32_t)pixels, y);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

extern "C" carve_status carve_cu_nchw_to_nhwc(const carve_cu_ctx* ctx, const float* x, uint32_t c, uint32_t h,
                                              uint32_t w, float* y) {
  return nchw_to_nhwc(ctx, x, 1, c, h, w, y);
}

extern "C" carve_status carve_cu_nchw_to_nhwc_batch(const carve_cu_ctx* ctx, const float* x, uint32_t batch, uint32_t c,
                                                    uint32_t h, uint32_t w, float* y) {
  return nchw_to_nhwc(ctx, x, batch, c, h, w, y);
}

carve_status carve_cu_nchw_to_nhwc_batch(const carve_cu_ctx* ctx, const float* x, uint32_t batch, uint32_t c,
                                         uint32_t h, uint32_t w, __half* y) {
  return nchw_to_nhwc(ctx, x, batch, c, h, w, y);
}
