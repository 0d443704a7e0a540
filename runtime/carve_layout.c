// carve runtime: nearest 2x upsampling and the NCHW <-> NHWC transposes (see carve_layout.h). Copies only:
// no arithmetic, so no instruction-set variants.

#include "carve_layout.h"
#include "carve_simd.h"  // min_size

// Tile edge of the blocked NCHW <-> NHWC transposes.
#define CARVE_TRANSPOSE_TILE 32

// ---- Upsample ---------------------------------------------------------------

typedef struct upsample_ctx {
  const float* x;  // (h, w, c), row stride x_stride
  size_t x_stride;
  size_t w, c;
  float* y;        // (2h, 2w, c), row stride y_stride
  size_t y_stride;
} upsample_ctx;

// Output rows 2i and 2i+1 for source rows i in [start, start + count).
static void upsample_task(void* context, size_t start, size_t count) {
  const upsample_ctx* ctx = context;
  const size_t w = ctx->w, c = ctx->c;
  const size_t bytes = c * sizeof(float);
  for (size_t i = start; i < start + count; i++) {
    for (size_t j = 0; j < w; j++) {
      const float* src = ctx->x + (i * w + j) * ctx->x_stride;
      float* top = ctx->y + ((2 * i) * (2 * w) + 2 * j) * ctx->y_stride;
      float* bottom = top + (2 * w) * ctx->y_stride;
      memcpy(top, src, bytes);
      memcpy(top + ctx->y_stride, src, bytes);
      memcpy(bottom, src, bytes);
      memcpy(bottom + ctx->y_stride, src, bytes);
    }
  }
}

carve_status carve_upsample_nearest2x(const float* x, size_t x_stride, size_t h, size_t w, size_t c, float* y,
                                      size_t y_stride, pthreadpool_t pool) {
  if (x == NULL || y == NULL || h == 0 || w == 0 || c == 0 || x_stride < c || y_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  upsample_ctx ctx = {x, x_stride, w, c, y, y_stride};
  carve_parallelize_1d_tile(pool, upsample_task, &ctx, h, 1);
  return CARVE_OK;
}

// ---- NCHW <-> NHWC -----------------------------------------------------------

carve_status carve_nchw_to_nhwc(const float* x, size_t c, size_t h, size_t w, float* y, size_t y_stride) {
  if (x == NULL || y == NULL || c == 0 || h == 0 || w == 0 || y_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t pixels = h * w;
  for (size_t p0 = 0; p0 < pixels; p0 += CARVE_TRANSPOSE_TILE) {
    const size_t p1 = min_size(pixels, p0 + CARVE_TRANSPOSE_TILE);
    for (size_t c0 = 0; c0 < c; c0 += CARVE_TRANSPOSE_TILE) {
      const size_t c1 = min_size(c, c0 + CARVE_TRANSPOSE_TILE);
      for (size_t p = p0; p < p1; p++) {
        for (size_t ch = c0; ch < c1; ch++) {
          y[p * y_stride + ch] = x[ch * pixels + p];
        }
      }
    }
  }
  return CARVE_OK;
}

carve_status carve_nhwc_to_nchw(const float* x, size_t x_stride, size_t h, size_t w, size_t c, float* y) {
  if (x == NULL || y == NULL || c == 0 || h == 0 || w == 0 || x_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t pixels = h * w;
  for (size_t c0 = 0; c0 < c; c0 += CARVE_TRANSPOSE_TILE) {
    const size_t c1 = min_size(c, c0 + CARVE_TRANSPOSE_TILE);
    for (size_t p0 = 0; p0 < pixels; p0 += CARVE_TRANSPOSE_TILE) {
      const size_t p1 = min_size(pixels, p0 + CARVE_TRANSPOSE_TILE);
      for (size_t ch = c0; ch < c1; ch++) {
        for (size_t p = p0; p < p1; p++) {
          y[ch * pixels + p] = x[p * x_stride + ch];
        }
      }
    }
  }
  return CARVE_OK;
}
